#!/usr/bin/python3
"""Exports a PyTorch nn.MultiheadAttention for examples/from_pytorch.cpp, which loads it into attend.

    /usr/bin/python3 examples/from_pytorch/export.py

builds nn.MultiheadAttention(embed_dim=16, num_heads=4, batch_first=True) with a fixed seed, in
float32, puts it in eval mode, and writes beside this script

    mha.safetensors   its state_dict(): in_proj_weight (48, 16), in_proj_bias (48),
                      out_proj.weight (16, 16), out_proj.bias (16)
    io.safetensors    X (2, 5, 16), a fixed input, and PyTorch's outputs on it:
                        output             module(X, X, X, need_weights=False)[0]            (2, 5, 16)
                        key_padding_mask   (2, 5), 1 where a key is padding (PyTorch's polarity: 1 = ignore)
                        output_masked      module(X, X, X, key_padding_mask=..., need_weights=False)[0]

and the same two files for a float64 copy of the module (module.double(), X in float64, outputs
computed in float64): mha_float64.safetensors, io_float64.safetensors, which
tests/test_from_torch.cpp compares with attend in double. key_padding_mask is stored as 0/1
floats because attend reads floating-point dtypes only.

PyTorch initialises in_proj_bias and out_proj.bias to 0; they are drawn uniform in [-0.5, 0.5)
here, as training would move them, so that a misplaced bias shows.

With the `safetensors` package one would call safetensors.torch.save_file(module.state_dict(),
path); it is not installed here, so the files are written by tests/reference/safetensors_writer.py,
which follows the format.
"""

import copy
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
from safetensors_writer import write_safetensors  # noqa: E402

SEED = 20240611
EMBED_DIM, NUM_HEADS = 16, 4
BATCH, STEPS = 2, 5
# Batch row 0 has 3 real keys and 2 of padding; row 1 has no padding.
KEY_PADDING_MASK = [[False, False, False, True, True],
                    [False, False, False, False, False]]


def entries(tensors):
    """{name: tensor} -> the writer's {name: (dtype, shape, row-major values)}."""
    dtypes = {torch.float32: "F32", torch.float64: "F64"}
    return {name: (dtypes[t.dtype], list(t.shape), t.detach().contiguous().flatten().tolist())
            for name, t in tensors.items()}


def write(name, tensors, metadata):
    path = os.path.join(HERE, name)
    write_safetensors(path, entries(tensors), metadata)
    print("wrote %s (%d bytes)" % (os.path.relpath(path), os.path.getsize(path)))


def main():
    torch.manual_seed(SEED)
    attention = nn.MultiheadAttention(EMBED_DIM, NUM_HEADS, batch_first=True)  # float32
    with torch.no_grad():
        nn.init.uniform_(attention.in_proj_bias, -0.5, 0.5)
        nn.init.uniform_(attention.out_proj.bias, -0.5, 0.5)
    attention.eval()
    X = torch.randn(BATCH, STEPS, EMBED_DIM)  # (batch, steps, embed_dim)
    key_padding_mask = torch.tensor(KEY_PADDING_MASK)  # (batch, keys), True = ignore

    for dtype, suffix in [(torch.float32, ""), (torch.float64, "_float64")]:
        module = copy.deepcopy(attention).to(dtype)
        x = X.to(dtype)
        with torch.no_grad():
            output, _ = module(x, x, x, need_weights=False)
            output_masked, _ = module(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        write("mha%s.safetensors" % suffix, module.state_dict(), {"format": "pt"})
        write("io%s.safetensors" % suffix,
              {"X": x, "output": output, "key_padding_mask": key_padding_mask.to(dtype),
               "output_masked": output_masked},
              {"source": "examples/from_pytorch/export.py",
               "module": "nn.MultiheadAttention(embed_dim=%d, num_heads=%d, batch_first=True), eval"
                         % (EMBED_DIM, NUM_HEADS),
               "key_padding_mask": "1 where a key is padding: PyTorch's polarity, 1 = ignore"})


if __name__ == "__main__":
    main()
