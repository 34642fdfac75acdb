"""Writes golden fixtures for the transformer blocks: activations, Embedding, LayerNorm, RMSNorm, d2l's
PositionWiseFFN and AddNorm, Llama's gated MLP, d2l's TransformerEncoderBlock and PyTorch's
nn.TransformerEncoderLayer.

Run it with PyTorch 2.x and transformers installed from pip (CPU only, no downloads):

    python3 tests/reference/make_transformer_fixtures.py

It writes, in the file format of make_fixtures.py (whose writer it reuses; tests/support/fixture.hpp reads it),
tests/golden/block_*.txt. Every case is float64 with its own torch.manual_seed. Each holds the module's parameters
under their state_dict() names, the inputs, the output, grad_output, the inputs' gradients (grad_X, ...) and each
parameter's gradient under "<name>_grad", all by autograd of sum(output * grad_output). Parameters are drawn uniform
in [-1, 1) (LayerNorm's weight too, so that a wrong weight or bias shows).

d2l's classes of "The Transformer Architecture" (current edition) are written out below with explicit input sizes
where the book uses nn.LazyLinear; d2l's MultiHeadAttention is make_fixtures.py's.
"""

import math
import os
import sys

import torch
import transformers
from torch import nn
from torch.nn import functional as F
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as writer  # noqa: E402  (the fixture writer and d2l's attention; importing generates nothing)

writer.SCRIPT = "tests/reference/make_transformer_fixtures.py"
torch.set_default_dtype(torch.float64)

VERSIONS = "torch %s, transformers %s" % (torch.__version__, transformers.__version__)


def uniform(*shape):
    """Uniform in [-1, 1)."""
    return torch.rand(*shape) * 2 - 1


def randomize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(uniform(*p.shape))


def parameter_entries(module):
    return [(name, p.detach()) for name, p in module.state_dict().items()]


def gradient_entries(module):
    return [(name + "_grad", p.grad) for name, p in module.named_parameters()]


def max_diff(a, b):
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------------------
# d2l, "The Transformer Architecture", with explicit input sizes
# --------------------------------------------------------------------------------------

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


class PositionWiseFFN(nn.Module):
    """The positionwise feed-forward network (d2l: dense1, ReLU, dense2); the activation may be chosen."""
    def __init__(self, ffn_num_input, ffn_num_hiddens, ffn_num_outputs, activation="relu"):
        super().__init__()
        self.dense1 = nn.Linear(ffn_num_input, ffn_num_hiddens)
        self.activation = ACTIVATIONS[activation]
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)

    def forward(self, X):
        return self.dense2(self.activation(self.dense1(X)))


class AddNorm(nn.Module):
    """The residual connection followed by layer normalization."""
    def __init__(self, norm_shape, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(norm_shape)

    def forward(self, X, Y):
        return self.ln(self.dropout(Y) + X)


class TransformerEncoderBlock(nn.Module):
    """The Transformer encoder block."""
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias=False):
        super().__init__()
        self.attention = writer.MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads,
                                                   dropout, use_bias)
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens, num_hiddens)
        self.addnorm2 = AddNorm(num_hiddens, dropout)

    def forward(self, X, valid_lens):
        Y = self.addnorm1(X, self.attention(X, X, X, valid_lens))
        return self.addnorm2(Y, self.ffn(Y))


def d2l_attention(num_hiddens, num_heads, dropout, bias=False):
    """d2l's current MultiHeadAttention(num_hiddens, num_heads, dropout, bias), with its LazyLinear sizes explicit."""
    return writer.MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, dropout, bias)


class TransformerEncoder(nn.Module):
    """The Transformer encoder."""
    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout, use_bias=False):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = writer.PositionalEncoding(num_hiddens, dropout)
        self.blks = nn.Sequential()
        for i in range(num_blks):
            self.blks.add_module("block" + str(i), TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads,
                                                                           dropout, use_bias))

    def forward(self, X, valid_lens):
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        for blk in self.blks:
            X = blk(X, valid_lens)
        return X


class TransformerDecoderBlock(nn.Module):
    """The i-th block in the Transformer decoder."""
    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout, i):
        super().__init__()
        self.i = i
        self.attention1 = d2l_attention(num_hiddens, num_heads, dropout)
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.attention2 = d2l_attention(num_hiddens, num_heads, dropout)
        self.addnorm2 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens, num_hiddens)
        self.addnorm3 = AddNorm(num_hiddens, dropout)

    def forward(self, X, state):
        enc_outputs, enc_valid_lens = state[0], state[1]
        if state[2][self.i] is None:
            key_values = X
        else:
            key_values = torch.cat((state[2][self.i], X), dim=1)
        state[2][self.i] = key_values
        if self.training:
            batch_size, num_steps, _ = X.shape
            dec_valid_lens = torch.arange(1, num_steps + 1, device=X.device).repeat(batch_size, 1)
        else:
            dec_valid_lens = None
        X2 = self.attention1(X, key_values, key_values, dec_valid_lens)
        Y = self.addnorm1(X, X2)
        Y2 = self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)
        Z = self.addnorm2(Y, Y2)
        return self.addnorm3(Z, self.ffn(Z)), state


class TransformerDecoder(nn.Module):
    """The Transformer decoder."""
    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.num_blks = num_blks
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = writer.PositionalEncoding(num_hiddens, dropout)
        self.blks = nn.Sequential()
        for i in range(num_blks):
            self.blks.add_module("block" + str(i), TransformerDecoderBlock(num_hiddens, ffn_num_hiddens, num_heads,
                                                                           dropout, i))
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens):
        return [enc_outputs, enc_valid_lens, [None] * self.num_blks]

    def forward(self, X, state):
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        for blk in self.blks:
            X, state = blk(X, state)
        return self.dense(X), state


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------

def differentiate(output, grad_output, inputs):
    """Backpropagates sum(output * grad_output); returns the inputs' gradients."""
    return torch.autograd.grad(output, inputs, grad_output, retain_graph=True) if inputs else ()


def activation_cases():
    for index, name in enumerate(ACTIVATIONS):
        torch.manual_seed(100 + index)
        X = uniform(2, 3, 7) * 4
        X[0, 0, 0] = 0.0  # the derivative at 0 (ReLU's is 0 in PyTorch)
        X.requires_grad_(True)
        output = ACTIVATIONS[name](X)
        grad_output = uniform(*output.shape)
        (grad_X,) = torch.autograd.grad(output, X, grad_output)
        torch_name = {"gelu_tanh": "F.gelu(approximate='tanh')"}.get(name, "F." + name)
        writer.write_fixture("block_activation_" + name, "%s on X uniform(2, 3, 7) * 4 with X[0,0,0] = 0; %s"
                             % (torch_name, VERSIONS),
                             [("X", X), ("output", output), ("grad_output", grad_output), ("grad_X", grad_X)])


def embedding_case():
    torch.manual_seed(110)
    embedding = nn.Embedding(10, 4)
    tokens = torch.tensor([[3, 0, 9, 3, 5], [5, 5, 1, 3, 9]])
    output = embedding(tokens)
    grad_output = uniform(*output.shape)
    output.backward(grad_output)
    writer.write_fixture("block_embedding", "nn.Embedding(10, 4) (its own N(0, 1) weight), tokens with repeats; %s"
                         % VERSIONS,
                         parameter_entries(embedding) + [("tokens", tokens), ("output", output),
                                                         ("grad_output", grad_output)] + gradient_entries(embedding))


def norm_case(name, seed, module, X, description, notes=()):
    torch.manual_seed(seed)
    randomize(module)
    X = X.clone().requires_grad_(True)
    output = module(X)
    grad_output = uniform(*output.shape)
    output.backward(grad_output)
    writer.write_fixture(name, "%s; %s" % (description, VERSIONS),
                         [("eps", float(module.eps))] + parameter_entries(module)
                         + [("X", X), ("output", output), ("grad_output", grad_output), ("grad_X", X.grad)]
                         + gradient_entries(module), notes)


def norm_cases():
    torch.manual_seed(120)
    X = uniform(2, 4, 6) * 3 + 1.5
    norm_case("block_layer_norm", 121, nn.LayerNorm(6), X, "nn.LayerNorm(6) on X uniform(2, 4, 6) * 3 + 1.5")
    torch.manual_seed(122)
    X = uniform(2, 3, 8) * 0.01 + 100
    norm_case("block_layer_norm_offset", 123, nn.LayerNorm(8, eps=1e-6), X,
              "nn.LayerNorm(8, eps=1e-6) on X uniform(2, 3, 8) * 0.01 + 100 (a mean far from 0, a small spread)")

    torch.manual_seed(124)
    X = uniform(2, 4, 6) * 3
    rms = nn.RMSNorm(6, eps=1e-6)
    # transformers' LlamaRMSNorm computes in float32 whatever the model's dtype; in float64 it is the same formula.
    hf = modeling_llama.LlamaRMSNorm(6, eps=1e-6)
    torch.manual_seed(125)
    randomize(rms)
    with torch.no_grad():
        hf.weight.copy_(rms.weight)
        float64 = X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-6) * rms.weight
        diff_torch = max_diff(rms(X), float64)
        diff_hf = max_diff(hf(X), float64)
    assert diff_torch < 1e-14, diff_torch
    norm_case("block_rms_norm", 125, rms, X, "nn.RMSNorm(6, eps=1e-6) on X uniform(2, 4, 6) * 3",
              ["nn.RMSNorm agrees with x * rsqrt(mean(x^2) + eps) * weight in float64 to %.1e; transformers' "
               "LlamaRMSNorm, which computes in float32 even in a float64 model, differs by %.1e"
               % (diff_torch, diff_hf)])


def module_case(name, seed, module, inputs, description, extras=(), call=None, notes=()):
    """inputs: [(entry name, tensor)], differentiated; call(module, *inputs) -> output (default module(*inputs))."""
    torch.manual_seed(seed)
    randomize(module)
    module.eval()
    tensors = [x.clone().requires_grad_(True) for _, x in inputs]
    output = call(module, *tensors) if call else module(*tensors)
    grad_output = uniform(*output.shape)
    output.backward(grad_output)
    writer.write_fixture(name, "%s; %s" % (description, VERSIONS),
                         list(extras) + parameter_entries(module)
                         + [(n, x) for (n, _), x in zip(inputs, tensors)]
                         + [("output", output), ("grad_output", grad_output)]
                         + [("grad_" + n, x.grad) for (n, _), x in zip(inputs, tensors)]
                         + gradient_entries(module), notes)


def ffn_cases():
    torch.manual_seed(130)
    X = uniform(2, 3, 6)
    module_case("block_ffn_relu", 131, PositionWiseFFN(6, 10, 5), [("X", X)],
                "d2l's PositionWiseFFN(6, 10, 5) (ReLU)", [("activation", 0)])
    module_case("block_ffn_gelu", 132, PositionWiseFFN(6, 10, 6, "gelu"), [("X", X)],
                "d2l's PositionWiseFFN(6, 10, 6) with GELU (erf form) in place of ReLU", [("activation", 1)])

    def llama_mlp(hidden_act, bias):
        config = LlamaConfig(hidden_size=6, intermediate_size=10, hidden_act=hidden_act, mlp_bias=bias,
                             num_attention_heads=2, num_key_value_heads=2)
        return modeling_llama.LlamaMLP(config)

    module_case("block_gated_ffn_silu", 133, llama_mlp("silu", False), [("X", X)],
                "transformers' LlamaMLP(hidden_size 6, intermediate_size 10, silu, no bias)",
                [("activation", 3), ("bias", 0)])
    module_case("block_gated_ffn_gelu_tanh", 134, llama_mlp("gelu_pytorch_tanh", True), [("X", X)],
                "transformers' LlamaMLP(hidden_size 6, intermediate_size 10, gelu_pytorch_tanh, mlp_bias)",
                [("activation", 2), ("bias", 1)])


def add_norm_case():
    torch.manual_seed(140)
    X, Y = uniform(2, 3, 6) * 2, uniform(2, 3, 6)
    module_case("block_add_norm", 141, AddNorm(6, 0.5), [("X", X), ("Y", Y)],
                "d2l's AddNorm(6, dropout 0.5) in eval mode (no dropout)")


def encoder_block_cases():
    torch.manual_seed(150)
    X = uniform(2, 5, 8)
    valid_lens = torch.tensor([3, 5])
    module_case("block_encoder_lens", 151, TransformerEncoderBlock(8, 12, 2, 0.5), [("X", X)],
                "d2l's TransformerEncoderBlock(8, 12, 2, dropout 0.5, use_bias False) in eval mode, valid_lens [3, 5]",
                [("num_heads", 2), ("use_bias", 0), ("valid_lens", valid_lens)],
                call=lambda m, x: m(x, valid_lens))
    module_case("block_encoder_bias", 152, TransformerEncoderBlock(8, 12, 2, 0.5, use_bias=True), [("X", X)],
                "d2l's TransformerEncoderBlock(8, 12, 2, dropout 0.5, use_bias True) in eval mode, no valid_lens",
                [("num_heads", 2), ("use_bias", 1)], call=lambda m, x: m(x, None))


def torch_encoder_layer_cases():
    """nn.TransformerEncoderLayer(batch_first=True) in its four variants, with a key padding mask or a causal one.
    Differentiated, so PyTorch takes its ordinary (not the fused inference) path."""
    torch.manual_seed(160)
    X = uniform(2, 5, 8)
    valid_lens = torch.tensor([3, 5])
    padding = torch.arange(5)[None, :] >= valid_lens[:, None]  # True: a padding key, ignored
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    seed = 161
    for norm_first in (False, True):
        for activation in ("relu", "gelu"):
            for mask in ("lens", "causal"):
                layer = nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, activation=activation, batch_first=True,
                                                   norm_first=norm_first)
                if mask == "lens":
                    call = lambda m, x: m(x, src_key_padding_mask=padding)  # noqa: E731
                    extras = [("valid_lens", valid_lens)]
                else:
                    call = lambda m, x: m(x, src_mask=causal, is_causal=True)  # noqa: E731
                    extras = [("causal", 1)]
                name = "block_torch_layer_%s_%s_%s" % ("pre" if norm_first else "post", activation, mask)
                module_case(name, seed, layer, [("X", X)],
                            "nn.TransformerEncoderLayer(8, 2, 12, dropout 0, activation %s, batch_first, norm_first "
                            "%s), %s" % (activation, norm_first,
                                         "src_key_padding_mask from valid_lens [3, 5]" if mask == "lens"
                                         else "causal src_mask"),
                            [("num_heads", 2), ("norm_first", int(norm_first)),
                             ("activation", 0 if activation == "relu" else 1)] + extras, call=call)
                seed += 1


def seq2seq_case():
    """d2l's encoder and decoder (2 blocks each) on a batch of two sequences, trained in training mode with dropout 0:
    logits, every gradient and the encoder outputs' gradient through the decoder; and d2l's own token-by-token
    prediction loop in eval mode, for the difference its position slip makes."""
    torch.manual_seed(170)
    encoder = TransformerEncoder(11, 8, 12, 2, 2, 0.0)
    decoder = TransformerDecoder(13, 8, 12, 2, 2, 0.0)
    randomize(encoder)
    randomize(decoder)
    src = torch.randint(0, 11, (2, 6))
    tgt = torch.randint(0, 13, (2, 5))
    enc_valid_lens = torch.tensor([4, 6])
    encoder.train()
    decoder.train()
    enc_outputs = encoder(src, enc_valid_lens)
    enc_outputs.retain_grad()
    logits, _ = decoder(tgt, decoder.init_state(enc_outputs, enc_valid_lens))
    grad_logits = uniform(*logits.shape)
    logits.backward(grad_logits)
    enc_outputs_grad = enc_outputs.grad.clone()

    decoder.eval()
    with torch.no_grad():
        state = decoder.init_state(enc_outputs.detach(), enc_valid_lens)
        stepwise = []
        for t in range(tgt.shape[1]):
            step_logits, state = decoder(tgt[:, t:t + 1], state)
            stepwise.append(step_logits)
        d2l_stepwise = torch.cat(stepwise, dim=1)
    slip = max_diff(d2l_stepwise, logits)

    def named(prefix, module, suffix="", grads=False):
        if grads:
            return [("%s.%s_grad" % (prefix, n), p.grad) for n, p in module.named_parameters()]
        return [("%s.%s" % (prefix, n), p.detach()) for n, p in module.state_dict().items()]

    writer.write_fixture(
        "block_seq2seq",
        "d2l's TransformerEncoder(11, 8, 12, 2, 2, dropout 0) and TransformerDecoder(13, 8, 12, 2, 2, dropout 0) in "
        "training mode (causal self-attention in the decoder); %s" % VERSIONS,
        named("encoder", encoder) + named("decoder", decoder)
        + [("src_tokens", src), ("enc_valid_lens", enc_valid_lens), ("tgt_tokens", tgt), ("enc_outputs", enc_outputs),
           ("logits", logits), ("grad_logits", grad_logits), ("enc_outputs_grad", enc_outputs_grad),
           ("d2l_stepwise_logits", d2l_stepwise)]
        + named("encoder", encoder, grads=True) + named("decoder", decoder, grads=True),
        ["parameters under d2l's EncoderDecoder names (encoder.*, decoder.*); gradients of sum(logits * grad_logits) "
         "by autograd, the encoder's through enc_outputs",
         "d2l_stepwise_logits: d2l's own eval-mode loop, one target token per call, which adds P[0] at every step; "
         "it differs from the causal whole-sequence logits by %.3g (max abs)" % slip])


def main():
    os.makedirs(writer.GOLDEN_DIR, exist_ok=True)
    activation_cases()
    embedding_case()
    norm_cases()
    ffn_cases()
    add_norm_case()
    encoder_block_cases()
    torch_encoder_layer_cases()
    seq2seq_case()


if __name__ == "__main__":
    main()
