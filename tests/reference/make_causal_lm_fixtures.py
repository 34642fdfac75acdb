"""Writes small decoder-only models with Hugging Face transformers, and golden fixtures of their logits, gradients
and greedy generation, for attend's CausalLM (include/attend/causal_lm.hpp, from_transformers.hpp).

Run it with PyTorch 2.x and transformers installed from pip (CPU only, no downloads):

    python3 tests/reference/make_causal_lm_fixtures.py

For each model (LlamaForCausalLM with grouped-query heads, the same tied and with attention biases,
MistralForCausalLM with a sliding window of 3, GPT2LMHeadModel) it writes

  tests/golden/models/<name>/config.json, model.safetensors   save_pretrained of the model, float64, random weights
  tests/golden/causal_lm_<name>.txt                            tokens, logits, gradients, greedy generation

transformers computes Llama's and Mistral's RMSNorm and rotary angles in float32 even in a float64 model. The
expected values therefore come from a float64 recomputation written out below (`reference_logits`, from the model's
own parameters), which is checked against transformers' output (the difference, about 1e-7, is in each fixture's
notes). Gradients: autograd of sum(logits * grad_logits) through the recomputation, under transformers' names
("<name>_grad"). Generation: greedy, 6 new tokens, by the recomputation over the whole sequence at each step, checked
against transformers' generate() with its cache.
"""

import json
import os
import shutil
import sys

import torch
import transformers
from torch.nn import functional as F
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as writer  # noqa: E402  (the fixture writer; importing it generates nothing)

writer.SCRIPT = "tests/reference/make_causal_lm_fixtures.py"
torch.set_default_dtype(torch.float64)
VERSIONS = "torch %s, transformers %s" % (torch.__version__, transformers.__version__)
MODELS_DIR = os.path.join(writer.GOLDEN_DIR, "models")


def uniform(*shape):
    return torch.rand(*shape) * 2 - 1


# --------------------------------------------------------------------------------------
# The float64 recomputation
# --------------------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(x, positions, theta):
    """RoPE, rotate_half form; x (B, H, T, hd); angles in float64."""
    hd = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angles = positions[:, None].to(torch.float64) * inv_freq[None, :]  # (T, hd/2)
    cos = torch.cat([angles.cos(), angles.cos()], -1)
    sin = torch.cat([angles.sin(), angles.sin()], -1)
    half = hd // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def attention(q, k, v, num_heads, num_kv_heads, window):
    """q (B, H, T, hd), k and v (B, G, T, hd); causal, and j > i - window when window > 0."""
    group = num_heads // num_kv_heads
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    T = q.shape[2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = j <= i
    if window > 0:
        visible &= j > i - window
    scores = scores.masked_fill(~visible, float("-inf"))
    return scores.softmax(-1) @ v


def heads(x, count):
    return x.reshape(x.shape[0], x.shape[1], count, -1).transpose(1, 2)


def merge(x):
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


def reference_logits(kind, config, p, ids):
    """The model's logits from its parameters p (transformers' names), all in float64."""
    T = ids.shape[1]
    positions = torch.arange(T)
    if kind == "gpt2":
        d, H = config.n_embd, config.n_head
        x = p["transformer.wte.weight"][ids] + p["transformer.wpe.weight"][positions]
        for i in range(config.n_layer):
            pre = "transformer.h.%d." % i
            h = F.layer_norm(x, (d,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], config.layer_norm_epsilon)
            qkv = h @ p[pre + "attn.c_attn.weight"] + p[pre + "attn.c_attn.bias"]
            q, k, v = qkv.split(d, dim=-1)
            a = merge(attention(heads(q, H), heads(k, H), heads(v, H), H, H, 0))
            x = x + a @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"]
            h = F.layer_norm(x, (d,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], config.layer_norm_epsilon)
            h = F.gelu(h @ p[pre + "mlp.c_fc.weight"] + p[pre + "mlp.c_fc.bias"], approximate="tanh")
            x = x + h @ p[pre + "mlp.c_proj.weight"] + p[pre + "mlp.c_proj.bias"]
        x = F.layer_norm(x, (d,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], config.layer_norm_epsilon)
        return x @ p["transformer.wte.weight"].T
    H, G = config.num_attention_heads, config.num_key_value_heads
    window = getattr(config, "sliding_window", None) or 0
    theta = config.rope_parameters["rope_theta"] if getattr(config, "rope_parameters", None) else config.rope_theta
    x = p["model.embed_tokens.weight"][ids]

    def linear(h, name):
        y = h @ p[name + ".weight"].T
        return y + p[name + ".bias"] if name + ".bias" in p else y

    for i in range(config.num_hidden_layers):
        pre = "model.layers.%d." % i
        h = rms_norm(x, p[pre + "input_layernorm.weight"], config.rms_norm_eps)
        q = rotate(heads(linear(h, pre + "self_attn.q_proj"), H), positions, theta)
        k = rotate(heads(linear(h, pre + "self_attn.k_proj"), G), positions, theta)
        v = heads(linear(h, pre + "self_attn.v_proj"), G)
        x = x + linear(merge(attention(q, k, v, H, G, window)), pre + "self_attn.o_proj")
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], config.rms_norm_eps)
        x = x + linear(F.silu(linear(h, pre + "mlp.gate_proj")) * linear(h, pre + "mlp.up_proj"), pre + "mlp.down_proj")
    x = rms_norm(x, p["model.norm.weight"], config.rms_norm_eps)
    head = p["model.embed_tokens.weight"] if config.tie_word_embeddings else p["lm_head.weight"]
    return x @ head.T


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------

def model_case(name, seed, kind, model_class, config, description):
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float64)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(uniform(*param.shape) * 0.5)
    model.eval()
    directory = os.path.join(MODELS_DIR, name)
    shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(directory, safe_serialization=True)
    for extra in os.listdir(directory):  # keep the two files attend reads
        if extra not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(directory, extra))

    p = dict(model.named_parameters())
    ids = torch.randint(0, config.vocab_size, (2, 7))
    logits = reference_logits(kind, config, p, ids)
    with torch.no_grad():
        hf_logits = model(ids).logits
    diff_hf = (hf_logits - logits).abs().max().item()
    assert diff_hf < 1e-5, diff_hf
    grad_logits = uniform(*logits.shape)
    logits.backward(grad_logits)

    # Greedy generation of 6 tokens from the first 4 tokens of each row.
    prompt = ids[:, :4]
    sequence = prompt.clone()
    margins = []
    with torch.no_grad():
        for _ in range(6):
            last = reference_logits(kind, config, p, sequence)[:, -1]
            top = last.topk(2, dim=-1).values
            margins.append((top[:, 0] - top[:, 1]).min().item())
            sequence = torch.cat([sequence, last.argmax(-1, keepdim=True)], dim=1)
        model.generation_config.eos_token_id = None  # six tokens whatever they are
        hf_sequence = model.generate(prompt, max_new_tokens=6, do_sample=False, use_cache=True,
                                     pad_token_id=0, attention_mask=torch.ones_like(prompt))
    assert torch.equal(hf_sequence, sequence), (hf_sequence, sequence)

    writer.write_fixture(
        "causal_lm_" + name, "%s; %s" % (description, VERSIONS),
        [("tokens", ids), ("logits", logits.detach()), ("grad_logits", grad_logits),
         ("prompt", prompt), ("generated", sequence)]
        + [(n + "_grad", q.grad) for n, q in model.named_parameters()],
        ["the model: tests/golden/models/%s (save_pretrained, float64, parameters uniform in [-0.5, 0.5))" % name,
         "logits from the float64 recomputation of tests/reference/make_causal_lm_fixtures.py; transformers' own "
         "forward differs from it by %.2g (max abs)" % diff_hf,
         "gradients of sum(logits * grad_logits) by autograd, under transformers' parameter names",
         "generated: the prompt and 6 greedy tokens, the same from transformers' generate() with its cache; the "
         "smallest gap between the two largest logits of a step: %.3g" % min(margins)])


def main():
    os.makedirs(MODELS_DIR, exist_ok=True)
    llama = dict(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)
    model_case("llama", 180, "llama", LlamaForCausalLM, LlamaConfig(**llama),
               "LlamaForCausalLM(vocab 40, hidden 16, 2 layers, 4 heads, 2 key/value heads, intermediate 24)")
    model_case("llama_tied_bias", 181, "llama", LlamaForCausalLM,
               LlamaConfig(**dict(llama, tie_word_embeddings=True, attention_bias=True, num_key_value_heads=1)),
               "LlamaForCausalLM as above with 1 key/value head, attention biases and lm_head tied to the embedding")
    model_case("mistral", 182, "mistral", MistralForCausalLM, MistralConfig(**dict(llama, sliding_window=3)),
               "MistralForCausalLM(vocab 40, hidden 16, 2 layers, 4 heads, 2 key/value heads, sliding window 3)")
    model_case("gpt2", 183, "gpt2", GPT2LMHeadModel,
               GPT2Config(vocab_size=40, n_positions=32, n_embd=16, n_layer=2, n_head=4, bos_token_id=0,
                          eos_token_id=1),
               "GPT2LMHeadModel(vocab 40, 32 positions, n_embd 16, 2 layers, 4 heads)")


if __name__ == "__main__":
    main()
