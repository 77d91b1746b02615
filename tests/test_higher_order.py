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

_SIDE_CALLS: list[str] = []


def _side(x: torch.Tensor) -> torch.Tensor:
    """A user's function (kept whole by fx) whose module's name starts with "torch"."""
    _SIDE_CALLS.append(x.device.type)
    return x * 2


_side.__module__ = "torchhelpers"
torch.fx.wrap("_side")


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
    with torch.no_grad():
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
    with torch.no_grad():  # a cond under no_grad inside the step: recorded
        inside = TorchFLOPsByFX(model)
        inside.propagate(x)
    assert inside.total_flops == 16 + 1 + 272 + 16 + 136


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


def test_a_cond_branch_raising_while_recorded_leaves_other_cond_models_working() -> None:
    class Raises(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            def fails(z: torch.Tensor) -> torch.Tensor:
                raise ValueError("the branch's own error")

            y = self.l(x)
            return torch.cond(y.sum() > -1e9, fails, lambda z: z.cos(), (y,))

    with pytest.raises(ValueError, match="the branch's own error"), torch.no_grad():
        TorchFLOPsByFX(Raises()).propagate(_x(1.0))
    model, x = _Cond(), _x(1.0)
    model(x).sum().backward()  # torch's compiled cond internals, left failing by that call, were dropped
    assert all(p.grad is not None for p in model.parameters())


def test_a_refused_backward_through_cond_leaves_the_plain_step_working() -> None:
    torch.manual_seed(0)
    model, x = _Cond(), _x(1.0)
    with pytest.raises(UnsupportedOpError):
        TorchFLOPsByFX(model).propagate(x, loss_fn=lambda out: out.sum())
    model(x).sum().backward()  # torch's compiled wrapper of cond, left failing by the refused call, was dropped
    assert all(p.grad is not None for p in model.parameters())


def test_a_composite_op_inside_a_cond_branch_counts_as_outside() -> None:
    # inside a branch the ops run below autograd, where a composite op (rfft, cdist, x.T) reaches the
    # recording undecomposed: its parts are recorded, as outside a cond
    class Plain(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cdist(x, x.T.T).sum() + torch.fft.rfft(x).abs().sum()

    class InCond(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda t: Plain()(t), lambda t: Plain()(t), (x,))

    x = _x(1.0)
    with torch.no_grad():
        plain, in_cond = TorchFLOPsByFX(Plain()), TorchFLOPsByFX(InCond())
        plain.propagate(x)
        in_cond.propagate(x)
    assert not [r.target for r in in_cond.records if r.status.value == "unsupported"]
    assert in_cond.total_flops == plain.total_flops + 16 + 1  # + the predicate: x.sum() 16, > 0 1


def test_other_higher_order_operators_are_refused_and_the_model_still_runs() -> None:
    scan = pytest.importorskip("torch._higher_order_ops.scan").scan

    class Cumulative(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return scan(lambda carry, row: (carry + row, carry * 2), torch.zeros(8), x)[1]

    model, x = Cumulative(), _x(1.0)
    expected = model(x)
    with pytest.raises(UnsupportedOpError, match="higher-order operator 'scan'"):
        TorchFLOPsByFX(model).propagate(x)
    assert torch.equal(model(x), expected)
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}


def test_the_aten_count_of_a_captured_call_touches_nothing_real() -> None:
    class Cache:
        def __init__(self) -> None:
            self.items: list[torch.Tensor] = []

        def update(self, k: torch.Tensor) -> torch.Tensor:
            self.items.append(k)
            return torch.cat(self.items)

    class Uses(nn.Module):
        def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
            order = torch.randperm(x.size(0))  # no tensor argument: it would draw from the real generator
            return cache.update(x[order]).sum()  # a method of an object that is no tensor

    x = _x(1.0)
    torch.manual_seed(1)
    expected = Uses()(x, Cache())
    rng = torch.get_rng_state()
    cache = Cache()
    torch.manual_seed(1)
    out = TorchFLOPsByFX(Uses(), tracer="fx").propagate(x, cache)
    assert torch.equal(out, expected) and torch.equal(torch.get_rng_state(), rng)
    assert len(cache.items) == 1 and cache.items[0].device.type == "cpu"  # updated once, as eager does


def test_a_user_function_whose_module_starts_with_torch_is_never_run_twice() -> None:
    class Uses(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _side(x) + 1

    counter = TorchFLOPsByFX(Uses(), tracer="fx")
    _SIDE_CALLS.clear()
    counter.propagate(_x(1.0))
    assert _SIDE_CALLS == ["cpu"]
    assert [r.target for r in counter.records if r.status.value == "unsupported"] == ["torchhelpers._side"]


class _Normed(nn.Module):
    """A BatchNorm (its running statistics move when it runs), then calls without a formula."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return torch.tensordot(y, y, dims=([1], [1])).sum() + torch.cdist(y, y).sum()


def test_strict_refuses_a_captured_call_without_a_formula_before_anything_runs() -> None:
    model = _Normed()
    with pytest.raises(UnsupportedOpError, match=r"strict=True: 2 node\(s\) have no FLOPs formula"):
        TorchFLOPsByFX(model, tracer="fx", strict=True).propagate(torch.randn(3, 4))
    assert int(model.norm.num_batches_tracked) == 0  # nothing ran


def test_ignore_ops_applies_to_the_aten_ops_of_a_captured_call() -> None:
    a, b = torch.randn(2, 3, 4), torch.randn(3, 4, 5)
    for tracer in ("eager", "fx", "export"):
        counter = TorchFLOPsByFX(_Calls(), tracer=tracer, ignore_ops=["mm"])
        counter.propagate(a, b)
        assert counter.profile.with_convention("flop_counter").total_flops == 0  # the mm alone, ignored


def test_a_backward_through_cond_on_an_activation_is_refused_before_any_gradient() -> None:
    """A cond whose operand needs a gradient (an activation): its backward under the profiler would
    fail inside torch after some gradients were written; refused before the backward runs."""
    class OnActivation(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x)
            return self.b(torch.cond(h.sum() > 0, lambda t: t.relu(), lambda t: t * 2.0, (h,)))

    torch.manual_seed(0)
    model = OnActivation()
    with pytest.raises(UnsupportedOpError, match="backward through 'cond'"):
        TorchFLOPsByFX(model).propagate(torch.randn(6, 8), loss_fn=lambda out: out.sum())
    assert all(p.grad is None for p in model.parameters())
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}
