"""torch.cond and while_loop (higher-order operators) in every front end, and the calls a captured
graph keeps whole without a formula of their own, counted through their aten ops as eager counts
them."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX, TracingError, UnsupportedOpError
from torch_flops.session import installed


class _Cond(nn.Module):
    """``torch.cond`` on the input's sign: ``relu(a(x))`` or ``a(x) * 2``, then ``b``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cond(x.sum() > 0, lambda t: self.a(t).relu(), lambda t: self.a(t) * 2, (x,))
        return self.b(y)


class _While(nn.Module):
    """Three iterations of ``h = tanh(h @ w)`` in a ``while_loop``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch._higher_order_ops.while_loop import while_loop

        def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < 3

        def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(h @ self.w)

        return while_loop(cond_fn, body_fn, (torch.tensor(0), x))[1]


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


def _x(sign: float) -> torch.Tensor:
    return sign * torch.rand(2, 8, generator=torch.Generator().manual_seed(0))


def test_cond_records_the_branch_that_ran() -> None:
    torch.manual_seed(0)
    model = _Cond()
    for sign, branch in ((1.0, 16), (-1.0, 16)):  # relu: 16 comparisons; * 2: 16 multiplies
        x = _x(sign)
        expected = model(x)
        with torch.no_grad():
            counter = TorchFLOPsByFX(model)
            out = counter.propagate(x)
        assert torch.equal(out, expected.detach())
        # x (2, 8): sum 16 + gt 1; a: 2*2*8*8 = 256 + bias 16 = 272; the branch 16; b: 2*2*8*4 = 128 + 8 = 136
        assert counter.total_flops == 16 + 1 + 272 + branch + 136
        assert {r.module_path for r in counter.records if r.target == "Linear"} == {"a", "b"}
        # flop_counter convention: the matmuls, 256 + 128, as FlopCounterMode counts
        with torch.no_grad(), FlopCounterMode(display=False) as reference:
            model(x)
        assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops() == 384
        torch._dynamo.reset()  # (FlopCounterMode leaves cond's compiled wrapper failing the next plain call)
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}


def test_the_plain_call_works_as_before_after_profiling_a_cond() -> None:
    # torch's eager cond compiles a wrapper; its cache made under a dispatch mode broke every later
    # plain call (FlopCounterMode leaves it so): the recording drops it
    torch.manual_seed(0)
    model, x = _Cond(), _x(1.0)
    twin = copy.deepcopy(model)
    TorchFLOPsByFX(model).propagate(x)
    out = model(x)
    out.sum().backward()
    twin(x).sum().backward()
    assert all(p.grad is not None and torch.equal(p.grad, q.grad)  # type: ignore[arg-type]
               for p, q in zip(model.parameters(), twin.parameters()))


def test_a_backward_through_cond_is_refused() -> None:
    # under a dispatch mode torch runs cond without the gradients of a's parameters (closed over by
    # the branches): a step would differ from the plain one
    torch.manual_seed(0)
    model, x = _Cond(), _x(1.0)
    with pytest.raises(UnsupportedOpError, match="backward through 'cond'"):
        TorchFLOPsByFX(model).propagate(x, loss_fn=lambda out: out.sum())
    assert all(p.grad is None for p in model.parameters())
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}


def test_while_loop_records_every_iteration() -> None:
    torch.manual_seed(0)
    model, x = _While(), _x(1.0)
    expected = model(x)
    with torch.no_grad():
        counter = TorchFLOPsByFX(model)
        out = counter.propagate(x)
    assert torch.equal(out, expected.detach())
    # 3 iterations of h (2, 8) @ w (8, 8): 2*2*8*8 = 256 each (FlopCounterMode cannot run while_loop)
    assert counter.profile.with_convention("flop_counter").total_flops == 3 * 256
    # meta: the same loop (its condition reads a counter made on CPU)
    with torch.no_grad():
        meta = TorchFLOPsByFX(copy.deepcopy(model).to("meta"))
        meta.propagate(x.to("meta"))
    assert meta.profile.with_convention("flop_counter").total_flops == 3 * 256


def test_captured_graphs_and_higher_order_operators() -> None:
    torch.manual_seed(0)
    model, x = _Cond(), _x(-1.0)
    with torch.no_grad():
        exported = TorchFLOPsByFX(model, tracer="export")
        exported.propagate(x)
    # the cond node counts the branch its predicate picked: a (272) and the * 2 (16)
    assert exported.total_flops == 16 + 1 + 272 + 16 + 136
    with pytest.raises(TracingError, match="could not trace"):
        TorchFLOPsByFX(_While(), tracer="fx").propagate(x)  # (torch's check of a Proxy: a tracing limit)


class _Calls(nn.Module):
    """Calls a captured graph keeps whole with no formula of their own."""

    def __init__(self) -> None:
        super().__init__()
        self.cos = nn.CosineSimilarity(dim=-1)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        t = torch.tensordot(a, b, dims=2)  # (2, 3, 4) x (3, 4, 5): one mm (2, 12) x (12, 5)
        return t.sum() + self.cos(a, a).sum() + F.fold(a.reshape(1, 24, 1), (2, 3), (2, 3)).sum()


def test_calls_without_a_formula_count_their_aten_ops_in_every_front_end() -> None:
    a, b = torch.randn(2, 3, 4), torch.randn(3, 4, 5)
    totals = {}
    for tracer in ("eager", "fx", "export"):
        counter = TorchFLOPsByFX(_Calls(), tracer=tracer)
        counter.propagate(a, b)
        assert not [r.target for r in counter.records if r.status.value == "unsupported"]
        totals[tracer] = (counter.total_flops, counter.total_macs,
                          counter.profile.with_convention("flop_counter").total_flops)
        if tracer == "fx":
            tensordot = next(r for r in counter.records if r.target == "torch.tensordot")
            assert (tensordot.flops, tensordot.macs) == (2 * 2 * 12 * 5, 2 * 12 * 5)  # 120 MACs
    assert totals["fx"] == totals["export"] == totals["eager"]
    assert totals["eager"][2] == 2 * 2 * 12 * 5  # FlopCounterMode: the mm alone
