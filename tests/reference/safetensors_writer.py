"""A small safetensors writer, Python 3 standard library only.

    from safetensors_writer import write_safetensors
    write_safetensors("w.safetensors", {"weight": ("F32", [2, 3], [0.5, -1.25, 3.0, 0.0, -0.0, 1024.0])},
                      {"format": "pt"})

The format (Hugging Face's safetensors): an unsigned 64-bit little-endian header length N, N bytes
of UTF-8 JSON (possibly padded with trailing spaces), then the data buffer. The header maps each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data buffer, end
exclusive) and may hold "__metadata__", an object of strings. The tensors' byte ranges must tile
the data buffer exactly.

The Python `safetensors` package is not installed on attend's machines (neither PyPI nor Debian
offers it there), so attend's scripts write files with this writer, which follows the format and
the reference implementation's layout; F16/BF16 values are encoded with struct ('<e' is IEEE
binary16; bfloat16 is the upper half of a float32). Used by make_broken_files.py and by
examples/from_pytorch/export.py.
"""

import json
import struct

# Bytes per element, and the reference implementation's dtype order (its tensors are sorted by
# this order descending, then by name, before their data is laid out).
DTYPE_SIZE = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
DTYPE_ORDER = ["F16", "BF16", "F32", "F64"]


def encode(dtype, values):
    """The little-endian bytes of `values` in `dtype`; BF16 takes float32's upper half (values are exact)."""
    if dtype == "F64":
        return struct.pack("<%dd" % len(values), *values)
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    if dtype == "BF16":
        out = b""
        for v in values:
            (bits,) = struct.unpack("<I", struct.pack("<f", v))
            assert bits & 0xFFFF == 0 or v != v, "not exactly representable in bfloat16: %r" % v
            out += struct.pack("<H", bits >> 16)
        return out
    raise ValueError(dtype)


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype, shape, values)}, values a flat row-major list. Header compact JSON,
    "__metadata__" first (keys sorted), then the tensors by descending dtype and by name, padded
    with spaces to a multiple of 8."""
    order = sorted(tensors, key=lambda name: (-DTYPE_ORDER.index(tensors[name][0]), name))
    header = {}
    if metadata is not None:
        header["__metadata__"] = dict(sorted(metadata.items()))
    data = b""
    for name in order:
        dtype, shape, values = tensors[name]
        count = 1
        for d in shape:
            count *= d
        assert count == len(values), name
        raw = encode(dtype, values)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
