"""Eager semantics around the runs of one ``propagate``.

One ``propagate`` leaves the model, its buffers, the caller's tensors and the random number
generators exactly as one call of the model would. Its extra runs (``warmup``, ``repeat``) must not
add to that: :class:`ExtraRuns` gives each of them copies of the inputs and, after it, puts back the
buffers (running statistics, counters, caches updated in forward) and the RNG state it found, so
only the one counting run leaves its effects. A forward that updates its own *parameters* in
place cannot be undone that way (copying every parameter would double the model's memory): extra
runs of such a model raise, naming the parameter. :func:`training_flags_restored` gives the
modules' ``training`` flags back, also when a run fails.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize as _parametrize
from torch.utils import _pytree

from torch_flops.backward import autograd_nodes
from torch_flops.errors import caller_stacklevel
from torch_flops.measure import functions_off, storage_key
from torch_flops.modelstate import ModelSnapshot, StateKind

__all__ = ["ExtraRuns", "LeafGrads", "copy_inputs", "training_flags_restored"]


@contextlib.contextmanager
def training_flags_restored(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Restore every module's ``training`` flag on exit (also when the body raises): ``modules``,
    the model's modules as its :class:`~torch_flops.capture.ModelIndex` lists them."""
    flags = [(m, m.training) for m in modules]
    try:
        yield
    finally:
        for module, flag in flags:
            if module.training is not flag:
                module.training = flag


def copy_inputs(value: Any) -> Any:
    """``value`` with every tensor replaced by a copy (same dtype, device, ``requires_grad``, an
    inference tensor or not), so that an extra run's in-place updates of its inputs stay its own. A
    tensor given twice (``model(x, x)``, ``model(ids, labels=ids)``: copy ``(args, kwargs)`` in one
    call) is one copy given twice, as in the real call (an in-place update reaches both; Dynamo guards
    on it: distinct copies compile another graph, and the real call then recompiles)."""
    memo: dict[int, torch.Tensor] = {}

    def aliased(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        found = memo.get(id(leaf))
        if found is None:
            found = memo[id(leaf)] = copy(leaf)
        return found

    def copy(leaf: torch.Tensor) -> torch.Tensor:
        if type(leaf) in (torch.Tensor, nn.Parameter):  # the profiler's own copy: no mode of the user's sees it
            with torch._C.DisableTorchFunction():
                clone = _copy(leaf)
        else:
            try:  # a subclass copies itself (its own clone keeps what it carries: a wrapper's data, a tag)
                clone = _copy(leaf)
            except Exception:  # noqa: BLE001  (one refusing clone: copied as a tensor, below made one of its class)
                with torch._C.DisableTorchFunction():
                    clone = _copy(leaf)
            if type(clone) is not type(leaf):  # (a subclass whose clone is a plain tensor)
                clone = clone.as_subclass(type(leaf))
        for name, attribute in getattr(leaf, "__dict__", {}).items():  # what the caller set on it (x.scale = 2)
            if name not in clone.__dict__:
                clone.__dict__[name] = attribute
        return clone

    return _pytree.tree_map(aliased, value)


def _copy(leaf: torch.Tensor) -> torch.Tensor:
    """``leaf.clone()`` (the one call a subclass sees: its flags are read with torch functions off)."""
    with torch._C.DisableTorchFunction():
        inference, grad = leaf.is_inference(), leaf.requires_grad
    # an inference tensor iff the original is one (under inference_mode a plain clone is one: a
    # compiled model guards on the difference, and the real call then compiled another graph)
    with torch.inference_mode(inference), torch.no_grad():  # (inference_mode(False) turns grad mode back on)
        clone = leaf.clone()
    # a tensor that needs a gradient stays one that does (a leaf now: the extra run's backward
    # ends at it instead of going on into the caller's graph)
    if grad:
        with torch._C.DisableTorchFunction():
            clone.requires_grad_(True)
    return clone


class LeafGrads:
    """The ``.grad`` of every leaf a loss's backward will accumulate into (found through its
    autograd graph: the model's parameters and any tensor outside it), saved now and put back by
    :meth:`restore`, so that an extra run's backward leaves no gradient behind."""

    @functions_off
    def __init__(self, loss: torch.Tensor) -> None:
        leaves: dict[int, torch.Tensor] = {}
        for node in autograd_nodes([loss.grad_fn]):
            variable = getattr(node, "variable", None)  # AccumulateGrad: the leaf it feeds
            if isinstance(variable, torch.Tensor):
                leaves.setdefault(id(variable), variable)
        with torch.no_grad():
            self._grads = [(t, t.grad, None if t.grad is None or t.grad.is_meta else t.grad.clone())
                           for t in leaves.values()]

    @functions_off
    def restore(self) -> None:
        with torch.no_grad():
            for leaf, grad, values in self._grads:
                if grad is not None and values is not None:
                    grad.copy_(values)
                leaf.grad = grad


#: what an extra run's :meth:`ExtraRuns.undo` puts back by object: parameters, buffers and submodules
#: registered, replaced or deleted, plain attributes rebound (``self.calls += 1``, ``self.h =
#: torch.cat(...)``), training flags switched, plain containers changed in place (``self.seen.append(x)``),
#: ``requires_grad`` flipped and ``.data`` rebound (the data kept as an alias: no copy)
_UNDONE = (StateKind.PARAMETER, StateKind.BUFFER, StateKind.SUBMODULE, StateKind.ATTRIBUTE, StateKind.TRAINING,
           StateKind.CONTAINER, StateKind.REQUIRES_GRAD, StateKind.DATA)


class ExtraRuns:
    """What an extra run may change, saved before it and put back after it (:meth:`undo`)."""

    @functions_off  # (the profiler's own reads and writes: no mode or subclass of the user's sees them)
    def __init__(self, tensors: Iterable[tuple[str, torch.Tensor, bool]], *graphs: nn.Module,
                 modules: Iterable[nn.Module] = ()) -> None:
        """``tensors``: the model's ``(name, tensor, is a parameter)`` (``ModelIndex.tensors``);
        ``graphs``: graph modules that run it and may hold tensors of their own (an export graph
        holds copies); ``modules``: the model's modules, whose attributes an extra run may rebind
        (``self.calls += 1``, a buffer replaced by ``self.h = torch.cat(...)``): put back too."""
        modules = list(modules)
        self._state = ModelSnapshot((("", m) for m in [*modules, *(m for graph in graphs for m in graph.modules())]),
                                    _UNDONE, keep_data=True)
        buffers: dict[int, tuple[str, torch.Tensor]] = {}
        params: dict[int, tuple[str, torch.Tensor]] = {}
        for name, t, is_param in tensors:
            (params if is_param else buffers).setdefault(id(t), (name, t))
        for graph in graphs:
            for name, b in graph.named_buffers():
                buffers.setdefault(id(b), (name, b))
            for name, p in graph.named_parameters():
                params.setdefault(id(p), (name, p))
        # and the plain tensor attributes of the modules (``self.total = torch.zeros(4)`` updated in place
        # by the forward, ``self.total.add_(x)``): their values too
        # (not one sharing a parameter's storage, a view of a weight: the forward cannot change it
        # without changing the parameter, which is refused below, and writing it back would count as that)
        weights = {storage_key(p)[0] for _, p in params.values() if p.layout == torch.strided}
        for module in modules:
            for attr, value in vars(module).items():
                if (isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter)
                        and value.layout == torch.strided and storage_key(value)[0] not in weights):
                    buffers.setdefault(id(value), (attr, value))
        with torch.no_grad():
            #: (name, tensor, its values, its version): written back only when the run changed it (an
            #: unchanged one keeps its version, so a graph of the caller's that saved it stays valid; an
            #: expanded view or an inference tensor could not be written anyway)
            self._buffers = [(name, b, b.clone(), _version(b)) for name, b in buffers.values()
                             if b.device.type != "meta"]
        self._versions = [(name, p, p._version) for name, p in params.values()]
        #: each parameter's sum, per device: a write through ``.data`` (``w.data.clamp_(...)``) moves no version
        self._sums = _Sums([p for _, p in params.values()])
        #: each parameter's ``.grad`` (the object, and a copy of its values): an extra backward
        #: accumulates into it or sets it
        with torch.no_grad():
            self._grads = [(p, p.grad, None if p.grad is None or p.grad.is_meta else p.grad.clone())
                           for _, p in params.values()]
        #: torch.nn.utils.parametrize's cache (inside ``parametrize.cached()``): an extra run fills it, and
        #: the real call would read the extra run's parametrized tensors instead of computing its own
        self._parametrized = dict(_parametrize._cache)
        self._cpu_rng = torch.get_rng_state()
        self._py_rng = random.getstate()  # (a forward may draw from Python's and numpy's global generators)
        self._np_rng = np.random.get_state()
        self._cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() \
            else None

    @functions_off
    def undo(self) -> None:
        """Put the buffers, the gradients and the RNG state back; ``ValueError`` when the run
        changed a parameter."""
        self._state.restore()  # the objects first (a rebound parameter or .data: below), then values
        with torch.no_grad():
            for _, buffer, saved, version in self._buffers:
                # changed: its version moved, or its values did (BatchNorm's kernel updates its running
                # statistics in place without moving their version); an inference tensor has no version
                if (version is None or buffer._version == version) and _same(buffer, saved):
                    continue
                with torch.inference_mode(buffer.is_inference()):
                    buffer.copy_(saved)
                if version is not None:  # and its version as before the extra run: a graph of the caller's
                    # that saved it stays as valid as after one plain call
                    torch._C._autograd._unsafe_set_version_counter((buffer,), (version,))
            for param, grad, values in self._grads:
                if grad is not None and values is not None:
                    grad.copy_(values)  # the same object, as an eager step would have kept
                param.grad = grad
        cache = _parametrize._cache
        if len(cache) != len(self._parametrized) or any(cache.get(k, self) is not v for k, v in self._parametrized.items()):
            cache.clear()
            cache.update(self._parametrized)
        torch.set_rng_state(self._cpu_rng)
        random.setstate(self._py_rng)
        np.random.set_state(self._np_rng)
        if self._cuda_rng is not None:
            torch.cuda.set_rng_state_all(self._cuda_rng)
        changed = next((name for name, param, version in self._versions if param._version != version), None)
        if changed is not None:
            raise ValueError(
                f"the model updates its parameter {changed!r} in forward, which an extra run cannot undo: "
                f"profile it with warmup=0 and repeat=1 (one call, as eager){_ONE_CALL}")
        if (position := self._sums.changed()) is not None:  # through .data: no version moved, no graph to spoil
            warnings.warn(
                f"torch_flops: the model writes its parameter {self._versions[position][0]!r} through .data in "
                "forward, which an extra run cannot undo: the model is left as after each of the calls made "
                f"(a clamp stays the same; a decay compounds). For one call's: warmup=0 and repeat=1{_ONE_CALL}",
                UserWarning, stacklevel=caller_stacklevel())


_ONE_CALL = " (get_model_profile: warm_up=0; the command line: --warmup 0; profile_generate: baseline=False)"


class _Sums:
    """The sum of each parameter's values, to tell a write that moves no version counter (through
    ``.data``: ``w.data.clamp_(...)``) after a run (one too small to move a sum goes unseen): one
    reduction per parameter, read once per device.
    Plain strided tensors with values only (not meta, not a subclass such as a DTensor, whose
    reduction would communicate)."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        self._params = params
        self._before = self._take()

    def _take(self) -> dict[torch.device, tuple[list[int], torch.Tensor]]:
        by_device: dict[torch.device, tuple[list[int], list[torch.Tensor]]] = {}
        with torch.no_grad():
            for i, p in enumerate(self._params):
                if type(p) not in (torch.Tensor, nn.Parameter) or p.layout != torch.strided or p.is_meta \
                        or p.is_quantized:
                    continue
                # in its own dtype (a float64 sum converts every element first: 5x slower): the same
                # values reduce to the same bits in one process, and a write changes them in practice
                total = p.sum()
                total = (torch.view_as_real(total) if total.is_complex() else total.reshape(1)).double()
                positions, sums = by_device.setdefault(p.device, ([], []))
                positions.extend([i] * total.numel())
                sums.append(total)
        return {device: (positions, torch.cat(sums)) for device, (positions, sums) in by_device.items()}

    def changed(self) -> int | None:
        """The position of a parameter whose values changed since, or None."""
        for device, (positions, now) in self._take().items():
            taken = self._before.get(device)
            if taken is None or taken[0] != positions:  # (a parameter moved to another device: changed)
                return positions[0]
            before = taken[1]
            differ = ~((now == before) | (now.isnan() & before.isnan()))
            if bool(differ.any()):
                return positions[int(differ.nonzero()[0, 0])]
        return None


def _version(t: torch.Tensor) -> int | None:
    """``t``'s version counter (None for an inference tensor, which has none)."""
    return None if t.is_inference() else int(t._version)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` holds what ``b`` holds (NaN where it has NaN; a sparse one: its coalesced
    entries); False when that cannot be told (written back then)."""
    try:
        if a.layout == torch.sparse_coo:
            a, b = a.coalesce(), b.coalesce()
            return bool(torch.equal(a.indices(), b.indices())) and _same(a.values(), b.values())
        if torch.equal(a, b):
            return True
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return False
    except Exception:  # noqa: BLE001  (a tensor that cannot be compared: written back)
        return False
