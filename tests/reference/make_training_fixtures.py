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
  loss_mse               F.mse_loss (mean) and its gradient
  loss_cross_entropy_*   d2l's MaskedSoftmaxCELoss, then .mean() over the batch rows, and its gradient
  optim_*                three steps of torch.optim.SGD / Adam / AdamW on two parameters from given gradients
"""

import os
import sys

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
    loss_cases()
    with torch.no_grad():
        optimizer_cases()


if __name__ == "__main__":
    main()
