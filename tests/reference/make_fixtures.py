#!/usr/bin/python3
"""Writes the golden fixtures in tests/golden/ from the d2l reference code in PyTorch.

The attention code below is the PyTorch code of the d2l chapter "Self-Attention and
Positional Encoding" and of the chapters it builds on ("Attention Scoring Functions",
"Multi-Head Attention"), kept as close to the book as possible so that it can be read
side by side with it. The only deliberate change is to PositionalEncoding (a dtype
argument and odd widths), flagged where it is made. The section "Not in d2l: boolean keep
masks" adds copies of d2l's DotProductAttention and MultiHeadAttention that take a boolean
keep mask instead of valid lengths; it says how they differ from the book. The section "Not in
d2l: PyTorch's nn.MultiheadAttention" records that module's state dict, inputs and outputs, and
checks that d2l's MultiHeadAttention computes the same thing from the same parameters.

Run it with Debian's interpreter, which has python3-torch:

    /usr/bin/python3 tests/reference/make_fixtures.py

Every case uses float64 (torch.set_default_dtype) unless its description says otherwise,
and its own torch.manual_seed, so the output is the same on every run. Modules are put in
eval mode, so dropout is never applied.

File format (read by tests/support/fixture.hpp):

    # <case>: <description>; made by tests/reference/make_fixtures.py
    <name> <ndim> <d0> <d1> ...
    <values, row-major, whitespace separated; one line per row of the last axis>

Lines starting with '#' are comments. ndim 0 is a scalar with one value. Floats are
written with repr(float(x)), which round-trips exactly; integer tensors as integers.
Tensors of a batch of sequences are stored in attend's layout (batch, steps, features);
Linear weights as PyTorch stores them (out, in); Conv1d weights as (out, in, kernel).
"""

import contextlib
import math
import os
import warnings

import torch
from torch import nn
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN_DIR = os.path.normpath(os.path.join(HERE, "..", "golden"))
SCRIPT = "tests/reference/make_fixtures.py"

torch.set_default_dtype(torch.float64)


# --------------------------------------------------------------------------------------
# d2l: Attention Scoring Functions
# --------------------------------------------------------------------------------------

def sequence_mask(X, valid_len, value=0):
    """Mask irrelevant entries in sequences."""
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32,
                        device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(X, valid_lens):
    """Perform softmax operation by masking elements on the last axis."""
    # `X`: 3D tensor, `valid_lens`: 1D or 2D tensor
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    else:
        shape = X.shape
        if valid_lens.dim() == 1:
            valid_lens = torch.repeat_interleave(valid_lens, shape[1])
        else:
            valid_lens = valid_lens.reshape(-1)
        # On the last axis, replace masked elements with a very large negative
        # value, whose exponentiation outputs 0
        X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
        return nn.functional.softmax(X.reshape(shape), dim=-1)


class AdditiveAttention(nn.Module):
    """Additive attention."""
    def __init__(self, key_size, query_size, num_hiddens, dropout, **kwargs):
        super(AdditiveAttention, self).__init__(**kwargs)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens):
        queries, keys = self.W_q(queries), self.W_k(keys)
        # After dimension expansion, shape of `queries`: (`batch_size`, no. of
        # queries, 1, `num_hiddens`) and shape of `keys`: (`batch_size`, 1,
        # no. of key-value pairs, `num_hiddens`). Sum them up with
        # broadcasting
        features = queries.unsqueeze(2) + keys.unsqueeze(1)
        features = torch.tanh(features)
        # There is only one output of `self.w_v`, so we remove the last
        # one-dimensional entry from the shape. Shape of `scores`:
        # (`batch_size`, no. of queries, no. of key-value pairs)
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        # Shape of `values`: (`batch_size`, no. of key-value pairs, value
        # dimension)
        return torch.bmm(self.dropout(self.attention_weights), values)


class DotProductAttention(nn.Module):
    """Scaled dot product attention."""
    def __init__(self, dropout, **kwargs):
        super(DotProductAttention, self).__init__(**kwargs)
        self.dropout = nn.Dropout(dropout)

    # Shape of `queries`: (`batch_size`, no. of queries, `d`)
    # Shape of `keys`: (`batch_size`, no. of key-value pairs, `d`)
    # Shape of `values`: (`batch_size`, no. of key-value pairs, value
    # dimension)
    # Shape of `valid_lens`: (`batch_size`,) or (`batch_size`, no. of queries)
    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        # Set `transpose_b=True` to swap the last two dimensions of `keys`
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


# --------------------------------------------------------------------------------------
# d2l: Multi-Head Attention (the older signature with key/query/value sizes)
# --------------------------------------------------------------------------------------

class MultiHeadAttention(nn.Module):
    """Multi-head attention."""
    def __init__(self, key_size, query_size, value_size, num_hiddens,
                 num_heads, dropout, bias=False, **kwargs):
        super(MultiHeadAttention, self).__init__(**kwargs)
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens):
        # Shape of `queries`, `keys`, or `values`:
        # (`batch_size`, no. of queries or key-value pairs, `num_hiddens`)
        # Shape of `valid_lens`:
        # (`batch_size`,) or (`batch_size`, no. of queries)
        # After transposing, shape of output `queries`, `keys`, or `values`:
        # (`batch_size` * `num_heads`, no. of queries or key-value pairs,
        # `num_hiddens` / `num_heads`)
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)

        if valid_lens is not None:
            # On axis 0, copy the first item (scalar or vector) for
            # `num_heads` times, then copy the next item, and so on
            valid_lens = torch.repeat_interleave(
                valid_lens, repeats=self.num_heads, dim=0)

        # Shape of `output`: (`batch_size` * `num_heads`, no. of queries,
        # `num_hiddens` / `num_heads`)
        output = self.attention(queries, keys, values, valid_lens)

        # Shape of `output_concat`:
        # (`batch_size`, no. of queries, `num_hiddens`)
        output_concat = transpose_output(output, self.num_heads)
        return self.W_o(output_concat)


def transpose_qkv(X, num_heads):
    """Transposition for parallel computation of multiple attention heads."""
    # Shape of input `X`:
    # (`batch_size`, no. of queries or key-value pairs, `num_hiddens`).
    # Shape of output `X`:
    # (`batch_size`, no. of queries or key-value pairs, `num_heads`,
    # `num_hiddens` / `num_heads`)
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)

    # Shape of output `X`:
    # (`batch_size`, `num_heads`, no. of queries or key-value pairs,
    # `num_hiddens` / `num_heads`)
    X = X.permute(0, 2, 1, 3)

    # Shape of `output`:
    # (`batch_size` * `num_heads`, no. of queries or key-value pairs,
    # `num_hiddens` / `num_heads`)
    return X.reshape(-1, X.shape[2], X.shape[3])


def transpose_output(X, num_heads):
    """Reverse the operation of `transpose_qkv`."""
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2])
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


# --------------------------------------------------------------------------------------
# d2l: Self-Attention and Positional Encoding
# --------------------------------------------------------------------------------------

class PositionalEncodingSeed(nn.Module):
    """Positional encoding, exactly as in the book (float32 arguments, even widths only)."""
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super(PositionalEncodingSeed, self).__init__()
        self.dropout = nn.Dropout(dropout)
        # Create a long enough `P`
        self.P = torch.zeros((1, max_len, num_hiddens))
        X = torch.arange(max_len, dtype=torch.float32).reshape(
            -1, 1) / torch.pow(10000, torch.arange(
            0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X):
        X = X + self.P[:, :X.shape[1], :].to(X.device)
        return self.dropout(X)


class PositionalEncoding(nn.Module):
    """Positional encoding.

    Changed from the book in two places:
    * `dtype`: the book computes the angles i / 10000^(2j/d) in float32 whatever the
      default dtype; here they are computed in `dtype` (float64 for the fixtures).
    * odd `num_hiddens`: the book's code fails there, because the 0::2 (sin) columns
      number ceil(d/2) and the 1::2 (cos) columns floor(d/2). The sin columns get all
      ceil(d/2) frequencies, the cos columns the first floor(d/2) of them. For even d
      this is the book's code exactly.
    """
    def __init__(self, num_hiddens, dropout, max_len=1000, dtype=torch.float64):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(dropout)
        # Create a long enough `P`
        self.P = torch.zeros((1, max_len, num_hiddens), dtype=dtype)
        X = torch.arange(max_len, dtype=dtype).reshape(
            -1, 1) / torch.pow(10000, torch.arange(
            0, num_hiddens, 2, dtype=dtype) / num_hiddens)
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X[:, :num_hiddens // 2])

    def forward(self, X):
        X = X + self.P[:, :X.shape[1], :].to(X.device)
        return self.dropout(X)


# --------------------------------------------------------------------------------------
# Not in d2l: boolean keep masks (causal, explicit, and their AND with valid lengths)
# --------------------------------------------------------------------------------------
#
# The book masks only by valid lengths. The code below extends its DotProductAttention and
# MultiHeadAttention to a boolean *keep* mask, True where a query may attend to a key, with
# one of two rules for the masked scores:
#
# * softmax_keep_d2l: d2l's rule, the masked scores are *replaced* by -1e6
#   (scores.masked_fill(~keep, -1e6)); a query that sees no key gets uniform weights.
# * softmax_keep_float_mask: PyTorch's float attention mask, 0 where kept and -inf where
#   blocked, *added* to the scores. A query that sees no key gets a row of NaN, which is
#   replaced by 0: that is what recent PyTorch's F.scaled_dot_product_attention returns
#   there, but torch 1.13 has no scaled_dot_product_attention (it came with 2.0), so the
#   rule is written out here.
#
# Where a query sees at least one key, the two rules give identical weights here (the
# masked exponentials are exactly 0 either way); the cases assert it.

def causal_keep(num_queries, num_keys):
    """Causal keep mask (1, num_queries, num_keys), aligned bottom-right, built from the formula:
    query i sees key j when j <= i + (num_keys - num_queries), as for a decoder with cached keys."""
    i = torch.arange(num_queries)[:, None]
    j = torch.arange(num_keys)[None, :]
    return (j <= i + (num_keys - num_queries))[None]


def lens_keep(valid_lens, num_queries, num_keys):
    """d2l's valid lengths (batch,) or (batch, num_queries) as a keep mask (batch, num_queries, num_keys):
    key j of query q is kept when j < len(q)."""
    lens = valid_lens[:, None].expand(-1, num_queries) if valid_lens.dim() == 1 else valid_lens
    return torch.arange(num_keys)[None, None, :] < lens[:, :, None]


def softmax_keep_d2l(scores, keep):
    """d2l's masked_softmax with a boolean keep mask in place of valid lengths: blocked scores replaced by -1e6."""
    return nn.functional.softmax(scores.masked_fill(~keep, -1e6), dim=-1)


def softmax_keep_float_mask(scores, keep):
    """PyTorch's float attention mask (0 kept, -inf blocked) added to the scores; NaN rows (no key seen) -> 0."""
    attn_mask = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    weights = nn.functional.softmax(scores + attn_mask, dim=-1)
    nan = torch.isnan(weights)
    sees_nothing = ~keep.expand(scores.shape).any(-1, keepdim=True)
    assert torch.equal(nan, sees_nothing.expand(scores.shape)), "NaN exactly in the rows that see no key"
    return weights.masked_fill(nan, 0.0)


class DotProductAttentionKeep(nn.Module):
    """d2l's DotProductAttention, changed to take a boolean keep mask (batch, queries, keys) instead of
    valid lengths; `softmax` is softmax_keep_d2l or softmax_keep_float_mask."""
    def __init__(self, dropout, softmax, **kwargs):
        super(DotProductAttentionKeep, self).__init__(**kwargs)
        self.dropout = nn.Dropout(dropout)
        self.softmax = softmax

    def forward(self, queries, keys, values, keep):
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = self.softmax(scores, keep)
        return torch.bmm(self.dropout(self.attention_weights), values)


class MultiHeadAttentionKeep(nn.Module):
    """d2l's MultiHeadAttention, changed to take a boolean keep mask (batch or 1, queries, keys) instead
    of valid lengths; the mask of a batch row applies to all its heads, as repeat_interleave does for
    valid lengths. Its parameters are copied from a d2l MultiHeadAttention."""
    def __init__(self, d2l_attention, softmax, **kwargs):
        super(MultiHeadAttentionKeep, self).__init__(**kwargs)
        self.num_heads = d2l_attention.num_heads
        self.attention = DotProductAttentionKeep(d2l_attention.attention.dropout.p, softmax)
        self.W_q, self.W_k = d2l_attention.W_q, d2l_attention.W_k
        self.W_v, self.W_o = d2l_attention.W_v, d2l_attention.W_o

    def forward(self, queries, keys, values, keep):
        batch_size = queries.shape[0]
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)
        # On axis 0, copy the mask of each batch row for `num_heads` times
        keep = torch.repeat_interleave(keep.expand(batch_size, -1, -1), repeats=self.num_heads, dim=0)
        output = self.attention(queries, keys, values, keep)
        output_concat = transpose_output(output, self.num_heads)
        return self.W_o(output_concat)


# --------------------------------------------------------------------------------------
# Writing fixtures
# --------------------------------------------------------------------------------------

def _format_values(values, is_float):
    if is_float:
        return " ".join(repr(float(v)) for v in values)
    return " ".join(str(int(v)) for v in values)


def _entry_lines(name, value):
    """Header line and value lines of one entry."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (int, float)):
        return ["%s 0" % name, _format_values([value], isinstance(value, float))]
    if not isinstance(value, torch.Tensor):
        value = torch.tensor(value)
    value = value.detach().contiguous()
    if value.dtype == torch.bool:
        value = value.to(torch.int64)
    is_float = value.is_floating_point()
    shape = list(value.shape)
    lines = [" ".join([name, str(len(shape))] + [str(d) for d in shape])]
    if len(shape) == 0:
        lines.append(_format_values([value.item()], is_float))
    elif len(shape) == 1:
        lines.append(_format_values(value.tolist(), is_float))
    else:
        for row in value.reshape(-1, shape[-1]).tolist():
            lines.append(_format_values(row, is_float))
    return lines


def write_fixture(case, description, entries, notes=()):
    """Writes tests/golden/<case>.txt; `entries` is a list of (name, tensor or number)."""
    names = [name for name, _ in entries]
    assert len(names) == len(set(names)), "duplicate entry in " + case
    lines = ["# %s: %s; made by %s" % (case, description, SCRIPT)]
    lines += ["# " + note for note in notes]
    for name, value in entries:
        assert " " not in name
        lines += _entry_lines(name, value)
    path = os.path.join(GOLDEN_DIR, case + ".txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d bytes)" % (os.path.relpath(path), os.path.getsize(path)))


@contextlib.contextmanager
def default_dtype(dtype):
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def lens_entries(valid_lens):
    return [] if valid_lens is None else [("valid_lens", valid_lens)]


def lens_text(valid_lens):
    if valid_lens is None:
        return "no valid_lens"
    return "valid_lens %s" % valid_lens.tolist()


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------

def masked_softmax_cases():
    def case(name, seed, make_X, valid_lens, description):
        torch.manual_seed(seed)
        X = make_X()
        # sequence_mask writes -1e6 into its argument, a view of X: keep the input first.
        X_in = X.clone()
        output = masked_softmax(X, valid_lens)
        write_fixture(name, "masked_softmax, %s, %s" % (description, lens_text(valid_lens)),
                      [("X", X_in)] + lens_entries(valid_lens) + [("output", output)])

    case("masked_softmax_book_1d", 1, lambda: torch.rand(2, 2, 4), torch.tensor([2, 3]),
         "the book's example X = rand(2, 2, 4)")
    case("masked_softmax_book_2d", 2, lambda: torch.rand(2, 2, 4), torch.tensor([[1, 3], [2, 4]]),
         "the book's example X = rand(2, 2, 4)")
    case("masked_softmax_none", 3, lambda: 3 * torch.randn(3, 4, 5), None,
         "X = 3 * randn(3, 4, 5)")
    case("masked_softmax_zero_and_long", 4, lambda: torch.randn(3, 2, 5), torch.tensor([0, 5, 9]),
         "X = randn(3, 2, 5), lengths zero, exact and longer than the keys")
    case("masked_softmax_2d_mixed", 5, lambda: torch.randn(2, 3, 4),
         torch.tensor([[0, 1, 4], [2, 7, 3]]), "X = randn(2, 3, 4), per-query lengths")


def dot_product_cases():
    for name, seed, valid_lens in [
            ("dot_product_none", 11, None),
            ("dot_product_1d", 12, torch.tensor([2, 5])),
            ("dot_product_2d", 13, torch.tensor([[1, 2, 3], [5, 0, 9]]))]:
        torch.manual_seed(seed)
        queries, keys, values = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
        attention = DotProductAttention(dropout=0.5)
        attention.eval()
        output = attention(queries, keys, values, valid_lens)
        write_fixture(name, "DotProductAttention(0.5) in eval mode, queries (2, 3, 4), keys (2, 5, 4), "
                      "values (2, 5, 6), %s" % lens_text(valid_lens),
                      [("queries", queries), ("keys", keys), ("values", values)]
                      + lens_entries(valid_lens)
                      + [("output", output), ("attention_weights", attention.attention_weights)])


def additive_cases():
    for name, seed, valid_lens in [
            ("additive_none", 21, None),
            ("additive_1d", 22, torch.tensor([3, 6])),
            ("additive_2d", 23, torch.tensor([[1, 0, 6, 8], [2, 3, 4, 5]]))]:
        torch.manual_seed(seed)
        attention = AdditiveAttention(key_size=3, query_size=5, num_hiddens=8, dropout=0.1)
        attention.eval()
        queries, keys, values = torch.randn(2, 4, 5), torch.randn(2, 6, 3), torch.randn(2, 6, 7)
        output = attention(queries, keys, values, valid_lens)
        write_fixture(name, "AdditiveAttention(key_size=3, query_size=5, num_hiddens=8, dropout=0.1) in eval "
                      "mode, queries (2, 4, 5), keys (2, 6, 3), values (2, 6, 7), %s" % lens_text(valid_lens),
                      [("queries", queries), ("keys", keys), ("values", values)]
                      + lens_entries(valid_lens)
                      + [("W_q.weight", attention.W_q.weight), ("W_k.weight", attention.W_k.weight),
                         ("w_v.weight", attention.w_v.weight),
                         ("output", output), ("attention_weights", attention.attention_weights)])


def book_attention_cases():
    # The book's examples of "Attention Scoring Functions"; the book makes values in
    # float32, here they are in the default dtype (float64).
    torch.manual_seed(31)
    queries, keys = torch.normal(0, 1, (2, 1, 20)), torch.ones((2, 10, 2))
    # The two value matrices in the `values` minibatch are identical
    values = torch.arange(40, dtype=torch.get_default_dtype()).reshape(1, 10, 4).repeat(2, 1, 1)
    valid_lens = torch.tensor([2, 6])
    attention = AdditiveAttention(key_size=2, query_size=20, num_hiddens=8, dropout=0.1)
    attention.eval()
    output = attention(queries, keys, values, valid_lens)
    write_fixture("additive_book", "the book's AdditiveAttention(2, 20, 8, 0.1) example in eval mode: queries "
                  "normal(0, 1, (2, 1, 20)), keys ones((2, 10, 2)), values arange(40).reshape(1, 10, 4) "
                  "repeated twice, valid_lens [2, 6]",
                  [("queries", queries), ("keys", keys), ("values", values), ("valid_lens", valid_lens),
                   ("W_q.weight", attention.W_q.weight), ("W_k.weight", attention.W_k.weight),
                   ("w_v.weight", attention.w_v.weight),
                   ("output", output), ("attention_weights", attention.attention_weights)])

    torch.manual_seed(32)
    queries = torch.normal(0, 1, (2, 1, 2))
    attention = DotProductAttention(dropout=0.5)
    attention.eval()
    output = attention(queries, keys, values, valid_lens)
    write_fixture("dot_product_book", "the book's DotProductAttention(0.5) example in eval mode: queries "
                  "normal(0, 1, (2, 1, 2)), keys ones((2, 10, 2)), values arange(40).reshape(1, 10, 4) "
                  "repeated twice, valid_lens [2, 6]",
                  [("queries", queries), ("keys", keys), ("values", values), ("valid_lens", valid_lens),
                   ("output", output), ("attention_weights", attention.attention_weights)])


def transpose_case():
    torch.manual_seed(41)
    X = torch.randn(2, 3, 12)
    output = transpose_qkv(X, 4)
    inverse = transpose_output(output, 4)
    assert torch.equal(inverse, X)
    write_fixture("transpose_qkv", "transpose_qkv(X, 4) of X = randn(2, 3, 12), and transpose_output of it",
                  [("X", X), ("num_heads", 4), ("output", output), ("inverse", inverse)])


def mha_entries(attention, bias):
    entries = []
    for layer in ["W_q", "W_k", "W_v", "W_o"]:
        linear = getattr(attention, layer)
        entries.append((layer + ".weight", linear.weight))
        if bias:
            entries.append((layer + ".bias", linear.bias))
    return entries


def mha_cases():
    key_size, query_size, value_size, num_hiddens = 6, 5, 4, 12
    lens_1d_a = torch.tensor([3, 7])
    lens_1d_b = torch.tensor([0, 10])
    lens_2d = torch.tensor([[1, 2, 7], [0, 4, 12]])
    cases = [
        (1, False, "none", None),
        (2, True, "1d", lens_1d_a),
        (3, False, "1d", lens_1d_b),
        (4, True, "2d", lens_2d),
        (6, False, "2d", lens_2d),
        (12, True, "none", None),
        (2, False, "1d", lens_1d_a),
        (3, True, "2d", lens_2d),
    ]
    for i, (num_heads, bias, lens_name, valid_lens) in enumerate(cases):
        name = "mha_h%d_%s_%s" % (num_heads, "bias" if bias else "nobias", lens_name)
        torch.manual_seed(51 + i)
        attention = MultiHeadAttention(key_size, query_size, value_size, num_hiddens, num_heads, 0.5, bias=bias)
        attention.eval()
        queries, keys, values = torch.randn(2, 3, 5), torch.randn(2, 7, 6), torch.randn(2, 7, 4)
        output = attention(queries, keys, values, valid_lens)
        assert output.shape == (2, 3, num_hiddens)
        write_fixture(name, "MultiHeadAttention(key_size=6, query_size=5, value_size=4, num_hiddens=12, "
                      "num_heads=%d, dropout=0.5, bias=%s) in eval mode, queries (2, 3, 5), keys (2, 7, 6), "
                      "values (2, 7, 4), %s" % (num_heads, bias, lens_text(valid_lens)),
                      [("num_heads", num_heads), ("bias", int(bias)),
                       ("queries", queries), ("keys", keys), ("values", values)]
                      + lens_entries(valid_lens) + mha_entries(attention, bias)
                      + [("output", output), ("attention_weights", attention.attention.attention_weights)],
                      notes=["attention_weights is (batch * num_heads, queries, keys), "
                             "row b * num_heads + h for head h of batch row b"])


def mha_self_seed_case():
    # The chapter's example: self-attention, queries = keys = values = X.
    torch.manual_seed(61)
    num_hiddens, num_heads = 100, 5
    attention = MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens,
                                   num_hiddens, num_heads, 0.5)
    attention.eval()
    batch_size, num_queries, valid_lens = 2, 4, torch.tensor([3, 2])
    X = torch.randn((batch_size, num_queries, num_hiddens))
    output = attention(X, X, X, valid_lens)
    assert output.shape == (batch_size, num_queries, num_hiddens)
    write_fixture("mha_self_seed", "the chapter's self-attention example, MultiHeadAttention(100, 100, 100, 100, "
                  "5, 0.5) in eval mode, X = randn(2, 4, 100), attention(X, X, X, valid_lens) with "
                  "valid_lens [3, 2]",
                  [("num_heads", num_heads), ("bias", 0), ("X", X), ("valid_lens", valid_lens)]
                  + mha_entries(attention, False)
                  + [("output", output), ("attention_weights", attention.attention.attention_weights)],
                  notes=["self-attention: queries, keys and values are all the entry X",
                         "attention_weights is (batch * num_heads, queries, keys)"])


def positional_encoding_cases():
    for name, seed, num_hiddens, max_len, steps in [
            ("positional_encoding_32", 71, 32, 60, 10),
            ("positional_encoding_odd", 72, 7, 50, 9)]:
        torch.manual_seed(seed)
        encoding = PositionalEncoding(num_hiddens, 0, max_len=max_len)
        encoding.eval()
        X = torch.randn(2, steps, num_hiddens)
        output = encoding(X)
        write_fixture(name, "PositionalEncoding(%d, 0, max_len=%d) in float64%s; P (max_len, num_hiddens), "
                      "X = randn(2, %d, %d), output = encoding(X)"
                      % (num_hiddens, max_len, ", odd width: sin columns get all ceil(d/2) frequencies, "
                         "cos columns the first floor(d/2)" if num_hiddens % 2 else "", steps, num_hiddens),
                      [("num_hiddens", num_hiddens), ("max_len", max_len), ("P", encoding.P[0]),
                       ("X", X), ("output", output)])

    # The book's code as it is: the angles are computed in float32, so is P.
    with default_dtype(torch.float32):
        encoding = PositionalEncodingSeed(32, 0, max_len=60)
    assert encoding.P.dtype == torch.float32
    write_fixture("positional_encoding_float32", "the book's PositionalEncoding(32, 0, max_len=60) run literally "
                  "in float32 (angles and P in float32), P written as float32 values",
                  [("num_hiddens", 32), ("max_len", 60), ("P", encoding.P[0])])


def rnn_cases():
    for name, seed, input_size, hidden_size, shape in [
            ("rnn_a", 81, 3, 5, (2, 6, 3)),
            ("rnn_b", 82, 4, 4, (3, 1, 4))]:
        torch.manual_seed(seed)
        rnn = nn.RNN(input_size, hidden_size, batch_first=True)
        rnn.eval()
        X = torch.randn(*shape)
        output, _ = rnn(X)
        write_fixture(name, "nn.RNN(%d, %d, batch_first=True), tanh, one layer, h0 = 0, X = randn%s, "
                      "output = every h_t (batch, steps, hidden)" % (input_size, hidden_size, shape),
                      [("weight_ih", rnn.weight_ih_l0), ("weight_hh", rnn.weight_hh_l0),
                       ("bias_ih", rnn.bias_ih_l0), ("bias_hh", rnn.bias_hh_l0),
                       ("X", X), ("output", output)])


def conv1d_reference(X, weight, bias):
    """Direct sum for padding='same': left pad (k - 1) // 2, the rest on the right.

    X is (batch, steps, in) and the result (batch, steps, out); used to check PyTorch.
    """
    k = weight.shape[2]
    left = (k - 1) // 2
    padded = F.pad(X.transpose(1, 2), (left, k - 1 - left))  # (batch, in, steps + k - 1)
    steps = X.shape[1]
    out = torch.zeros(X.shape[0], steps, weight.shape[0])
    for t in range(steps):
        window = padded[:, :, t:t + k]  # (batch, in, k)
        out[:, t, :] = torch.einsum("bik,oik->bo", window, weight)
    if bias is not None:
        out += bias
    return out


def conv1d_cases():
    cases = [("conv1d_k%d" % k, 90 + k, 3, 4, k, True, (2, 7, 3)) for k in range(1, 6)]
    cases += [("conv1d_k4_nobias", 96, 3, 4, 4, False, (2, 7, 3)),
              ("conv1d_k3_long", 97, 2, 3, 3, True, (1, 12, 2))]
    for name, seed, in_channels, out_channels, k, bias, shape in cases:
        torch.manual_seed(seed)
        conv = nn.Conv1d(in_channels, out_channels, kernel_size=k, padding="same", bias=bias)
        conv.eval()
        X = torch.randn(*shape)  # attend's layout (batch, steps, channels)
        with warnings.catch_warnings():
            # PyTorch warns that even kernels with padding='same' copy the input.
            warnings.simplefilter("ignore", UserWarning)
            output = conv(X.transpose(1, 2)).transpose(1, 2)
        expected = conv1d_reference(X, conv.weight, conv.bias)
        assert torch.allclose(output, expected, rtol=1e-12, atol=1e-12), name
        write_fixture(name, "nn.Conv1d(%d, %d, kernel_size=%d, padding='same', bias=%s), X = randn%s in "
                      "(batch, steps, channels), output in (batch, steps, channels)"
                      % (in_channels, out_channels, k, bias, shape),
                      [("kernel_size", k), ("weight", conv.weight)]
                      + ([("bias", conv.bias)] if bias else [])
                      + [("X", X), ("output", output)],
                      notes=["weight is PyTorch's (out_channels, in_channels, kernel_size); 'same' pads "
                             "(k - 1) // 2 steps on the left and the rest on the right"])


def mask_combined(batch, num_queries, num_keys, valid_lens, causal, keep):
    """The AND of a mask's parts, (batch, num_queries, num_keys): what attend::Mask must keep."""
    combined = torch.ones(batch, num_queries, num_keys, dtype=torch.bool)
    if valid_lens is not None:
        combined &= lens_keep(valid_lens, num_queries, num_keys)
    if causal:
        combined &= causal_keep(num_queries, num_keys)
    if keep is not None:
        combined &= keep
    return combined


def mask_text(valid_lens, causal, keep, zero):
    parts = []
    if causal:
        parts.append("causal")
    if valid_lens is not None:
        parts.append("valid_lens %s" % valid_lens.tolist())
    if keep is not None:
        parts.append("keep %s" % (tuple(keep.shape),))
    return "mask %s, %s" % (" && ".join(parts), "FullyMasked::zero" if zero else "FullyMasked::uniform")


def mask_entries(valid_lens, causal, keep, zero, combined):
    return (lens_entries(valid_lens) + [("causal", int(causal))]
            + ([] if keep is None else [("keep", keep)])
            + [("fully_masked_zero", int(zero)), ("combined_keep", combined)])


MASK_NOTES = [
    "mask parts: valid_lens (absent: none), causal (0/1: key j of query i kept when j <= i + (keys - queries), "
    "bottom-right aligned), keep (absent: none; 0/1, shape (batch or 1, queries, keys)), fully_masked_zero (0/1)",
    "combined_keep (batch, queries, keys) is the AND of the parts, built from the formulas",
    "reference: FullyMasked::uniform -> scores.masked_fill(~keep, -1e6), softmax (d2l's rule); "
    "FullyMasked::zero -> scores + float mask (0 kept, -inf blocked), softmax, NaN rows (no key seen) -> 0 "
    "(recent PyTorch's scaled_dot_product_attention; torch 1.13 has none)",
]


def random_keep(shape, p=0.6):
    """A random keep mask in which every query keeps at least one key."""
    keep = torch.rand(shape) < p
    first = torch.randint(shape[-1], shape[:-1])
    keep.scatter_(-1, first[..., None], True)
    return keep


def mask_softmax_for(zero):
    return softmax_keep_float_mask if zero else softmax_keep_d2l


def check_rules_agree(scores, combined):
    """Where a query sees a key, the -1e6 rule and the -inf rule give identical weights."""
    sees = combined.any(-1)
    a = softmax_keep_d2l(scores, combined)
    b = softmax_keep_float_mask(scores, combined)
    assert torch.equal(a[sees], b[sees])
    return int((~sees).sum())


def mask_dot_product_cases():
    cases = [
        # name, seed, (batch, queries, keys), valid_lens, causal, keep maker, zero
        ("mask_dot_causal_square", 101, (2, 4, 4), None, True, None, False),
        ("mask_dot_causal_fewer_queries", 102, (2, 3, 5), None, True, None, False),
        ("mask_dot_causal_more_queries_uniform", 103, (2, 5, 3), None, True, None, False),
        ("mask_dot_causal_more_queries_zero", 103, (2, 5, 3), None, True, None, True),
        ("mask_dot_keep_broadcast", 104, (2, 3, 5), None, False, (1, 3, 5), False),
        ("mask_dot_keep_batch", 105, (2, 3, 5), None, False, (2, 3, 5), False),
        ("mask_dot_keep_lens_uniform", 106, (2, 3, 5), torch.tensor([4, 1]), False, (2, 3, 5), False),
        ("mask_dot_keep_lens_zero", 106, (2, 3, 5), torch.tensor([4, 1]), False, (2, 3, 5), True),
        ("mask_dot_causal_lens_uniform", 107, (2, 3, 5), torch.tensor([[1, 4, 5], [0, 3, 2]]), True, None, False),
        ("mask_dot_causal_lens_zero", 107, (2, 3, 5), torch.tensor([[1, 4, 5], [0, 3, 2]]), True, None, True),
    ]
    for name, seed, (batch, num_queries, num_keys), valid_lens, causal, keep_shape, zero in cases:
        torch.manual_seed(seed)
        queries = torch.randn(batch, num_queries, 4)
        keys, values = torch.randn(batch, num_keys, 4), torch.randn(batch, num_keys, 6)
        keep = None if keep_shape is None else random_keep(keep_shape)
        if name.startswith("mask_dot_keep_lens"):
            keep[1, 0, 0] = False  # with valid length 1, query 0 of batch row 1 sees no key
        combined = mask_combined(batch, num_queries, num_keys, valid_lens, causal, keep)
        attention = DotProductAttentionKeep(dropout=0.5, softmax=mask_softmax_for(zero))
        attention.eval()
        output = attention(queries, keys, values, combined)
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(4)
        blind = check_rules_agree(scores, combined)
        if valid_lens is not None:
            # On valid lengths alone, the -1e6 rule with a keep mask is d2l's masked_softmax bit for bit.
            assert torch.equal(softmax_keep_d2l(scores, lens_keep(valid_lens, num_queries, num_keys)),
                               masked_softmax(scores.clone(), valid_lens))
        write_fixture(name, "DotProductAttention(0.5) in eval mode with a boolean keep mask, queries (%d, %d, 4), "
                      "keys (%d, %d, 4), values (%d, %d, 6), %s; queries that see no key: %d"
                      % (batch, num_queries, batch, num_keys, batch, num_keys,
                         mask_text(valid_lens, causal, keep, zero), blind),
                      [("queries", queries), ("keys", keys), ("values", values)]
                      + mask_entries(valid_lens, causal, keep, zero, combined)
                      + [("output", output), ("attention_weights", attention.attention_weights)],
                      notes=MASK_NOTES)


def mask_softmax_cases():
    for name, zero in [("mask_softmax_all_parts_uniform", False), ("mask_softmax_all_parts_zero", True)]:
        torch.manual_seed(111)
        batch, num_queries, num_keys = 2, 4, 6
        X = 3 * torch.randn(batch, num_queries, num_keys)
        valid_lens = torch.tensor([[6, 2, 0, 5], [3, 6, 4, 1]])
        keep = random_keep((1, num_queries, num_keys))
        combined = mask_combined(batch, num_queries, num_keys, valid_lens, True, keep)
        output = mask_softmax_for(zero)(X, combined)
        blind = check_rules_agree(X, combined)
        write_fixture(name, "masked softmax of X = 3 * randn(2, 4, 6), %s; queries that see no key: %d"
                      % (mask_text(valid_lens, True, keep, zero), blind),
                      [("X", X)] + mask_entries(valid_lens, True, keep, zero, combined) + [("output", output)],
                      notes=MASK_NOTES)


def mask_mha_cases():
    key_size, query_size, value_size, num_hiddens = 6, 5, 4, 12
    cases = [
        # name, seed, num_heads, bias, valid_lens, causal, keep shape, zero
        ("mask_mha_causal", 121, 3, True, None, True, None, False),
        ("mask_mha_keep_broadcast", 122, 2, False, None, False, (1, 4, 6), False),
        ("mask_mha_keep_lens", 123, 3, True, torch.tensor([5, 2]), False, (2, 4, 6), False),
        ("mask_mha_causal_lens_uniform", 124, 4, True, torch.tensor([[1, 0, 6, 4], [2, 3, 0, 5]]), True, None,
         False),
        ("mask_mha_causal_lens_zero", 124, 4, True, torch.tensor([[1, 0, 6, 4], [2, 3, 0, 5]]), True, None, True),
    ]
    for name, seed, num_heads, bias, valid_lens, causal, keep_shape, zero in cases:
        torch.manual_seed(seed)
        d2l_attention = MultiHeadAttention(key_size, query_size, value_size, num_hiddens, num_heads, 0.5, bias=bias)
        d2l_attention.eval()
        queries, keys, values = torch.randn(2, 4, 5), torch.randn(2, 6, 6), torch.randn(2, 6, 4)
        keep = None if keep_shape is None else random_keep(keep_shape)
        combined = mask_combined(2, 4, 6, valid_lens, causal, keep)
        attention = MultiHeadAttentionKeep(d2l_attention, mask_softmax_for(zero))
        attention.eval()
        output = attention(queries, keys, values, keep=combined)
        if valid_lens is not None:
            # With d2l's -1e6 rule, the copy is d2l's MultiHeadAttention bit for bit on valid lengths alone.
            d2l_rule = MultiHeadAttentionKeep(d2l_attention, softmax_keep_d2l)
            d2l_rule.eval()
            assert torch.equal(d2l_rule(queries, keys, values, lens_keep(valid_lens, 4, 6)),
                               d2l_attention(queries, keys, values, valid_lens))
        blind = int((~combined.any(-1)).sum())
        write_fixture(name, "MultiHeadAttention(key_size=6, query_size=5, value_size=4, num_hiddens=12, "
                      "num_heads=%d, dropout=0.5, bias=%s) in eval mode with a boolean keep mask, queries (2, 4, 5), "
                      "keys (2, 6, 6), values (2, 6, 4), %s; queries that see no key: %d"
                      % (num_heads, bias, mask_text(valid_lens, causal, keep, zero), blind),
                      [("num_heads", num_heads), ("bias", int(bias)),
                       ("queries", queries), ("keys", keys), ("values", values)]
                      + mask_entries(valid_lens, causal, keep, zero, combined)
                      + mha_entries(d2l_attention, bias)
                      + [("output", output), ("attention_weights", attention.attention.attention_weights)],
                      notes=MASK_NOTES + ["parameters are d2l's MultiHeadAttention's; attention_weights is "
                                          "(batch * num_heads, queries, keys), row b * num_heads + h for head h of "
                                          "batch row b; the mask of batch row b applies to all its heads"])


# --------------------------------------------------------------------------------------
# Not in d2l: PyTorch's nn.MultiheadAttention, for attend::multi_head_attention_from_torch
# --------------------------------------------------------------------------------------

def torch_mha_cases():
    """nn.MultiheadAttention(embed_dim=12, batch_first=True) in its layouts: packed in_proj_weight or q/k/v_proj_weight
    (kdim, vdim), with or without biases. The fixtures hold its state_dict() under PyTorch's names; attend converts
    them. examples/from_pytorch/export.py covers the float32 packed case docs/USAGE.md shows (#weights-from-pytorch)."""
    embed_dim = 12
    key_padding_mask = torch.tensor([[0, 1, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    cases = [
        # name, seed, num_heads, kdim, vdim, bias
        ("torch_mha_packed", 131, 2, None, None, True),
        ("torch_mha_packed_nobias", 132, 4, None, None, False),
        ("torch_mha_kdim_vdim", 133, 3, 6, 4, True),
        ("torch_mha_kdim_vdim_nobias", 134, 6, 6, 4, False),
    ]
    for name, seed, num_heads, kdim, vdim, bias in cases:
        torch.manual_seed(seed)
        attention = nn.MultiheadAttention(embed_dim, num_heads, bias=bias, kdim=kdim, vdim=vdim, batch_first=True)
        if bias:
            # PyTorch starts both biases at 0; give them values, so that a misplaced bias shows.
            nn.init.uniform_(attention.in_proj_bias, -0.5, 0.5)
            nn.init.uniform_(attention.out_proj.bias, -0.5, 0.5)
        attention.eval()
        key_size, value_size = kdim or embed_dim, vdim or embed_dim
        queries, keys, values = torch.randn(2, 3, embed_dim), torch.randn(2, 7, key_size), torch.randn(2, 7, value_size)
        output, _ = attention(queries, keys, values, need_weights=False)
        output_masked, _ = attention(queries, keys, values, key_padding_mask=key_padding_mask, need_weights=False)
        # The same computation as d2l's MultiHeadAttention, with the parameters under d2l's names.
        d2l_attention = MultiHeadAttention(key_size, embed_dim, value_size, embed_dim, num_heads, 0.0, bias=bias)
        d2l_attention.eval()
        state = attention.state_dict()
        if "in_proj_weight" in state:
            W_q, W_k, W_v = state["in_proj_weight"].chunk(3)
        else:
            W_q, W_k, W_v = state["q_proj_weight"], state["k_proj_weight"], state["v_proj_weight"]
        d2l_state = {"W_q.weight": W_q, "W_k.weight": W_k, "W_v.weight": W_v, "W_o.weight": state["out_proj.weight"]}
        if bias:
            b_q, b_k, b_v = state["in_proj_bias"].chunk(3)
            d2l_state.update({"W_q.bias": b_q, "W_k.bias": b_k, "W_v.bias": b_v, "W_o.bias": state["out_proj.bias"]})
        d2l_attention.load_state_dict(d2l_state)
        assert torch.allclose(d2l_attention(queries, keys, values, None), output, rtol=1e-12, atol=1e-14)
        write_fixture(name, "nn.MultiheadAttention(embed_dim=12, num_heads=%d, bias=%s, kdim=%s, vdim=%s, "
                      "batch_first=True) in eval mode, queries (2, 3, 12), keys (2, 7, %d), values (2, 7, %d); "
                      "output = module(queries, keys, values, need_weights=False)[0], output_masked the same with "
                      "key_padding_mask" % (num_heads, bias, kdim, vdim, key_size, value_size),
                      [("num_heads", num_heads), ("queries", queries), ("keys", keys), ("values", values),
                       ("key_padding_mask", key_padding_mask)]
                      + list(state.items())
                      + [("output", output), ("output_masked", output_masked)],
                      notes=["the entries between key_padding_mask and output are the module's state_dict(), under "
                             "PyTorch's names",
                             "key_padding_mask is PyTorch's: 1 where a key is padding and must be ignored",
                             "d2l's MultiHeadAttention with the same parameters gives the same output (checked)"])


def main():
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    with torch.no_grad():
        masked_softmax_cases()
        dot_product_cases()
        additive_cases()
        book_attention_cases()
        transpose_case()
        mha_cases()
        mha_self_seed_case()
        positional_encoding_cases()
        rnn_cases()
        conv1d_cases()
        mask_softmax_cases()
        mask_dot_product_cases()
        mask_mha_cases()
        torch_mha_cases()


if __name__ == "__main__":
    main()
