"""``x += 1`` costs FLOPs too: the same Linear model with and without it.

The in-place add does one addition per output element, so the totals differ by exactly the
number of elements of the Linear's output.

Run: python examples/compare.py
"""

from __future__ import annotations

import torch
from torch import nn

from torch_flops import TorchFLOPsByFX


class LinearModel(nn.Module):
    def __init__(self, add_one: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.add_one = add_one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        if self.add_one:
            x += 1
        return x


def total_flops(add_one: bool, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    counter = TorchFLOPsByFX(LinearModel(add_one))
    with torch.no_grad():
        out = counter.propagate(x)
    label = "with x += 1" if add_one else "without x += 1"
    print(f"-- {label}")
    counter.print_result_table()
    return counter.print_total_flops(show=False), out


def main() -> None:
    x = torch.randn(4, 8)
    plain, _ = total_flops(False, x)
    plus, out = total_flops(True, x)
    print()
    print(f"total FLOPs without x += 1: {plain}")
    print(f"total FLOPs with    x += 1: {plus}")
    print(f"difference: {plus - plain} (output numel: {out.numel()})")


if __name__ == "__main__":
    main()
