#!/usr/bin/python3
"""Writes the training fixtures in tests/golden/: gradients by PyTorch autograd, losses, optimizer steps.

Run it with Debian's interpreter, which has python3-torch:

    /usr/bin/python3 tests/reference/make_training_fixtures.py

It reuses the d2l code and the fixture writer of make_fixtures.py (same directory, same file format, described
there). Each case names the PyTorch version that made it. Every case is in float64 with its own torch.manual_seed.

Cases:
  grad_masked_softmax_*  d2l's masked_softmax (sequence_mask writes -1e6 into the masked scores) and a boolean keep
                         mask, differentiated by autograd: X, grad_Y -> grad_X
  grad_linear            nn.Linear's backward: X, weight, bias, grad_output -> grad_X, weight.grad, bias.grad
  grad_dot_product_*     d2l's DotProductAttention (eval mode) differentiated by autograd, with valid lengths and with
                         a mask of every part (the -1e6 rule through DotProductAttentionKeep)
  grad_mha_*             d2l's MultiHeadAttention (eval mode) likewise: the gradients of queries, keys, values and of
                         every weight and bias; grad_mha_self passes one X as all three
  grad_rnn_*             nn.RNN(batch_first=True), tanh, h0 = 0, differentiated through every step: X, the parameters,
                         grad_output -> grad_X and the four parameters' .grad
  grad_conv1d_*          nn.Conv1d(padding='same') on (batch, steps, channels), odd and even kernels, with and without
                         a bias: grad_X, weight.grad, bias.grad, checked against autograd through make_fixtures.py's
                         conv1d_reference
  loss_mse               F.mse_loss (mean) and its gradient
  loss_cross_entropy_*   d2l's MaskedSoftmaxCELoss, then .mean() over the batch rows, and its gradient
  optim_*                three steps of torch.optim.SGD / Adam / AdamW on two parameters from given gradients
"""

import os
import sys
import warnings

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as d2l  # noqa: E402  (the d2l code and the writer)

d2l.SCRIPT = "tests/reference/make_training_fixtures.py"
VERSION = "PyTorch %s" % torch.__version__
torch.set_default_dtype(torch.float64)


class MaskedSoftmaxCELoss(nn.CrossEntropyLoss):
    """The softmax cross-entropy loss with masks (d2l, "Encoder-Decoder Seq2Seq for Machine Translation")."""
    # `pred` shape: (`batch_size`, `num_steps`, `vocab_size`)
    # `label` shape: (`batch_size`, `num_steps`)
    # `valid_len` shape: (`batch_size`,)
    def forward(self, pred, label, valid_len):
        weights = torch.ones_like(label)
        weights = d2l.sequence_mask(weights, valid_len)
        self.reduction = 'none'
        unweighted_loss = super(MaskedSoftmaxCELoss, self).forward(
            pred.permute(0, 2, 1), label)
        weighted_loss = (unweighted_loss * weights).mean(dim=1)
        return weighted_loss


def masked_softmax_cases():
    def case(name, seed, shape, valid_lens, description):
        torch.manual_seed(seed)
        X = torch.randn(*shape)
        grad_Y = torch.randn(*shape)
        X_leaf = X.clone().requires_grad_(True)
        # sequence_mask writes into its argument: give it a non-leaf copy, as a model's scores are.
        Y = d2l.masked_softmax(X_leaf * 1.0, valid_lens)
        Y.backward(grad_Y)
        d2l.write_fixture(name, "%s; d2l's masked_softmax, X = randn%s, %s, grad_Y = randn of the same shape; "
                          "grad_X by autograd" % (VERSION, tuple(shape), description),
                          [("X", X)] + d2l.lens_entries(valid_lens) +
                          [("Y", Y), ("grad_Y", grad_Y), ("grad_X", X_leaf.grad)])

    case("grad_masked_softmax_none", 101, (2, 3, 5), None, "no valid_lens")
    case("grad_masked_softmax_1d", 102, (3, 2, 5), torch.tensor([2, 0, 5]),
         "valid_lens [2, 0, 5] (a batch row that sees no key)")
    case("grad_masked_softmax_2d", 103, (2, 3, 4), torch.tensor([[1, 4, 0], [3, 2, 6]]),
         "per-query valid_lens [[1, 4, 0], [3, 2, 6]]")

    # A boolean keep mask, d2l's rule: a masked score replaced by -1e6 (torch.where keeps the gradient at 0 there).
    torch.manual_seed(104)
    X = torch.randn(2, 3, 6)
    grad_Y = torch.randn(2, 3, 6)
    keep = torch.rand(2, 3, 6) < 0.6
    keep[1, 2, :] = False  # a query that sees no key
    X_leaf = X.clone().requires_grad_(True)
    Y = F.softmax(torch.where(keep, X_leaf, torch.tensor(-1e6)), dim=-1)
    Y.backward(grad_Y)
    d2l.write_fixture("grad_masked_softmax_keep", "%s; softmax of X with the scores keep hides replaced by -1e6 "
                      "(d2l's rule), X = randn(2, 3, 6), keep = rand(2, 3, 6) < 0.6 with row (1, 2) all false, "
                      "grad_Y = randn; grad_X by autograd" % VERSION,
                      [("X", X), ("keep", keep), ("Y", Y), ("grad_Y", grad_Y), ("grad_X", X_leaf.grad)])


def linear_case():
    torch.manual_seed(111)
    layer = nn.Linear(4, 3)
    X = torch.randn(2, 5, 4, requires_grad=True)
    grad_output = torch.randn(2, 5, 3)
    layer(X).backward(grad_output)
    d2l.write_fixture("grad_linear", "%s; nn.Linear(4, 3) on X = randn(2, 5, 4), grad_output = randn(2, 5, 3); "
                      "grad_X, weight.grad and bias.grad by autograd" % VERSION,
                      [("X", X), ("weight", layer.weight), ("bias", layer.bias), ("grad_output", grad_output),
                       ("grad_X", X.grad), ("weight_grad", layer.weight.grad), ("bias_grad", layer.bias.grad)])


def grad_entries(name_tensor_pairs):
    return [("grad_" + name, tensor.grad) for name, tensor in name_tensor_pairs]


def dot_product_cases():
    def case(name, seed, keys_count, valid_lens, causal, keep_shape):
        torch.manual_seed(seed)
        queries = torch.randn(2, 3, 4, requires_grad=True)
        keys = torch.randn(2, keys_count, 4, requires_grad=True)
        values = torch.randn(2, keys_count, 6, requires_grad=True)
        keep = None if keep_shape is None else d2l.random_keep(keep_shape)
        if causal or keep is not None:
            combined = d2l.mask_combined(2, 3, keys_count, valid_lens, causal, keep)
            attention = d2l.DotProductAttentionKeep(dropout=0.5, softmax=d2l.softmax_keep_d2l)
            attention.eval()
            output = attention(queries, keys, values, combined)
            mask_entries = d2l.mask_entries(valid_lens, causal, keep, False, combined)
            described = d2l.mask_text(valid_lens, causal, keep, False)
        else:
            attention = d2l.DotProductAttention(dropout=0.5)
            attention.eval()
            output = attention(queries, keys, values, valid_lens)
            mask_entries = d2l.lens_entries(valid_lens)
            described = d2l.lens_text(valid_lens)
        grad_output = torch.randn(output.shape)
        output.backward(grad_output)
        inputs = [("queries", queries), ("keys", keys), ("values", values)]
        d2l.write_fixture(name, "%s; d2l's DotProductAttention(0.5) in eval mode, queries randn(2, 3, 4), keys "
                          "randn(2, %d, 4), values randn(2, %d, 6), %s, grad_output randn; the inputs' gradients by "
                          "autograd" % (VERSION, keys_count, keys_count, described),
                          inputs + mask_entries + [("output", output), ("grad_output", grad_output)]
                          + grad_entries(inputs))

    case("grad_dot_product_lens", 141, 5, torch.tensor([3, 0]), False, None)
    case("grad_dot_product_mask", 142, 5, torch.tensor([[1, 4, 5], [0, 3, 2]]), True, (1, 3, 5))


def mha_cases():
    def parameter_entries(attention, bias):
        entries = d2l.mha_entries(attention, bias)
        for layer in ["W_q", "W_k", "W_v", "W_o"]:
            linear = getattr(attention, layer)
            entries.append(("%s.weight_grad" % layer, linear.weight.grad))
            if bias:
                entries.append(("%s.bias_grad" % layer, linear.bias.grad))
        return entries

    def case(name, seed, num_heads, bias, valid_lens, causal, keep_shape):
        torch.manual_seed(seed)
        attention = d2l.MultiHeadAttention(6, 5, 4, 12, num_heads, 0.5, bias=bias)
        attention.eval()
        queries = torch.randn(2, 3, 5, requires_grad=True)
        keys = torch.randn(2, 7, 6, requires_grad=True)
        values = torch.randn(2, 7, 4, requires_grad=True)
        keep = None if keep_shape is None else d2l.random_keep(keep_shape)
        if causal or keep is not None:
            combined = d2l.mask_combined(2, 3, 7, valid_lens, causal, keep)
            keep_attention = d2l.MultiHeadAttentionKeep(attention, d2l.softmax_keep_d2l)
            keep_attention.eval()  # a new module starts in training mode, its dropout on
            output = keep_attention(queries, keys, values, combined)
            mask_entries = d2l.mask_entries(valid_lens, causal, keep, False, combined)
            described = d2l.mask_text(valid_lens, causal, keep, False)
        else:
            output = attention(queries, keys, values, valid_lens)
            mask_entries = d2l.lens_entries(valid_lens)
            described = d2l.lens_text(valid_lens)
        grad_output = torch.randn(output.shape)
        output.backward(grad_output)
        inputs = [("queries", queries), ("keys", keys), ("values", values)]
        d2l.write_fixture(name, "%s; d2l's MultiHeadAttention(key_size=6, query_size=5, value_size=4, num_hiddens=12, "
                          "num_heads=%d, dropout=0.5, bias=%s) in eval mode, queries randn(2, 3, 5), keys randn(2, 7, "
                          "6), values randn(2, 7, 4), %s, grad_output randn; gradients by autograd"
                          % (VERSION, num_heads, bias, described),
                          [("num_heads", num_heads), ("bias", int(bias))] + inputs + mask_entries
                          + parameter_entries(attention, bias) + [("output", output), ("grad_output", grad_output)]
                          + grad_entries(inputs))

    case("grad_mha_lens", 151, 3, True, torch.tensor([0, 5]), False, None)
    case("grad_mha_mask", 152, 2, False, torch.tensor([[2, 7, 4], [7, 1, 6]]), True, (2, 3, 7))

    torch.manual_seed(153)
    attention = d2l.MultiHeadAttention(8, 8, 8, 8, 2, 0.5, bias=True)
    attention.eval()
    X = torch.randn(2, 4, 8, requires_grad=True)
    valid_lens = torch.tensor([[1, 2, 3, 4], [4, 4, 2, 1]])
    output = attention(X, X, X, valid_lens)
    grad_output = torch.randn(output.shape)
    output.backward(grad_output)
    d2l.write_fixture("grad_mha_self", "%s; d2l's MultiHeadAttention(8, 8, 8, num_hiddens=8, num_heads=2, dropout=0.5, "
                      "bias=True) in eval mode on self-attention: X randn(2, 4, 8) passed as queries, keys and "
                      "values, %s, grad_output randn; gradients by autograd (grad_X: the sum over X's three uses)"
                      % (VERSION, d2l.lens_text(valid_lens)),
                      [("num_heads", 2), ("bias", 1), ("X", X)] + d2l.lens_entries(valid_lens)
                      + parameter_entries(attention, True) + [("output", output), ("grad_output", grad_output),
                                                             ("grad_X", X.grad)])


def rnn_cases():
    def case(name, seed, input_size, hidden_size, shape):
        torch.manual_seed(seed)
        rnn = nn.RNN(input_size, hidden_size, batch_first=True)
        X = torch.randn(*shape, requires_grad=True)
        output, _ = rnn(X)
        grad_output = torch.randn(output.shape)
        output.backward(grad_output)
        labels = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
        parameters = [(label, getattr(rnn, label + "_l0")) for label in labels]
        d2l.write_fixture(name, "%s; nn.RNN(%d, %d, batch_first=True), tanh, one layer, h0 = 0, X = randn%s, "
                          "grad_output = randn of every h_t's shape; grad_X and the parameters' .grad by autograd "
                          "(through every step)" % (VERSION, input_size, hidden_size, shape),
                          parameters + [("X", X), ("output", output), ("grad_output", grad_output),
                                        ("grad_X", X.grad)]
                          + [(label + "_grad", parameter.grad) for label, parameter in parameters])

    case("grad_rnn_steps", 161, 3, 5, (2, 6, 3))
    case("grad_rnn_one_step", 162, 4, 2, (3, 1, 4))


def conv1d_cases():
    def case(name, seed, in_channels, out_channels, k, bias, shape):
        torch.manual_seed(seed)
        conv = nn.Conv1d(in_channels, out_channels, kernel_size=k, padding="same", bias=bias)
        X = torch.randn(*shape, requires_grad=True)  # attend's layout (batch, steps, channels)
        with warnings.catch_warnings():
            # PyTorch warns that even kernels with padding='same' copy the input.
            warnings.simplefilter("ignore", UserWarning)
            output = conv(X.transpose(1, 2)).transpose(1, 2)
        grad_output = torch.randn(output.shape)
        output.backward(grad_output)
        # The same gradients through the direct sum, independently of PyTorch's convolution kernels.
        X_check = X.detach().clone().requires_grad_(True)
        weight_check = conv.weight.detach().clone().requires_grad_(True)
        bias_check = conv.bias.detach().clone().requires_grad_(True) if bias else None
        d2l.conv1d_reference(X_check, weight_check, bias_check).backward(grad_output)
        checks = [(X.grad, X_check.grad), (conv.weight.grad, weight_check.grad)]
        checks += [(conv.bias.grad, bias_check.grad)] if bias else []
        for autograd, reference in checks:
            assert torch.allclose(autograd, reference, rtol=1e-12, atol=1e-12), name
        d2l.write_fixture(name, "%s; nn.Conv1d(%d, %d, kernel_size=%d, padding='same', bias=%s), X = randn%s in "
                          "(batch, steps, channels), grad_output = randn of the output's shape; grad_X, weight.grad "
                          "and bias.grad by autograd" % (VERSION, in_channels, out_channels, k, bias, shape),
                          [("kernel_size", k), ("weight", conv.weight)]
                          + ([("bias", conv.bias)] if bias else [])
                          + [("X", X), ("output", output), ("grad_output", grad_output), ("grad_X", X.grad),
                             ("weight_grad", conv.weight.grad)]
                          + ([("bias_grad", conv.bias.grad)] if bias else []),
                          notes=["weight is PyTorch's (out_channels, in_channels, kernel_size); 'same' pads "
                                 "(k - 1) // 2 steps on the left and the rest on the right"])

    case("grad_conv1d_k1", 171, 3, 4, 1, True, (2, 5, 3))
    case("grad_conv1d_k2_nobias", 172, 3, 4, 2, False, (2, 5, 3))
    case("grad_conv1d_k3", 173, 3, 4, 3, True, (2, 7, 3))
    case("grad_conv1d_k4", 174, 2, 3, 4, True, (2, 7, 2))
    case("grad_conv1d_k5_nobias", 175, 3, 2, 5, False, (1, 8, 3))
    case("grad_conv1d_k6_short", 176, 2, 3, 6, True, (2, 3, 2))  # the kernel longer than the sequence


def loss_cases():
    torch.manual_seed(121)
    prediction = torch.randn(2, 3, 4, requires_grad=True)
    target = torch.randn(2, 3, 4)
    loss = F.mse_loss(prediction, target)
    loss.backward()
    d2l.write_fixture("loss_mse", "%s; F.mse_loss(prediction, target), reduction 'mean', both randn(2, 3, 4); "
                      "grad by autograd" % VERSION,
                      [("prediction", prediction), ("target", target), ("loss", loss.item()),
                       ("grad", prediction.grad)])

    for name, seed, valid_len in [("loss_cross_entropy_lens", 122, torch.tensor([3, 1, 4])),
                                  ("loss_cross_entropy_full", 123, None)]:
        torch.manual_seed(seed)
        logits = (2 * torch.randn(3, 4, 5)).requires_grad_(True)
        labels = torch.randint(0, 5, (3, 4))
        lens = valid_len if valid_len is not None else torch.tensor([4, 4, 4])
        loss = MaskedSoftmaxCELoss()(logits, labels, lens).mean()
        loss.backward()
        d2l.write_fixture(name, "%s; d2l's MaskedSoftmaxCELoss(logits, labels, valid_len).mean(), logits = "
                          "2 randn(3, 4, 5), labels = randint(0, 5, (3, 4)), %s; grad by autograd"
                          % (VERSION, d2l.lens_text(valid_len)),
                          [("logits", logits), ("labels", labels)] + d2l.lens_entries(valid_len) +
                          [("loss", loss.item()), ("grad", logits.grad)])


def optimizer_cases():
    def case(name, make, description):
        torch.manual_seed(131)
        a = torch.randn(3, 4)
        b = torch.randn(5)
        grads = [(torch.randn(3, 4), torch.randn(5)) for _ in range(3)]
        pa, pb = nn.Parameter(a.clone()), nn.Parameter(b.clone())
        optimizer = make([pa, pb])
        entries = [("a", a), ("b", b)]
        for step, (ga, gb) in enumerate(grads, 1):
            pa.grad, pb.grad = ga.clone(), gb.clone()
            optimizer.step()
            entries += [("grad_a_%d" % step, ga), ("grad_b_%d" % step, gb),
                        ("a_%d" % step, pa.detach().clone()), ("b_%d" % step, pb.detach().clone())]
        d2l.write_fixture(name, "%s; %s on parameters a = randn(3, 4), b = randn(5); three steps, the gradients "
                          "grad_*_t given (randn), the parameters after step t in *_t" % (VERSION, description),
                          entries)

    case("optim_sgd", lambda p: torch.optim.SGD(p, lr=0.1), "torch.optim.SGD(lr=0.1)")
    case("optim_sgd_momentum", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
         "torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01)")
    case("optim_adam", lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),
         "torch.optim.Adam(lr=0.01, weight_decay=0.1)")
    case("optim_adamw", lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
         "torch.optim.AdamW(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)")


def main():
    os.makedirs(d2l.GOLDEN_DIR, exist_ok=True)
    masked_softmax_cases()
    linear_case()
    dot_product_cases()
    mha_cases()
    rnn_cases()
    conv1d_cases()
    loss_cases()
    with torch.no_grad():
        optimizer_cases()


if __name__ == "__main__":
    main()
