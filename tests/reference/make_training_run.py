#!/usr/bin/python3
"""Writes tests/golden/training_run.txt: ten Adam steps of examples/sequence_model.hpp's model, in PyTorch.

Run it with Debian's interpreter, which has python3-torch:

    /usr/bin/python3 tests/reference/make_training_run.py

The model: one_hot(tokens) through nn.Linear(vocab, d, bias=False) times sqrt(d), d2l's PositionalEncoding
(dropout 0), d2l's MultiHeadAttention(d, d, d, d, heads, dropout=0, bias=True) as self-attention, nn.Linear(d, vocab);
the loss d2l's MaskedSoftmaxCELoss over every position, .mean() over the batch; torch.optim.Adam(lr=0.01). The task
is examples/train_attention.cpp's: the label at position t is the token at position steps - 1 - t. Everything in
float64 from torch.manual_seed(161). Written: the sizes, the initial parameters (their state_dict names, prefixed
embedding., attention., head.), each step's tokens and loss, and the parameters after the last step (suffix _final).
"""

import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as d2l  # noqa: E402  (the d2l code and the writer)
from make_training_fixtures import MaskedSoftmaxCELoss  # noqa: E402

d2l.SCRIPT = "tests/reference/make_training_run.py"
VERSION = "PyTorch %s" % torch.__version__
torch.set_default_dtype(torch.float64)

VOCAB, STEPS, D, HEADS, BATCH, TRAINING_STEPS, LR = 6, 5, 8, 2, 4, 10, 0.01


class SequenceModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Linear(VOCAB, D, bias=False)
        self.position = d2l.PositionalEncoding(D, 0)
        self.attention = d2l.MultiHeadAttention(D, D, D, D, HEADS, 0, bias=True)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, tokens):
        X = self.position(self.embedding(F.one_hot(tokens, VOCAB).to(torch.float64)) * math.sqrt(D))
        return self.head(self.attention(X, X, X, None))


def parameter_entries(model, suffix):
    return [(name + suffix, value.detach().clone()) for name, value in model.state_dict().items()]


def main():
    torch.manual_seed(161)
    model = SequenceModel()
    initial = parameter_entries(model, "")
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = MaskedSoftmaxCELoss()
    steps = []
    for step in range(1, TRAINING_STEPS + 1):
        tokens = torch.randint(0, VOCAB, (BATCH, STEPS))
        labels = tokens.flip(1)
        loss = loss_fn(model(tokens), labels, torch.full((BATCH,), STEPS)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += [("tokens_%d" % step, tokens), ("loss_%d" % step, loss.item())]
    d2l.write_fixture("training_run", "%s; %d Adam steps (lr %g) of the sequence model (vocab %d, steps %d, d %d, "
                      "heads %d, batch %d) learning to reverse random tokens; see the script's docstring"
                      % (VERSION, TRAINING_STEPS, LR, VOCAB, STEPS, D, HEADS, BATCH),
                      [("vocab", VOCAB), ("steps", STEPS), ("d", D), ("heads", HEADS), ("batch", BATCH),
                       ("training_steps", TRAINING_STEPS), ("lr", LR)]
                      + initial + steps + parameter_entries(model, "_final"))


if __name__ == "__main__":
    os.makedirs(d2l.GOLDEN_DIR, exist_ok=True)
    main()
