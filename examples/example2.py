"""A transformer attention block written out by hand, profiled node by node.

q/k/v projections, explicit softmax attention, output projection, residual and LayerNorm: the
table shows where the FLOPs (and MACs) of each step go.

Run: python examples/example2.py
"""

from __future__ import annotations

import math

import torch
from torch import nn

from torch_flops import TorchFLOPsByFX


class AttentionBlock(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)  # (B, H, N, Dh)
        k = self.k(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, N, N)
        weights = scores.softmax(dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(b, n, d)
        return self.norm(x + self.out(y))


def main() -> None:
    model = AttentionBlock(dim=64, heads=4).eval()
    x = torch.randn(2, 16, 64)  # (batch, tokens, dim)
    counter = TorchFLOPsByFX(model)
    with torch.no_grad():
        counter.propagate(x)
    counter.print_result_table()
    print()
    counter.print_total_flops()
    counter.print_total_time()
    counter.print_max_memory()


if __name__ == "__main__":
    main()
