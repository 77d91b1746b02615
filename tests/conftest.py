"""Shared small models and fixtures for the analyzer, interpreter, measure, tracing and zoo tests.

The models are tiny on purpose: every number a test expects of them is derived by hand next to
the assertion. Model classes are handed out through fixtures (not imported from here), so the
test files do not depend on how pytest puts ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import Profile, Status, formulas
from torch_flops.records import NodeRecord

# --------------------------------------------------------------------------- models


class MixedModel(nn.Module):
    """call_module (Linear), call_function (torch.relu), call_method (Tensor.sum, Tensor.view)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.fc(x))
        return y.sum(-1).view(-1, 1)


class MemoryChain(nn.Module):
    """A chain whose live tensor bytes are derived by hand in test_measure.py.

    Input (4, 256) float32. Node order: x, mul, view, add_, w (get_attr), matmul, relu, sum_1, output.
    """

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(128, 128) / 16)  # 128*128*4 = 65536 B, never counted

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x * 2  # new storage
        b = a.view(8, 128)  # view of a's storage
        c = b.add_(1)  # in place on a's storage, result used below
        d = c @ self.w  # new storage (8, 128)
        e = torch.relu(d)  # new storage (8, 128)
        return e.sum(-1)  # new storage (8,)


class LinearPlusOne(nn.Module):
    """Linear(8, 8), optionally followed by ``x += 1`` (the case the old engine missed)."""

    def __init__(self, add_one: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.add_one = add_one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        if self.add_one:  # a Python bool fixed at construction, not a traced value
            x += 1
        return x


class DataDependent(nn.Module):
    """Symbolic tracing cannot handle ``if x.sum() > 0`` (control flow on a tensor value)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.fc(x)
        return -x


class WithUntraceable(nn.Module):
    """fc1 -> gate (untraceable, no formula) -> fc2."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.gate = DataDependent()
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.gate(self.fc1(x)))


class CountingLeaf(nn.Module):
    """Counts its forward calls in a plain Python attribute (used as a leaf module)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * 2


class CountingModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.leaf = CountingLeaf()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.leaf(self.fc(x))


class BNLinear(nn.Module):
    """BatchNorm1d(8) then Linear(8, 4): running stats move on every training-mode forward."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(x))


class Breaks(nn.Module):
    """A graph break at ``.item()``: two Dynamo frames. The code after the break specialises on the
    value read, so a new value means a recompile (the program's own)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        if y.sum().item() > -1e30:  # always true; Dynamo cannot trace .item(): the frame ends here
            y = y * 2.0
        return self.b(y)


@pytest.fixture(scope="session")
def models() -> SimpleNamespace:
    """The model classes above, by name."""
    return SimpleNamespace(
        MixedModel=MixedModel, MemoryChain=MemoryChain, LinearPlusOne=LinearPlusOne,
        DataDependent=DataDependent, WithUntraceable=WithUntraceable, CountingLeaf=CountingLeaf,
        CountingModel=CountingModel, BNLinear=BNLinear, Breaks=Breaks,
    )


# --------------------------------------------------------------------------- hand-made profiles

MiB = 1 << 20


def make_record(index: int, name: str, op: str, target: str, path: str, mtype: str, flops: int | None,
                macs: int | None, time_ms: float | None, status: Status = Status.COUNTED,
                stack: tuple[str, ...] | None = None, shape: Any = (4, 10),
                mem: tuple[int, int] | None = None) -> NodeRecord:
    """A record built by hand; ``stack`` defaults to every prefix of ``path``."""
    if stack is None:
        parts = path.split(".") if path else []
        stack = tuple(".".join(parts[: i + 1]) for i in range(len(parts)))
    before, after = mem if mem is not None else (None, None)
    return NodeRecord(index=index, name=name, op=op, target=target, module_path=path, module_type=mtype,
                      flops=flops, macs=macs, status=status, time_ms=time_ms, mem_before=before, mem_after=after,
                      mem_delta=None if mem is None else after - before, output_shape=shape, module_stack=stack)


def make_hand_profile(timed: bool = True) -> Profile:
    """Net(encoder=Sequential(Linear(10, 10), ReLU()), head=Linear(10, 2) called twice, unused=Linear)
    on a batch of 4, with injected times and memory; one unsupported root-level node."""
    t = (lambda v: v) if timed else (lambda v: None)
    rec = make_record
    records = (
        rec(0, "x", "placeholder", "x", "", "Net", 0, 0, t(0.010), Status.ZERO, mem=(0, MiB)),
        # Linear 10->10 on (4, 10): 4*10*10 = 400 MACs; 2*400 + 40 bias = 840 FLOPs
        rec(1, "encoder_0", "call_module", "Linear", "encoder.0", "Linear", 840, 400, t(2.0), mem=(MiB, 3 * MiB)),
        rec(2, "encoder_1", "call_module", "ReLU", "encoder.1", "ReLU", 40, 0, t(0.5), mem=(3 * MiB, 2 * MiB)),
        rec(3, "add", "call_function", "operator.add", "", "Net", 40, 0, t(0.1)),  # 4*10
        # Linear 10->2 on (4, 10): 4*10*2 = 80 MACs; 2*80 + 8 bias = 168 FLOPs
        rec(4, "head", "call_module", "Linear", "head", "Linear", 168, 80, t(1.0), shape=(4, 2)),
        rec(5, "mystery", "call_function", "torch.mystery", "", "Net", None, None, t(0.25), Status.UNSUPPORTED),
        rec(6, "head_1", "call_module", "Linear", "head", "Linear", 168, 80, t(1.0), shape=(4, 2)),
        rec(7, "output", "output", "output", "", "Net", 0, 0, t(0.005), Status.ZERO, shape=((4, 2), None)),
    )
    return Profile(
        records=records, device="cpu" if timed else "meta",
        module_types={"": "Net", "encoder": "Sequential", "encoder.0": "Linear", "encoder.1": "ReLU",
                      "head": "Linear", "unused": "Linear"},
        module_params={"": 0, "encoder": 0, "encoder.0": 110, "encoder.1": 0, "head": 22, "unused": 5},
        batch_size=4, settings={"warmup": 0, "repeat": 1, "ignore_ops": []},
    )


@pytest.fixture(scope="session")
def rec() -> Callable[..., NodeRecord]:
    """``rec(index, name, op, target, path, module_type, flops, macs, time_ms, status, stack, shape, mem)``."""
    return make_record


@pytest.fixture(scope="session")
def hand_profile() -> Callable[..., Profile]:
    """``hand_profile(timed=True)``: the hand-made profile above (its numbers are derived there)."""
    return make_hand_profile


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def inductor_on_cpu() -> None:
    """Skips unless torch.compile with Inductor can run here: Dynamo's platform support and a C++
    compiler. Session-scoped, so it is set up (and skips) before a test module's own fixtures compile."""
    try:
        supported = torch._dynamo.is_dynamo_supported()
    except Exception:  # noqa: BLE001  (a torch without Dynamo)
        supported = False
    if not (supported and (shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++"))):
        pytest.skip("torch.compile (Inductor on CPU) needs Dynamo support and a C++ compiler")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the HTML tests of the session (``tests/_chromium.py`` drives it)."""
    spec = importlib.util.spec_from_file_location("torch_flops_tests_chromium", Path(__file__).with_name("_chromium.py"))
    chromium = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(chromium)  # type: ignore[union-attr]
    executable = chromium.find_chromium()
    if executable is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium)")
    with chromium.Browser(executable) as b:
        yield b



@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def clean_tables() -> Iterator[None]:
    """Give the global formula tables back exactly as they were after a test that edits them."""
    saved = formulas.FORMULAS.copy()
    try:
        yield
    finally:
        formulas.FORMULAS.restore(saved)


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               "_state_dict_hooks", "_load_state_dict_pre_hooks")


def _global_hook_counts() -> tuple[int, ...]:
    from torch.nn.modules import module as m

    names = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
             "_global_backward_pre_hooks")
    return tuple(len(getattr(m, n)) for n in names if hasattr(m, n))


def _capture(model: nn.Module) -> Callable[[], None]:
    """Everything propagate must give back unchanged; the returned function asserts it is."""
    with torch.no_grad():
        params = {k: v.detach().clone() for k, v in model.named_parameters()}
        buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    flags = {k: m.training for k, m in model.named_modules()}
    attrs = {k: set(vars(m)) for k, m in model.named_modules()}
    hooks = {k: {h: len(getattr(m, h)) for h in _HOOK_DICTS if hasattr(m, h)} for k, m in model.named_modules()}
    global_hooks = _global_hook_counts()
    requires_grad = {k: v.requires_grad for k, v in model.named_parameters()}

    def check() -> None:
        now_params = dict(model.named_parameters())
        now_buffers = dict(model.named_buffers())
        assert now_params.keys() == params.keys()
        assert now_buffers.keys() == buffers.keys()  # no buffer added or removed
        for k, v in params.items():
            assert torch.equal(now_params[k], v), f"parameter {k} changed"
            assert now_params[k].requires_grad == requires_grad[k]
        for k, v in buffers.items():
            assert torch.equal(now_buffers[k], v), f"buffer {k} changed"
        assert {k: m.training for k, m in model.named_modules()} == flags
        assert {k: set(vars(m)) for k, m in model.named_modules()} == attrs  # no attribute added
        now_hooks = {k: {h: len(getattr(m, h)) for h in _HOOK_DICTS if hasattr(m, h)}
                     for k, m in model.named_modules()}
        assert now_hooks == hooks
        assert all(n == 0 for h in now_hooks.values() for n in h.values()), "a hook was left on the model"
        assert _global_hook_counts() == global_hooks

    return check


@pytest.fixture
def capture_state() -> Callable[[nn.Module], Callable[[], None]]:
    """``check = capture_state(model)`` ... ``check()`` asserts the model's state is unchanged."""
    return _capture


def assert_same_state(model: nn.Module, twin: nn.Module) -> None:
    """Parameters, buffers and training flags of ``model`` bit-identical to ``twin``'s (an eager
    twin that ran the same calls)."""
    for (name, a), (_, b) in zip(model.named_parameters(), twin.named_parameters(), strict=True):
        assert torch.equal(a, b), f"parameter {name} differs from eager"
    for (name, a), (_, b) in zip(model.named_buffers(), twin.named_buffers(), strict=True):
        assert torch.equal(a, b), f"buffer {name} differs from eager"
    assert [m.training for m in model.modules()] == [m.training for m in twin.modules()]


@pytest.fixture(scope="session")
def same_state() -> Callable[[nn.Module, nn.Module], None]:
    """``same_state(model, twin)``: see :func:`assert_same_state`."""
    return assert_same_state


def by_name(records: Any) -> dict[str, Any]:
    return {r.name: r for r in records}


@pytest.fixture(scope="session")
def records_by_name() -> Callable[[Any], dict[str, Any]]:
    return by_name
