"""``torch_flops.plan``: how each node is counted, decided once per graph, and what dies when."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import FORMULAS, UnsupportedOpError
from torch_flops.capture import CaptureOptions, capture_fx
from torch_flops.plan import NodeKind, make_plan


class Odd(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.odd = Odd()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.fc(x)).view(-1)
        return self.odd(y) + x.sum()


def _plan(ignore: tuple[str, ...] = ()) -> Any:
    capture = capture_fx(Net(), CaptureOptions(leaf_types=(Odd,)))
    return make_plan(capture.graphs[0], FORMULAS, ignore)


def test_kinds_targets_and_locations() -> None:
    plan = _plan(ignore=("sum",))
    got = {p.node.name: (p.kind, p.target, p.location.path, p.location.module_type) for p in plan.nodes}
    assert got == {
        "x": (NodeKind.ZERO, "x", "", "Net"),
        "fc": (NodeKind.COUNTED, "Linear", "fc", "Linear"),
        "relu": (NodeKind.COUNTED, "torch.relu", "", "Net"),
        "view": (NodeKind.ZERO, "Tensor.view", "", "Net"),
        "odd": (NodeKind.UNSUPPORTED, "Odd", "odd", "Odd"),
        "sum_1": (NodeKind.IGNORED, "Tensor.sum", "", "Net"),
        "add": (NodeKind.COUNTED, "operator.add", "", "Net"),
        "output": (NodeKind.ZERO, "output", "", "Net"),
    }
    assert [p.position for p in plan.nodes] == list(range(8))
    assert plan.by_node[plan.nodes[1].node] is plan.nodes[1]
    assert plan.unsupported == (plan.nodes[4],)


def test_last_uses_and_needed() -> None:
    plan = _plan()
    frees = {p.node.name: [plan.nodes[i].node.name for i in p.frees] for p in plan.nodes}
    # x is read by fc and sum_1: freed after its last reader; each value after its only reader
    assert frees["relu"] == ["fc"] and frees["view"] == ["relu"] and frees["odd"] == ["view"]
    assert frees["sum_1"] == ["x"] and sorted(frees["add"]) == ["odd", "sum_1"]
    assert frees["output"] == ["add"]
    assert plan.frees == tuple(p.frees for p in plan.nodes)
    assert all(p.needed for p in plan.nodes)


def test_check_strict_lists_the_nodes_before_anything_runs() -> None:
    with pytest.raises(UnsupportedOpError, match=r"1 node\(s\) have no FLOPs formula: 'odd' \(Odd\)"):
        _plan().check_strict()


def test_flat_arguments_are_marked_for_the_fast_fetch() -> None:
    from torch_flops.plan import FlatArgs

    plan = _plan()
    shape = {p.node.name: p.flat_args for p in plan.nodes}
    # fc(x), relu(fc), odd(view): nodes only; view(relu, -1): a node and a constant; placeholders,
    # get_attr and the output never use it; add(odd, sum_1): nodes
    assert shape == {"x": FlatArgs.NESTED, "fc": FlatArgs.NODES, "relu": FlatArgs.NODES,
                     "view": FlatArgs.NODES_AND_CONSTANTS, "odd": FlatArgs.NODES, "sum_1": FlatArgs.NODES,
                     "add": FlatArgs.NODES, "output": FlatArgs.NESTED}


def test_a_modules_parameter_bytes_count_each_tensor_once_with_or_without_submodules() -> None:
    # a weight also registered as a buffer: Linear(4, 4) holds 16 + 4 floats = 80 B; it was 144 (the weight
    # twice) for a module with a submodule and 80 without one
    from torch_flops.plan import _param_bytes

    leaf, parent = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    for module in (leaf, parent):
        module.register_buffer("wb", module.weight)
    parent.child = torch.nn.Identity()
    assert _param_bytes(leaf) == _param_bytes(parent) == (16 + 4) * 4
