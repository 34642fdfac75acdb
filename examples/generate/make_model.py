"""Writes a decoder-only model with random weights, as Hugging Face transformers saves one, for examples/generate.

    python3 examples/generate/make_model.py llama  /tmp/llama-100m      # LlamaForCausalLM, about 100 M parameters
    python3 examples/generate/make_model.py gpt2   /tmp/gpt2-small      # GPT2LMHeadModel, GPT-2 small's shape
    ./build/examples/generate build/pictures /tmp/llama-100m

Needs PyTorch and transformers (pip install torch transformers); downloads nothing: the model is built from a config
and saved in float32 (config.json and model.safetensors). A model of your own of these shapes, saved with
save_pretrained(safe_serialization=True), loads the same way.
"""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

CONFIGS = {
    # about 100 M parameters: 12 layers of width 768, 12 heads sharing 4 key/value heads, a 32000-token vocabulary
    "llama": lambda: LlamaForCausalLM(LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                                                  num_hidden_layers=12, num_attention_heads=12,
                                                  num_key_value_heads=4, max_position_embeddings=2048)),
    "gpt2": lambda: GPT2LMHeadModel(GPT2Config()),  # GPT-2 small: 124 M parameters
}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in CONFIGS:
        sys.exit("usage: make_model.py {llama|gpt2} output_directory")
    torch.manual_seed(0)
    model = CONFIGS[sys.argv[1]]().to(torch.float32)
    model.save_pretrained(sys.argv[2], safe_serialization=True)
    count = sum(p.numel() for p in model.parameters())
    print("wrote %s: %s, %.1f M parameters" % (sys.argv[2], type(model).__name__, count / 1e6))


if __name__ == "__main__":
    main()
