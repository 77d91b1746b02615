"""FLOPs of one optimizer step (torch_flops.optim): hand-derived numbers per optimizer and option,
a cross-check against the ops the real ``optimizer.step()`` dispatches, and the registry."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from torch_flops.errors import DuplicateFormulaError, TorchFlopsError
from torch_flops.optim import (
    OPTIMIZER_FLOPs_MAPPING,
    UnsupportedOptimizerError,
    adam_flops,
    optimizer_step_counts,
    optimizer_step_flops,
    register_optimizer,
)

optim = torch.optim
aten = torch.ops.aten

W, B = 12, 3  # elements of Linear(4, 3): weight 3x4, bias 3


def _model() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 3)


def _backward(params: list[torch.Tensor], model: nn.Module) -> None:
    for p in params:
        p.grad = None
    model(torch.randn(2, 4)).square().sum().backward()


def _stepped(cls: type[optim.Optimizer], steps: int, **kwargs: Any) -> optim.Optimizer:
    """An optimizer over Linear(4, 3) after ``steps`` real steps, with fresh gradients."""
    model = _model()
    opt = cls(model.parameters(), **kwargs)
    params = list(model.parameters())
    for _ in range(steps):
        _backward(params, model)
        opt.step()
    _backward(params, model)
    return opt


def _per_param(opt: optim.Optimizer) -> list[int]:
    return [flops for _, flops in optimizer_step_flops(opt)]


# -------------------------------------------------------------------------------- hand-derived numbers
# (class, options, real steps taken before counting, FLOPs per element) -> [12 * per, 3 * per]
CASES = [
    # SGD: p - lr*g 2
    (optim.SGD, {"lr": 0.1}, 0, 2),
    # lr = 1: p - g 1
    (optim.SGD, {"lr": 1.0}, 0, 1),
    # -g 1 + update 2
    (optim.SGD, {"lr": 0.1, "maximize": True}, 0, 3),
    # g + wd*p 2 + update 2
    (optim.SGD, {"lr": 0.1, "weight_decay": 0.01}, 0, 4),
    # first step: buffer = g (a copy, 0) + update 2
    (optim.SGD, {"lr": 0.1, "momentum": 0.9}, 0, 2),
    # b*mu 1 + b + g 1 (dampening 0) + update 2
    (optim.SGD, {"lr": 0.1, "momentum": 0.9}, 1, 4),
    # b*mu 1 + b + 0.9*g 2 + update 2
    (optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.1}, 1, 5),
    # first step: copy 0 + nesterov g + mu*b 2 + update 2
    (optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}, 0, 4),
    # -g 1 + wd 2 + momentum 2 + nesterov 2 + update 2
    (optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01, "maximize": True}, 1, 9),
    # Adam: m.lerp_ 3 + v*b2 + (1-b2)*g*g 4 + sqrt(v)/sqrt(bc2) + eps 3 + p + c*m/denom 3 = 13
    (optim.Adam, {}, 0, 13),
    # the step count changes nothing
    (optim.Adam, {}, 2, 13),
    # 13 + g + wd*p 2
    (optim.Adam, {"weight_decay": 0.1}, 0, 15),
    # 13 + max(vmax, v) 1
    (optim.Adam, {"amsgrad": True}, 1, 14),
    # 13 + -g 1
    (optim.Adam, {"maximize": True}, 0, 14),
    # 13 + p *= 1 - lr*wd 1
    (optim.Adam, {"weight_decay": 0.1, "decoupled_weight_decay": True}, 0, 14),
    # AdamW: 13 + p *= 1 - lr*wd 1 (weight_decay 0.01 by default)
    (optim.AdamW, {}, 0, 14),
    (optim.AdamW, {"weight_decay": 0.0}, 0, 13),
    # 14 + amsgrad 1 + -g 1
    (optim.AdamW, {"amsgrad": True, "maximize": True}, 1, 16),
    # Adagrad: sum + g*g 2 + sqrt + eps 2 + p - clr*g/std 3 = 7
    (optim.Adagrad, {}, 0, 7),
    # 7 + g + wd*p 2
    (optim.Adagrad, {"weight_decay": 0.1}, 0, 9),
    # clr = lr = 1: p - g/std 2 -> 6
    (optim.Adagrad, {"lr": 1.0}, 0, 6),
    # second step, clr = 1 / (1 + 1*0.5) != 1 -> 7
    (optim.Adagrad, {"lr": 1.0, "lr_decay": 0.5}, 1, 7),
    # RMSprop: v*a + (1-a)*g*g 4 + sqrt 1 + eps 1 + p - lr*g/avg 3 = 9
    (optim.RMSprop, {}, 0, 9),
    # 4 + g_avg.lerp_ 3 + v - g_avg^2 2 + sqrt 1 + eps 1 + update 3 = 14
    (optim.RMSprop, {"centered": True}, 0, 14),
    # 4 + sqrt 1 + eps 1 + b*mu + g/avg 3 + p - lr*b 2 = 11
    (optim.RMSprop, {"momentum": 0.9}, 1, 11),
    # wd 2 + 4 + centered 6 + eps 1 + momentum 5 = 18
    (optim.RMSprop, {"momentum": 0.9, "centered": True, "weight_decay": 0.1}, 1, 18),
    # 9 + -g 1
    (optim.RMSprop, {"maximize": True}, 0, 10),
    # Adamax: m.lerp_ 3 + max(u*b2, |g| + eps) 4 + p - clr*m/u 3 = 10
    (optim.Adamax, {}, 0, 10),
    (optim.Adamax, {"weight_decay": 0.1, "maximize": True}, 1, 13),
    # NAdam: lerp 3 + v 4 + sqrt(v/bc2) + eps 3 + two addcdiv 6 = 16
    (optim.NAdam, {}, 0, 16),
    (optim.NAdam, {"weight_decay": 0.1}, 1, 18),
    (optim.NAdam, {"weight_decay": 0.1, "decoupled_weight_decay": True}, 1, 17),
    # RAdam, t = 1 (rho_1 = 1 <= 5): lerp 3 + v 4 + m/bc1 1 + *lr 1 + p - update 1 = 10
    (optim.RAdam, {}, 0, 10),
    # t = 10 (rho_10 = 9.98 > 5): 10 + sqrt(v) + eps 2 + sqrt(bc2)/. 1 + *l 1 + *r 1 = 15
    (optim.RAdam, {}, 9, 15),
    (optim.RAdam, {"weight_decay": 0.1, "decoupled_weight_decay": True}, 0, 11),
    # Adadelta (rho 0.9, lr 1): v 4 + sqrt(v+eps) 2 + sqrt(u+eps) 2 + /std *g 2 + u 4 + p - dx 1 = 15
    (optim.Adadelta, {}, 0, 15),
    # lr 0.5: p - lr*dx 2 -> 16
    (optim.Adadelta, {"lr": 0.5}, 1, 16),
    (optim.Adadelta, {"weight_decay": 0.1}, 0, 17),
    # ASGD: p *= 1 - lambd*eta 1 + p - eta*g 2; mu = 1 until t0: ax = p, a copy 0 -> 3
    (optim.ASGD, {}, 2, 3),
    # t0 = 0: mu = 1/2 from the third step: + ax + mu*(p - ax) 3 -> 6
    (optim.ASGD, {"t0": 0}, 2, 6),
    (optim.ASGD, {"t0": 0, "weight_decay": 0.1, "maximize": True}, 1, 6),
    # Rprop: g*prev 1 + sign 1 + > 0, < 0, == 0 3 + step*sign 1 + clamp 1 + == etaminus 1 + sign(g) 1
    # + p - sign*step 2 = 11
    (optim.Rprop, {}, 1, 11),
    (optim.Rprop, {"maximize": True}, 0, 12),
]


@pytest.mark.parametrize(("cls", "kwargs", "steps", "per_element"), CASES,
                         ids=[f"{c.__name__}-{i}" for i, (c, *_rest) in enumerate(CASES)])
def test_per_element_counts(cls: type[optim.Optimizer], kwargs: dict[str, Any], steps: int, per_element: int) -> None:
    opt = _stepped(cls, steps, foreach=False, **kwargs)
    assert _per_param(opt) == [W * per_element, B * per_element]


def test_adafactor_factored_and_vector() -> None:
    opt = _stepped(optim.Adafactor, 1, foreach=False)
    # both: RMS(p) 2N+1, clamp + rsqrt + mul 3N, RMS(U) 2N+1, p - alpha*U 2N -> 9N + 2
    # weight 3x4 (N 12, R 3, C 4, B 1), factored: row 2N + 6R, column 2N + 6C, outer product 2N,
    # mean of R  R + 1, clamp 1, divide N -> 7N + 7R + 6C + 2 = 84 + 21 + 24 + 2 = 131; 110 + 131 = 241
    # bias (N 3), not factored: g*g N + v.lerp_ 3N -> 12; 27 + 2 + 12 = 41
    assert _per_param(opt) == [241, 41]
    opt = _stepped(optim.Adafactor, 0, foreach=False, weight_decay=0.1, maximize=True)
    # + -g N + p *= 1 - lr*wd N: 241 + 24 = 265, 41 + 6 = 47
    assert _per_param(opt) == [265, 47]


def test_adafactor_batched_factors() -> None:
    p = nn.Parameter(torch.randn(2, 3, 4))
    p.grad = torch.randn(2, 3, 4)
    # N 24, B 2, R 3, C 4: 9N + 2 = 218; 7N + 7BR + 6BC + 2B = 168 + 42 + 48 + 4 = 262 -> 480
    assert _per_param(optim.Adafactor([p])) == [480]


def test_complex_params_count_real_elements() -> None:
    p = nn.Parameter(torch.randn(3, dtype=torch.complex64))
    p.grad = torch.randn(3, dtype=torch.complex64)
    # 3 complex = 6 real elements: Adam 13 * 6, SGD 2 * 6
    assert _per_param(optim.Adam([p])) == [78]
    assert _per_param(optim.SGD([p], lr=0.1)) == [12]


# -------------------------------------------------------------------------------- reference counter
# FLOPs per output element of each aten op the for-loop optimizers dispatch, from the op's own
# arithmetic, independent of torch_flops.optim. A scale (alpha=, value=) of +-1 is free.
def _scale(kwargs: dict[str, Any], name: str) -> int:
    return 0 if float(kwargs.get(name, 1)) in (1.0, -1.0) else 1


_PER_ELEMENT = {
    aten.add: lambda kw: 1 + _scale(kw, "alpha"), aten.add_: lambda kw: 1 + _scale(kw, "alpha"),  # x + a*y
    aten.sub: lambda kw: 1 + _scale(kw, "alpha"), aten.sub_: lambda kw: 1 + _scale(kw, "alpha"),
    aten.addcmul: lambda kw: 2 + _scale(kw, "value"), aten.addcmul_: lambda kw: 2 + _scale(kw, "value"),  # x + v*y*z
    aten.addcdiv: lambda kw: 2 + _scale(kw, "value"), aten.addcdiv_: lambda kw: 2 + _scale(kw, "value"),  # x + v*y/z
    aten.lerp: lambda kw: 3, aten.lerp_: lambda kw: 3,  # x + w*(y - x)
    # torch evaluates `scalar / tensor` as reciprocal(tensor) * scalar: the pair is one division,
    # counted on the multiply (reciprocal appears in the optimizers only in that pattern)
    aten.reciprocal: lambda kw: 0,
}
for _op in (aten.mul, aten.mul_, aten.div, aten.div_, aten.neg, aten.abs, aten.sqrt, aten.sqrt_, aten.rsqrt,
            aten.rsqrt_, aten.maximum, aten.pow, aten.pow_, aten.clamp, aten.clamp_, aten.sign, aten.gt, aten.lt,
            aten.eq):
    _PER_ELEMENT[_op] = lambda kw: 1  # one arithmetic step, comparison or transcendental
_ZERO = {aten.detach, aten.clone, aten.copy_, aten.zeros_like, aten.new_zeros, aten.zeros, aten.ones, aten.lift_fresh,
         aten._local_scalar_dense, aten.view_as_real, aten.view_as_complex, aten.alias, aten.empty_like,
         aten.full_like, aten.index_put_}  # (the last two: Rprop's step sizes and its masked fills)


def _numel(t: torch.Tensor) -> int:
    return t.numel() * (2 if t.is_complex() else 1)


def _reference_flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    packet = func.overloadpacket
    if packet in _ZERO or packet.__name__.startswith("_record_function"):
        return 0
    tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
    if all(t.dim() == 0 for t in tensors):
        return 0  # per-tensor scalar work (step += 1, mu_product *= mu): left out by the documented rule
    if packet in _PER_ELEMENT:
        return _PER_ELEMENT[packet](kwargs) * _numel(out)
    if packet is aten.linalg_vector_norm:
        return 2 * _numel(args[0]) + out.numel()  # square, add per input; sqrt per result
    if packet is aten.mean:
        return args[0].numel() + out.numel()  # add per input, divide per result
    if packet in (aten.mm, aten.bmm):
        return 2 * out.numel() * args[0].shape[-1]  # 2*M*N*K
    raise AssertionError(f"reference counter has no entry for {func}")


class _StepCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.flops += _reference_flops(func, args, kwargs, out)
        return out


def _measured_steps(cls: type[optim.Optimizer], steps: int, params: list[nn.Parameter] | None = None,
                    **kwargs: Any) -> Iterator[tuple[int, int]]:
    """(predicted, measured) total FLOPs of each of ``steps`` real for-loop steps."""
    model = _model()
    params = params if params is not None else list(model.parameters())
    opt = cls(params, foreach=False, **kwargs)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn_like(p)
        predicted = sum(_per_param(opt))
        with _StepCounter() as counter:
            opt.step()
        yield predicted, counter.flops


CROSS = [
    (optim.SGD, {"lr": 0.1}),
    (optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.2, "weight_decay": 0.01, "maximize": True}),
    (optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    (optim.Adam, {}),
    (optim.Adam, {"weight_decay": 0.1, "amsgrad": True, "maximize": True}),
    (optim.Adam, {"weight_decay": 0.1, "decoupled_weight_decay": True}),
    (optim.AdamW, {}),
    (optim.AdamW, {"amsgrad": True, "maximize": True}),
    (optim.Adagrad, {"lr_decay": 0.1, "weight_decay": 0.1}),
    (optim.RMSprop, {"centered": True, "momentum": 0.9, "weight_decay": 0.1}),
    (optim.RMSprop, {}),
    (optim.Adamax, {"weight_decay": 0.1}),
    (optim.NAdam, {"weight_decay": 0.1}),
    (optim.NAdam, {"weight_decay": 0.1, "decoupled_weight_decay": True, "maximize": True}),
    (optim.RAdam, {"weight_decay": 0.1}),
    (optim.Adadelta, {"weight_decay": 0.1}),
    (optim.ASGD, {"t0": 0, "weight_decay": 0.1}),
    (optim.Adafactor, {"weight_decay": 0.1, "maximize": True}),
    (optim.Rprop, {}),
    (optim.Rprop, {"maximize": True}),
]


@pytest.mark.parametrize(("cls", "kwargs"), CROSS, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(CROSS)])
def test_matches_the_ops_of_the_real_step(cls: type[optim.Optimizer], kwargs: dict[str, Any]) -> None:
    # 7 steps: SGD's momentum buffer appears at step 2, ASGD's averaging at step 3 (t0 = 0), RAdam
    # rectifies from step 6
    for step, (predicted, measured) in enumerate(_measured_steps(cls, 7, **kwargs), start=1):
        assert predicted == measured, f"step {step}"


@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam, optim.AdamW, optim.Adagrad, optim.RMSprop])
def test_complex_matches_the_ops_of_the_real_step(cls: type[optim.Optimizer]) -> None:
    params = [nn.Parameter(torch.randn(3, 2, dtype=torch.complex64))]
    kwargs: dict[str, Any] = {"lr": 0.1, "weight_decay": 0.1, "maximize": True}
    for predicted, measured in _measured_steps(cls, 2, params=params, **kwargs):
        assert predicted == measured


# -------------------------------------------------------------------------------- implementations
IMPLEMENTATIONS = [(optim.SGD, {"lr": 0.1, "momentum": 0.9}), (optim.Adam, {"amsgrad": True}), (optim.AdamW, {}),
                   (optim.Adagrad, {}), (optim.RMSprop, {"centered": True}), (optim.Adamax, {}), (optim.NAdam, {}),
                   (optim.RAdam, {}), (optim.Adadelta, {}), (optim.ASGD, {}), (optim.Adafactor, {})]


@pytest.mark.parametrize(("cls", "kwargs"), IMPLEMENTATIONS, ids=[c.__name__ for c, _ in IMPLEMENTATIONS])
def test_foreach_and_fused_count_the_same(cls: type[optim.Optimizer], kwargs: dict[str, Any]) -> None:
    reference = _per_param(_stepped(cls, 1, foreach=False, **kwargs))
    assert _per_param(_stepped(cls, 1, foreach=True, **kwargs)) == reference
    if "fused" in inspect.signature(cls).parameters:  # SGD, Adam, AdamW, Adagrad: fused on CPU too
        assert _per_param(_stepped(cls, 1, fused=True, **kwargs)) == reference


# -------------------------------------------------------------------------------- what is counted
def test_params_without_grad_are_skipped() -> None:
    model = _model()
    model.weight.requires_grad_(False)
    unused = nn.Parameter(torch.randn(5))
    opt = optim.SGD([{"params": [model.weight, model.bias]}, {"params": [unused]}], lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    counts = optimizer_step_flops(opt)
    assert [p for p, _ in counts] == [model.bias]
    assert [flops for _, flops in counts] == [2 * B]  # p - lr*g


def test_reading_changes_no_state() -> None:
    model = _model()
    opt = optim.Adam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer_step_flops(opt)
    assert len(opt.state) == 0


def test_a_sparse_gradient_counts_the_rows_it_touches() -> None:
    emb = nn.Embedding(5, 2, sparse=True)
    emb(torch.tensor([1, 2, 1])).sum().backward()  # 3 looked-up rows (one twice) of 2 values each
    [(_, flops)] = optimizer_step_flops(optim.SGD(emb.parameters(), lr=0.1))
    assert flops == 2 * 3 * 2  # p - lr * g on 6 values: a multiply and an add each


def test_a_sparse_gradient_step_runs_as_without_the_profiler() -> None:
    from torch_flops import TrainingProfiler

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4, sparse=True)
            self.lin = nn.Linear(4, 2)

        def forward(self, i: torch.Tensor) -> torch.Tensor:
            return self.lin(self.emb(i))

    torch.manual_seed(0)
    model, i = Bag(), torch.tensor([1, 2, 3])
    twin = Bag()
    twin.load_state_dict(model.state_dict())
    for m, profiled in ((twin, False), (model, True)):
        opt = optim.SGD(m.parameters(), lr=0.1)
        profiler = TrainingProfiler(m, opt) if profiled else None
        if profiler is not None:
            profiler.start_profile()
        m(i).sum().backward()
        opt.step()
        if profiler is not None:
            profiler.stop_profile()
            [profile] = profiler.profiles
            # SGD: 2 per value: the Linear's 8 + 2 and the 3 looked-up rows x 4 of the embedding
            assert sum(r.flops or 0 for r in profile.records if r.op == "optimizer_step") == 2 * (10 + 12)
            profiler.end_profile()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), twin.parameters()))


def test_not_an_optimizer() -> None:
    with pytest.raises(TypeError, match="optimizer"):
        optimizer_step_flops([torch.zeros(1)])  # type: ignore[arg-type]


class _OwnStep(optim.Optimizer):
    def __init__(self, params: Any) -> None:
        super().__init__(params, {"lr": 0.1})

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        pass


def test_unknown_optimizer_raises_with_the_fix() -> None:
    with pytest.raises(UnsupportedOptimizerError, match="_OwnStep.*register_optimizer") as info:
        optimizer_step_flops(_OwnStep(_model().parameters()))
    assert isinstance(info.value, TypeError) and isinstance(info.value, TorchFlopsError)


def test_subclass_gets_the_parent_formula() -> None:
    class MyAdam(optim.Adam):
        pass

    model = _model()
    opt = MyAdam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    assert _per_param(opt) == [13 * W, 13 * B]


def test_register_duplicate_raises() -> None:
    with pytest.raises(DuplicateFormulaError, match="SGD.*override=True"):
        register_optimizer(optim.SGD)(adam_flops)
    assert issubclass(DuplicateFormulaError, ValueError)


def test_register_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one"):
        register_optimizer()
    with pytest.raises(TypeError, match="Optimizer subclasses"):
        register_optimizer(int)  # type: ignore[arg-type]


def test_user_registration_and_override() -> None:
    def one_per_element(group: dict[str, Any], param: torch.Tensor, state: Any) -> int:
        return param.numel()

    original = OPTIMIZER_FLOPs_MAPPING[optim.SGD]
    try:
        register_optimizer(_OwnStep)(one_per_element)
        model = _model()
        model(torch.randn(2, 4)).sum().backward()
        assert _per_param(_OwnStep(model.parameters())) == [W, B]
        register_optimizer(optim.SGD, override=True)(one_per_element)
        assert _per_param(optim.SGD(model.parameters(), lr=0.1)) == [W, B]
    finally:
        OPTIMIZER_FLOPs_MAPPING.pop(_OwnStep, None)
        OPTIMIZER_FLOPs_MAPPING[optim.SGD] = original


def test_formula_must_return_an_int() -> None:
    try:
        register_optimizer(_OwnStep)(lambda group, param, state: 1.5)
        model = _model()
        model(torch.randn(2, 4)).sum().backward()
        with pytest.raises(TypeError, match="not an int"):
            optimizer_step_flops(_OwnStep(model.parameters()))
    finally:
        OPTIMIZER_FLOPs_MAPPING.pop(_OwnStep, None)


# -------------------------------------------------------------------------------- Muon and SparseAdam
def _addmm_reference(args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor) -> int:
    # beta*input + alpha*(a @ b): 2*M*N*K for the product; per output element one add, and one
    # multiply for each scale that is not 1 (the op's own arithmetic, independent of torch_flops)
    beta, alpha = float(kwargs.get("beta", 1)), float(kwargs.get("alpha", 1))
    product = 2 * out.numel() * args[1].shape[-1]
    return product + out.numel() * ((1 + (beta != 1) + (alpha != 1)) if beta != 0 else int(alpha != 1))


class _MuonCounter(_StepCounter):
    """The reference counter of the real step, with the ops of Muon's Newton-Schulz iteration."""

    def __init__(self) -> None:
        super().__init__()
        self.macs = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet is aten.addmm:
            out = func(*args, **kwargs)
            self.flops += _addmm_reference(args, kwargs, out)
            self.macs += out.numel() * args[1].shape[-1]
            return out
        if packet in (aten._to_copy, aten.t, aten.permute, aten.transpose):  # the bf16 copy; views
            return func(*args, **kwargs)
        if packet is aten.mul_ and not isinstance(args[1], torch.Tensor) and float(args[1]) == 1.0:
            return func(*args, **kwargs)  # p *= 1 - lr*wd at wd = 0: a scale of exactly 1 is free (the rule)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if packet in (aten.mm, aten.bmm):
            self.macs += out.numel() * args[0].shape[-1]
        return out


MUON = [({}, (6, 4)), ({}, (3, 5)), ({"nesterov": False, "weight_decay": 0.0}, (4, 4)),
        ({"adjust_lr_fn": "match_rms_adamw", "ns_steps": 2, "ns_coefficients": (1.0, 0.0, 1.0)}, (5, 2))]


@pytest.mark.skipif(not hasattr(optim, "Muon"), reason="torch.optim.Muon needs torch >= 2.9")
@pytest.mark.parametrize(("kwargs", "shape"), MUON, ids=[str(s) for _, s in MUON])
def test_muon_matches_the_ops_of_the_real_step(kwargs: dict[str, Any], shape: tuple[int, int]) -> None:
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(*shape))
    opt = optim.Muon([p], lr=0.02, **kwargs)
    for _ in range(2):  # the momentum buffer is made at the first step
        p.grad = torch.randn_like(p)
        [(_, flops, macs)] = optimizer_step_counts(opt)
        with _MuonCounter() as counter:
            opt.step()
        assert (flops, macs) == (counter.flops, counter.macs)


@pytest.mark.skipif(not hasattr(optim, "Muon"), reason="torch.optim.Muon needs torch >= 2.9")
def test_muon_by_hand() -> None:
    p = nn.Parameter(torch.zeros(4, 2))
    p.grad = torch.ones(4, 2)
    [(_, flops, macs)] = optimizer_step_counts(optim.Muon([p], lr=0.02))
    # 4x2 works as 2x4 (m=2, n=4), 5 steps of: X@X.T 2*2*4 = 16 MACs, A@A 2*2*2 = 8, B@X 2*2*4 = 16:
    # 40 MACs a step, 200 in all. Scaled adds (coefficients a=3.4445, b=-4.775, c=2.0315, none 1):
    # B: 3 per element of 2x2 = 12, X: 2 per element of 2x4 = 16; 28 a step, 140 in all.
    # Element-wise on N=8: lerp 3 + nesterov lerp 3 + norm 2N+1 + divide 1 + decay 1 (lr*wd = 0.002)
    # + p - lr'*O 2 (lr' = 0.02 * sqrt(4/2), not 1): 8 * (3+3+1+1+2) + 17 = 97.
    assert macs == 200
    assert flops == 2 * 200 + 140 + 97


@pytest.mark.skipif(not hasattr(optim, "Muon"), reason="torch.optim.Muon needs torch >= 2.9")
def test_muon_step_under_the_training_profiler_equals_flop_counter_mode() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from torch_flops import TrainingProfiler

    def run(profiled: bool) -> tuple[nn.Module, Any]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5, bias=False), nn.Tanh(), nn.Linear(5, 3, bias=False))
        opt = optim.Muon(model.parameters(), lr=0.05)
        profiler = TrainingProfiler(model, opt) if profiled else None
        if profiler is not None:
            profiler.start_profile()
        model(torch.randn(4, 6)).square().sum().backward()
        with FlopCounterMode(display=False) as fcm:
            opt.step()
        if profiler is None:
            return model, fcm.get_total_flops()
        profiler.stop_profile()
        [profile] = profiler.profiles
        # the step's MACs include Muon's: weights (5, 6) and (3, 5), m x n = 5 x 6 and 3 x 5, 5 steps of
        # 2m^2n + m^3 MACs: 5 * (300 + 125) + 5 * (90 + 27) = 2125 + 585 = 2710
        assert profiler.get_total_macs() == profile.total_macs + profile.total_backward_macs + 2710
        profiler.end_profile()
        return model, profile

    twin, fcm_flops = run(False)
    model, profile = run(True)
    # FlopCounterMode counts only the Newton-Schulz matrix products: 2 x their MACs
    optimizer = [r for r in profile.with_convention("flop_counter").records if r.phase == "optimizer"]
    assert len(optimizer) == 2 and sum(r.flops for r in optimizer) == fcm_flops > 0
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), twin.parameters()))


def test_sparse_adam_by_hand_and_as_without_the_profiler() -> None:
    from torch_flops import TrainingProfiler

    def run(profiled: bool) -> tuple[nn.Module, int | None]:
        torch.manual_seed(0)
        emb = nn.Embedding(10, 4, sparse=True)
        opt = optim.SparseAdam(emb.parameters(), lr=0.1)
        profiler = TrainingProfiler(emb, opt) if profiled else None
        flops = None
        for _ in range(2):
            if profiler is not None:
                profiler.start_profile()
            opt.zero_grad()
            emb(torch.tensor([1, 3, 3])).square().sum().backward()
            opt.step()
            if profiler is not None:
                profiler.stop_profile()
                flops = sum(r.flops or 0 for r in profiler.profiles[-1].records if r.phase == "optimizer")
        if profiler is not None:
            profiler.end_profile()
        return emb, flops

    twin, _ = run(False)
    emb, flops = run(True)
    # the gradient holds 3 looked-up rows of 4 values; the step coalesces them to 2 rows first (row 3's
    # two sets of 4 values summed: 4 adds), then 14 per value of the 8 left: 4 + 112 = 116
    assert flops == 4 + 8 * 14
    assert torch.equal(emb.weight, twin.weight)
