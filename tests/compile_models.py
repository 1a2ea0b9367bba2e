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


def _grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    out = x.new_zeros(x.shape[0], w.shape[2])
    start = 0
    for group, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end] @ w[group]
        start = end
    return out


def _custom_grouped_mm():
    """Rows of x sorted by group, times their group's matrix (as transformers' grouped_mm_fallback): a custom op
    TVM's importer does not know. Defined once per process: this file is also loaded by path (`autotune extract
    tests/compile_models.py:...`), and defining the op again would destroy the registration the first one uses."""
    try:
        return torch.ops.autotune_tests.grouped_mm.default
    except (AttributeError, RuntimeError):
        pass
    op = torch.library.custom_op("autotune_tests::grouped_mm", _grouped_mm, mutates_args=())
    op.register_fake(lambda x, w, offs: x.new_empty(x.shape[0], w.shape[2]))
    return torch.ops.autotune_tests.grouped_mm.default


grouped_mm = _custom_grouped_mm()


class TinyMoE(nn.Module):
    """A mixture-of-experts layer written as Mixtral's is in transformers: a histogram (no TVM importer) of the
    chosen experts, a custom grouped matmul, an in-place normalisation of the routing weights and an inverse
    permutation written into an uninitialised tensor, between ordinary layers."""

    def __init__(self, dim: int = 16, experts: int = 4, top_k: int = 2):
        super().__init__()
        self.experts, self.top_k = experts, top_k
        self.norm = nn.LayerNorm(dim)
        self.router = nn.Linear(dim, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, dim, 2 * dim) * 0.2)
        self.w_out = nn.Parameter(torch.randn(experts, 2 * dim, dim) * 0.2)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.norm(x)
        weights, chosen = torch.topk(torch.softmax(self.router(h), dim=-1), self.top_k, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        flat = chosen.reshape(-1)
        perm = torch.argsort(flat, stable=True)
        counts = torch.histc(flat.float(), bins=self.experts, min=0, max=self.experts - 1)
        offs = torch.cumsum(counts, dim=0).to(torch.int64)
        y = grouped_mm(torch.relu(grouped_mm(h[perm // self.top_k], self.w_in, offs)), self.w_out, offs)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel())
        y = y[inverse].view(-1, self.top_k, y.shape[-1]) * weights.unsqueeze(-1)
        return self.out(x + y.sum(dim=1))


def tiny_moe():
    torch.manual_seed(0)
    return TinyMoE().eval(), (torch.randn(8, 16),)
