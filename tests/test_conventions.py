"""Counting conventions (torch_flops/conventions.py): one profile re-expressed, never re-run.
The flop_counter convention against FlopCounterMode is checked for every zoo model in
test_zoo_flops.py and every transformers model in test_hf.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import Profile, TorchFLOPsByFX
from torch_flops.conventions import CONVENTIONS


class Mixed(nn.Module):
    """Linear, Conv2d, bmm, mv, relu: every kind of record a convention treats differently."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 5)
        self.conv = nn.Conv2d(2, 3, 2)

    def forward(self, x: torch.Tensor, img: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.relu(self.fc(x)), self.conv(img), torch.bmm(a, b), torch.mv(a[0], v)


def _inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    shapes = ((3, 4), (1, 2, 4, 4), (2, 3, 4), (2, 4, 5), (4,))
    return tuple(torch.randn(s, device=device) for s in shapes)


def _profile(device: str = "cpu") -> Profile:
    counter = TorchFLOPsByFX(Mixed().to(device))
    counter.propagate(*_inputs(device))
    return counter.profile


# Hand counts, per node (flops, macs, dot outputs):
#   fc: Linear(4, 5) on (3, 4): 15 outputs, 15*4 = 60 MACs, 2*60 + 15 bias = 135 FLOPs
#   relu: 15 FLOPs
#   conv: Conv2d(2, 3, 2) on (1, 2, 4, 4): 27 outputs, 27*2*2*2 = 216 MACs, 432 + 27 bias = 459
#   bmm: (2, 3, 4) @ (2, 4, 5): 30 outputs, 30*4 = 120 MACs, 240 FLOPs
#   mv: (3, 4) @ (4,): 3 outputs, 12 MACs, 24 FLOPs (an aten.mv: FlopCounterMode counts 0)
TORCH_FLOPS = 135 + 15 + 459 + 240 + 24  # 873
MACS = 60 + 216 + 120 + 12  # 408


def test_each_convention_by_hand() -> None:
    p = _profile()
    assert (p.total_flops, p.total_macs, p.convention) == (TORCH_FLOPS, MACS, "torch_flops")
    by_name = {name: p.with_convention(name) for name in CONVENTIONS}
    # exact: a dot product of length K is 2K - 1, one add fewer per output: 15 + 27 + 30 + 3 fewer
    assert by_name["exact"].total_flops == TORCH_FLOPS - (15 + 27 + 30 + 3)
    rec = {r.name: r for r in by_name["exact"].records}
    assert (rec["fc"].flops, rec["conv"].flops, rec["bmm"].flops) == (135 - 15, 459 - 27, 240 - 30)
    assert rec["relu"].flops == 15  # no dot products: unchanged
    # macs: 1 per MAC and nothing else
    assert by_name["macs"].total_flops == by_name["macs"].total_macs == MACS
    # flop_counter: 2 per MAC of matrix-multiply kernels only; mv is 0, relu and bias adds are 0
    assert by_name["flop_counter"].total_flops == 2 * (60 + 216 + 120)
    assert {r.name: r.flops for r in by_name["flop_counter"].records if r.op.startswith("call")} == {
        "fc": 120, "relu": 0, "conv": 432, "bmm": 240, "getitem": 0, "mv": 0}
    for name, converted in by_name.items():
        assert converted.convention == name
        assert converted.with_convention("torch_flops") == p  # always from the original
        assert [r.name for r in converted.records] == [r.name for r in p.records]


def test_flop_counter_convention_equals_flop_counter_mode_on_meta() -> None:
    p = _profile("meta")
    with FlopCounterMode(display=False) as mode:
        Mixed().to("meta")(*_inputs("meta"))
    assert p.with_convention("flop_counter").total_flops == mode.get_total_flops() == 2 * (60 + 216 + 120)


def test_conversion_runs_nothing(models: Any) -> None:
    counter = TorchFLOPsByFX(models.CountingModel(), leaf_modules=(models.CountingLeaf,),
                             ignore_ops=("CountingLeaf",))
    counter.propagate(torch.randn(2, 8))
    calls = counter.model.leaf.calls
    for name in CONVENTIONS:
        assert counter.in_convention(name).total_flops >= 0
        counter.print_total_flops(show=False, convention=name)
    assert counter.model.leaf.calls == calls == 1


def test_facade_and_exports_take_a_convention(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    counter = TorchFLOPsByFX(Mixed())
    counter.propagate(*_inputs())
    assert counter.print_total_flops(convention="macs") == MACS
    assert "Total FLOPs: 408" in capsys.readouterr().out
    counter.print_model_profile(depth=0, convention="flop_counter")
    assert "Convention:  flop_counter" in capsys.readouterr().out
    doc = json.loads(counter.to_json(str(tmp_path / "p.json"), convention="exact"))
    assert doc["summary"]["convention"] == "exact" and doc["summary"]["flops"] == TORCH_FLOPS - 75
    back = Profile.from_json(tmp_path / "p.json")
    assert back.convention == "exact" and back.total_flops == TORCH_FLOPS - 75
    with pytest.raises(ValueError, match="counted in the 'exact' convention"):
        back.with_convention("macs")
    rows = counter.print_result_table(show=False, convention="macs")
    assert sum(row[6] or 0 for row in rows) == MACS  # the flops column
    assert "convention macs" in counter.to_markdown(convention="macs")
    with pytest.raises(ValueError, match="convention must be one of"):
        counter.print_total_flops(convention="fvcore")
