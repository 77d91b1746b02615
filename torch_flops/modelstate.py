"""The model's state: what one call of a model can change in it, taken once and compared later.

:class:`ModelSnapshot` is the one definition of "the model's state" in torch_flops. For each module
it holds (the objects, compared by identity, never by value):

* its entries: parameters, buffers and submodules (``_parameters``, ``_buffers``, ``_modules``);
* its plain attributes (``__dict__``), the ``training`` flag among them, reported on its own;
* the plain containers among them (a dict, list or set: a hook table, a user's cache list),
  which a call changes in place rather than rebinds;
* for each parameter and buffer (each tensor once, under its first name): ``requires_grad``, its
  layout (shape, strides, dtype, device, storage and offset: what ``t.data = other`` rebinds) and its version
  counter (an in-place write), and, with ``keep_data``, an alias of its data to put back.

:meth:`ModelSnapshot.changes` lists what differs now as :class:`StateChange` records (one
:class:`StateKind` each); :meth:`ModelSnapshot.restore` puts the chosen kinds back. A snapshot
records only the kinds it is asked for (taking one is on the path of every extra run). What a
caller refuses, puts back or reports is its own policy: the fx tracer's guard and the export
front end (:mod:`torch_flops.capture`) and the extra runs of one ``propagate``
(:mod:`torch_flops.state`).
"""

from __future__ import annotations

import collections
import enum
import itertools
import operator
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

__all__ = ["ABSENT", "ALL_KINDS", "ENTRIES", "ModelSnapshot", "StateChange", "StateKind"]

ABSENT: Any = object()  #: an entry or attribute a module did not have (before) or no longer has (now)

from torch_flops.measure import functions_off


class StateKind(enum.Enum):
    """What a :class:`StateChange` changed."""

    PARAMETER = "parameter"  #: an entry of a module's ``_parameters``: registered, replaced, deleted
    BUFFER = "buffer"  #: an entry of its ``_buffers``
    SUBMODULE = "submodule"  #: an entry of its ``_modules``
    ATTRIBUTE = "attribute"  #: a plain attribute (``__dict__``) rebound, the training flag aside
    TRAINING = "training"  #: the module's ``training`` flag (``.eval()``, ``.train()``)
    CONTAINER = "container"  #: a plain dict, list or set attribute whose items changed in place
    REQUIRES_GRAD = "requires_grad"  #: a parameter's or buffer's ``requires_grad``
    DATA = "data"  #: a parameter's or buffer's ``.data`` rebound (its layout: see :func:`_layout`)
    VERSION = "version"  #: a parameter or buffer written in place (its version counter moved)


#: the kinds kept in a module's entry tables
ENTRIES = frozenset({StateKind.PARAMETER, StateKind.BUFFER, StateKind.SUBMODULE})
ALL_KINDS = frozenset(StateKind)
_TENSOR_KINDS = frozenset({StateKind.REQUIRES_GRAD, StateKind.DATA, StateKind.VERSION})
_DICT_KINDS = frozenset({StateKind.ATTRIBUTE, StateKind.TRAINING})


@dataclass(frozen=True, slots=True)
class StateChange:
    """One difference between a snapshot and the model now. ``path`` is the module's path and
    ``name`` the entry, attribute or container in it; for a tensor kind, ``path``/``name`` split
    the tensor's first name. ``before``/``now``: the objects (``ABSENT``: none), the container's
    items, the flag or layout or version; ``owner``: the module, the container or the tensor."""

    kind: StateKind
    path: str
    name: str
    before: Any
    now: Any
    owner: Any

    @property
    def qualified_name(self) -> str:
        """``path.name`` ("layers.0.weight"), the name alone at the root."""
        return f"{self.path}.{self.name}" if self.path else self.name

    def restore(self) -> None:
        """Put this one entry or attribute back (kinds :data:`ENTRIES`, ATTRIBUTE, TRAINING); the
        other kinds are put back by :meth:`ModelSnapshot.restore`."""
        if self.kind not in ENTRIES and self.kind not in _DICT_KINDS:
            raise ValueError(f"a {self.kind.value} change is put back by ModelSnapshot.restore()")
        store = _store(self.owner, self.kind)
        if self.before is ABSENT:
            del store[self.name]
        else:
            store[self.name] = self.before


def _store(module: nn.Module, kind: StateKind) -> dict[str, Any]:
    if kind is StateKind.PARAMETER:
        return module._parameters  # type: ignore[return-value]
    if kind is StateKind.BUFFER:
        return module._buffers  # type: ignore[return-value]
    if kind is StateKind.SUBMODULE:
        return module._modules  # type: ignore[return-value]
    return module.__dict__


_TABLE_KINDS = (StateKind.PARAMETER, StateKind.BUFFER, StateKind.SUBMODULE, StateKind.ATTRIBUTE)
_ABSENTS = itertools.repeat(ABSENT)  # (the default of each ``table.get`` in a C-level scan)


def _same(table: dict[str, Any], before: dict[str, Any]) -> bool:
    """The same objects under the same names (in any order)."""
    return len(table) == len(before) and all(map(operator.is_, map(table.get, before, _ABSENTS), before.values()))


class _Module(NamedTuple):
    path: str
    module: nn.Module
    tables: tuple[dict[str, Any], ...]  #: the live tables, one per kind of ``ModelSnapshot._tables``
    copies: tuple[dict[str, Any], ...]  #: the same as they were


class ModelSnapshot:
    """The state of ``modules`` (``(path, module)`` pairs, e.g. ``model.named_modules()``) as
    found now, for the ``kinds`` asked for (see the module's docstring); ``keep_data`` also keeps
    each tensor's data to put back a rebound ``.data``."""

    @functions_off  # (the profiler's own reads: no mode or subclass of the user's sees them)
    def __init__(self, modules: Iterable[tuple[str, nn.Module]], kinds: Collection[StateKind] = ALL_KINDS, *,
                 keep_data: bool = False) -> None:
        self.kinds = frozenset(kinds)
        #: the tables each module's record holds: ``__dict__`` (ATTRIBUTE) for the flag too
        self._tables = tuple(kind for kind in _TABLE_KINDS
                             if kind in self.kinds or (kind is StateKind.ATTRIBUTE and StateKind.TRAINING in self.kinds))
        self._plans: dict[frozenset[StateKind], tuple[tuple[int, StateKind, bool], ...]] = {}
        self._modules: list[_Module] = []
        self._by_id: dict[int, _Module] = {}
        by_id = self._by_id
        for path, m in modules:
            if id(m) not in by_id:
                # (a TorchScript module's tables are TorchScript's, fixed by its compilation, and no
                # dicts: none is held, nothing of it changes)
                tables = tuple([{} if isinstance(m, torch.jit.ScriptModule) else _store(m, kind)
                                for kind in self._tables])
                record = _Module(path, m, tables, tuple([dict(table) for table in tables]))
                self._modules.append(record)
                by_id[id(m)] = record
        #: (path, name, tensor, requires_grad, layout, version, data) of each tensor, once: with ``keep_data``
        #: an alias of its data (then no layout: :func:`_holds` compares them), else its layout and None
        self._tensors: list[tuple[str, str, torch.Tensor, bool, Any, int | None, torch.Tensor | None]] = []
        if self.kinds & _TENSOR_KINDS:
            seen: set[int] = set()
            for path, m, _, _ in self._modules:
                for store in (m._parameters, m._buffers):
                    for name, t in store.items():
                        if isinstance(t, torch.Tensor) and id(t) not in seen:
                            seen.add(id(t))
                            self._tensors.append((path, name, t, t.requires_grad, None if keep_data else _layout(t),
                                                  _version(t), t.data if keep_data else None))
        #: (path, name, the container, its items) of each plain container attribute
        self._containers: list[tuple[str, str, Any, list[Any]]] = []
        if StateKind.CONTAINER in self.kinds:
            self._containers = [(path, name, value, _items(value)) for path, m, _, _ in self._modules
                                for name, value in vars(m).items()
                                if type(value) in _CONTAINERS and name not in ("_parameters", "_buffers", "_modules")]

    def path(self, module: nn.Module) -> str | None:
        """``module``'s path, or None when it was not one of the modules when the snapshot was taken."""
        record = self._by_id.get(id(module))
        return None if record is None else record.path

    def module_changes(self, module: nn.Module, kinds: frozenset[StateKind] | None = None) -> list[StateChange]:
        """What changed in ``module``'s own entries and attributes, of ``kinds`` (default all the
        snapshot holds; empty for a module it does not hold): a few C-level scans when nothing did."""
        record = self._by_id.get(id(module))
        if record is None:
            return []
        wanted = self.kinds if kinds is None else kinds
        return self._module_changes(record, self._plan(wanted), wanted)

    @functions_off
    def changes(self, kinds: Collection[StateKind] | None = None) -> list[StateChange]:
        """Every difference (of ``kinds``, default all the snapshot holds), in the model's order:
        each module's entries and attributes, then the containers, then each tensor's."""
        wanted = self.kinds if kinds is None else self.kinds & frozenset(kinds)
        plan = self._plan(wanted)
        found: list[StateChange] = []
        if plan:
            for record in self._modules:
                found += self._module_changes(record, plan, wanted)
        if StateKind.CONTAINER in wanted:
            for path, name, container, items in self._containers:
                now = _items(container)
                if not _identical(now, items):
                    found.append(StateChange(StateKind.CONTAINER, path, name, items, now, container))
        if wanted & _TENSOR_KINDS:
            requires, data, written = (kind in wanted for kind in _TENSOR_ORDER)
            for path, name, t, requires_grad, layout, version, kept in self._tensors:
                if requires and t.requires_grad != requires_grad:
                    found.append(StateChange(StateKind.REQUIRES_GRAD, path, name, requires_grad, t.requires_grad, t))
                if data and (_layout(t) != layout if kept is None else not _holds(t, kept)):
                    found.append(StateChange(StateKind.DATA, path, name, layout if kept is None else _layout(kept),
                                             _layout(t), t))
                if written and version is not None and _version(t) != version:
                    found.append(StateChange(StateKind.VERSION, path, name, version, _version(t), t))
        return found

    def _plan(self, wanted: frozenset[StateKind]) -> tuple[tuple[int, StateKind, bool], ...]:
        """(table, its kind, compared whole) per table ``wanted`` needs; ``__dict__`` not compared
        whole: the training flag alone."""
        plan = self._plans.get(wanted)
        if plan is None:
            plan = self._plans[wanted] = tuple(
                (i, kind, kind in wanted) for i, kind in enumerate(self._tables)
                if kind in wanted or (kind is StateKind.ATTRIBUTE and StateKind.TRAINING in wanted))
        return plan

    @staticmethod
    def _module_changes(record: _Module, plan: tuple[tuple[int, StateKind, bool], ...],
                        wanted: frozenset[StateKind]) -> list[StateChange]:
        found: list[StateChange] = []
        path, module, tables, copies = record
        for i, kind, whole in plan:
            table, before = tables[i], copies[i]
            if not whole:  # the training flag alone
                old, now = before.get("training", ABSENT), table.get("training", ABSENT)
                if old is not now:
                    found.append(StateChange(StateKind.TRAINING, path, "training", old, now, module))
                continue
            if _same(table, before):
                continue  # (the common case)
            for name in [*before, *(k for k in table if k not in before)]:
                old, now = before.get(name, ABSENT), table.get(name, ABSENT)
                if old is now:
                    continue
                which = StateKind.TRAINING if kind is StateKind.ATTRIBUTE and name == "training" else kind
                if which in wanted:
                    found.append(StateChange(which, path, name, old, now, module))
        return found

    @functions_off
    def restore(self, kinds: Collection[StateKind] | None = None) -> None:
        """Put back what changed, of ``kinds`` (default all the snapshot holds): an entry table or
        ``__dict__`` that differs is refilled as it was (order included; TRAINING alone puts back
        the flag only), a container its items, a tensor's ``.data`` (with ``keep_data``) and
        ``requires_grad`` (a leaf's). A write into a tensor (VERSION) cannot be put back here."""
        wanted = self.kinds if kinds is None else self.kinds & frozenset(kinds)
        plan = self._plan(wanted)
        for _, module, tables, copies in self._modules:
            for i, _, whole in plan:
                table, before = tables[i], copies[i]
                if not whole:
                    flag = before.get("training", ABSENT)
                    if flag is not ABSENT and table.get("training", ABSENT) is not flag:
                        module.training = flag
                elif not _same(table, before) or not all(map(operator.eq, table, before)):
                    table.clear()
                    table.update(before)
        if StateKind.CONTAINER in wanted:
            for _, _, container, items in self._containers:
                if not _identical(_items(container), items):
                    container.clear()
                    if isinstance(container, dict):
                        container.update(zip(items[::2], items[1::2]))
                    elif isinstance(container, list):
                        container.extend(items)
                    else:
                        container.update(items)
        data_kept, requires = StateKind.DATA in wanted, StateKind.REQUIRES_GRAD in wanted
        for _, _, t, requires_grad, layout, _, data in self._tensors:
            if data_kept and data is not None and not _holds(t, data):
                with torch.no_grad():
                    t.data = data
            if requires and t.requires_grad != requires_grad and t.is_leaf:
                t.requires_grad_(requires_grad)


_TENSOR_ORDER = (StateKind.REQUIRES_GRAD, StateKind.DATA, StateKind.VERSION)


_CONTAINERS = (dict, list, set, collections.OrderedDict)


def _items(container: Any) -> list[Any]:
    """A container's contents as a snapshot compares them: a dict's keys and values in turn, a
    list's items, a set's items (ordered by identity)."""
    if isinstance(container, dict):
        return [x for pair in container.items() for x in pair]
    return sorted(container, key=id) if isinstance(container, set) else list(container)


def _identical(a: list[Any], b: list[Any]) -> bool:
    """The same objects in the same order (never compared by value: tensors among them)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _layout(t: torch.Tensor) -> Any:
    """What ``t.data = other`` changes: shape, strides, dtype, device, storage and offset in it."""
    try:
        strided = t.layout == torch.strided
        storage = t.untyped_storage()._cdata if strided else None
        strides = tuple(t.stride()) if strided else None
        offset = t.storage_offset() if strided else None
    except (RuntimeError, NotImplementedError, TypeError):  # a subclass without storage
        storage = strides = offset = None
    return tuple(t.shape), strides, t.dtype, t.device, storage, offset


def _holds(t: torch.Tensor, data: torch.Tensor) -> bool:
    """Whether ``t`` still holds ``data`` (an alias of its data taken before): the same storage,
    offset, shape, strides and dtype, i.e. the same :func:`_layout`, in one C-level check."""
    if t.is_meta:  # is_set_to has no meta kernel: the same checks, one by one
        return (t.dtype == data.dtype and torch._C._is_alias_of(t, data)  # type: ignore[attr-defined]
                and t.storage_offset() == data.storage_offset() and t.shape == data.shape
                and t.stride() == data.stride())
    try:
        return t.dtype == data.dtype and t.is_set_to(data)
    except (RuntimeError, NotImplementedError, TypeError):  # a subclass without storage
        return _layout(t) == _layout(data)


def _version(t: torch.Tensor) -> int | None:
    try:
        return int(t._version)
    except RuntimeError:  # an inference tensor has no version counter
        return None
