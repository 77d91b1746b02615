"""The formula table: one mapping from a graph node's *target* to the formula that counts it.

Keys are the targets themselves, as a graph names them:

* a module class (``nn.Linear``) for ``call_module`` nodes, looked up along the module's MRO;
* a callable (``torch.relu``, ``F.relu``, ``operator.add``, ``torch.batch_norm``) for
  ``call_function`` nodes: ``torch.batch_norm`` and ``F.batch_norm`` are two keys;
* a ``torch.Tensor`` method (``torch.Tensor.relu``) for ``call_method`` nodes;
* an aten overload packet (``torch.ops.aten.mm``) for the nodes of ``torch.export`` graphs;
* a :class:`Name` for a target known only by name (a user's ``MODULE_FLOPs_MAPPING["MyBlock"]``,
  a custom op ``"transformers.grouped_mm"``, a function whose object is not importable here).

Every formula is called the same way, whatever the front door (see :mod:`torch_flops.formulas`)::

    formula(module, out, *args, **kwargs) -> (flops, macs) | flops

``module`` is the called module for ``call_module`` nodes and ``None`` otherwise; ``args`` and
``kwargs`` are the node's real inputs, a method's ``self`` first. The name-keyed dicts users
already extend (``MODULE_FLOPs_MAPPING`` ...) are :class:`NameView` s onto a table; the function,
method and aten views keep their historical convention ``f(out, *args, **kwargs)`` and adapt
formulas in and out of it.
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
from torch import nn

from torch_flops.errors import DuplicateFormulaError

__all__ = ["Composite", "Count", "FlopCount", "Formula", "FormulaTable", "Kind", "Name", "NameView", "zero_flops"]

class Count(NamedTuple):
    """What a formula of dot products returns, when it says more than ``(flops, macs)``: the facts
    the counting conventions (:mod:`torch_flops.conventions`) re-express a count with."""

    flops: int
    macs: int = 0
    #: the outputs the MACs are summed into (a dot product of length K per output): the "exact"
    #: convention counts K - 1 adds, not K, per output. None: unknown.
    dot_outputs: int | None = None
    #: of ``macs``, those a matrix-multiply kernel does (aten mm, bmm, addmm, baddbmm,
    #: convolution, attention, _scaled_mm): what FlopCounterMode counts (mv, dot, addmv, addbmm,
    #: bilinear, _int_mm and grouped mm it counts as 0). None: all of them.
    mm_macs: int | None = None


#: What a formula returns: ``(flops, macs)``, a :class:`Count` (or the plain tuple
#: ``(flops, macs, dot_outputs, mm_macs)``, cheaper to build on hot paths), or a bare int meaning
#: ``(flops, 0)``.
FlopCount = int | tuple[int, int] | tuple[int, int, int | None, int | None] | Count
Formula = Callable[..., FlopCount]
Kind = Literal["module", "function", "method", "aten"]
KINDS: tuple[Kind, ...] = ("module", "function", "method", "aten")

_LEGACY = "__torch_flops_legacy__"  # on an adapter: the user's function in the historical convention



def zero_flops(*args: Any, **kwargs: Any) -> tuple[int, int]:
    """The formula of ops that do no floating point work by definition (views, copies, shapes).
    It takes any arguments, so it serves every calling convention unchanged."""
    return (0, 0)


@dataclass(frozen=True)
class Name:
    """A target known by name only: a module class name, a function ``__name__``, a Tensor method
    name or an aten op ``"namespace.name"``. It matches every target of that kind and name that
    has no entry of its own."""

    kind: Kind
    name: str


class Composite:
    """A formula that counts a module by the formulas of its children (``nn.Transformer*``, kept
    whole by fx). ``fn(table, module, out, *args, **kwargs)`` receives the table it was looked up
    in, so each counter's own table counts the children."""

    def __init__(self, fn: Callable[..., FlopCount]) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "composite")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = fn.__doc__

    def bind(self, table: FormulaTable) -> Formula:
        bound = functools.partial(self.fn, table)
        return functools.update_wrapper(bound, self.fn)  # type: ignore[return-value]


def _string_key(key: str) -> Any:
    """A ``custom_formulas`` key given as a string: an aten op (``"aten::mm"``, ``"aten.mm"``,
    ``"aten.mm.default"``: its packet) or a Tensor method name (``"relu"``); ``ValueError`` for
    anything else (it would silently match nothing)."""
    for prefix in ("aten::", "aten."):
        if key.startswith(prefix):
            packet = getattr(torch.ops.aten, key[len(prefix):].split(".")[0], None)
            if isinstance(packet, torch._ops.OpOverloadPacket):
                return packet
            raise ValueError(f"custom_formulas key {key!r}: torch has no aten op {key[len(prefix):]!r}")
    method = getattr(torch.Tensor, key, None)
    if callable(method):
        return method
    raise ValueError(f"custom_formulas key {key!r} is no Tensor method and no aten op ('aten::mm'): give the target "
                     "itself (a module class, torch.mm, torch.ops.aten.mm) or a Tensor method name ('relu')")


def normalize_key(key: Any) -> Any:
    """An aten overload (``aten.mm.default``) is keyed by its packet (``aten.mm``)."""
    if isinstance(key, torch._ops.OpOverload):
        return key.overloadpacket
    return key


def key_kind(key: Any) -> Kind:
    """Which kind of node a key serves; ``TypeError`` for something that is not a target."""
    if isinstance(key, Name):
        return key.kind
    if isinstance(key, type):
        if issubclass(key, nn.Module):
            return "module"
        raise TypeError(f"a formula key class must be an nn.Module subclass, got {key.__name__}")
    if isinstance(key, torch._ops.OpOverloadPacket):
        return "aten"
    if callable(key):
        name = getattr(key, "__name__", None)
        return "method" if isinstance(name, str) and getattr(torch.Tensor, name, None) is key else "function"
    raise TypeError(f"cannot use {key!r} as a formula table key: give a module class, a callable, an aten op or "
                    "a Name")


def key_name(key: Any) -> str:
    if isinstance(key, Name):
        return key.name
    if isinstance(key, torch._ops.OpOverloadPacket):
        return str(key)
    return str(getattr(key, "__name__", key))


#: Python operators that call the aten op of their name on tensors (``a + b`` is ``aten.add``)
_OPERATOR_OPS = frozenset({"add", "sub", "mul", "pow", "neg", "matmul"})


def _binding(key: Any) -> bool:
    """Whether a function or method key is torch's own binding of the aten op of its name (a
    Tensor method, a builtin of ``torch`` or ``torch._C._nn``/``_linalg``/``_special``/``_fft``, an
    arithmetic operator), whose arguments are the op's."""
    if isinstance(key, Name):
        return False
    if key_kind(key) == "method":
        return True
    if not isinstance(key, types.BuiltinFunctionType):
        return False
    module = getattr(key, "__module__", None) or ""
    if module == "_operator":
        return key.__name__ in _OPERATOR_OPS
    return module == "torch" or module.startswith("torch._C._")


def _dispatched(packet: Any) -> bool:
    """Whether calls of an aten op reach a dispatch mode (FlopCounterMode's ``custom_mapping``, the
    eager recording's aten level): not when every overload is ``CompositeImplicitAutograd`` (it
    decomposes into other ops first)."""
    for overload in packet.overloads():
        if overload == "out" or overload.endswith("_out"):  # (an out= variant has its own kernel)
            continue
        try:
            op = getattr(packet, overload)
            if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
                return True
        except (AttributeError, RuntimeError):  # TorchScript-only overloads (aten::add.t)
            continue
    return False


def _torch_api(key: Any) -> bool:
    """Whether a function or method key is one of torch's overridable functions or Tensor methods
    (a call reaches ``__torch_function__``), or a Name of one."""
    if isinstance(key, Name):
        return key.kind == "method" or callable(getattr(torch.Tensor, key.name, None))
    return key_kind(key) == "method" or key in _overridable()


@functools.cache
def _overridable() -> frozenset[Any]:
    return frozenset(f for functions in torch.overrides.get_overridable_functions().values() for f in functions)


def _describe(formula: Any) -> str:
    original = getattr(formula, _LEGACY, formula)
    return str(getattr(original, "__qualname__", original))


def _same(a: Any, b: Any) -> bool:
    return a is b or getattr(a, _LEGACY, a) is getattr(b, _LEGACY, b)


class FormulaTable:
    """target -> formula, for one counter (or the package's defaults).

    ``add`` registers exact keys; ``set_named`` is what assigning into a name-keyed view does
    (the name, and every key of that kind and name, get the formula). ``resolve_*`` find the
    formula of a node's target, with composite formulas bound to this table.
    """

    def __init__(self) -> None:
        self._entries: dict[Any, Formula | Composite] = {}
        self._index: dict[tuple[Kind, str], list[Any]] | None = None
        #: module class -> its formula (resolve_module's answers; forgotten whenever an entry changes)
        self._resolved: dict[type, Formula | None] | None = None
        self._builtin: dict[Any, Formula | Composite] = {}
        self._builtin_formulas: set[int] = set()
        #: keys whose entry a user removed (custom_formulas {key: None}): no FlopCounterMode formula either
        self._dropped: frozenset[Any] = frozenset()
        #: (with_module, method) -> formula -> its adapter in that historical convention
        self._legacy_adapters: dict[tuple[bool, bool], weakref.WeakKeyDictionary[Any, Formula]] = {
            key: weakref.WeakKeyDictionary() for key in ((False, False), (True, False), (False, True))}

    # ------------------------------------------------------------------ building
    def copy(self) -> FormulaTable:
        """An independent table with the same entries (later edits to either do not leak)."""
        table = FormulaTable()
        table._entries = dict(self._entries)
        table._builtin, table._builtin_formulas, table._dropped = self._builtin, self._builtin_formulas, self._dropped
        return table

    def with_overrides(self, overrides: Mapping[Any, Formula | None] | None) -> FormulaTable:
        """This table with ``overrides`` merged over it (each key replacing its entry): keys are
        module classes, Python functions, Tensor method names (str), aten ops (packets or
        overloads) or :class:`Name` s; values formulas in the table's one calling convention
        ``formula(module, out, *args, **kwargs)``, or ``None`` to remove a key's entry (its nodes
        are then recorded as their ops, or unsupported). ``TypeError`` names a bad key or value."""
        if overrides is None:
            return self
        if not isinstance(overrides, Mapping):
            raise TypeError(f"custom_formulas must be a mapping of target -> formula, got {type(overrides).__name__}")
        table = self.copy()
        targets = []
        for key, formula in overrides.items():
            if formula is not None and not callable(formula) and not isinstance(formula, Composite):
                raise TypeError(f"custom_formulas[{key!r}] must be a formula (callable) or None, got {formula!r}")
            target = _string_key(key) if isinstance(key, str) else key
            targets.append(normalize_key(target))
            if formula is None:
                table._entries.pop(normalize_key(target), None)
                table._dropped |= {normalize_key(target)}
                table._index = table._resolved = None
            else:
                table.add((target,), formula, override=True, where="custom_formulas")
                table._dropped -= {normalize_key(target)}
        # an aten op's formula (FlopCounterMode's custom_mapping is keyed so) also serves the torch
        # bindings of that very op that have a formula of the package's own (``torch.mm``,
        # ``Tensor.add``, ``a + b`` for ``aten.mm`` / ``aten.add``): a front end records those calls
        # whole, so the op itself never shows; they take the op's own arguments. Not Python functions
        # of the same name (``F.embedding`` orders its arguments otherwise), nor an op that decomposes
        # before any dispatch mode sees it (``aten.linear``: FlopCounterMode never sees it either)
        for key, formula in overrides.items():
            packet = normalize_key(key)
            if formula is None or not isinstance(packet, torch._ops.OpOverloadPacket) or not _dispatched(packet):
                continue
            name = packet._qualified_op_name.split("::")[-1]
            for kind in ("function", "method"):
                for same in table.keys_named(kind, name):
                    if same not in targets and _binding(same) and table._builtin.get(same) is table._entries.get(same):
                        table._entries[same] = formula
            table._index = table._resolved = None
        return table

    def restore(self, snapshot: FormulaTable) -> None:
        """Make this table's entries those of ``snapshot`` (a :meth:`copy` taken earlier)."""
        self._entries = dict(snapshot._entries)
        self._dropped = snapshot._dropped
        self._index = self._resolved = None

    def add(self, keys: tuple[Any, ...], formula: Formula | Composite, override: bool = False,
            where: str = "the formula table") -> None:
        """Register ``formula`` for each key; a key that has another formula needs ``override``."""
        for raw in keys:
            key = normalize_key(raw)
            key_kind(key)  # TypeError for a non-target
            current = self._entries.get(key)
            if current is not None and not override and not _same(current, formula):
                raise DuplicateFormulaError(
                    f"{key_name(key)!r} is already registered in {where} (by {_describe(current)}); pass "
                    "override=True to replace it")
            self._entries[key] = formula
        self._index = self._resolved = None

    def set_named(self, kind: Kind, name: Any, formula: Formula | Composite, override: bool = True,
                  where: str = "the formula table") -> None:
        """Give every ``kind`` target called ``name`` this formula (a non-str ``name`` is a key)."""
        if not isinstance(name, str):
            self.add((name,), formula, override, where)
            return
        keys = [Name(kind, name), *self.keys_named(kind, name)]
        if not override:
            current = self.formula_named(kind, name)
            if current is not None and not _same(current, formula):
                raise DuplicateFormulaError(
                    f"{name!r} is already registered in {where} (by {_describe(current)}); pass override=True "
                    "to replace it")
        for key in dict.fromkeys(keys):
            self._entries[key] = formula
        self._index = self._resolved = None

    def delete_named(self, kind: Kind, name: Any) -> None:
        keys = [normalize_key(name)] if not isinstance(name, str) else [Name(kind, name), *self.keys_named(kind, name)]
        found = [k for k in keys if k in self._entries]
        if not found:
            raise KeyError(name)
        for key in found:
            del self._entries[key]
        self._index = self._resolved = None

    def mark_builtin(self) -> None:
        """Remember the current entries as the package's own (see :meth:`is_builtin`)."""
        self._builtin = dict(self._entries)
        self._builtin_formulas = {id(f) for f in self._builtin.values()} | {
            id(f.fn) for f in self._builtin.values() if isinstance(f, Composite)}

    def is_builtin(self, formula: Any) -> bool:
        """Whether ``formula`` is one of the package's own (a :class:`Composite` of the package's, as
        :meth:`bound` hands it out bound to a table, too)."""
        if isinstance(formula, functools.partial):
            return id(formula.func) in self._builtin_formulas
        return id(formula) in self._builtin_formulas

    def user_graph_keys(self) -> list[Any]:
        """Function keys whose formula the user added or replaced and which only a graph front end
        (fx) sees whole: plain Python functions. torch's own functions and Tensor methods reach the
        eager recording through ``__torch_function__``, which keeps them whole too."""
        builtin = self._builtin
        changed = [key for key, formula in self._entries.items() if builtin.get(key) is not formula]  # few
        return [key for key in changed if key_kind(key) in ("function", "method") and not _torch_api(key)]

    # ------------------------------------------------------------------ finding
    def _names(self) -> dict[tuple[Kind, str], list[Any]]:
        if self._index is None:
            index: dict[tuple[Kind, str], list[Any]] = {}
            for key in self._entries:
                if not isinstance(key, Name):
                    index.setdefault((key_kind(key), key_name(key)), []).append(key)
            self._index = index
        return self._index

    def keys_named(self, kind: Kind, name: str) -> list[Any]:
        """The non-Name keys of ``kind`` called ``name``, in registration order (for a method,
        ``torch.Tensor.<name>`` first: ``Tensor.__neg__`` is ``Tensor.neg``, whose ``__name__`` is
        ``neg``)."""
        keys = list(self._names().get((kind, name), ()))
        if kind == "method":
            method = getattr(torch.Tensor, name, None)
            if method is not None and method in self._entries and method not in keys:
                keys.insert(0, method)
        return keys

    def formula_named(self, kind: Kind, name: Any) -> Formula | Composite | None:
        """What a name-keyed view returns: the Name entry, else the first key of that name."""
        if not isinstance(name, str):
            return self._entries.get(normalize_key(name))
        formula = self._entries.get(Name(kind, name))
        if formula is None:
            keys = self.keys_named(kind, name)
            formula = self._entries[keys[0]] if keys else None
        return formula

    def names(self, kind: Kind) -> list[Any]:
        """The keys a name-keyed view lists: names (str); aten packets as themselves."""
        seen: dict[Any, None] = {}
        for key in self._entries:
            if key_kind(key) != kind:
                continue
            if isinstance(key, Name):
                seen[key.name] = None
            elif kind == "aten":
                seen[key] = None
            else:
                seen[key_name(key)] = None
        return list(seen)

    def bound(self, formula: Formula | Composite | None) -> Formula | None:
        return formula.bind(self) if isinstance(formula, Composite) else formula

    def drops(self, cls: type) -> bool:
        """Whether ``custom_formulas`` removed the formula of ``cls`` or of a class it derives from
        (``{nn.Linear: None}``): its calls are recorded through the ops they run."""
        return bool(self._dropped) and any(klass in self._dropped for klass in cls.__mro__)

    def resolve_module(self, cls: type) -> Formula | None:
        """The formula of a module class, falling back along its MRO: a subclass of ``nn.Linear``
        is counted as a Linear unless it has an entry of its own, but only while it runs the
        Linear's own ``forward``. A subclass that overrides ``forward`` (a head that transposes
        before its Conv1d, a router whose Linear returns a tuple) computes something else: it has
        no formula (None), so every front end records the ops it runs."""
        resolved = self._resolved
        if resolved is None:
            resolved = self._resolved = {}
        elif cls in resolved:
            return resolved[cls]
        found = resolved[cls] = self._resolve_module(cls)
        return found

    def _resolve_module(self, cls: type) -> Formula | None:
        entries = self._entries
        forward = getattr(cls, "forward", None)
        for klass in cls.__mro__:
            if klass in self._dropped:  # (custom_formulas {klass: None}: no formula, by its name neither)
                return None
            formula = (entries.get(klass) or entries.get(Name("module", klass.__name__))
                       or entries.get(Name("module", f"{klass.__module__}.{klass.__qualname__}")))
            if formula is not None:
                return self.bound(formula) if klass is cls or getattr(klass, "forward", None) is forward else None
            if klass is nn.Module:
                break
        return None

    def resolve_function(self, target: Any) -> Formula | None:
        """The target's own entry, else one for its ``__name__`` (a user's name, or a registered
        function of that name: an alias torch exposes under another module)."""
        entries = self._entries
        formula = entries.get(target)
        if formula is None:
            name = getattr(target, "__name__", None)
            if not isinstance(name, str):
                return None
            formula = entries.get(Name("function", name))
            if formula is None:
                keys = self._names().get(("function", name))
                formula = entries[keys[0]] if keys else None
        return self.bound(formula)

    def resolve_method(self, name: str) -> Formula | None:
        entries = self._entries
        method = getattr(torch.Tensor, name, None)
        formula = entries.get(method) if method is not None else None
        return self.bound(formula or entries.get(Name("method", name)))

    def resolve_aten(self, op: Any) -> Formula | None:
        packet = normalize_key(op)
        formula = self._entries.get(packet) or self._entries.get(Name("aten", str(packet)))
        if formula is None and getattr(op, "namespace", None) == "prims":
            # a primitive (forward-mode AD's tangents run some: prims.add) counts as its aten namesake
            namesake = getattr(torch.ops.aten, op._opname, None) if hasattr(op, "_opname") else None
            if namesake is not None:
                formula = self._entries.get(normalize_key(namesake))
        if formula is None and packet not in self._dropped:  # an op FlopCounterMode has a formula for (a
            formula = flop_counter_formula(packet)  # custom op's register_flop_formula), unless dropped
        return self.bound(formula)

    # ------------------------------------------------------------------ the historical convention
    def to_legacy(self, formula: Formula, with_module: bool = False, method: bool = False) -> Formula:
        """The historical calling convention: ``f(out, *args, **kwargs)`` calling
        ``formula(None, out, *args, **kwargs)`` (``with_module``: ``f(module, out, *args,
        **kwargs)``; ``method``: the original torch_flops' ``f(self, out, *args_tail, **kwargs)``),
        returning ``(flops, macs)`` where the formula returns a :class:`Count`. Cached, so two
        views of one formula give the same object; a user's own function comes back as is."""
        original = getattr(formula, _LEGACY, None)
        if original is not None or formula is zero_flops:
            return original or formula
        cache = self._legacy_adapters[with_module, method]
        adapter = cache.get(formula)
        if adapter is None:
            if with_module:
                def adapter(module: Any, out: Any, *args: Any, **kwargs: Any) -> FlopCount:
                    return _pair(formula(module, out, *args, **kwargs))
            elif method:
                def adapter(self: Any, out: Any, *args: Any, **kwargs: Any) -> FlopCount:
                    return _pair(formula(None, out, self, *args, **kwargs))
            else:
                def adapter(out: Any, *args: Any, **kwargs: Any) -> FlopCount:
                    return _pair(formula(None, out, *args, **kwargs))
            functools.update_wrapper(adapter, formula)
            cache[formula] = adapter
        return adapter


def _pair(result: FlopCount) -> FlopCount:
    return (result[0], result[1]) if isinstance(result, tuple) and len(result) > 2 else result


def from_legacy(fn: Callable[..., FlopCount], method: bool = False) -> Formula:
    """A formula in the one convention wrapping ``fn(out, *args, **kwargs)`` (``method``: the
    original torch_flops' method formulas, ``fn(self, out, *args_tail, **kwargs)``)."""
    if fn is zero_flops or hasattr(fn, _LEGACY):
        return fn

    if method:
        def formula(module: Any, out: Any, self: Any = None, *args: Any, **kwargs: Any) -> FlopCount:
            return fn(self, out, *args, **kwargs)
    else:
        def formula(module: Any, out: Any, *args: Any, **kwargs: Any) -> FlopCount:
            return fn(out, *args, **kwargs)

    functools.update_wrapper(formula, fn)
    setattr(formula, _LEGACY, fn)
    return formula


class NameView(MutableMapping[Any, Formula]):
    """A name-keyed dict onto a :class:`FormulaTable` (``MODULE_FLOPs_MAPPING`` and friends).

    ``view["relu"] = fn`` gives every target of the view's kind called ``relu`` the formula ``fn``;
    ``view["relu"]`` returns it. Module formulas are ``f(module, out, *args, **kwargs)``; function
    and aten formulas ``f(out, *args, **kwargs)``; method formulas, as the original torch_flops
    called them, ``f(self, out, *args_tail, **kwargs)`` (each adapted to and from the table's one
    convention). The aten view also takes op packets and overloads as keys.
    """

    def __init__(self, table: FormulaTable, kind: Kind) -> None:
        self._table = table
        self._kind = kind
        self._historical = kind != "module"

    def __getitem__(self, name: Any) -> Formula:
        raw = self._table.formula_named(self._kind, name)
        formula = self._table.bound(raw)
        if formula is None:
            raise KeyError(name)
        if self._historical:
            return self._table.to_legacy(formula, method=self._kind == "method")
        # module formulas already take the module first: the package's own come back returning
        # (flops, macs) where they return a Count; a user's come back as they were set
        return self._table.to_legacy(formula, with_module=True) if self._table.is_builtin(raw) else formula

    def __setitem__(self, name: Any, fn: Formula) -> None:
        if not callable(fn):
            raise TypeError(f"a formula must be callable, got {type(fn).__name__}")
        self._table.set_named(self._kind, name, from_legacy(fn, self._kind == "method") if self._historical else fn)

    def __delitem__(self, name: Any) -> None:
        self._table.delete_named(self._kind, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._table.names(self._kind))

    def __len__(self) -> int:
        return len(self._table.names(self._kind))

    def __contains__(self, name: object) -> bool:
        return self._table.formula_named(self._kind, name) is not None

    def __repr__(self) -> str:
        return f"<{self._kind} formulas: {len(self)} names>"


@functools.cache
def _flop_counter_formula(packet: Any, registered: Any) -> Formula:
    def formula(module: Any, out: Any, *args: Any, **kwargs: Any) -> Count:
        # FlopCounterMode's own formula (registered with torch.utils.flop_counter.register_flop_formula),
        # called as FlopCounterMode calls it; its FLOPs are taken as 2 per MAC of a matrix kernel (an odd
        # count loses its last FLOP in the flop_counter convention)
        flops = int(registered(*args, **kwargs, out_val=out))
        return Count(flops, flops // 2, None, flops // 2)

    formula.__qualname__ = f"flop_counter_formula[{packet}]"
    return formula


def flop_counter_formula(packet: Any) -> Formula | None:
    """The formula FlopCounterMode has for an op packet none of ours covers (a custom op's, given with
    ``register_flop_formula``), as one of ours; None when it has none."""
    from torch.utils.flop_counter import flop_registry

    registered = flop_registry.get(packet) if isinstance(packet, torch._ops.OpOverloadPacket) else None
    return None if registered is None else _flop_counter_formula(packet, registered)
