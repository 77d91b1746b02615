"""FLOPs of one optimizer step, per parameter: pure arithmetic on shapes and hyper-parameters.

:func:`optimizer_step_flops` never runs the optimizer and never times anything: it reads each
parameter group's hyper-parameters and, where the count depends on it, the parameter's state, and
returns the FLOPs of the *next* ``optimizer.step()`` for every parameter that has a gradient.
:data:`OPTIMIZER_FLOPs_MAPPING` maps an optimizer class to ``formula(group, param, state) -> int``;
:func:`register_optimizer` fills it (lookup follows the optimizer's MRO, so a subclass of ``Adam``
that keeps ``Adam.step`` is counted as Adam; a subclass that rewrites ``step`` should register its
own formula).

Counting rules (the convention of :mod:`torch_flops.formulas`, applied to an update rule)
-----------------------------------------------------------------------------------------
* What is counted is the per-element arithmetic of the update rule as torch's reference
  implementation writes it (the for-loop path, ``foreach=False``, not ``capturable`` nor
  ``differentiable``), which follows the pseudo-code of each optimizer's page in the torch.optim
  docs. The count is a property of the algorithm, not of the kernel: ``foreach=True`` and
  ``fused=True`` give the same number, even where a fused kernel folds or reorders operations.
* One FLOP per element per add, subtract, multiply, divide, comparison (``max``, ``clamp``,
  ``maximum``), ``abs``, negation and transcendental (``sqrt``, ``rsqrt``). ``lerp`` is 3
  (``x + w*(y - x)``). The scale of ``add(x, y, alpha=a)``, ``addcmul(x, y, z, value=v)`` and
  ``addcdiv`` costs one multiply unless it is +1 or -1 (then it is a plain add or subtract): so
  ``x + a*y`` is 2, ``x - y`` is 1, ``x + v*y*z`` is 3 and ``x + y*z`` is 2. A scale that depends on
  the step count (Adam's ``lr / (1 - beta1**t)``) is taken as a multiply.
* ``maximize`` negates the gradient: 1 FLOP per element, counted.
* Scalar work done once per parameter tensor on hyper-parameters and the step count (the step
  increment, bias corrections such as ``1 - beta1**t``, ``lr * weight_decay``, NAdam's
  ``mu_product``, ASGD's ``eta``/``mu``) is **left out**: it is O(1) per tensor and lives in Python
  floats or 0-dim tensors depending on the implementation. Reductions over the parameter
  (Adafactor's norms and means) are counted as the graph counter counts them: a 2-norm is
  ``2*I + O``, a mean ``I + O`` (``I`` input and ``O`` result elements), a matmul ``2*M*N*K``.
* Complex parameters count as twice their real elements: torch updates them through
  ``torch.view_as_real`` and every scale is a real number.
* Parameters whose ``.grad`` is ``None`` are skipped (the step does not touch them; frozen
  parameters have none). A sparse COO gradient (``nn.Embedding(sparse=True)``) counts the formula on
  the values it holds (the rows the update touches); another layout raises ``ValueError``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
from torch import Tensor
from torch.optim import Optimizer

from torch_flops.comm import local_value
from torch_flops.errors import DuplicateFormulaError, UnsupportedOptimizerError

__all__ = [
    "OPTIMIZER_FLOPs_MAPPING",
    "OptimizerFormula",
    "UnsupportedOptimizerError",
    "adadelta_flops",
    "adafactor_flops",
    "adagrad_flops",
    "adam_flops",
    "adamax_flops",
    "adamw_flops",
    "asgd_flops",
    "formula_for",
    "muon_flops",
    "nadam_flops",
    "optimizer_step_counts",
    "optimizer_step_flops",
    "radam_flops",
    "register_optimizer",
    "rmsprop_flops",
    "sgd_flops",
    "update_traffic",
]


#: ``formula(group, param, state) -> FLOPs`` of the next step for one parameter, or ``(FLOPs, MACs)``
#: when the update multiplies matrices (Muon's Newton-Schulz iteration; the MACs are in the FLOPs,
#: 2 each). ``group`` is the parameter's group (hyper-parameters), ``state`` its optimizer state
#: (empty before the first step). A formula reads them and must not change them.
OptimizerFormula = Callable[[dict[str, Any], Tensor, Mapping[str, Any]], "int | tuple[int, int]"]
FormulaT = TypeVar("FormulaT", bound=OptimizerFormula)

#: Optimizer class -> formula. Extend it with :func:`register_optimizer`.
OPTIMIZER_FLOPs_MAPPING: dict[type[Optimizer], OptimizerFormula] = {}


def register_optimizer(*classes: type[Optimizer], override: bool = False) -> Callable[[FormulaT], FormulaT]:
    """Register ``formula(group, param, state) -> int`` for optimizer classes (and, through the
    MRO, their subclasses). A class that already has a formula raises
    :class:`~torch_flops.errors.DuplicateFormulaError` (a ``ValueError``) unless ``override=True``."""
    if not classes:
        raise ValueError("register_optimizer needs at least one optimizer class")
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
            raise TypeError(f"register_optimizer takes torch.optim.Optimizer subclasses, got {cls!r}")
        if cls in OPTIMIZER_FLOPs_MAPPING and not override:
            raise DuplicateFormulaError(f"{cls.__qualname__} already has an optimizer FLOPs formula "
                                        f"({OPTIMIZER_FLOPs_MAPPING[cls].__name__}); pass override=True to replace it")

    def wrap(formula: FormulaT) -> FormulaT:
        for cls in classes:
            OPTIMIZER_FLOPs_MAPPING[cls] = formula
        return formula

    return wrap


def formula_for(cls: type[Optimizer]) -> OptimizerFormula:
    """The formula of the nearest class in ``cls``'s MRO that has one."""
    for base in cls.__mro__:
        formula = OPTIMIZER_FLOPs_MAPPING.get(base)  # type: ignore[call-overload]
        if formula is not None:
            return formula
    raise UnsupportedOptimizerError(
        f"no step FLOPs formula for optimizer {cls.__module__}.{cls.__qualname__}; register one with "
        f"@torch_flops.optim.register_optimizer({cls.__qualname__}) on a function "
        f"formula(group, param, state) -> int")


def optimizer_step_flops(optimizer: Optimizer) -> list[tuple[Tensor, int]]:
    """``(param, flops)`` of the next ``optimizer.step()`` for every parameter with a gradient, in
    ``param_groups`` order. Reads hyper-parameters and state only; runs and changes nothing."""
    return [(param, flops) for param, flops, _ in optimizer_step_counts(optimizer)]


def optimizer_step_counts(optimizer: Optimizer) -> list[tuple[Tensor, int, int]]:
    """``(param, flops, macs)`` of the next ``optimizer.step()`` for every parameter with a gradient
    (:func:`optimizer_step_flops` with the MACs of the update's matrix products: 0 for an
    element-wise rule)."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    formula = formula_for(type(optimizer))
    counts: list[tuple[Tensor, int, int]] = []
    for g, group in enumerate(optimizer.param_groups):
        for i, param in enumerate(group["params"]):
            grad = param.grad
            if grad is None:
                continue
            state = optimizer.state.get(param, {})  # .get: the state is a defaultdict, never add to it
            counted, merged = param, 0
            if grad.layout == torch.sparse_coo:  # (nn.Embedding(sparse=True)): the update touches the
                # values the gradient holds, the rows it looked up: the formula on that many elements (an
                # optimizer refusing sparse gradients, Adam, raises its own error as it steps)
                values = grad._values()
                if isinstance(optimizer, _COALESCING) and not grad.is_coalesced():
                    # its step coalesces first: one add per value summed into a row looked up before,
                    # then the formula on the rows left
                    kept = grad.coalesce()._values()
                    merged, values = (values.numel() - kept.numel()) * (2 if values.is_complex() else 1), kept
                counted = torch.empty(values.shape, dtype=param.dtype, device="meta")
            elif grad.layout != torch.strided:
                raise ValueError(f"param_groups[{g}]['params'][{i}] has a {grad.layout} gradient: only dense "
                                 f"and sparse COO gradients are counted")
            elif type(param).__name__ == "DTensor":  # sharded (FSDP2, tensor parallel): this rank's shard
                counted, state = local_value(param), {k: local_value(v) for k, v in state.items()}
            flops, macs = _flops_and_macs(formula, formula(group, counted, state))
            counts.append((param, flops + merged, macs))
    return counts


#: optimizers whose step coalesces a sparse gradient before its per-value work (SparseAdam: its update
#: is not linear in the gradient, so a row looked up twice must be one value)
_COALESCING: tuple[type[Optimizer], ...] = (torch.optim.SparseAdam,)


def _flops_and_macs(formula: Any, value: Any) -> tuple[int, int]:
    """A formula's answer, ``flops`` or ``(flops, macs)``, as two ints."""
    try:
        if isinstance(value, tuple) and len(value) == 2:
            return operator.index(value[0]), operator.index(value[1])
        return operator.index(value), 0
    except TypeError:
        raise TypeError(f"optimizer formula {getattr(formula, '__name__', formula)!r} returned {value!r}, not "
                        f"an int (FLOPs) or a pair of ints (FLOPs, MACs)") from None


def update_traffic(optimizer: Optimizer, param: Tensor) -> tuple[int, int]:
    """``(bytes read, bytes written)`` of one parameter's update, once the step has made its state:
    the update reads the parameter, its gradient and every state tensor the optimizer keeps for it
    (Adam's ``exp_avg`` and ``exp_avg_sq``, SGD's ``momentum_buffer``, Adafactor's factored
    row/column variances...) and writes the parameter and that state back. 0-dim state (the step
    count) is scalar bookkeeping, left out as its FLOPs are (the module docstring). A sharded
    parameter (DTensor): this rank's shard. So SGD without momentum moves ``3 x P`` bytes of a
    ``P``-byte parameter (read p and g, write p) and AdamW ``7 x P`` (read p, g, m, v; write p, m, v)."""
    counted = local_value(param)
    grad = local_value(param.grad) if param.grad is not None else None
    state = optimizer.state.get(param, {})  # .get: the state is a defaultdict, never add to it
    tensors = [local_value(v) for v in state.values() if isinstance(v, Tensor) and v.dim() > 0]
    state_bytes = sum(_nbytes(t) for t in tensors)
    param_bytes = _nbytes(counted)
    return param_bytes + (_nbytes(grad) if grad is not None else 0) + state_bytes, param_bytes + state_bytes


def _nbytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


# ---------------------------------------------------------------------------------------------- helpers
def _elements(param: Tensor) -> int:
    """Real elements updated: a complex parameter is viewed as real, 2 per element."""
    return param.numel() * (2 if param.is_complex() else 1)


def _scale(value: Any) -> int:
    """Cost of the alpha=/value= scale of add/addcmul/addcdiv: a multiply, free when it is +-1."""
    return 0 if float(value) in (1.0, -1.0) else 1


def _maximize(group: Mapping[str, Any]) -> int:
    # -grad: 1 per element when maximizing
    return 1 if group.get("maximize", False) else 0


def _weight_decay(group: Mapping[str, Any], decoupled: bool) -> int:
    """Per element: decoupled ``p *= 1 - lr*wd`` is 1; L2 ``g = g + wd*p`` is 1 add + the scale."""
    wd = group.get("weight_decay", 0)
    if wd == 0:
        return 0
    return 1 if decoupled else 1 + _scale(wd)


def _step(state: Mapping[str, Any]) -> float:
    """The step count ``t`` the next step uses (state['step'] + 1; 1 before the first step)."""
    return float(state.get("step", 0)) + 1


# ---------------------------------------------------------------------------------------------- formulas
@register_optimizer(torch.optim.SGD)
def sgd_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.SGD.html
    # per element: maximize 1; wd g + wd*p 1+s; momentum b = mu*b + (1-dampening)*g 1 + 1+s once the
    # buffer exists (first step: b = g, a copy, 0); nesterov g + mu*b 1+s; p - lr*g 1+s  (s: scale != +-1)
    per_element = _maximize(group) + _weight_decay(group, decoupled=False) + 1 + _scale(group["lr"])
    momentum = group.get("momentum", 0)
    if momentum != 0:
        if state.get("momentum_buffer") is not None:
            per_element += 2 + _scale(1 - group.get("dampening", 0))
        if group.get("nesterov", False):
            per_element += 1 + _scale(momentum)
    return per_element * _elements(param)


def _adam(group: Mapping[str, Any], param: Tensor, decoupled: bool) -> int:
    beta2 = group["betas"][1]
    # maximize 1; wd (AdamW p *= 1 - lr*wd 1, Adam g + wd*p 1+s); m.lerp_(g, 1-b1) 3;
    # v*b2 + (1-b2)*g*g 1 + 2+s; amsgrad max(vmax, v) 1; sqrt(v)/sqrt(bc2) + eps 3;
    # p + (-lr/bc1) * m/denom 3 (bias correction of m folded into the per-tensor step size)
    per_element = (_maximize(group) + _weight_decay(group, decoupled) + 3 + 3 + _scale(1 - float(beta2))
                   + (1 if group.get("amsgrad", False) else 0) + 3 + 3)
    return per_element * _elements(param)


@register_optimizer(torch.optim.Adam)
def adam_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.Adam.html (13 per element by default)
    return _adam(group, param, decoupled=bool(group.get("decoupled_weight_decay", False)))


@register_optimizer(torch.optim.AdamW)
def adamw_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html: Adam + p *= 1 - lr*wd (14 by default)
    return _adam(group, param, decoupled=True)


@register_optimizer(torch.optim.Adagrad)
def adagrad_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.Adagrad.html
    # maximize 1; wd 1+s; sum + g*g 2; sqrt(sum) + eps 2; p + (-clr) * g/std 2+s,
    # clr = lr / (1 + (t-1)*lr_decay) a per-tensor scalar
    clr = float(group["lr"]) / (1 + (_step(state) - 1) * group.get("lr_decay", 0))
    per_element = _maximize(group) + _weight_decay(group, decoupled=False) + 2 + 2 + 2 + _scale(clr)
    return per_element * _elements(param)


@register_optimizer(torch.optim.RMSprop)
def rmsprop_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.RMSprop.html
    # maximize 1; wd 1+s; v*alpha + (1-alpha)*g*g 1 + 2+s;
    # centered: g_avg.lerp_(g, 1-alpha) 3, v - g_avg*g_avg 2, sqrt 1 (else sqrt 1); + eps 1;
    # momentum: b*mu + g/avg 3, p - lr*b 1+s; else p - lr * g/avg 2+s
    per_element = _maximize(group) + _weight_decay(group, decoupled=False) + 3 + _scale(1 - group["alpha"])
    per_element += (3 + 2 + 1 if group.get("centered", False) else 1) + 1
    lr_scale = _scale(group["lr"])
    per_element += 3 + 1 + lr_scale if group.get("momentum", 0) > 0 else 2 + lr_scale
    return per_element * _elements(param)


@register_optimizer(torch.optim.Adamax)
def adamax_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.Adamax.html
    # maximize 1; wd 1+s; m.lerp_ 3; u = max(u*b2, |g| + eps) 4; p + (-lr/bc1) * m/u 3  (10 by default)
    per_element = _maximize(group) + _weight_decay(group, decoupled=False) + 3 + 4 + 3
    return per_element * _elements(param)


@register_optimizer(torch.optim.NAdam)
def nadam_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.NAdam.html
    # maximize 1; wd (decoupled 1, L2 1+s); m.lerp_ 3; v*b2 + (1-b2)*g*g 3+s; sqrt(v/bc2) + eps 3;
    # p + c1 * g/denom 3 and p + c2 * m/denom 3 (c1, c2: per-tensor momentum-cache scalars)  (16 by default)
    decoupled = bool(group.get("decoupled_weight_decay", False))
    per_element = (_maximize(group) + _weight_decay(group, decoupled) + 3 + 3 + _scale(1 - group["betas"][1])
                   + 3 + 3 + 3)
    return per_element * _elements(param)


@register_optimizer(torch.optim.RAdam)
def radam_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.RAdam.html
    # maximize 1; wd (decoupled 1, L2 1+s); m.lerp_ 3; v*b2 + (1-b2)*g*g 3+s; m_hat = m/bc1 1; * lr 1;
    # rectified (rho_t > 5): sqrt(v) + eps 2, l = sqrt(bc2) / that 1, * l 1, * r_t 1; p - update 1
    # (torch evaluates the scalar / tensor division as reciprocal and multiply: 2 ops, counted as 1 divide)
    beta2 = float(group["betas"][1])
    t = _step(state)
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 * t * beta2**t / (1 - beta2**t)  # the docs' SMA length, a per-tensor scalar
    per_element = (_maximize(group) + _weight_decay(group, bool(group.get("decoupled_weight_decay", False)))
                   + 3 + 3 + _scale(1 - beta2) + 1 + 1 + (2 + 1 + 1 + 1 if rho_t > 5 else 0) + 1)
    return per_element * _elements(param)


@register_optimizer(torch.optim.Adadelta)
def adadelta_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.Adadelta.html
    # maximize 1; wd 1+s; v*rho + (1-rho)*g*g 3+s; sqrt(v + eps) 2; sqrt(u + eps) 2; / std, * g 2;
    # u*rho + (1-rho)*dx*dx 3+s; p - lr*dx 1+s  (15 with the defaults rho=0.9, lr=1)
    rho_scale = _scale(1 - group["rho"])
    per_element = (_maximize(group) + _weight_decay(group, decoupled=False) + 3 + rho_scale + 2 + 2 + 2
                   + 3 + rho_scale + 1 + _scale(group["lr"]))
    return per_element * _elements(param)


@register_optimizer(torch.optim.ASGD)
def asgd_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.ASGD.html
    # maximize 1; wd 1+s; p *= 1 - lambd*eta 1; p - eta*g 1+s; averaging ax + mu*(p - ax) 3 while
    # mu != 1 (mu = 1 until step t0: ax = p, a copy, 0). eta and mu come from the state.
    eta = state.get("eta", group["lr"])
    mu = float(state.get("mu", 1.0))
    per_element = _maximize(group) + _weight_decay(group, decoupled=False) + 1 + 1 + _scale(eta)
    per_element += 3 if mu != 1 else 0
    return per_element * _elements(param)


@register_optimizer(torch.optim.Rprop)
def rprop_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.Rprop.html
    # maximize 1; g * prev 1; its sign 1; the three comparisons choosing etaplus/etaminus/1 (> 0, < 0,
    # == 0) 3, their fills none; step *= that 1; clamp(step, min, max) 1; == etaminus (where the
    # gradient is zeroed) 1; p + (-1) * sign(g) * step: sign 1 + 2  (11 per element by default)
    return (_maximize(group) + 1 + 1 + 3 + 1 + 1 + 1 + 3) * _elements(param)


def adafactor_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.Adafactor.html; N elements, for >= 2 dims
    # factored over the last two (R rows, C columns, B = N/(R*C) leading batch)
    n = param.numel()
    flops = _maximize(group) * n + (n if group.get("weight_decay", 0) != 0 else 0)  # -g; p *= 1 - lr*wd
    # RMS(p) 2-norm 2N+1; clamp(v, eps1^2), rsqrt, * g 3N; RMS(U) 2-norm 2N+1; p - alpha*U 2N
    flops += (2 * n + 1) + 3 * n + (2 * n + 1) + 2 * n
    if param.dim() > 1:
        c = param.shape[-1]
        r = param.shape[-2]
        b = n // (r * c) if n else 0
        # row mean of g^2: 2-norm over C 2N+BR, square BR, / C BR; R.lerp_ 3BR (columns likewise);
        # outer product R @ C 2N (2*MACs, K=1); mean of R over rows BR+B; clamp B; V / that N
        flops += (2 * n + 6 * b * r) + (2 * n + 6 * b * c) + 2 * n + (b * r + b) + b + n
    else:
        # g*g N; v.lerp_ 3N
        flops += 4 * n
    return flops


if hasattr(torch.optim, "Adafactor"):  # torch >= 2.5
    register_optimizer(torch.optim.Adafactor)(adafactor_flops)


@register_optimizer(torch.optim.SparseAdam)
def sparse_adam_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> int:
    # https://pytorch.org/docs/stable/generated/torch.optim.SparseAdam.html; ``param`` stands for the
    # values of the coalesced sparse gradient, the rows the update touches (optimizer_step_counts adds
    # the coalescing's sums).
    # Per value: maximize 1; m += (g - m)*(1-b1) 3; v += (g*g - v)*(1-b2) 4; m's and v's new values
    # again (one add each, the dense re-addition torch's loop does) 2; sqrt(v) + eps 2;
    # p + (-step_size) * m/denom 3  (14 by default)
    return (_maximize(group) + 3 + 4 + 2 + 2 + 3) * _elements(param)


def _muon_matrix(group: Mapping[str, Any], rows: int, cols: int) -> tuple[int, int]:
    """(FLOPs, MACs) of Muon's Newton-Schulz orthogonalisation of a ``rows x cols`` update
    (torch.optim._muon._zeropower_via_newtonschulz): it works on the wide orientation, ``m x n``
    with ``m = min(rows, cols)``; per step ``A = X @ X.T`` (m*m*n MACs), ``B = b*A + c*(A @ A)``
    (m^3 MACs, addmm's scaled add per element: 1 + [b != 1] + [c != 1]) and ``X = a*X + B @ X``
    (m*m*n MACs, scaled add 1 + [a != 1])."""
    m, n = min(rows, cols), max(rows, cols)
    a, b, c = (float(v) for v in group.get("ns_coefficients", (3.4445, -4.7750, 2.0315)))
    steps = int(group.get("ns_steps", 5))
    macs = steps * (m * m * n + m * m * m + m * m * n)
    # addmm's ``beta*input + alpha*product``: no add when beta is 0 (just the scale, when alpha != 1)
    gram_add = (1 + (b != 1) + (c != 1)) if b != 0 else int(c != 1)
    update_add = (1 + (a != 1)) if a != 0 else 0
    return 2 * macs + steps * (m * m * gram_add + m * n * update_add), macs


def _muon_lr(group: Mapping[str, Any], rows: int, cols: int) -> float:
    """Muon's learning rate adjusted to the shape (torch.optim._muon._adjust_lr)."""
    lr, how = float(group["lr"]), group.get("adjust_lr_fn")
    if how is None or how == "original":
        return lr * math.sqrt(max(1.0, rows / cols))
    if how == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr


if hasattr(torch.optim, "Muon"):  # torch >= 2.9

    @register_optimizer(torch.optim.Muon)
    def muon_flops(group: dict[str, Any], param: Tensor, state: Mapping[str, Any]) -> tuple[int, int]:
        # https://pytorch.org/docs/stable/generated/torch.optim.Muon.html (Jordan 2024,
        # kellerjordan.github.io/posts/muon), per element of a 2-D parameter: b.lerp_(g, 1-mu) 3;
        # nesterov g.lerp(b, mu) 3; the update's 2-norm 2N+1 and its division by it N (the clamp of the
        # norm is scalar work, left out); Newton-Schulz (_muon_matrix); p *= 1 - lr*wd 1 unless lr*wd
        # is 0; p + (-adjusted lr) * O 1+s. MACs: the Newton-Schulz matrix products only
        n = param.numel()
        rows, cols = (param.shape[0], param.shape[1]) if param.dim() == 2 else (n, 1)
        flops, macs = _muon_matrix(group, rows, cols)
        lr, wd = float(group["lr"]), float(group.get("weight_decay", 0))
        flops += 3 * n + (3 * n if group.get("nesterov", True) else 0) + (2 * n + 1) + n
        flops += (n if lr * wd != 0 else 0) + (1 + _scale(_muon_lr(group, rows, cols))) * n
        return flops, macs
