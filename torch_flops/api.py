"""One-call entry points over :class:`~torch_flops.analyzer.TorchFLOPsByFX`, and drop-ins for users
of the two most used peers.

* :func:`profile`: run the model once on the given inputs and return the :class:`Profile`,
  the data every view in :mod:`torch_flops.report` is made from.
* :func:`get_model_profile`: DeepSpeed's flops profiler function of the same name, every argument
  and the return value ``(flops, macs, params)`` included.
* :class:`FlopCountAnalysis` and :func:`flop_count_table`: fvcore's API (``total``, ``by_module``,
  ``by_operator``, ``by_module_and_operator``, ``unsupported_ops``, ``uncalled_modules``),
  counting in fvcore's convention: one per multiply-accumulate.

All run the forward pass under ``torch.no_grad()`` and leave the model as they found it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torch_flops import _validate, report
from torch_flops.analyzer import TorchFLOPsByFX
from torch_flops.options import TracerName
from torch_flops.records import Profile, Status

__all__ = ["FlopCountAnalysis", "flop_count_table", "get_model_profile", "profile"]


def profile(model: nn.Module, *args: Any, tracer: TracerName = "auto", warmup: int = 0, repeat: int = 1,
            ignore_ops: Iterable[str] = (), strict: bool = False, leaf_modules: Iterable[type | str] = (),
            progress: bool | None = None, **kwargs: Any) -> Profile:
    """Profile ``model(*args, **kwargs)`` and return its :class:`Profile`.

    >>> p = torch_flops.profile(model, x)
    >>> p.total_flops, p.by_module()["layer1"].flops, p.top_modules(3, by="time")
    >>> print(torch_flops.report.model_profile_text(p, depth=2))

    The keyword-only options are those of :class:`TorchFLOPsByFX`; every other keyword argument
    goes to the model (a model argument named like an option needs ``TorchFLOPsByFX`` itself).
    """
    counter = TorchFLOPsByFX(model, tracer=tracer, warmup=warmup, repeat=repeat, ignore_ops=ignore_ops,
                             strict=strict, leaf_modules=leaf_modules, progress=progress)
    with torch.no_grad():
        counter.propagate(*args, **kwargs)
    return counter.profile


def get_model_profile(
    model: nn.Module,
    input_shape: Sequence[int] | None = None,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    print_profile: bool = True,
    detailed: bool = True,
    module_depth: int = -1,
    top_modules: int = 1,
    warm_up: int = 1,
    as_string: bool = True,
    output_file: str | None = None,
    ignore_modules: Iterable[type | str] | None = None,
    mode: str = "forward",
) -> tuple[int | str, int | str, int | str]:
    """Profile one forward pass and return ``(flops, macs, params)``: DeepSpeed's
    ``deepspeed.profiling.flops_profiler.get_model_profile``, argument for argument.

    Args:
        model: the model.
        input_shape: build one input: a float tensor of this shape (batch first) on the device
            and with the floating dtype of the model's first parameter or buffer (CPU float32
            when it has none). Give either this or ``args``/``kwargs``.
        args, kwargs: the model's positional and keyword arguments.
        print_profile: print the profile (to ``output_file`` when given).
        detailed: include the module tree down to ``module_depth``; without it, the summary and
            the top modules only.
        module_depth: tree depth printed (0 = root, -1 = all) and depth of the top modules
            (-1 = innermost modules).
        top_modules: how many top modules to list (0 = none).
        warm_up: untimed runs before the measured one.
        as_string: return ``('8.21 GFLOPs', '4.09 GMACs', '25.6 M')`` instead of integers.
        output_file: write the printed profile to this file instead of stdout.
        ignore_modules: module classes (or class names) whose calls count 0 FLOPs.
        mode: ``"forward"`` (a forward call). DeepSpeed's ``"generate"`` profiles
            ``model.generate``, a Python loop no single graph holds: refused with a ``ValueError``.
    """
    if mode != "forward":
        raise ValueError(f"mode must be 'forward', got {mode!r}: mode='generate' profiles model.generate(), a "
                         "Python loop of forwards that no single graph holds; profile one forward (a prefill or "
                         "one decoding step) instead")
    if input_shape is not None and (args or kwargs):
        raise ValueError("give either input_shape or args/kwargs, not both")
    if input_shape is None and not args and not kwargs:
        raise ValueError("give input_shape or args/kwargs: the model needs inputs to be profiled")
    if input_shape is not None:
        if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence):
            raise TypeError(f"input_shape must be a sequence of positive ints, got {input_shape!r}")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in input_shape):
            raise ValueError(f"input_shape must be a sequence of positive ints, got {input_shape!r}")
        args = (_tensor_like_model(model, tuple(input_shape)),)
    _validate.check_bool("detailed", detailed)
    _validate.check_depth("module_depth", module_depth)
    _validate.check_int("top_modules", top_modules, 0)
    ignore = _class_names(ignore_modules or (), "ignore_modules")
    result = profile(model, *(args or ()), warmup=warm_up, ignore_ops=ignore, **dict(kwargs or {}))
    if print_profile:
        if detailed:
            text = report.model_profile_text(result, depth=module_depth, top=top_modules)
        else:
            parts = [report.summary_text(result)]
            if top_modules:
                parts.append(report.top_modules_text(result, top_modules, module_depth))
            text = "\n\n".join(parts)
        if output_file is not None:
            report.write_atomic(output_file, text + "\n")
        else:
            print(text)
    flops, macs, params = result.total_flops, result.total_macs, result.total_params
    if as_string:
        return (report.format_count(flops, "FLOPs"), report.format_count(macs, "MACs"),
                report.format_count(params))
    return flops, macs, params


def _class_names(items: Iterable[type | str], name: str) -> list[str]:
    names: list[str] = []
    for item in items:
        if isinstance(item, type):
            names.append(item.__name__)
        elif isinstance(item, str):
            names.append(item)
        else:
            raise TypeError(f"{name} entries must be module classes or class names, got {item!r}")
    return names


def _tensor_like_model(model: nn.Module, shape: tuple[int, ...]) -> torch.Tensor:
    for t in (*model.parameters(), *model.buffers()):
        if t.is_floating_point():
            device, dtype = t.device, t.dtype
            break
    else:
        device, dtype = torch.device("cpu"), torch.float32
    if device.type == "meta":
        return torch.empty(shape, device=device, dtype=dtype)
    return torch.randn(shape, device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# fvcore
# ---------------------------------------------------------------------------------------------

_PREFIXES = ("torch.", "F.", "Tensor.", "aten.", "operator.")


def _operator_name(target: str) -> str:
    """fvcore's operator names: ``conv`` for every convolution, ``matmul`` for the matmul
    family's plain forms, the op's own lowercase name otherwise (``linear``, ``addmm``, ``bmm``,
    ``einsum``, ``scaled_dot_product_attention``)."""
    name = target
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    name = name.lower().strip("_")
    if name.startswith(("conv", "convolution")):
        return "conv"
    if name in ("matmul", "mm", "rmatmul", "mv", "dot", "vdot"):
        return "matmul"
    return name


class FlopCountAnalysis:
    """fvcore's ``FlopCountAnalysis(model, inputs)``, counting one per multiply-accumulate (the
    ``"macs"`` convention, as fvcore does), on torch_flops' own capture.

    >>> flops = FlopCountAnalysis(model, (x,))
    >>> flops.total(), flops.by_module()["layer1"], flops.by_operator()["conv"]

    ``inputs`` is one tensor or a tuple of positional inputs. The profile runs once, on first use;
    :attr:`profile` is the full :class:`Profile` (in the ``torch_flops`` convention).
    """

    def __init__(self, model: nn.Module, inputs: Any) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self._model = model
        self._inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        self._profile: Profile | None = None

    @property
    def profile(self) -> Profile:
        if self._profile is None:
            self._profile = profile(self._model, *self._inputs)
        return self._profile

    def _macs(self) -> Profile:
        return self.profile.with_convention("macs")

    def total(self, module_name: str = "") -> int:
        """MACs of the whole model, or of the module at ``module_name`` (its submodules included)."""
        modules = self._macs().by_module()
        if module_name not in modules:
            raise KeyError(f"no module {module_name!r}; modules are {list(modules)[:10]}...")
        return modules[module_name].flops

    def by_module(self) -> Counter[str]:
        """Module path ("" = the root) -> its MACs, submodules included."""
        return Counter({path: m.flops for path, m in self._macs().by_module().items()})

    def by_operator(self, module_name: str = "") -> Counter[str]:
        """Operator -> MACs, inside ``module_name`` ("" = the whole model)."""
        return self.by_module_and_operator().get(module_name, Counter())

    def by_module_and_operator(self) -> dict[str, Counter[str]]:
        """Module path -> (operator -> MACs), each module's submodules included."""
        result: dict[str, Counter[str]] = {path: Counter() for path in self._macs().by_module()}
        for r in self._macs().records:
            if r.macs:
                name = _operator_name(r.target)
                for path in ("", *r.module_chain):
                    result.setdefault(path, Counter())[name] += r.macs
        return result

    def unsupported_ops(self, module_name: str = "") -> Counter[str]:
        """Operators without a formula (and how many nodes each), inside ``module_name``."""
        return Counter(r.target for r in self.profile.records
                       if r.status is Status.UNSUPPORTED and (not module_name or module_name in r.module_chain))

    def uncalled_modules(self) -> set[str]:
        """Submodules no node ran inside."""
        return {path for path, m in self.profile.by_module().items() if path and m.nodes == 0}

    # fvcore's configuration methods, which return the analysis for chaining
    def unsupported_ops_warnings(self, enabled: bool) -> FlopCountAnalysis:
        return self

    def uncalled_modules_warnings(self, enabled: bool) -> FlopCountAnalysis:
        return self

    def tracer_warnings(self, mode: str) -> FlopCountAnalysis:
        return self

    def ancestor_mode(self, mode: str) -> FlopCountAnalysis:
        return self


def flop_count_table(flops: FlopCountAnalysis, max_depth: int = 3) -> str:
    """fvcore's ``flop_count_table``: per module down to ``max_depth``, its parameters and MACs."""
    _validate.check_int("max_depth", max_depth, 0)
    p = flops.profile.with_convention("macs")
    rows = [[("  " * m.depth) + (m.path or "model"), report.format_count(m.params), report.format_count(m.flops)]
            for m in p.by_module().values() if m.depth <= max_depth]
    header = ["module", "#parameters", "#flops (MACs)"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])
