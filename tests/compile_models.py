"""Small PyTorch programs torch.export cannot capture whole; each factory returns (module, example_inputs)."""

from __future__ import annotations

import torch
from torch import nn


class Branchy(nn.Module):
    """A data-dependent branch: torch.export fails, torch.compile breaks the graph and guards."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.pos = nn.Linear(dim, dim)
        self.neg = nn.Linear(dim, 8)

    def forward(self, x):
        y = torch.relu(self.inp(x))
        if y.mean() > 0.2:
            y = self.pos(y)
        return self.neg(y)


class PrintItem(nn.Module):
    """A print (a graph break) and an .item() that steers Python code, around two same-shape linears."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.a = nn.Linear(dim, dim)
        self.b = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        y = torch.tanh(self.a(x))
        print("PrintItem: after a")
        scale = 2.0 if y.abs().max().item() > 0.5 else 0.5
        return self.norm(self.b(y) * scale)


def branchy():
    torch.manual_seed(0)
    return Branchy().eval(), (torch.randn(4, 16),)


def print_item():
    torch.manual_seed(0)
    return PrintItem().eval(), (torch.randn(4, 16),)
