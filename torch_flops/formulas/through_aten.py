"""A call without a formula of its own, counted through the aten ops it runs.

The eager front end never needs this: a torch function without a formula is no node there, its
aten ops are (each counted by its aten formula). A captured graph (``tracer="fx"``/``"export"``)
keeps such a call as one node (``torch.fft.rfft``, ``torch.cdist``, ``F.fold``, an
``nn.CosineSimilarity`` kept as a leaf, export's ``aten.numpy_T``): :func:`through_aten_ops` gives it
the count of the aten ops the same call runs on meta copies of its arguments (shapes, strides and
dtypes only: nothing of the real tensors is read or written, no random number is drawn), each
counted by its aten formula in the same table. So the captured graph counts what eager counts
for the same call. A call whose aten ops include one without a formula, or that cannot run on
meta (it reads tensor values), raises: its node stays unsupported, the message naming why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode

from torch_flops.formulas.evaluate import evaluate
from torch_flops.formulas.table import Count, Formula, FormulaTable, zero_flops

__all__ = ["NoAtenCount", "through_aten_ops"]

#: aten ops that only ask for metadata (FlopCounterMode passes them by too)
_METADATA = frozenset({"sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel",
                       "dim", "is_contiguous", "sym_is_contiguous", "is_strides_like_format",
                       "is_non_overlapping_and_dense", "storage_offset", "layout", "device"})


#: Python's own containers: a method of one (``dict.get``, ``list.index``) computes nothing on tensors
_CONTAINERS = (dict, list, tuple, set, frozenset, str)


def _container_method(obj: Any, name: str) -> bool:
    """Whether ``obj.<name>`` is a method of Python's own containers (also on a subclass, an
    ``OrderedDict``, a named tuple, that does not override it)."""
    base = next((b for b in _CONTAINERS if isinstance(obj, b)), None)
    name = name.rpartition(".")[2]
    return base is not None and getattr(base, name, None) is not None \
        and getattr(type(obj), name, None) is getattr(base, name, None)


def through_aten_ops(table: FormulaTable, call: Callable[..., Any], key: str, ignored: Iterable[str] = (),
                     real: int | None = None, method: bool = False) -> Formula:
    """A formula ``f(module, out, *args, **kwargs)`` counting ``call(module, *args, **kwargs)`` by
    its aten ops on meta (see the module docstring). ``call`` runs the node's own target; ``key``:
    what the table was searched for (for messages); ``ignored``: ``ignore_ops`` (an aten op named
    there counts 0, as in the eager run); ``real``: the position of an argument passed as it is
    (``torch.cond``'s predicate, read to pick the branch that ran); ``method``: ``call`` calls a
    method of its first argument, which must then be a tensor.

    Nothing real is touched: a call with no tensor among its arguments (``torch.randperm(n)``,
    which would draw from the real generator) or a method of an object that is not a tensor (a
    cache's ``update``) is not run, and the CPU random state is put back after the call."""
    ignored = frozenset(ignored)

    def counted_through_aten_ops(module: Any, out: Any, *args: Any, **kwargs: Any) -> Count:
        if method and args and _container_method(args[0], key):  # (kwargs.get(...) in a traced forward: no tensor work)
            return Count(0, 0, 0, 0)
        tensors = [t for t in _pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if not tensors or (method and not (args and isinstance(args[0], torch.Tensor))):
            raise NoAtenCount(f"no formula for {key!r}, and it does not run on tensors alone")
        meta_args, meta_kwargs = _pytree.tree_map_only(torch.Tensor, _meta_like, (args, kwargs))
        if real is not None:
            meta_args = (*meta_args[:real], args[real], *meta_args[real + 1:])
        counter = _AtenCounter(table, ignored)
        with torch.random.fork_rng(devices=[]), torch.no_grad(), counter:
            call(module, *meta_args, **meta_kwargs)
        if counter.missing:
            raise NoAtenCount(f"no formula for {key!r}, nor for {', '.join(sorted(counter.missing))} it runs")
        return counter.count()

    counted_through_aten_ops.__qualname__ = f"through the aten ops of {key!r}"
    return counted_through_aten_ops


class NoAtenCount(NotImplementedError):
    """A call :func:`through_aten_ops` does not count (its message says why)."""


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised meta tensor of ``t``'s sizes, strides and dtype."""
    if t.layout is not torch.strided:
        raise NotImplementedError(f"a {t.layout} tensor argument")
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


class _AtenCounter(TorchDispatchMode):
    """Sums the aten formulas of the ops run under it (their four counts: see :class:`Count`)."""

    def __init__(self, table: FormulaTable, ignored: frozenset[str]) -> None:
        super().__init__()
        self._table = table
        self._ignored = ignored
        self.flops = self.macs = 0
        self.dots: int | None = 0
        self.mm = 0
        self.missing: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._opname if hasattr(func, "_opname") else str(func)
        if name in _METADATA or name in self._ignored or f"aten.{name}" in self._ignored:
            return out
        formula = self._table.resolve_aten(func)
        if formula is None:
            self.missing.add(f"aten.{name}")
        elif formula is not zero_flops:
            flops, macs, dots, mm = evaluate(formula, None, out, args, kwargs)
            self.flops += flops
            self.macs += macs
            if macs:  # the outputs its MACs go into: unknown for the sum as soon as for one op
                self.dots = None if dots is None or self.dots is None else self.dots + dots
            self.mm += macs if mm is None else mm  # (None: all of its MACs are a matmul kernel's)
        return out

    def count(self) -> Count:
        return Count(self.flops, self.macs, self.dots, self.mm)
