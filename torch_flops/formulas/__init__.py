"""FLOPs formulas and the table that maps graph targets to them.

Counting convention (stated once, here)
---------------------------------------
Every formula returns ``(flops, macs)`` for one graph node:

* ``macs`` counts the multiply-accumulates of *dot products*: linear layers, the matmul family
  (mm, bmm, matmul, addmm, baddbmm, einsum), convolutions (transposed and grouped too), the two
  matmuls of attention (``Q @ K^T`` and ``P @ V``) and the fixed matrix products some ops run inside
  themselves (cdist's matmul path, ``affine_grid``, ``pinv``, ``matrix_exp``). Nothing else has
  MACs: the factorizations of ``torch.linalg`` are counted in FLOPs (see ``linalg.py``).
* ``flops = 2 * macs + every other floating point operation of the node``: bias adds,
  elementwise arithmetic, norms, softmax, pooling, reductions and activations. Each formula states
  its per-element cost in a comment where it is defined; a transcendental function (exp, log,
  tanh, erf, sqrt, ...) counts as one FLOP, as an add or a multiply does.

Hence ``2 * total_macs`` is the number of FLOPs that ``torch.utils.flop_counter.FlopCounterMode``
reports for the same model on ``meta`` tensors, which counts only mm/bmm/addmm/baddbmm/
convolution/attention and counts each MAC as two FLOPs (bias adds excluded). Two documented
differences follow from FlopCounterMode's own table: it counts 0 for ``aten.mv``/``aten.dot``
(matrix-vector and vector-vector products) and for ``bilinear``, which we do count as MACs.
Causal or masked attention is counted as the full ``L x S`` score matrix, as FlopCounterMode does.

Elementwise FLOPs are counted only for floating point (or complex) data: integer index
arithmetic and boolean mask logic are 0 FLOPs.

Bytes moved (the roofline's memory traffic)
-------------------------------------------
Every record also carries ``bytes_read`` and ``bytes_written``, counted by the interpreter from
the real (or meta) tensors, per family (``plan.Traffic`` has the rules):

* linear, matmul, conv, norm modules: read the input, the weight, the bias (and a norm's running
  statistics), write the output; ``F.linear`` and aten ops read the same tensors as operands.
* attention (``scaled_dot_product_attention``): reads Q, K, V (and the mask), writes the output;
  the ``L x S`` score matrix of a fused kernel never reaches memory and is not counted (an
  unfused ``matmul``/``softmax``/``matmul`` counts each of its tensors).
* elementwise, activations, losses, reductions, pooling, resampling: read every tensor operand
  once (a Python number: 0 bytes), write the output.
* in place (``add_``, ``relu_``): read the operands, write the updated tensor; overwrites
  (``copy_``, ``fill_``, ``zero_``, ``x[i] = v``) read only the other operands.
* views, shape ops and aliases (``view``, ``t``, ``chunk``, a ``contiguous`` that is a no-op)
  move 0; copies (``contiguous`` of a strided tensor, ``clone``, ``cat``, casts) read and write.
* gathers (``embedding``, ``index_select``, ``gather``, advanced indexing): read the rows they
  gather (their output's bytes) and their indices, not the whole table.
* creation (``zeros``, ``randn_like``, ``new_ones``): write their output, read nothing.

Each byte is counted once per node, as if every operand came from memory and no cache helped.
``dtype`` is the compute dtype: the dtype of the floating point operands (a cast: its source).

One table, one calling convention
---------------------------------
:data:`FORMULAS` maps each target itself (a module class, a callable, a ``torch.Tensor`` method,
an aten overload packet; see :mod:`torch_flops.formulas.table`) to a formula called as::

    formula(module, out, *args, **kwargs) -> (flops, macs) | flops

``module`` is the called module for ``call_module`` nodes, else ``None``; ``out`` is the node's
real output; ``args``/``kwargs`` its real inputs (a method's ``self`` first). So one formula
serves ``nn.ReLU()(x)``, ``F.relu(x)``, ``x.relu()`` and ``aten.relu(x)``. Formulas read only
shapes, dtypes and attributes (they work on meta tensors), never time or print. A formula may
return a plain ``int``: it is taken as ``flops`` with ``macs = 0``; formulas of dot products
return a :class:`Count`, which also says how many dot-product outputs the MACs go into and how
many of them a matrix-multiply kernel does (see :mod:`torch_flops.conventions`). :func:`register` fills the
table next to each formula; registering a target twice raises unless ``override=True``. Ops that
are 0 *by definition* (views, copies, shape queries) are registered with :func:`zero_flops`, so a
node can be told apart as "zero" rather than "counted".

The name-keyed dicts users already extend are views onto :data:`FORMULAS`:
``MODULE_FLOPs_MAPPING`` (class name -> ``f(module, out, *args, **kwargs)``),
``FUNCTION_FLOPs_MAPPING`` (function ``__name__`` -> ``f(out, *args, **kwargs)``),
``METHOD_FLOPs_MAPPING`` (Tensor method name -> ``f(self, out, *args, **kwargs)``, the original
torch_flops' order) and
``ATEN_FLOPs_MAPPING`` (aten packet or ``"ns.name"`` -> ``f(out, *args, **kwargs)``), with the
``register_module/function/method/aten`` decorators. Assigning a name gives every target of that
name the formula. A counter copies the table when it is created; later edits do not reach it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from torch_flops.formulas.evaluate import evaluate
from torch_flops.formulas.table import (
    Composite,
    Count,
    FlopCount,
    Formula,
    FormulaTable,
    Kind,
    Name,
    NameView,
    from_legacy,
    key_kind,
    normalize_key,
    zero_flops,
)

__all__ = [
    "FORMULAS",
    "ATEN_FLOPs_MAPPING",
    "Composite",
    "Count",
    "FUNCTION_FLOPs_MAPPING",
    "FlopCount",
    "Formula",
    "FormulaTable",
    "METHOD_FLOPs_MAPPING",
    "MODULE_FLOPs_MAPPING",
    "Name",
    "aten_ops",
    "evaluate",
    "functions",
    "methods",
    "modules",
    "register",
    "register_aten",
    "register_function",
    "register_method",
    "register_module",
    "zero_flops",
]

FnT = TypeVar("FnT", bound=Callable[..., Any])
RegT = TypeVar("RegT", bound=Callable[..., Any] | Composite)

#: The package's formula table; each counter works on its own copy.
FORMULAS = FormulaTable()

MODULE_FLOPs_MAPPING = NameView(FORMULAS, "module")
FUNCTION_FLOPs_MAPPING = NameView(FORMULAS, "function")
METHOD_FLOPs_MAPPING = NameView(FORMULAS, "method")
ATEN_FLOPs_MAPPING = NameView(FORMULAS, "aten")


def register(*targets: Any, override: bool = False) -> Callable[[RegT], RegT]:
    """Register ``f(module, out, *args, **kwargs)`` for targets: module classes, callables,
    ``torch.Tensor`` methods, aten ops, :class:`Name` s (see :func:`functions`, :func:`methods`,
    :func:`aten_ops`). A :class:`Composite` is bound to the table it is looked up in."""
    if not targets:
        raise ValueError("register needs at least one target")
    for target in targets:
        if isinstance(target, str):
            raise TypeError(f"register takes targets, not names ({target!r}): use functions('{target}'), "
                            f"methods('{target}'), Name(kind, '{target}') or a register_<kind> decorator")

    def wrap(fn: RegT) -> RegT:
        if not (callable(fn) or isinstance(fn, Composite)):
            raise TypeError(f"a formula must be callable, got {type(fn).__name__} {fn!r}")
        FORMULAS.add(targets, fn, override)
        return fn

    return wrap


# ---------------------------------------------------------------------------- finding targets by name
_PREFIXED = (("special_", torch.special), ("linalg_", torch.linalg), ("fft_", torch.fft))


def functions(*names: str) -> tuple[Any, ...]:
    """The callables called ``name`` in ``torch``, ``torch.nn.functional`` and ``operator``
    (``special_x``/``linalg_x``/``fft_x``: ``torch.special.x`` ...); a :class:`Name` for a name
    none of them has, so that any function of that ``__name__`` still matches."""
    found: dict[int, Any] = {}
    for name in names:
        hits = [getattr(ns, name, None) for ns in (torch, F, operator)]
        hits += [getattr(ns, name[len(prefix):], None) for prefix, ns in _PREFIXED if name.startswith(prefix)]
        hits = [h for h in hits if callable(h) and not isinstance(h, type)]
        for hit in hits or [Name("function", name)]:
            found.setdefault(id(hit), hit)
    return tuple(found.values())


def modules(*names: str) -> tuple[Any, ...]:
    """``torch.nn.<name>`` for each name this torch has (a :class:`Name` for the others)."""
    return tuple(getattr(nn, name, None) or Name("module", name) for name in names)


def methods(*names: str) -> tuple[Any, ...]:
    """``torch.Tensor.<name>`` for each name (a :class:`Name` where Tensor has no such method)."""
    found = ((name, getattr(torch.Tensor, name, None)) for name in names)
    return tuple(m if callable(m) else Name("method", name) for name, m in found)


def aten_ops(*names: str) -> tuple[Any, ...]:
    """The aten overload packets of these names, and of their in-place ``name_`` forms, that this
    torch has (an in-place op does the arithmetic of its functional form)."""
    ops = (getattr(torch.ops.aten, n, None) for name in names for n in (name, f"{name}_"))
    return tuple(dict.fromkeys(op for op in ops if op is not None))


# ---------------------------------------------------------------------------- the historical decorators
_VIEW_NAMES = {"module": "MODULE_FLOPs_MAPPING", "function": "FUNCTION_FLOPs_MAPPING",
               "method": "METHOD_FLOPs_MAPPING", "aten": "ATEN_FLOPs_MAPPING"}


def _register_named(kind: Kind, keys: tuple[Any, ...], override: bool) -> Callable[[FnT], FnT]:
    """The decorator of ``register_<kind>``; the keys are checked before it is applied."""
    where = _VIEW_NAMES[kind]
    if not keys:
        raise ValueError(f"register_{kind} needs at least one key")
    for key in keys:
        if isinstance(key, str):
            continue
        if kind == "method" or (kind == "function" and isinstance(key, type)):
            raise TypeError(f"cannot use {key!r} as a {where} table key: give a name (str)"
                            f"{'' if kind == 'method' else ' or a function'}")
        key_kind(normalize_key(key))  # TypeError naming a key that is no target

    def wrap(fn: FnT) -> FnT:
        formula = fn if kind == "module" else from_legacy(fn, kind == "method")
        for key in keys:
            if isinstance(key, str):
                FORMULAS.set_named(kind, key, formula, override, where)
            else:
                FORMULAS.add((key,), formula, override, where)
        return fn

    return wrap


def register_module(*names: str | type, override: bool = False) -> Callable[[FnT], FnT]:
    """Register ``f(module, out, *args, **kwargs)`` for module classes (or their class names).

    Lookup falls back along the module's MRO, so registering ``nn.Linear`` also serves its
    subclasses unless they have an entry of their own. A class registered by the user is kept as
    one node by the fx tracer.
    """
    return _register_named("module", names, override)


def register_function(*names: str | Callable[..., Any], override: bool = False) -> Callable[[FnT], FnT]:
    """Register ``f(out, *args, **kwargs)`` for functions (by object, or by ``__name__``: every
    function of that name)."""
    return _register_named("function", names, override)


def register_method(*names: str, override: bool = False) -> Callable[[FnT], FnT]:
    """Register ``f(self, out, *args, **kwargs)`` for Tensor methods, by method name (the order
    the original torch_flops called ``METHOD_FLOPs_MAPPING``'s formulas in: the tensor the method
    is called on, the output, then the method's own arguments)."""
    return _register_named("method", names, override)


def register_aten(*ops: Any, override: bool = False) -> Callable[[FnT], FnT]:
    """Register ``f(out, *args, **kwargs)`` for aten ops (packets, overloads, or ``"ns.name"``)."""
    return _register_named("aten", ops, override)


# The families register themselves (with every front door of each op: module, function, method,
# aten) on import. Order matters only among targets sharing a name: the first registered is what a
# name-keyed view returns (F.batch_norm before torch.batch_norm).
from torch_flops.formulas import (  # noqa: F401
    activation,
    attention,
    backward,
    conv,
    elementwise,
    embedding,
    fft,
    foreach,
    linalg,
    loss,
    matmul,
    norm,
    pooling,
    reduction,
    resample,
    rnn,
    search,
    zero,
)

FORMULAS.mark_builtin()
