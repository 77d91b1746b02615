"""FLOPs formulas and the tables that map graph targets to them.

Counting convention (stated once, here)
---------------------------------------
Every formula returns ``(flops, macs)`` for one graph node:

* ``macs`` counts the multiply-accumulates of *dot products*: linear layers, the matmul family
  (mm, bmm, matmul, addmm, baddbmm, einsum), convolutions (transposed and grouped too) and the two
  matmuls of attention (``Q @ K^T`` and ``P @ V``). Nothing else has MACs.
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

Tables
------
``MODULE_FLOPs_MAPPING`` (module class name -> ``f(module, out, *args, **kwargs)``),
``FUNCTION_FLOPs_MAPPING`` (function ``__name__`` -> ``f(out, *args, **kwargs)``),
``METHOD_FLOPs_MAPPING`` (Tensor method name -> ``f(out, self, *args, **kwargs)``).
``out`` is the node's real output and ``args``/``kwargs`` are the node's real inputs; formulas
read only shapes, dtypes and attributes (so they work on meta tensors) and never time or print.
A formula may return a plain ``int``: it is taken as ``flops`` with ``macs = 0``.

Each table entry is filled by a register decorator next to the formula; registering a key twice
raises unless ``override=True``. Assigning into the dicts directly (the historical API) still works.
Formulas that are 0 *by definition* (views, copies, shape queries) are registered with
:func:`zero_flops`, so a node can be told apart as "zero" rather than "counted".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from typing import Any, TypeVar

__all__ = [
    "ATEN_FLOPs_MAPPING",
    "FUNCTION_FLOPs_MAPPING",
    "FlopCount",
    "Formula",
    "METHOD_FLOPs_MAPPING",
    "MODULE_FLOPs_MAPPING",
    "register_aten",
    "register_function",
    "register_method",
    "register_module",
    "zero_flops",
]

#: What a formula returns: ``(flops, macs)``, or a bare int meaning ``(flops, 0)``.
FlopCount = int | tuple[int, int]
Formula = Callable[..., FlopCount]
F = TypeVar("F", bound=Callable[..., Any])

MODULE_FLOPs_MAPPING: dict[str, Formula] = {}
FUNCTION_FLOPs_MAPPING: dict[str, Formula] = {}
METHOD_FLOPs_MAPPING: dict[str, Formula] = {}
#: aten op overload packets (``torch.ops.aten.mm``) -> ``f(out, *args, **kwargs)``.
ATEN_FLOPs_MAPPING: dict[Any, Formula] = {}


def zero_flops(*args: Any, **kwargs: Any) -> tuple[int, int]:
    """The formula of ops that do no floating point work by definition (views, copies, shapes)."""
    return (0, 0)


def _key(name: Any) -> str:
    if isinstance(name, str):
        return name
    key = getattr(name, "__name__", None)
    if not isinstance(key, str):
        raise TypeError(f"cannot derive a table key from {name!r}: pass a str or a named callable")
    return key


def _register(table: MutableMapping[Any, Formula], keys: Iterable[Any], fn: Formula,
              override: bool, table_name: str) -> None:
    for key in keys:
        if key in table and not override and table[key] is not fn:
            raise KeyError(
                f"{key!r} is already registered in {table_name} (by "
                f"{getattr(table[key], '__qualname__', table[key])}); pass override=True to replace it"
            )
        table[key] = fn


def _decorator(table: MutableMapping[Any, Formula], table_name: str, keys: tuple[Any, ...],
               override: bool, key_fn: Callable[[Any], Any]) -> Callable[[F], F]:
    if not keys:
        raise ValueError(f"register into {table_name} needs at least one key")
    resolved = [key_fn(k) for k in keys]

    def wrap(fn: F) -> F:
        _register(table, resolved, fn, override, table_name)
        return fn

    return wrap


def register_module(*names: str | type, override: bool = False) -> Callable[[F], F]:
    """Register ``f(module, out, *args, **kwargs)`` for module classes (or their class names).

    Lookup falls back along the module's MRO, so registering ``nn.Linear`` also serves its
    subclasses unless they have an entry of their own.
    """
    return _decorator(MODULE_FLOPs_MAPPING, "MODULE_FLOPs_MAPPING", names, override, _key)


def register_function(*names: str | Callable[..., Any], override: bool = False) -> Callable[[F], F]:
    """Register ``f(out, *args, **kwargs)`` for functions, keyed by ``__name__``."""
    return _decorator(FUNCTION_FLOPs_MAPPING, "FUNCTION_FLOPs_MAPPING", names, override, _key)


def register_method(*names: str, override: bool = False) -> Callable[[F], F]:
    """Register ``f(out, self, *args, **kwargs)`` for Tensor methods, keyed by method name."""
    return _decorator(METHOD_FLOPs_MAPPING, "METHOD_FLOPs_MAPPING", names, override, _key)


def register_aten(*ops: Any, override: bool = False) -> Callable[[F], F]:
    """Register ``f(out, *args, **kwargs)`` for aten ops, keyed by overload packet."""
    return _decorator(ATEN_FLOPs_MAPPING, "ATEN_FLOPs_MAPPING", ops, override, _aten_key)


def _aten_key(op: Any) -> Any:
    # An OpOverload (aten.mm.default) is stored under its packet (aten.mm).
    return getattr(op, "overloadpacket", op)


# The families register themselves on import. Order does not matter among them (keys never
# overlap); the aten table comes after them because it reuses their function formulas.
from torch_flops.formulas import (  # noqa: F401
    activation,
    attention,
    conv,
    elementwise,
    embedding,
    matmul,
    norm,
    pooling,
    reduction,
    resample,
    zero,
)

# isort: split
from torch_flops.formulas import aten  # noqa: F401

#: the package's own module formulas, to tell entries users added or replaced from the defaults
DEFAULT_MODULE_FORMULAS: dict[str, Formula] = dict(MODULE_FLOPs_MAPPING)
