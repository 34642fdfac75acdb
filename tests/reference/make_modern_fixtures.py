"""Writes golden fixtures for modern attention: masked, grouped-query scaled dot-product attention, rotary
position embedding, and the attention layers of Hugging Face transformers' Llama and Mistral.

Run it with PyTorch 2.x and transformers installed from pip (CPU only, no downloads):

    python3 tests/reference/make_modern_fixtures.py

It writes, in the file format of make_fixtures.py (whose writer it reuses; tests/support/fixture.hpp reads it):

  tests/golden/sdpa_*.txt             attention from its definition (attention_reference), output, lse and the
                                      autograd gradients, cross-checked against F.scaled_dot_product_attention and
                                      flex_attention
  tests/golden/rope_*.txt             rotary position embedding (rope_reference), output and gradient, cross-checked
                                      against transformers' apply_rotary_pos_emb and a complex-number rotation
  tests/golden/llama_attention_*.txt  LlamaAttention / MistralAttention with random weights, recomputed in float64
  tests/golden/mistral_attention_*.txt  (attention_layer_reference), with gradients and DynamicCache decoding

Every case is float64 with its own torch.manual_seed, so the output is the same on every run. Conventions of attend:

  * sequences are (batch, steps, features) with the heads side by side in the last axis: queries (B, Q, H*d), keys
    (B, K, G*d), values (B, K, G*dv); query head h reads key/value head h // (H // G) (grouped-query attention).
  * query q sits at the aligned position p = q + (K - Q) (bottom-right). causal: key j visible when j <= p;
    window(left, right): p - left <= j <= p + right; valid_lens (B,): j < len[b]; keep (B or 1, Q, K): true =
    visible. All parts are ANDed.
  * score s = scale * q.k (scale 0 means 1/sqrt(d)); softcap > 0: s = softcap * tanh(s / softcap); ALiBi:
    s -= slope[h] * |p - j|; bias (B*H, Q, K), (B, Q, K) or (1, Q, K): s += bias (-inf hides a key). Softmax over
    the visible keys; lse (B, Q, H) is the log of its normaliser. fully_masked = 1 ("zero"): a row that sees no key
    has output 0, gradients 0 and lse -inf.
  * RoPE: inv_freq_i = base^(-2i / head_dim), angle (start + t) * inv_freq_i in float64; not interleaved (rotate_half,
    Llama, GPT-NeoX) pairs element i with i + head_dim/2, interleaved (GPT-J, Meta's complex form) pairs 2i with 2i+1.
"""

import math
import os
import sys
import warnings

import torch
import transformers
from torch import nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import AuxRequest, flex_attention
from transformers import DynamicCache, LlamaConfig, MistralConfig
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as writer  # noqa: E402  (the fixture writer; importing it generates nothing)

writer.SCRIPT = "tests/reference/make_modern_fixtures.py"
torch.set_default_dtype(torch.float64)
warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")

VERSIONS = "torch %s, transformers %s" % (torch.__version__, transformers.__version__)
INF = float("inf")


def uniform(*shape):
    """Uniform in [-1, 1)."""
    return torch.rand(*shape) * 2 - 1


def to_heads(X, heads):
    """(B, steps, heads*d) -> (B, heads, steps, d)."""
    return X.reshape(X.shape[0], X.shape[1], heads, -1).transpose(1, 2)


def from_heads(X):
    """(B, heads, steps, d) -> (B, steps, heads*d)."""
    return X.transpose(1, 2).reshape(X.shape[0], X.shape[2], -1)


def max_diff(a, b):
    return (a - b).abs().max().item()


def alibi_slopes(num_heads):
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)])


# --------------------------------------------------------------------------------------
# Scaled dot-product attention from its definition
# --------------------------------------------------------------------------------------

def visible_keys(batch, num_queries, num_keys, causal=False, window=(-1, -1), valid_lens=None, keep=None):
    """(B, Q, K) boolean, true where key j is visible to query q; positions are bottom-right aligned."""
    p = torch.arange(num_queries)[:, None] + (num_keys - num_queries)
    j = torch.arange(num_keys)[None, :]
    visible = torch.ones(batch, num_queries, num_keys, dtype=torch.bool)
    if causal:
        visible &= j <= p
    left, right = window
    if left >= 0:
        visible &= j >= p - left
    if right >= 0:
        visible &= j <= p + right
    if valid_lens is not None:
        visible &= j[None] < valid_lens[:, None, None]
    if keep is not None:
        visible &= keep
    return visible


def position_terms(num_heads, num_queries, num_keys, slopes=None, bias=None, batch=1):
    """ALiBi and bias, the score terms added after the softcap, as (B or 1, H, Q, K)."""
    terms = torch.zeros(1, num_heads, num_queries, num_keys)
    if slopes is not None:
        p = torch.arange(num_queries)[:, None] + (num_keys - num_queries)
        distance = (p - torch.arange(num_keys)[None, :]).abs()
        terms = terms - slopes[None, :, None, None] * distance
    if bias is not None:
        if bias.shape[0] == batch * num_heads:  # row b*H + h (when H = 1 the same as (B, Q, K))
            terms = terms + bias.reshape(batch, num_heads, num_queries, num_keys)
        else:  # (B, Q, K) or (1, Q, K): the same for every head
            terms = terms + bias[:, None]
    return terms


def attention_reference(queries, keys, values, num_heads, num_kv_heads, causal=False, window=(-1, -1),
                        valid_lens=None, keep=None, scale=0.0, softcap=0.0, slopes=None, bias=None,
                        fully_masked_zero=False):
    """attend's attention, from the definition: returns output (B, Q, H*dv) and lse (B, Q, H)."""
    B, Q, K = queries.shape[0], queries.shape[1], keys.shape[1]
    d = queries.shape[2] // num_heads
    kv_head = torch.arange(num_heads) // (num_heads // num_kv_heads)
    q = to_heads(queries, num_heads)                    # (B, H, Q, d)
    k = to_heads(keys, num_kv_heads)[:, kv_head]        # (B, H, K, d): key head of each query head
    v = to_heads(values, num_kv_heads)[:, kv_head]

    s = (scale if scale > 0 else 1 / math.sqrt(d)) * (q @ k.transpose(-1, -2))
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    s = s + position_terms(num_heads, Q, K, slopes, bias, B)
    visible = visible_keys(B, Q, K, causal, window, valid_lens, keep)[:, None] & (s > -INF)
    s = s.masked_fill(~visible, -INF)

    sees_a_key = visible.any(-1, keepdim=True)
    assert fully_masked_zero or sees_a_key.all(), "a row sees no key"
    weights = torch.softmax(torch.where(sees_a_key, s, 0.0), dim=-1) * sees_a_key
    lse = torch.logsumexp(s, dim=-1)                    # -inf for a row that sees no key
    return from_heads(weights @ v), lse.transpose(1, 2)


def with_gradients(function, inputs, grad_output):
    """function(*inputs) and the autograd gradients of sum(output * grad_output) with respect to the inputs."""
    inputs = [x.detach().clone().requires_grad_() for x in inputs]
    output = function(*inputs)
    output = output[0] if isinstance(output, tuple) else output
    grads = torch.autograd.grad((output * grad_output).sum(), inputs)
    return output.detach(), [g.detach() for g in grads]


def torch_sdpa(queries, keys, values, num_heads, num_kv_heads, mask, scale):
    """F.scaled_dot_product_attention in attend's layout; mask is (B or 1, H or 1, Q, K), boolean or additive."""
    out = F.scaled_dot_product_attention(to_heads(queries, num_heads), to_heads(keys, num_kv_heads),
                                         to_heads(values, num_kv_heads), attn_mask=mask,
                                         scale=scale if scale > 0 else None, enable_gqa=True)
    return from_heads(out)


def torch_flex(queries, keys, values, num_heads, num_kv_heads, softcap, additive, scale):
    """flex_attention (eager, forward only: it has no backward on CPU) with a score_mod that applies the softcap, then
    adds `additive` (B or 1, H, Q, K), which holds ALiBi, bias and -inf for the masked keys."""
    # flex_attention traces score_mod with dynamo, which cannot take a captured float: the softcap is a tensor.
    cap = torch.tensor(softcap) if softcap > 0 else None

    def score_mod(score, b, h, q_idx, kv_idx):
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        return score + additive[b if additive.shape[0] > 1 else 0, h, q_idx, kv_idx]

    out, aux = flex_attention(to_heads(queries, num_heads), to_heads(keys, num_kv_heads),
                              to_heads(values, num_kv_heads), score_mod=score_mod,
                              scale=scale if scale > 0 else None, enable_gqa=True,
                              return_aux=AuxRequest(lse=True))
    return from_heads(out), aux.lse.transpose(1, 2)


def sdpa_case(name, seed, sizes, description, input_scale=1.0, extras=None, causal=False, window=(-1, -1),
              valid_lens=None, scale=0.0, softcap=0.0, slopes=None, fully_masked_zero=False, sdpa_without=()):
    """One sdpa_<name> fixture. sizes = (B, Q, K, H, G, d, dv); extras() draws keep and bias after the inputs.
    sdpa_without names options left out of the copy checked against F.scaled_dot_product_attention."""
    B, Q, K, H, G, d, dv = sizes
    torch.manual_seed(seed)
    queries = uniform(B, Q, H * d) * input_scale
    keys = uniform(B, K, G * d) * input_scale
    values = uniform(B, K, G * dv)
    options = dict(causal=causal, window=window, valid_lens=valid_lens, scale=scale, softcap=softcap, slopes=slopes,
                   fully_masked_zero=fully_masked_zero)
    options.update(extras() if extras else {})
    grad_output = uniform(B, Q, H * dv)
    qkv = [queries, keys, values]

    def reference(q, k, v, **changes):
        return attention_reference(q, k, v, H, G, **dict(options, **changes))

    output, lse = reference(*qkv)
    _, grads = with_gradients(reference, qkv, grad_output)
    visible = visible_keys(B, Q, K, causal, window, valid_lens, options.get("keep"))
    terms = position_terms(H, Q, K, slopes, options.get("bias"), B)
    checked, report = [], []

    # F.scaled_dot_product_attention (math and CPU flash backends): output and gradients, without softcap if need be.
    if softcap == 0 or "softcap" in sdpa_without:
        plain = softcap == 0 and slopes is None and options.get("bias") is None
        mask = visible[:, None] if plain else terms.masked_fill(~visible[:, None], -INF)
        expected_out, expected_grads = with_gradients(lambda q, k, v: reference(q, k, v, softcap=0.0), qkv,
                                                      grad_output)
        backends = [(SDPBackend.MATH, "math")]
        if d == dv:  # the CPU flash kernel wants one width for queries, keys and values
            backends.append((SDPBackend.FLASH_ATTENTION, "CPU flash"))
        for backend, label in backends:
            with sdpa_kernel(backend):
                sdpa_out, sdpa_grads = with_gradients(
                    lambda q, k, v: torch_sdpa(q, k, v, H, G, mask, scale), qkv, grad_output)
            diff = max([max_diff(sdpa_out, expected_out)]
                       + [max_diff(a, b) for a, b in zip(sdpa_grads, expected_grads)])
            assert diff < 1e-12, (name, label, diff)
            report.append("SDPA %s %.1e" % (label, diff))
        checked.append("F.scaled_dot_product_attention (%s backend%s, %s attn_mask, enable_gqa; output and "
                       "gradients%s)" % (" and ".join(label for _, label in backends), "s" * (len(backends) > 1),
                                         "boolean" if plain else "additive float",
                                         ", on a copy without softcap" if softcap > 0 else ""))

    # flex_attention: output and lse with everything, softcap included.
    flex_out, flex_lse = torch_flex(*qkv, H, G, softcap, terms.masked_fill(~visible[:, None], -INF), scale)
    seen = lse > -INF
    diff = max(max_diff(flex_out, output), max_diff(flex_lse[seen], lse[seen]))
    assert diff < 1e-12 and (flex_lse[~seen] == -INF).all(), (name, diff)
    checked.append("flex_attention (eager, score_mod; output and lse)")
    report.append("flex %.1e" % diff)

    if softcap > 0:  # flex_attention has no backward on CPU: finite differences check the reference's gradients
        assert torch.autograd.gradcheck(lambda q, k, v: reference(q, k, v)[0],
                                        [x.clone().requires_grad_() for x in qkv])
        checked.append("torch.autograd.gradcheck (finite differences) for the gradients, flex_attention having no "
                       "backward on CPU")
        report.append("gradcheck ok")

    entries = [("queries", queries), ("keys", keys), ("values", values), ("num_heads", H), ("num_kv_heads", G),
               ("causal", int(causal)), ("window_left", window[0]), ("window_right", window[1]),
               ("fully_masked", int(fully_masked_zero))]
    if valid_lens is not None:
        entries.append(("valid_lens", valid_lens))
    if "keep" in options:
        entries.append(("keep", options["keep"]))
    entries += [("scale", float(scale)), ("softcap", float(softcap))]
    if slopes is not None:
        entries.append(("alibi_slopes", slopes))
    if "bias" in options:
        entries.append(("bias", options["bias"]))
    entries += [("output", output), ("lse", lse), ("grad_output", grad_output), ("grad_queries", grads[0]),
                ("grad_keys", grads[1]), ("grad_values", grads[2])]
    shape = "B=%d, Q=%d, K=%d, H=%d, G=%d, d=%d, dv=%d" % sizes
    writer.write_fixture("sdpa_" + name, "%s; %s; %s; checked against %s" % (description, shape, VERSIONS,
                                                                              ", ".join(checked)),
                         entries, notes=["queries, keys, values uniform in [-1, 1)%s; grad_output uniform in [-1, 1)"
                                         % (" times %g" % input_scale if input_scale != 1 else ""),
                                         "output, lse and the gradients from the definition (attention_reference), "
                                         "the gradients by autograd of sum(output * grad_output)"])
    print("  sdpa_%s: %s" % (name, ", ".join(report)))


def hide_some(u, fraction):
    """Boolean, true where u < fraction except at each row's largest u, so that no row is all true."""
    return (u < fraction) & (u < u.max(-1, keepdim=True).values)


def sdpa_cases():
    slopes4 = alibi_slopes(4)
    sdpa_case("mha", 1, (2, 5, 5, 2, 2, 4, 4), "multi-head attention, no mask")
    sdpa_case("gqa_causal", 2, (2, 6, 9, 4, 2, 8, 6), "grouped-query attention, causal (bottom-right, Q < K)",
              causal=True)
    sdpa_case("mqa_lens", 3, (3, 4, 7, 3, 1, 8, 8), "multi-query attention, valid_lens [7, 3, 5]",
              valid_lens=torch.tensor([7, 3, 5]))
    sdpa_case("window_causal", 4, (1, 12, 12, 2, 1, 4, 4), "causal and window(3, 0), Mistral's W = 4",
              causal=True, window=(3, 0))
    sdpa_case("window_two_sided", 5, (2, 7, 10, 2, 2, 4, 4), "window(2, 1), not causal", window=(2, 1))
    sdpa_case("keep", 6, (2, 5, 6, 2, 1, 4, 4), "boolean keep (1, Q, K), about 30 % false, no row all false",
              extras=lambda: dict(keep=~hide_some(torch.rand(1, 5, 6), 0.3)))
    sdpa_case("softcap", 7, (2, 5, 7, 2, 1, 8, 8), "causal, softcap 0.7, queries and keys times 3 so that tanh "
              "saturates", input_scale=3.0, causal=True, softcap=0.7)
    sdpa_case("alibi", 8, (2, 6, 6, 4, 2, 8, 8), "causal, ALiBi slopes 2^(-8(h+1)/4)", causal=True, slopes=slopes4)

    def bias_with_hidden_keys():
        bias = torch.randn(2 * 4, 4, 6)
        return dict(bias=bias.masked_fill(hide_some(torch.rand(2 * 4, 4, 6), 0.1), -INF))
    sdpa_case("bias_heads", 9, (2, 4, 6, 4, 2, 4, 4), "bias (B*H, Q, K) standard normal with some -inf (never a "
              "whole row), no other mask", extras=bias_with_hidden_keys)
    sdpa_case("bias_batch", 10, (2, 4, 6, 2, 2, 4, 4), "bias (B, Q, K) standard normal, causal", causal=True,
              extras=lambda: dict(bias=torch.randn(2, 4, 6)))
    sdpa_case("bias_one", 11, (1, 3, 5, 2, 1, 4, 4), "bias (1, Q, K) standard normal, scale 0.3", scale=0.3,
              extras=lambda: dict(bias=torch.randn(1, 3, 5)))
    sdpa_case("everything", 12, (2, 8, 11, 4, 2, 8, 6), "causal, window(5, 0), valid_lens [11, 9], softcap 2.0, "
              "ALiBi slopes 2^(-8(h+1)/4), bias (B, Q, K) standard normal, scale 0.25", causal=True, window=(5, 0),
              valid_lens=torch.tensor([11, 9]), softcap=2.0, slopes=slopes4, scale=0.25,
              extras=lambda: dict(bias=torch.randn(2, 8, 11)), sdpa_without=("softcap",))
    sdpa_case("zero_rows", 13, (2, 6, 4, 2, 1, 4, 4), "causal with Q > K: query rows 0 and 1 see no key, "
              "fully_masked = 1 (zero: output and gradients 0, lse -inf); %s" % sdpa_on_fully_masked_rows(),
              causal=True, fully_masked_zero=True)
    sdpa_case("decode", 14, (2, 1, 37, 8, 2, 16, 16), "one query, causal (every key visible)", causal=True)
    sdpa_case("decode_few", 15, (2, 3, 40, 8, 2, 16, 16), "three queries, causal bottom-right (speculative "
              "decoding)", causal=True)
    sdpa_case("long", 16, (1, 300, 300, 2, 1, 16, 16), "causal, window(63, 0)", causal=True, window=(63, 0))


def sdpa_on_fully_masked_rows():
    """What F.scaled_dot_product_attention (math backend, boolean mask) gives a row whose mask is all false."""
    torch.manual_seed(0)
    q, k, v = [uniform(1, 1, 2, 4).requires_grad_() for _ in range(3)]
    mask = torch.tensor([[False, False], [True, False]])
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.sum().backward()
    row, grad = out[0, 0, 0], q.grad[0, 0, 0]
    what = "zeros" if (row == 0).all() else "NaN" if row.isnan().any() else "values %s" % row.tolist()
    grad_what = "zero" if (grad == 0).all() else "NaN" if grad.isnan().any() else "nonzero"
    return ("torch %s's F.scaled_dot_product_attention (math backend, boolean attn_mask) returns %s for such a row "
            "and a %s gradient" % (torch.__version__, what, grad_what))


# --------------------------------------------------------------------------------------
# Rotary position embedding
# --------------------------------------------------------------------------------------

def rope_angles(num_steps, head_dim, base, start=0):
    """(num_steps, head_dim/2) angles (start + t) * base^(-2i / head_dim), in float64."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return torch.arange(start, start + num_steps, dtype=torch.float64)[:, None] * inv_freq[None, :]


def rope_reference(X, num_heads, head_dim, base, start=0, interleaved=False):
    """attend's RotaryEmbedding on X (B, n, H*hd)."""
    B, n, _ = X.shape
    theta = rope_angles(n, head_dim, base, start)[:, None, :]      # (n, 1, hd/2), broadcast over heads
    cos, sin = theta.cos(), theta.sin()
    x = X.reshape(B, n, num_heads, head_dim)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.reshape(B, n, num_heads * head_dim)


def hf_rope(X, num_heads, head_dim, cos, sin):
    """transformers' Llama apply_rotary_pos_emb on X (B, n, H*hd), cos and sin (B, n, hd)."""
    x = to_heads(X, num_heads)
    out, _ = modeling_llama.apply_rotary_pos_emb(x, x, cos, sin)
    return from_heads(out)


def rope_case(name, seed, B, n, H, hd, base, start, interleaved):
    torch.manual_seed(seed)
    X = uniform(B, n, H * hd)
    grad_output = uniform(B, n, H * hd)
    output, (grad_input,) = with_gradients(lambda x: rope_reference(x, H, hd, base, start, interleaved), [X],
                                           grad_output)
    if interleaved:  # Meta's original form: pairs (2i, 2i+1) as complex numbers times e^(i theta)
        pairs = torch.view_as_complex(X.reshape(B, n, H, hd // 2, 2).contiguous())
        rotation = torch.polar(torch.ones(n, hd // 2), rope_angles(n, hd, base, start))[:, None]
        diff = max_diff(torch.view_as_real(pairs * rotation).reshape(B, n, H * hd), output)
        assert diff < 1e-12, diff
        checked = "a rotation of complex numbers (torch.view_as_complex, torch.polar)"
        print("  rope_%s: complex rotation %.1e" % (name, diff))
    else:
        theta = rope_angles(n, hd, base, start)
        emb = torch.cat((theta, theta), dim=-1).expand(B, n, hd)
        diff = max_diff(hf_rope(X, H, hd, emb.cos(), emb.sin()), output)
        assert diff < 1e-12, diff
        config = LlamaConfig(hidden_size=H * hd, num_attention_heads=H, num_key_value_heads=H, head_dim=hd,
                             rope_theta=base)
        positions = torch.arange(start, start + n)[None].expand(B, n)
        cos, sin = modeling_llama.LlamaRotaryEmbedding(config)(X, positions)   # angles in float32
        diff32 = max_diff(hf_rope(X, H, hd, cos, sin), output)
        checked = ("transformers' Llama apply_rotary_pos_emb with cos and sin from float64 angles (to 1e-12); "
                   "LlamaRotaryEmbedding as it is computes the angles in float32 and differs by %.1e" % diff32)
        print("  rope_%s: apply_rotary_pos_emb %.1e, LlamaRotaryEmbedding (float32 angles) %.1e"
              % (name, diff, diff32))
    writer.write_fixture(
        "rope_" + name, "RotaryEmbedding(head_dim %d, base %g, %s), B=%d, n=%d, H=%d, start %d; %s; checked against %s"
        % (hd, base, "interleaved" if interleaved else "rotate_half", B, n, H, start, VERSIONS, checked),
        [("X", X), ("num_heads", H), ("head_dim", hd), ("base", float(base)), ("start", start),
         ("interleaved", int(interleaved)), ("output", output), ("grad_output", grad_output),
         ("grad_input", grad_input)],
        notes=["X and grad_output uniform in [-1, 1); grad_input by autograd of sum(output * grad_output)"])


def rope_cases():
    rope_case("half", 21, 2, 5, 3, 8, 10000.0, 0, False)
    rope_case("half_offset", 22, 2, 5, 3, 8, 500000.0, 17, False)
    rope_case("interleaved", 23, 1, 4, 2, 6, 10000.0, 3, True)


# --------------------------------------------------------------------------------------
# Hugging Face attention layers
# --------------------------------------------------------------------------------------

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def attention_layer_reference(X, params, config, num_queries=None):
    """The attention layer in float64 from the definition: projections, RoPE with float64 angles, grouped-query
    attention (causal, and the sliding window if any), o_proj. Keys and values come from all n steps of X; the
    queries from the last num_queries steps (all by default), at positions n - num_queries ... n - 1."""
    H, G, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    base = config.rope_parameters["rope_theta"]
    n = X.shape[1]
    num_queries = num_queries or n
    q = F.linear(X[:, n - num_queries:], params["q_proj.weight"], params.get("q_proj.bias"))
    k = F.linear(X, params["k_proj.weight"], params.get("k_proj.bias"))
    v = F.linear(X, params["v_proj.weight"], params.get("v_proj.bias"))
    q = rope_reference(q, H, hd, base, start=n - num_queries)
    k = rope_reference(k, G, hd, base)
    window = (config.sliding_window - 1, 0) if getattr(config, "sliding_window", None) else (-1, -1)
    out, _ = attention_reference(q, k, v, H, G, causal=True, window=window)
    return F.linear(out, params["o_proj.weight"], params.get("o_proj.bias"))


def hf_mask(config, x, cache, positions):
    """The mask transformers builds for these steps, as the model's forward does (eager: 0 or the dtype's min)."""
    make = create_sliding_window_causal_mask if getattr(config, "sliding_window", None) else create_causal_mask
    return make(config=config, inputs_embeds=x, attention_mask=None, cache=cache, position_ids=positions)


def attention_layer_case(name, seed, config, attention_class, rotary_class, B, n, prefix, description):
    torch.manual_seed(seed)
    layer = attention_class(config, layer_idx=0).double().eval()
    for module in layer.modules():
        if isinstance(module, nn.Linear):
            bound = 1 / math.sqrt(module.in_features)
            nn.init.uniform_(module.weight, -bound, bound)
            if module.bias is not None:
                nn.init.uniform_(module.bias, -bound, bound)
    X = uniform(B, n, config.hidden_size)
    grad_output = uniform(B, n, config.hidden_size)
    rotary = rotary_class(config)
    params = {k: p.detach().clone() for k, p in layer.named_parameters()}
    names = list(params)
    window = getattr(config, "sliding_window", None) or 0

    # HF's forward over all n steps, with its own mask, checked to be attend's causal (and window(W - 1, 0)) mask.
    positions = torch.arange(n)[None].expand(B, n)
    mask = hf_mask(config, X, None, positions)
    expected = visible_keys(B, n, n, causal=True, window=(window - 1, 0) if window else (-1, -1))
    assert torch.equal(mask[:, 0] == 0, expected), name
    X_hf = X.clone().requires_grad_()
    output_hf, _ = layer(X_hf, position_embeddings=rotary(X_hf, positions), attention_mask=mask)
    (output_hf * grad_output).sum().backward()

    # The float64 recomputation and its gradients.
    output, grads = with_gradients(lambda x, *p: attention_layer_reference(x, dict(zip(names, p)), config),
                                   [X] + [params[k] for k in names], grad_output)
    diff = max_diff(output_hf.detach(), output)
    grad_diff = max([max_diff(X_hf.grad, grads[0])]
                    + [max_diff(p.grad, g) for p, g in zip(layer.parameters(), grads[1:])])
    assert diff < 1e-6 and grad_diff < 1e-5, (name, diff, grad_diff)

    # Decoding through HF with a DynamicCache: the prefix at once, then one step at a time.
    cache = DynamicCache(config=config)
    steps = []
    with torch.no_grad():
        for lo, hi in [(0, prefix)] + [(t, t + 1) for t in range(prefix, n)]:
            x, pos = X[:, lo:hi], torch.arange(lo, hi)[None].expand(B, hi - lo)
            y, _ = layer(x, position_embeddings=rotary(x, pos), attention_mask=hf_mask(config, x, cache, pos),
                         cache=cache)
            if lo >= prefix:
                steps.append(y)
        decode_output = torch.cat(steps, dim=1)
        decode_diff = max_diff(decode_output, output[:, prefix:])
        assert decode_diff < 1e-6, (name, decode_diff)
        # The recomputation of each step (one query at position t against keys 0 ... t) is the same computation.
        recomputed = torch.cat([attention_layer_reference(X[:, : t + 1], params, config, num_queries=1)
                                for t in range(prefix, n)], dim=1)
        recompute_diff = max_diff(recomputed, output[:, prefix:])
        assert recompute_diff < 1e-13, (name, recompute_diff)
    print("  %s: output vs HF %.1e, gradients vs HF autograd %.1e, HF decode %.1e, float64 decode %.1e"
          % (name, diff, grad_diff, decode_diff, recompute_diff))

    entries = [("X", X), ("num_heads", config.num_attention_heads), ("num_kv_heads", config.num_key_value_heads),
               ("head_dim", config.head_dim), ("hidden_size", config.hidden_size),
               ("rope_theta", float(config.rope_parameters["rope_theta"])), ("sliding_window", window)]
    entries += [(k, params[k]) for k in names]
    entries += [("output", output), ("output_hf", output_hf), ("grad_output", grad_output), ("grad_input", grads[0])]
    entries += [(k + ".grad", g) for k, g in zip(names, grads[1:])]
    entries += [("prefix", prefix), ("decode_output", decode_output)]
    writer.write_fixture(
        name, "%s (attn_implementation eager, layer_idx 0, float64 via .double(), every Linear re-initialised "
        "uniform in +-1/sqrt(in_features)), B=%d, n=%d, prefix %d; %s" % (description, B, n, prefix, VERSIONS),
        entries,
        notes=["X and grad_output uniform in [-1, 1); positions 0 ... n-1; weights in PyTorch's (out, in) layout",
               "output: the float64 recomputation from the definition (projections, RoPE with float64 angles, "
               "grouped-query attention with the mask below, o_proj); output_hf: the HF layer's own output, which "
               "computes the RoPE angles and the softmax in float32 (max difference %.1e)" % diff,
               "mask: %s" % mask_text(window),
               "grad_*: autograd of sum(output * grad_output) through the recomputation (HF's autograd agrees to "
               "%.1e)" % grad_diff,
               "decode_output: HF with a DynamicCache(config), X[:, :prefix] in one call then one step at a time "
               "(position_ids t; transformers %s derives the cache position from the cache), steps prefix ... n-1; "
               "equals output[:, prefix:] to %.1e, and the float64 recomputation of each step (one query at "
               "position t, keys 0 ... t, bottom-right aligned) to %.1e"
               % (transformers.__version__, decode_diff, recompute_diff)])


def mask_text(window):
    if not window:
        return "causal, key j visible to query q when j <= q"
    return ("HF's sliding_window W = %d: masking_utils' sliding_window_causal_mask_function keeps key j when "
            "q - W < j <= q, i.e. W keys counting the query itself; attend's causal and window(%d, 0)"
            % (window, window - 1))


def attention_layer_cases():
    llama_gqa = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            rope_theta=10000.0, attention_bias=False, num_hidden_layers=1,
                            attn_implementation="eager")
    attention_layer_case("llama_attention_gqa", 31, llama_gqa, modeling_llama.LlamaAttention,
                         modeling_llama.LlamaRotaryEmbedding, 2, 7, 4, "transformers' LlamaAttention, hidden 64, "
                         "4 heads, 2 key/value heads, head_dim 16, rope_theta 10000, no bias, causal")
    llama_mqa = LlamaConfig(hidden_size=48, num_attention_heads=6, num_key_value_heads=1, head_dim=8,
                            rope_theta=500000.0, attention_bias=True, num_hidden_layers=1,
                            attn_implementation="eager")
    attention_layer_case("llama_attention_mqa_bias", 32, llama_mqa, modeling_llama.LlamaAttention,
                         modeling_llama.LlamaRotaryEmbedding, 1, 6, 3, "transformers' LlamaAttention, hidden 48, "
                         "6 heads, 1 key/value head, head_dim 8, rope_theta 500000, attention_bias, causal")
    mistral = MistralConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                            sliding_window=4, num_hidden_layers=1, attn_implementation="eager")
    attention_layer_case("mistral_attention_window", 33, mistral, modeling_mistral.MistralAttention,
                         modeling_mistral.MistralRotaryEmbedding, 2, 10, 6, "transformers' MistralAttention, "
                         "hidden 64, 4 heads, 1 key/value head, head_dim 16, rope_theta 10000, sliding_window 4")


def main():
    print("making fixtures with %s" % VERSIONS)
    os.makedirs(writer.GOLDEN_DIR, exist_ok=True)
    sdpa_cases()
    rope_cases()
    attention_layer_cases()


if __name__ == "__main__":
    main()
