"""One-call entry points over :class:`~torch_flops.analyzer.TorchFLOPsByFX`, and drop-ins for users
of the two most used peers.

* :func:`profile`: run the model once on the given inputs and return the :class:`Profile`,
  the data every view in :mod:`torch_flops.report` is made from.
* :func:`get_model_profile`: DeepSpeed's flops profiler function of the same name, every argument
  and the return value ``(flops, macs, params)`` included.
* :class:`FlopCountAnalysis` and :func:`flop_count_table`: fvcore's API (``total``, ``by_module``,
  ``by_operator``, ``by_module_and_operator``, ``unsupported_ops``, ``uncalled_modules``),
  counting in fvcore's convention: one per multiply-accumulate.

``profile`` and ``get_model_profile`` run the forward pass under ``torch.no_grad()``; the fvcore
analyses in the caller's grad mode, as fvcore does. All leave the model as they found it.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import tabulate as tabulate_module
import torch
from tabulate import tabulate
from torch import nn

from torch_flops import _validate, formulas, report
from torch_flops.analyzer import TorchFLOPsByFX
from torch_flops.compiled import (
    CompareRow,
    CompiledComparison,
    compile_options,
    eager_call_ms,
    eager_launches,
    profile_compiled,
    split_compiled,
)
from torch_flops.formulas import Formula
from torch_flops.formulas import fvcore as fvcore_rules
from torch_flops.formulas._shapes import prod
from torch_flops.generation import profile_generation_call
from torch_flops.options import TracerName
from torch_flops.paths import ancestors, module_chain
from torch_flops.records import NodeRecord, Profile, Status, is_internal
from torch_flops.state import ExtraRuns, copy_inputs

__all__ = ["ActivationCountAnalysis", "FlopCountAnalysis", "activation_count", "compare_compiled", "flop_count",
           "flop_count_str", "flop_count_table", "get_model_profile", "parameter_count", "parameter_count_table", "profile"]


def profile(model: nn.Module, *args: Any, tracer: TracerName = "auto", warmup: int = 0, repeat: int = 1,
            ignore_ops: Iterable[str] = (), strict: bool = False, leaf_modules: Iterable[type | str] = (),
            progress: bool | None = None, custom_formulas: Mapping[Any, Formula | None] | None = None,
            **kwargs: Any) -> Profile:
    """Profile ``model(*args, **kwargs)`` and return its :class:`Profile`.

    >>> p = torch_flops.profile(model, x)
    >>> p.total_flops, p.by_module()["layer1"].flops, p.top_modules(3, by="time")
    >>> print(torch_flops.report.model_profile_text(p, depth=2))

    ``custom_formulas`` maps targets (module classes, functions, Tensor method names, aten ops)
    to this profile's own formulas, ``formula(module, out, *args, **kwargs)``, over the package's
    (FlopCounterMode's ``custom_mapping``, fvcore's ``set_op_handle``); see :class:`TorchFLOPsByFX`.

    The keyword-only options are those of :class:`TorchFLOPsByFX`; every other keyword argument
    goes to the model (a model argument named like an option needs ``TorchFLOPsByFX`` itself), but
    ``loss_fn`` and ``backward``, which ``propagate`` would take for itself: ``profile`` records a
    forward under ``torch.no_grad()`` and refuses them (``TypeError``).
    """
    taken = [name for name in ("loss_fn", "backward") if name in kwargs]
    if taken:
        raise TypeError(f"profile() records one forward under torch.no_grad() and takes no {taken[0]}=: for the "
                        "backward too, use TorchFLOPsByFX(model).propagate(*inputs, loss_fn=...) (one step) or "
                        "TrainingProfiler (a training loop); a model argument of that name goes in through "
                        "functools.partial or a wrapper")
    counter = TorchFLOPsByFX(model, tracer=tracer, warmup=warmup, repeat=repeat, ignore_ops=ignore_ops,
                             strict=strict, leaf_modules=leaf_modules, progress=progress,
                             custom_formulas=custom_formulas)
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
    ``deepspeed.profiling.flops_profiler.get_model_profile``, argument for argument. As DeepSpeed
    does, the model runs in eval mode (``model.eval()``); each module's training flag is then put
    back as it was.

    Args:
        model: the model.
        input_shape: build one input: a float tensor of this shape (batch first) on the device
            and with the floating dtype of the model's first parameter or buffer (CPU float32
            when it has none): the model's one positional argument. Give either this or ``args``;
            ``kwargs`` go with either (as in DeepSpeed).
        args, kwargs: the model's positional and keyword arguments (every keyword goes to the
            model, whatever its name).
        print_profile: print the profile (to ``output_file`` when given).
        detailed: include the module tree down to ``module_depth``; without it, the summary and
            the top modules only.
        module_depth: tree depth printed (0 = root, -1 = all) and depth of the top modules
            (-1 = innermost modules).
        top_modules: how many top modules to list (0 = none).
        warm_up: untimed runs before the measured one.
        as_string: return DeepSpeed's text, ``('8.24 G', '4.09 GMACs', '25.56 M')``, instead of
            integers (two decimals; FLOPs without a unit, as DeepSpeed gives them).
        output_file: write the printed profile to this file instead of stdout.
        ignore_modules: module classes (or class names) left unprofiled, as DeepSpeed leaves them: the
            work they run themselves is charged to the module that calls them (the totals do not
            change); their rows show only their submodules' work.
        mode: ``"forward"`` (a forward call) or ``"generate"``: ``model.generate(*args, **kwargs)``
            (after ``warm_up`` unprofiled calls of it), every call of the model in it recorded
            (:func:`torch_flops.generation.profile_generate`); the returned counts are summed over
            the whole generation, as DeepSpeed's are, and the printed profile also splits them into
            the prefill and each decode step. ``input_shape`` then builds token ids (``torch.long``
            ones of that shape) rather than a float tensor, and ``kwargs`` may go with it
            (``generate``'s options, e.g. ``max_new_tokens``).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if mode not in ("forward", "generate"):
        raise ValueError(f"mode must be 'forward' or 'generate', got {mode!r}")
    _validate.check_bool("detailed", detailed)
    _validate.check_bool("as_string", as_string)
    _validate.check_depth("module_depth", module_depth)
    _validate.check_int("top_modules", top_modules, 0)
    _validate.check_int("warm_up", warm_up, 0)
    if args is not None and (isinstance(args, (torch.Tensor, str, bytes, Mapping)) or not isinstance(args, Sequence)):
        raise TypeError(f"args must be a list or tuple of the model's positional inputs (args=[x] for one tensor), "
                        f"got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a dict of the model's keyword inputs, got {type(kwargs).__name__}")
    if input_shape is not None and args:  # (DeepSpeed replaces args by the input it builds, silently)
        raise ValueError("give either input_shape or args, not both (input_shape builds the model's one positional input)")
    if input_shape is None and not args and not kwargs:
        raise ValueError("give input_shape or args/kwargs: the model needs inputs to be profiled")
    if input_shape is not None:
        if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence):
            raise TypeError(f"input_shape must be a sequence of positive ints, got {input_shape!r}")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in input_shape):
            raise ValueError(f"input_shape must be a sequence of positive ints, got {input_shape!r}")
        args = (_tensor_like_model(model, tuple(input_shape)) if mode == "forward" else
                _token_ids_like_model(model, tuple(input_shape)),)
    ignore = _class_names(ignore_modules or (), "ignore_modules")
    if print_profile and output_file is not None:
        report.check_writable(output_file)  # (before the model runs, not after)
    # DeepSpeed calls model.eval() first: the profiled calls run in eval mode, so that a forward that
    # reads self.training counts as DeepSpeed counts it; every module's flag is put back afterwards
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        if mode == "generate":
            return _generate_profile(model, tuple(args or ()), dict(kwargs or {}), print_profile, detailed,
                                     module_depth, top_modules, warm_up, as_string, output_file, ignore)
        counter = TorchFLOPsByFX(model, warmup=warm_up)
        with torch.no_grad():  # (the model's keywords go to the model, whatever they are named)
            counter.propagate_inputs(tuple(args or ()), dict(kwargs or {}))
        result = counter.profile
    finally:
        for m, training in flags:
            m.training = training
    result = _charged_to_parents(result, ignore)
    if print_profile:
        if detailed:
            text = report.model_profile_text(result, depth=module_depth, top=top_modules)
        else:
            parts = [report.summary_text(result)]
            if top_modules:
                parts.append(report.top_modules_text(result, top_modules, module_depth))
            text = "\n\n".join(parts)
        _emit(text, output_file)
    return _totals(result, as_string)


def _generate_profile(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], print_profile: bool,
                      detailed: bool, module_depth: int, top_modules: int, warm_up: int, as_string: bool,
                      output_file: str | None, ignore: list[str]) -> tuple[int | str, int | str, int | str]:
    """``get_model_profile(mode="generate")``: DeepSpeed's warm-up calls, then one profiled
    ``model.generate(*args, **kwargs)``; its totals over every step."""
    generate = getattr(model, "generate", None)
    if not callable(generate):  # (a ValueError: the mode, not the model, is what to change)
        raise ValueError(  # noqa: TRY004
            f"mode must be 'forward' for {type(model).__name__}: mode='generate' calls model.generate(), which it "
            "does not have")
    for _ in range(warm_up):  # (warm_up: checked by get_model_profile)
        generate(*args, **kwargs)
    gp = profile_generation_call(model, lambda: generate(*args, **kwargs))
    whole = _charged_to_parents(gp.total, ignore)  # DeepSpeed's ignore_modules: the totals stay
    if print_profile:
        parts = [gp.text(depth=0)]
        if detailed:
            parts.append("The whole generation (every step summed):\n"
                         + report.model_profile_text(whole, depth=module_depth, top=top_modules))
        elif top_modules:
            parts.append(report.top_modules_text(whole, top_modules, module_depth))
        text = "\n\n".join(parts)
        _emit(text, output_file)
    return _totals(whole, as_string)


def _charged_to_parents(result: Profile, ignored: Sequence[str]) -> Profile:
    """DeepSpeed's ``ignore_modules``: an ignored module gets no hooks there, so the work it runs
    itself is charged to the module that called it and the totals do not change. Here: each node
    whose innermost module is of an ignored class moves to its nearest enclosing module that is
    not; the ignored module keeps its submodules' work (DeepSpeed sums those into it too)."""
    names = set(ignored)
    skipped = {path for path, cls in result.module_types.items() if path and cls in names}
    if not skipped:
        return result
    records = []
    for r in result.records:
        if r.module_path in skipped:
            stack = r.module_chain
            while stack and stack[-1] in skipped:
                stack = stack[:-1]
            path = stack[-1] if stack else ""
            r = r._replace(module_path=path, module_stack=stack, module_type=result.module_types.get(path, ""))
        records.append(r)
    return replace(result, records=tuple(records))


def _emit(text: str, output_file: str | None) -> None:
    """DeepSpeed's output: printed, or written (atomically) to ``output_file``."""
    if output_file is not None:
        report.write_atomic(output_file, text + "\n")
    else:
        print(text)


def _totals(profile: Profile, as_string: bool) -> tuple[int | str, int | str, int | str]:
    """DeepSpeed's return value: ``(flops, macs, params)``, as numbers or as text."""
    flops, macs, params = profile.total_flops, profile.total_macs, profile.total_params
    if as_string:  # DeepSpeed's own text: '33.56 M' (FLOPs carry no unit there), '16.78 MMACs', '16.78 M'; its
        # params_to_string writes a billion parameters with a B: '1.5 B'
        return (_deepspeed_count(flops), _deepspeed_count(macs) + "MACs",
                _deepspeed_count(params).replace("G", "B").strip())
    return flops, macs, params


def _deepspeed_count(n: int) -> str:
    """DeepSpeed's number text: the value in T/G/M/K (from 1e12/1e9/1e6/1e3 up) rounded to 2
    decimals, trailing zeros dropped, then a space and the prefix: ``16777216 -> '16.78 M'``,
    ``412 -> '412 '``."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{round(n / scale, 2):g} {prefix}"
    return f"{n:g} "


def _token_ids_like_model(model: nn.Module, shape: tuple[int, ...]) -> torch.Tensor:
    device = next((t.device for t in (*model.parameters(), *model.buffers())), torch.device("cpu"))
    return torch.ones(shape, dtype=torch.long, device=device)


def _class_names(items: Iterable[type | str], name: str) -> list[str]:
    if isinstance(items, (str, type)) or not isinstance(items, Iterable):
        raise TypeError(f"{name} must be a list of module classes or class names, got {items!r}")
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
    # from a generator of its own: the caller's random numbers are drawn as without this call
    return torch.randn(shape, device=device, dtype=dtype, generator=torch.Generator(device).manual_seed(0))


# ---------------------------------------------------------------------------------------------
# fvcore
# ---------------------------------------------------------------------------------------------

_PREFIXES = ("torch.", "F.", "Tensor.", "aten.", "operator.")
#: module class -> the op TorchScript records for its call (fvcore's names); see _fvcore_op
_MODULE_OPS = {"Linear": "aten::linear", "LazyLinear": "aten::linear", "Bilinear": "aten::bilinear",
               "BatchNorm1d": "aten::batch_norm", "BatchNorm2d": "aten::batch_norm", "BatchNorm3d": "aten::batch_norm",
               "SyncBatchNorm": "aten::batch_norm", "GroupNorm": "aten::group_norm", "LayerNorm": "aten::layer_norm",
               "InstanceNorm1d": "aten::instance_norm", "InstanceNorm2d": "aten::instance_norm",
               "InstanceNorm3d": "aten::instance_norm", "Identity": None, "Flatten": "aten::flatten",
               "Dropout": "aten::dropout", "ReLU6": "aten::hardtanh", "MultiheadAttention": "aten::linear"}  # (and aten::bmm: see _parts)
#: Python operators and function names -> TorchScript's op names
_OPERATOR_OPS = {"add": "add", "iadd": "add_", "__add__": "add", "__radd__": "add", "__iadd__": "add_", "sub": "sub",
                 "isub": "sub_", "__sub__": "sub", "__rsub__": "rsub", "mul": "mul", "imul": "mul_", "__mul__": "mul",
                 "__rmul__": "mul", "truediv": "div", "itruediv": "div_", "__truediv__": "div", "matmul": "matmul",
                 "__matmul__": "matmul", "getitem": None, "__getitem__": None, "setitem": "index_put_",
                 "__setitem__": "index_put_", "neg": "neg", "pow": "pow", "__pow__": "pow",
                 "max_pool2d_with_indices": "max_pool2d", "max_pool1d_with_indices": "max_pool1d",
                 "max_pool3d_with_indices": "max_pool3d", "interpolate": None, "upsample": None,
                 "item": "Int", "_local_scalar_dense": "Int",  # a trace reads .item() as aten::Int (ignored)
                 "dim": None,  # a Python int: a trace records no op for x.dim()
                 "grid_sample": "grid_sampler", "grid_sampler_2d": "grid_sampler", "grid_sampler_3d": "grid_sampler"}


#: torch's convolution and upsampling modules (by class: transformers' GPT-2 ``Conv1D`` is a matmul)
_CONVS = frozenset(c for c in vars(nn).values() if isinstance(c, type) and issubclass(c, nn.modules.conv._ConvNd))
_CONV_NAMES = frozenset(c.__name__ for c in _CONVS)
_RESAMPLINGS = frozenset(c for c in vars(nn).values() if isinstance(c, type) and issubclass(c, nn.Upsample))


def _known_class(cls: type) -> str | None:
    """The name of the class, ``cls`` or one it derives from whose forward it runs unchanged (a
    subclass of ``nn.Upsample``, parametrize's ``ParametrizedLinear``), whose op :func:`_fvcore_op`
    knows; None for any other (one overriding ``forward`` runs more than that op)."""
    for klass in cls.__mro__:
        if klass is nn.Module or not issubclass(klass, nn.Module):
            break
        name = klass.__name__
        if name.startswith("Parametrized"):
            continue
        if (name in _MODULE_OPS or name == "ReLU" or klass in _CONVS or klass in _RESAMPLINGS
                or klass in (nn.RNN, nn.LSTM, nn.GRU, nn.RNNBase, nn.MultiheadAttention)
                or any(klass in keys for pairs in fvcore_rules.OVERRIDES.values() for keys, _ in pairs)):
            return name if getattr(klass, "forward", None) is getattr(cls, "forward", None) else None
    return None


def _traced_through(model: nn.Module) -> dict[Any, None]:
    """The module classes of ``model`` that fvcore's trace shows through their ops: those whose op
    :func:`_fvcore_op` does not know (:func:`_known_class`: ``nn.SiLU`` shows ``aten::silu``, an
    ``nn.LSTMCell`` its two ``aten::linear``), as dropped formulas for ``custom_formulas`` (every one,
    as a subclass overriding ``forward`` of a class the drop-ins count would reach that class's rule)."""
    return {cls: None for cls in {type(m) for m in model.modules()} if _known_class(cls) is None}


def _handle_targets(op: str) -> tuple[Any, ...]:
    """Every target a handle for fvcore's ``op`` applies to: :func:`fvcore_rules.op_targets`, and the
    Tensor methods and Python operators a trace shows as that op (``a @ b``, ``a.matmul(b)``)."""
    name = op.removeprefix("aten::")
    aliases = [alias for alias, traced in _OPERATOR_OPS.items() if traced == name]
    return (*fvcore_rules.op_targets(op), *formulas.methods(name, *aliases),
            *(f for f in formulas.functions(*aliases) if callable(f)))


def _resampling_op(mode: str, rank: int) -> str:
    """The op an upsampling call in ``mode`` on data of ``rank`` spatial dimensions shows in a trace:
    ``aten::upsample_bilinear2d``; "area" is an adaptive average pooling, "nearest-exact" its own op."""
    return {"area": f"aten::adaptive_avg_pool{rank}d",
            "nearest-exact": f"aten::_upsample_nearest_exact{rank}d"}.get(mode, f"aten::upsample_{mode}{rank}d")


class _Resamplings:
    """The formula of every upsampling call (``nn.Upsample``, ``F.interpolate``, ``F.upsample``) in the
    fvcore drop-ins: it names the op the call shows in a trace (:func:`_resampling_op`) and counts it
    with that op's handle, else fvcore's rule for 2-D nearest and bilinear, else 0 (an unsupported op).
    A function call's name, which its record cannot tell (a module's is its ``mode``), is kept in call
    order once counted: :func:`_fvcore_op` reads them back for the counted records."""

    TARGETS = tuple(key for keys, _ in fvcore_rules.OVERRIDES["aten::upsample_nearest2d"] for key in keys)
    MODULES = tuple(t for t in TARGETS if isinstance(t, type))

    def __init__(self, handles: Mapping[str, Formula | None], fvcore_rule: bool) -> None:
        self.handles, self.fvcore_rule = handles, fvcore_rule
        self.ops: list[str] = []

    def __call__(self, module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
        mode = module.mode if module is not None else (args[2] if len(args) > 2 else kwargs.get("mode", "nearest"))
        op = _resampling_op(mode, max(out.dim() - 2, 1) if isinstance(out, torch.Tensor) else 2)
        count = self._count(op, module, out, x, *args, **kwargs)
        if module is None:
            self.ops.append(op)
        return count

    def _count(self, op: str, module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
        handle = self.handles.get(op)
        if handle is not None:
            return handle(module, out, x, *args, **kwargs)
        if not self.fvcore_rule or op in self.handles:  # (a None handle: ignored)
            return 0
        if op in ("aten::upsample_nearest2d", "aten::upsample_bilinear2d"):
            return fvcore_rules.upsample_fvcore(module, out, x, *args, **kwargs)
        if op == "aten::adaptive_avg_pool2d":
            return fvcore_rules.adaptive_avg_pool2d_fvcore(module, out, x)
        return 0


def _fvcore_op(r: NodeRecord, modules: Mapping[str, nn.Module], resampled: Iterator[str]) -> str | None:
    """The op fvcore's TorchScript trace shows for this node (``"aten::add"``), None for a node
    that records no op (an input, a ``getitem``, ``nn.Identity``); ``resampled``: the names of the
    upsampling function calls counted, in order (:class:`_Resamplings`)."""
    if r.op in ("placeholder", "output", "get_attr") or is_internal(r):
        return None
    if r.op == "call_module":
        cls = r.module_type
        module = modules.get(r.module_path)
        if module is not None:  # (a subclass running its base's forward, ParametrizedX: the base's op)
            cls = _known_class(type(module)) or cls
        if cls in _CONV_NAMES:
            return "aten::_convolution"
        if isinstance(module, _Resamplings.MODULES):
            return _resampling_op(str(getattr(module, "mode", "nearest")), max(len(r.output_shape or ()) - 2, 1))
        if cls in _MODULE_OPS:
            return _MODULE_OPS[cls]
        if isinstance(module, nn.RNN):  # TorchScript's op for nn.RNN names its nonlinearity
            return f"aten::rnn_{module.nonlinearity}"
        if cls == "ReLU" and module is not None:
            return "aten::relu_" if getattr(module, "inplace", False) else "aten::relu"
        return "aten::" + fvcore_rules.snake(cls)
    name = r.target
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if name in ("interpolate", "upsample"):  # (named by its formula as it ran; one not counted: no mode known)
        return next(resampled, "aten::upsample") if r.status is Status.COUNTED else "aten::upsample"
    if name.startswith(("conv", "convolution", "_convolution")) and not name.startswith("convolution_backward"):
        return "aten::_convolution"
    op = _OPERATOR_OPS.get(name, name)
    return None if op is None else f"aten::{op}"


def _fvcore_name(op: str) -> str:
    """fvcore's ``by_operator`` key of an op: ``conv`` for convolutions, else the op without
    ``aten::``."""
    return fvcore_rules.MAC_OPS.get(op, op.removeprefix("aten::"))


class FlopCountAnalysis:
    """fvcore's ``FlopCountAnalysis(model, inputs)`` on torch_flops' own recording: fvcore's
    handles (:mod:`torch_flops.formulas.fvcore`: one per multiply-accumulate for convolutions and
    matmuls, fvcore's estimates for norms, upsampling, adaptive average pooling, grid sampling),
    its operator names (``conv``, ``linear``, ``batch_norm``, ...), its ignored ops and its
    unsupported-op report (``{"aten::max_pool2d": 1, "aten::add": 16}`` on ResNet-50).

    >>> flops = FlopCountAnalysis(model, (x,))
    >>> flops.total(), flops.by_module()["layer1"], flops.by_operator()["conv"]

    ``inputs`` is one tensor or a tuple of positional inputs. The model runs once, eagerly, on
    first use (again after a setting that changes the counts); :attr:`profile` is the full
    :class:`Profile` (fvcore's counts in its ``flops`` for the ops whose handle is a formula,
    torch_flops' MACs for the convolutions and matmuls). :meth:`set_op_handle` takes a formula of
    the table's convention, ``handle(module, out, *args, **kwargs)`` (not fvcore's TorchScript
    handle), or None to ignore the op. A module shared under several names is reported under its
    first name (:meth:`canonical_module_name`); every query accepts any of its names.
    """

    #: fvcore's handles this analysis starts with (ActivationCountAnalysis: its own)
    _default_ops: frozenset[str] = fvcore_rules.HANDLED
    #: which of fvcore_rules.SPLIT_MODULES' formulas counts (0: FLOPs, 1: activations)
    _split_formula = 0

    def __init__(self, model: nn.Module, inputs: Any) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self._model = model
        self._inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        self._stats: _FvcoreStats | None = None  # the run and its tally (fvcore's name: None re-runs)
        self._handles: dict[str, Formula | None] = {}  # set_op_handle's, by fvcore op name
        self._ignored: set[str] = set(fvcore_rules.IGNORED)
        # fvcore's settings, under its names: warnings logged, tracer warnings shown, ancestors
        self._enable_warn_unsupported_ops = True
        self._enable_warn_uncalled_mods = True
        self._warn_trace = "no_tracer_warning"
        self._ancestor_mode = "owner"
        aliases: dict[str, str] = {}
        canonical: dict[int, str] = {}
        for name, module in model.named_modules(remove_duplicate=False):
            aliases[name] = canonical.setdefault(id(module), name)
        self._aliases = aliases

    def set_op_handle(self, *args: Any, **kwargs: Any) -> FlopCountAnalysis:
        """fvcore's ``set_op_handle(name, handle, name2, handle2, ...)`` or ``(**{name: handle})``:
        count op ``name`` (``"aten::batch_norm"``) with ``handle(module, out, *args, **kwargs)``,
        a formula of the table's convention applied to every target that runs the op (its module
        classes, functions and aten ops), or ignore it (``None``). Returns the analysis."""
        if len(args) % 2:
            raise TypeError("set_op_handle takes (name, handle) pairs")
        pairs = dict(zip(args[::2], args[1::2]), **kwargs)
        for name, handle in pairs.items():
            if not isinstance(name, str):
                raise TypeError(f"set_op_handle: an op name must be a str like 'aten::batch_norm', got {name!r}")
            if handle is not None and not callable(handle):
                raise TypeError(f"set_op_handle: the handle of {name!r} must be callable or None, got {handle!r}")
            if name.startswith("prim::PythonOp."):  # fvcore's name of a custom autograd.Function's call
                if handle is not None:
                    warnings.warn(f"set_op_handle: {name!r} (a custom autograd.Function) is not applied: torch_flops "
                                  "records such a Function through the ops its forward runs, each counted by its own "
                                  "handle", UserWarning, stacklevel=2)
            elif handle is not None and not fvcore_rules.op_targets(name):
                raise ValueError(f"set_op_handle: no module, function or aten op of this torch runs {name!r}")
            self._handles[name] = handle
        self._stats = None
        return self

    def clear_op_handles(self) -> FlopCountAnalysis:
        """fvcore's ``clear_op_handles()``: forget every handle, fvcore's defaults included, so
        that every op not ignored is unsupported and counts 0. Returns the analysis."""
        self._handles = {}
        self._default_ops = frozenset()
        self._stats = None
        return self

    def copy(self, new_model: nn.Module | None = None, new_inputs: Any = None) -> FlopCountAnalysis:
        """fvcore's ``copy(new_model=None, new_inputs=None)``: a new analysis with this one's
        handles and settings, on another model and/or inputs (default: the same). It runs anew."""
        other = type(self)(self._model if new_model is None else new_model,
                           self._inputs if new_inputs is None else new_inputs)
        other._handles = dict(self._handles)
        other._default_ops = self._default_ops
        other._enable_warn_unsupported_ops = self._enable_warn_unsupported_ops
        other._enable_warn_uncalled_mods = self._enable_warn_uncalled_mods
        other._warn_trace = self._warn_trace
        other._ancestor_mode = self._ancestor_mode
        return other

    def _enabled(self, op: str) -> bool:
        if op in self._handles:
            return self._handles[op] is not None
        return op in self._default_ops

    def _custom_formulas(self) -> dict[Any, Formula | None]:
        custom: dict[Any, Formula | None] = dict.fromkeys(fvcore_rules.TRACED_THROUGH)  # (no op of their own)
        custom.update(_traced_through(self._model))
        for op, pairs in fvcore_rules.OVERRIDES.items():
            if op in self._default_ops and self._enabled(op):
                for keys, formula in pairs:
                    custom.update(dict.fromkeys(keys, formula))
        for cls, split in fvcore_rules.SPLIT_MODULES.items():
            custom[cls] = split[self._split_formula]
        for op, handle in self._handles.items():
            if handle is not None:
                custom.update(dict.fromkeys(_handle_targets(op), handle))
        self._resamplings = _Resamplings(self._handles, fvcore_rule=True)
        custom.update(dict.fromkeys(_Resamplings.TARGETS, self._resamplings))
        return custom

    @property
    def profile(self) -> Profile:
        return self._analyse().profile

    def _run(self) -> tuple[Profile, set[tuple[str, ...]]]:
        """One eager call of the model (fvcore traces one call too), with fvcore's warning filter;
        in ``ancestor_mode("caller")`` also the stacks of (canonical) module names that were
        called, read by a pair of global module hooks removed right after."""
        stacks: set[tuple[str, ...]] = set()
        hooks: list[Any] = []
        if self._ancestor_mode == "caller":
            names = {id(m): name for name, m in self._model.named_modules()}
            stack: list[str | None] = []

            def enter(module: nn.Module, args: Any) -> None:
                stack.append(names.get(id(module)))
                stacks.add(tuple(n for n in stack if n is not None))

            def leave(module: nn.Module, args: Any, output: Any) -> None:
                if stack:
                    stack.pop()

            hooks = [nn.modules.module.register_module_forward_pre_hook(enter),
                     nn.modules.module.register_module_forward_hook(leave)]
        try:
            with warnings.catch_warnings():
                if self._warn_trace == "none":
                    warnings.simplefilter("ignore")
                elif self._warn_trace == "no_tracer_warning":
                    warnings.simplefilter("ignore", torch.jit.TracerWarning)
                # in the caller's grad mode (on by default), as fvcore's trace runs the model: not under no_grad
                counter = TorchFLOPsByFX(self._model, tracer="eager", custom_formulas=self._custom_formulas())
                counter.propagate(*self._inputs)
                result = counter.profile
        finally:
            for hook in hooks:
                hook.remove()
        return result, stacks

    def _ancestors(self, r: NodeRecord, stacks: set[tuple[str, ...]]) -> tuple[set[str], set[str]]:
        """(the modules a node counts into, the modules it shows were called): fvcore's owner
        mode counts a node into its module and that module's owners by name; caller mode into
        the modules on its call stack (a method other than ``forward`` is no call)."""
        chain = r.module_chain
        if self._ancestor_mode == "caller":
            ends = [s for s in stacks if (s[-1] if s else "") == r.module_path]
            stack = next((s for s in ends if module_chain(s) == chain), None)
            called = {"", *(stack if stack is not None else chain)}
            return called, called
        owners = set(ancestors(r.module_path))
        return owners, owners | set(chain)

    def _analyse(self) -> _FvcoreStats:
        if self._stats is None:
            result, stacks = self._run()
            modules = dict(self._model.named_modules())
            by_module: dict[str, Counter[str]] = {path: Counter() for path in modules}
            unsupported: Counter[tuple[str, str]] = Counter()
            called: set[str] = set()
            resampled = iter(self._resamplings.ops)
            for r in result.records:
                op = _fvcore_op(r, modules, resampled)
                if op is None:
                    continue
                counted, seen = self._ancestors(r, stacks)
                called |= seen
                for part, count in self._parts(r, op, modules):
                    if self._enabled(part):
                        for path in counted:
                            by_module.setdefault(path, Counter())[_fvcore_name(part)] += count
                    elif part not in self._ignored and part not in self._handles:
                        for path in counted:
                            unsupported[(path, part)] += 1
            self._stats = _FvcoreStats(result, by_module, unsupported, called)
            self._log_warnings()
        return self._stats

    def _log_warnings(self) -> None:
        """fvcore's two warnings, logged (``logging``, logger ``torch_flops.api``) when enabled."""
        log = logging.getLogger(__name__)
        if self._enable_warn_unsupported_ops:
            for op, n in self.unsupported_ops().items():
                log.warning("Unsupported operator %s encountered %d time(s)", op, n)
        if self._enable_warn_uncalled_mods:
            modules = dict(self._model.named_modules())
            silent = {nn.Module.forward, nn.ModuleList.forward, nn.ModuleDict.forward, nn.Identity.forward}
            uncalled = sorted(p for p in self.uncalled_modules() if type(modules[p]).forward not in silent)
            if uncalled:
                log.warning("These submodules were never called during the run: %s. They are unused, or run only "
                            "through another method than their forward, in which case their counts go to the "
                            "module that called that method.", ", ".join(uncalled))

    def _parts(self, r: NodeRecord, op: str, modules: Mapping[str, nn.Module]) -> list[tuple[str, int]]:
        """The ops fvcore's trace shows for one node, each with its count (read when it is
        counted): one, or for a module fvcore sees as several (``nn.MultiheadAttention``: its
        projections' ``aten::linear`` and, with ``need_weights``, its ``aten::bmm``) each part, from
        the node's count ``(both, linear)`` (:data:`~torch_flops.formulas.fvcore.SPLIT_MODULES`)."""
        module = modules.get(r.module_path) if r.op == "call_module" else None
        if module is not None and isinstance(module, tuple(fvcore_rules.SPLIT_MODULES)):
            linear = r.macs or 0
            bmm = (r.flops or 0) - linear
            return [("aten::linear", linear), *([("aten::bmm", bmm)] if bmm else [])]
        parts = [(op, self._count(r, op) if self._enabled(op) else 0)]
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and module.track_running_stats \
                and module.num_batches_tracked is not None:  # its forward's num_batches_tracked.add_(1), no FLOP
            parts.append(("aten::add_", 0))
        return parts

    def _count(self, r: NodeRecord, op: str) -> int:
        """fvcore's count of one node whose op it handles."""
        if op in fvcore_rules.MAC_OPS and op not in self._handles:
            return r.macs or 0
        return r.flops or 0

    def canonical_module_name(self, name: str) -> str:
        """fvcore's ``canonical_module_name``: the name this analysis reports a module under (its
        first name in ``model.named_modules()``); ``KeyError`` for a name no module has."""
        if name not in self._aliases:
            raise KeyError(f"no module {name!r} in the analysed model; modules are {list(self._aliases)[:10]}...")
        return self._aliases[name]

    def total(self, module_name: str = "") -> int:
        """fvcore's count of the whole model, or of the module at ``module_name`` (submodules included)."""
        return sum(self._analyse().by_module[self.canonical_module_name(module_name)].values())

    def by_module(self) -> Counter[str]:
        """Module path ("" = the root) -> its count, submodules included (every module)."""
        return Counter({path: sum(ops.values()) for path, ops in self._analyse().by_module.items()})

    def by_operator(self, module_name: str = "") -> Counter[str]:
        """Operator (fvcore's name) -> count, inside ``module_name`` ("" = the whole model)."""
        return Counter(self._analyse().by_module[self.canonical_module_name(module_name)])

    def by_module_and_operator(self) -> dict[str, Counter[str]]:
        """Module path -> (operator -> count), each module's submodules included."""
        return {path: Counter(ops) for path, ops in self._analyse().by_module.items()}

    def unsupported_ops(self, module_name: str = "") -> Counter[str]:
        """fvcore's unsupported ops (``aten::add`` -> nodes) inside ``module_name``: ops it has no
        handle for and does not ignore."""
        name = self.canonical_module_name(module_name)
        return Counter({op: n for (path, op), n in self._analyse().unsupported.items() if path == name})

    def uncalled_modules(self) -> set[str]:
        """Submodules that ran no op (fvcore's trace never enters them: an ``nn.Identity`` too;
        in caller mode also those whose ``forward`` never ran, their methods called directly)."""
        called = self._analyse().called
        return {path for path, _ in self._model.named_modules() if path and path not in called}

    # fvcore's configuration methods, which return the analysis for chaining
    def unsupported_ops_warnings(self, enabled: bool) -> FlopCountAnalysis:
        """Log (``logging.warning``) each unsupported op and its count when the analysis runs (default: on)."""
        self._enable_warn_unsupported_ops = _validate.check_bool("enabled", enabled)
        return self

    def uncalled_modules_warnings(self, enabled: bool) -> FlopCountAnalysis:
        """Log the modules never called (containers and ``nn.Identity`` aside) when the analysis runs (default: on)."""
        self._enable_warn_uncalled_mods = _validate.check_bool("enabled", enabled)
        return self

    def tracer_warnings(self, mode: str) -> FlopCountAnalysis:
        """Python warnings raised while the model runs: ``"all"``, ``"no_tracer_warning"`` (the
        default: all but ``torch.jit.TracerWarning``) or ``"none"`` (silenced). Runs anew."""
        if mode not in ("all", "no_tracer_warning", "none"):
            raise ValueError(f"tracer_warnings mode must be 'all', 'no_tracer_warning' or 'none', got {mode!r}")
        self._warn_trace, self._stats = mode, None
        return self

    def ancestor_mode(self, mode: str) -> FlopCountAnalysis:
        """Which modules a node counts into: ``"owner"`` (the default: its module and the modules
        that own it by name) or ``"caller"`` (the modules whose forward it ran inside; a module
        shared by two callers counts into each for its own calls). Runs anew."""
        if mode not in ("owner", "caller"):
            raise ValueError(f"ancestor_mode must be 'owner' or 'caller', got {mode!r}")
        self._ancestor_mode, self._stats = mode, None
        return self


@dataclass(frozen=True)
class _FvcoreStats:
    """One run of a :class:`FlopCountAnalysis` and its tally."""

    profile: Profile
    by_module: dict[str, Counter[str]]  #: module -> operator -> count
    unsupported: Counter[tuple[str, str]]  #: (module, op) -> nodes
    called: set[str]  #: modules that ran an op


class ActivationCountAnalysis(FlopCountAnalysis):
    """fvcore's ``ActivationCountAnalysis``: the output elements of each convolution, linear,
    addmm, bmm, einsum and matmul (fvcore's handles), with the same API as
    :class:`FlopCountAnalysis`."""

    _default_ops = frozenset(op for op in fvcore_rules.MAC_OPS if op != "aten::mm")
    _split_formula = 1

    def _custom_formulas(self) -> dict[Any, Formula | None]:
        # no fvcore FLOP rules here, but the handles set_op_handle was given; and the upsampling calls'
        # formula, which names the op each shows (_Resamplings): an unsupported op here, unless handled
        custom: dict[Any, Formula | None] = {**dict.fromkeys(fvcore_rules.TRACED_THROUGH), **_traced_through(self._model),
                                             **{cls: split[self._split_formula]
                                                for cls, split in fvcore_rules.SPLIT_MODULES.items()}}
        for op, handle in self._handles.items():
            if handle is not None:
                custom.update(dict.fromkeys(_handle_targets(op), handle))
        self._resamplings = _Resamplings(self._handles, fvcore_rule=False)
        custom.update(dict.fromkeys(_Resamplings.TARGETS, self._resamplings))
        return custom

    def _count(self, r: NodeRecord, op: str) -> int:
        if op in self._handles:
            return r.flops or 0
        return prod(r.output_shape) if r.output_shape else 0


def _fvcore_size(x: int, decimals: int = 3) -> str:
    """fvcore's number format: 3 decimals (``flop_count_str``: 2), trailing zeros dropped, K/M/G/T/P
    above 100 of each."""
    def fixed(v: float) -> str:
        return f"{v:.{decimals}f}".rstrip("0").rstrip(".")

    for limit, scale, suffix in ((1e14, 1e15, "P"), (1e11, 1e12, "T"), (1e8, 1e9, "G"), (1e5, 1e6, "M"),
                                 (1e2, 1e3, "K")):
        if abs(x) > limit:
            return fixed(x / scale) + suffix
    return str(x)


def flop_count_table(flops: FlopCountAnalysis, max_depth: int = 3, activations: ActivationCountAnalysis | None = None,
                     show_param_shapes: bool = True) -> str:
    """fvcore's ``flop_count_table``: a pipe table of modules (and, with ``show_param_shapes``,
    each parameter's shape under its module) down to ``max_depth``, with their parameter count and
    count (and activations, when given). Modules whose numbers are all 0 are left out, a module
    with one child of the same numbers is shown as that child, a module that ran no op shows an
    empty count."""
    if not isinstance(flops, FlopCountAnalysis):
        raise TypeError(f"flop_count_table takes a FlopCountAnalysis, got {type(flops).__name__}")
    if activations is not None and not isinstance(activations, ActivationCountAnalysis):
        raise TypeError(f"activations must be an ActivationCountAnalysis or None, got {type(activations).__name__}")
    _validate.check_int("max_depth", max_depth, 0)
    _validate.check_bool("show_param_shapes", show_param_shapes)
    for analysis in (flops, activations):  # fvcore's table turns their warnings off (for good, as fvcore does)
        if analysis is not None:
            analysis._enable_warn_unsupported_ops = analysis._enable_warn_uncalled_mods = False
            analysis._warn_trace = "none"  # (a run already made is kept, as in fvcore)
    params_header = "#parameters" + (" or shape" if show_param_shapes else "")
    columns = [params_header, "#flops"] + (["#activations"] if activations is not None else [])
    model = flops._model
    # rows in fvcore's order: every prefix of every parameter name, then the other modules
    params: dict[str, int] = {}  # (fvcore's parameter_count: no "" row for a model without parameters)
    shapes: dict[str, tuple[int, ...]] = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        for k in range(len(parts) + 1):
            prefix = ".".join(parts[:k])
            params[prefix] = params.get(prefix, 0) + p.numel()
        shapes[name] = tuple(p.shape)
    counts = [flops.by_module()] + ([activations.by_module()] if activations is not None else [])
    uncalled = [flops.uncalled_modules()] + ([activations.uncalled_modules()] if activations is not None else [])
    names = list(dict.fromkeys([*params, *(path for path, _ in model.named_modules())]))
    values = {n: [params.get(n, 0), *(c.get(n, 0) for c in counts)] for n in names}

    def children(name: str) -> list[str]:
        prefix = name + "." if name else ""
        return [n for n in kept if n and n.startswith(prefix) and n.count(".") == prefix.count(".")]

    # drop all-zero rows whose descendants are all dropped too (the root stays)
    kept: list[str] = []
    for n in reversed(names):
        prefix = n + "." if n else ""
        if not n or any(values[n]) or any(k.startswith(prefix) for k in kept):
            kept.append(n)
    kept.reverse()

    def cells(name: str) -> list[str]:
        if name in shapes:
            return [str(shapes[name]) if show_param_shapes else "", *("" for _ in counts)]
        row = [_fvcore_size(values[name][0]) if name in params else ""]
        for i, stat in enumerate(values[name][1:]):
            # an uncalled module's cell is blank; fvcore's holds the row's indent (a space or more: never
            # the root), which tabulate reads as text, so the column is aligned left as fvcore's is
            row.append(" " if name in uncalled[i] else _fvcore_size(stat))
        return row

    def forward(name: str) -> str:
        # a row with one child of the same numbers is shown as the child
        while True:
            kids = children(name)
            if len(kids) != 1 or kids[0] in shapes or cells(kids[0]) != cells(name):
                return name
            name = kids[0]

    rows: list[list[str]] = []

    def fill(name: str, level: int) -> None:
        for child in children(name):
            if child in shapes and not show_param_shapes:
                continue
            shown = forward(child)
            rows.append([shown.removeprefix(root_prefix), *cells(shown)])
            if level < max_depth:
                fill(shown, level + 1)

    root = forward("")
    root_prefix = root + "." if root else ""  # the root shown as its one child: rows named below it, as fvcore's
    rows.append([root or "model", *cells(root)])
    if max_depth >= 1:
        fill(root, 1)
    return tabulate(rows, headers=["module", *columns], tablefmt="pipe")  # numbers parsed (aligned) as fvcore does


def parameter_count(model: nn.Module) -> defaultdict[str, int]:
    """fvcore's ``parameter_count``: every prefix of each parameter's name (``""`` = the model,
    ``"fc"``, ``"fc.weight"``) -> the elements of the parameters under it (shared ones once)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"parameter_count takes a torch.nn.Module, got {type(model).__name__}")
    counts: defaultdict[str, int] = defaultdict(int)
    for name, p in model.named_parameters():
        parts = name.split(".")
        for k in range(len(parts) + 1):
            counts[".".join(parts[:k])] += p.numel()
    return counts


def _param_size(x: int) -> str:
    """parameter_count_table's number format: 1 decimal, G/M/K above 100 of each."""
    for limit, scale, suffix in ((1e8, 1e9, "G"), (1e5, 1e6, "M"), (1e2, 1e3, "K")):
        if x > limit:
            return f"{x / scale:.1f}{suffix}"
    return str(x)


def parameter_count_table(model: nn.Module, max_depth: int = 3) -> str:
    """fvcore's ``parameter_count_table``: a pipe table of the model's parameter count and, down
    to ``max_depth`` levels of name, each module's count and each parameter's shape, indented one
    space per level."""
    counts = parameter_count(model)
    _validate.check_int("max_depth", max_depth, 0)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    rows: list[tuple[str, str]] = [("model", _param_size(counts.pop("", 0)))]

    def fill(level: int, prefix: str) -> None:
        if level >= max_depth:
            return
        for name, n in counts.items():
            if name.count(".") == level and name.startswith(prefix):
                indent = " " * (level + 1)
                if name in shapes:
                    rows.append((indent + name, indent + str(shapes[name])))
                else:
                    rows.append((indent + name, indent + _param_size(n)))
                    fill(level + 1, name + ".")

    fill(0, "")
    # the indents are the table's: tabulate keeps them only with PRESERVE_WHITESPACE, restored after
    old = tabulate_module.PRESERVE_WHITESPACE
    tabulate_module.PRESERVE_WHITESPACE = True
    try:
        return tabulate(rows, headers=["name", "#elements or shape"], tablefmt="pipe")
    finally:
        tabulate_module.PRESERVE_WHITESPACE = old


def flop_count(model: nn.Module, inputs: Any,
               supported_ops: Mapping[str, Any] | None = None) -> tuple[defaultdict[str, float], Counter[str]]:
    """fvcore's ``flop_count``: (operator -> GFLOPs of a :class:`FlopCountAnalysis` (one per
    multiply-accumulate), its unsupported ops -> nodes); ``supported_ops`` are
    :meth:`~FlopCountAnalysis.set_op_handle`'s handles, by op name."""
    return _per_operator(FlopCountAnalysis(model, inputs), supported_ops, 1e9)  # GFLOPs = count / 10^9


def activation_count(model: nn.Module, inputs: Any,
                     supported_ops: Mapping[str, Any] | None = None) -> tuple[defaultdict[str, float], Counter[str]]:
    """fvcore's ``activation_count``: (operator -> millions of activations of an
    :class:`ActivationCountAnalysis`, its unsupported ops -> nodes)."""
    return _per_operator(ActivationCountAnalysis(model, inputs), supported_ops, 1e6)  # M activations = count / 10^6


def _per_operator(analysis: FlopCountAnalysis, supported_ops: Mapping[str, Any] | None,
                  unit: float) -> tuple[defaultdict[str, float], Counter[str]]:
    """(operator -> count / ``unit``, unsupported ops -> nodes) of ``analysis`` with the handles."""
    analysis.set_op_handle(**dict(supported_ops or {}))
    per_op: defaultdict[str, float] = defaultdict(float)
    for op, n in analysis.by_operator().items():
        per_op[op] = n / unit
    return per_op, analysis.unsupported_ops()


def flop_count_str(flops: FlopCountAnalysis, activations: ActivationCountAnalysis | None = None) -> str:
    """fvcore's ``flop_count_str``: the model printed as ``str(model)`` prints it, each module
    with its ``#params`` and ``#flops`` (and ``#acts``) where any is nonzero; a module that ran
    no op shows ``N/A`` (a note above the model says so). The analyses' warnings are turned off."""
    if not isinstance(flops, FlopCountAnalysis):
        raise TypeError(f"flop_count_str takes a FlopCountAnalysis, got {type(flops).__name__}")
    if activations is not None and not isinstance(activations, ActivationCountAnalysis):
        raise TypeError(f"activations must be an ActivationCountAnalysis or None, got {type(activations).__name__}")
    model = flops._model
    analyses = [("#flops", flops)] + ([("#acts", activations)] if activations is not None else [])
    columns: dict[str, Mapping[str, int]] = {"#params": dict(parameter_count(model))}
    for stat, analysis in analyses:
        analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
        columns[stat] = analysis.by_module()
    uncalled = {stat: analysis.uncalled_modules() for stat, analysis in analyses}
    all_uncalled = set().union(*uncalled.values())
    # module -> stat -> value, every module of the model filled with 0 (fvcore's order: the stats', then the modules')
    stats: dict[str, dict[str, int]] = {}
    names = [path for path, _ in model.named_modules()]
    for stat, values in columns.items():
        for path in [*values, *(n for n in names if n not in values)]:
            stats.setdefault(path, {})[stat] = values.get(path, 0)
    # drop modules whose stats are all 0 (fvcore's rule: the root only kept by it when no module is uncalled)
    keep = all_uncalled or {""}
    kept: dict[str, dict[str, int]] = {}

    def visit(name: str) -> None:
        prefix = name + ("." if name else "")
        for path in stats:
            if path and path.count(".") == prefix.count(".") and path.startswith(prefix):
                visit(path)
        if any(stats[name].values()) or name in keep:
            kept[name] = stats[name]

    visit("")
    shown = {path: {stat: _fvcore_size(v, 2) for stat, v in values.items()} for path, values in kept.items()}
    for stat, paths in uncalled.items():
        for path in paths:
            shown.setdefault(path, {})[stat] = "N/A"

    def indent(text: str) -> str:  # as nn.Module's repr indents a child: every line but the first by 2
        first, *rest = text.split("\n")
        return "\n".join([first, *("  " + line for line in rest)])

    def describe(module: nn.Module, name: str) -> str:  # nn.Module.__repr__ with the stats as extra lines
        extra = module.extra_repr().split("\n") if module.extra_repr() else []
        if shown.get(name):
            extra.append(", ".join(f"{k}: {v}" for k, v in shown[name].items()))
        children = [f"({key}): " + indent(describe(child, name + ("." if name else "") + key))
                    for key, child in module._modules.items() if child is not None]
        lines = extra + children
        text = module._get_name() + "("
        if len(extra) == 1 and not children:
            text += extra[0]
        elif lines:
            text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"

    note = ("N/A indicates a possibly missing statistic due to how the module was called. Missing values are "
            "still included in the parent's total.\n") if all_uncalled else ""
    return note + describe(model, "")


# ---------------------------------------------------------------------------------------------
# compiled models
# ---------------------------------------------------------------------------------------------

def compare_compiled(model: nn.Module, *args: Any, compile_kwargs: Mapping[str, Any] | None = None, warmup: int = 1,
                     repeat: int = 5, **kwargs: Any) -> CompiledComparison:
    """Profile ``model`` eagerly (:class:`~torch_flops.TorchFLOPsByFX`) and compiled
    (:func:`profile_compiled`) on the same inputs, forward under ``torch.no_grad()``, and compare
    them per module: time, speed-up, kernel launches, bytes moved (eager op by op vs after fusion)
    and FLOPs. ``model`` may be compiled already (its original module is the eager side)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (or what torch.compile returns), got {type(model).__name__}")
    _validate.check_int("warmup", warmup, 0)
    _validate.check_int("repeat", repeat, 1)
    original, compiled_module = split_compiled(model)
    compile_options(compiled_module, compile_kwargs)  # (bad keywords: refused before the eager side runs)
    with torch.no_grad():
        launches = eager_launches(original, args, kwargs)
        counter = TorchFLOPsByFX(original, warmup=warmup, repeat=repeat)
        call_args, call_kwargs = copy_inputs((args, kwargs))
        extra = ExtraRuns((), original)  # (the eager side's call is an extra one: the compiled call's effects stay)
        try:
            counter.propagate(*call_args, **call_kwargs)
        finally:
            extra.undo()
        eager = counter.profile
        eager_call = eager_call_ms(original, args, kwargs, warmup, repeat)
    result = profile_compiled(model, *args, compile_kwargs=compile_kwargs, warmup=warmup, repeat=repeat, **kwargs)
    compiled = result.profile
    e_mods, c_mods = eager.by_module(), compiled.by_module()
    c_launch = Counter[str]()
    for r in compiled.records:
        if r.op in ("kernel", "extern_kernel"):
            for p in ("", *r.module_chain):
                c_launch[p] += 1
    rows = []
    for path in dict.fromkeys([*e_mods, *c_mods]):
        e, c = e_mods.get(path), c_mods.get(path)
        rows.append(CompareRow(
            path=path, module_type=(e or c).module_type if (e or c) else "",  # type: ignore[union-attr]
            eager_ms=e.time_ms if e else None, compiled_ms=c.time_ms if c else None,
            eager_launches=launches.get(path, 0), compiled_launches=c_launch.get(path, 0),
            eager_bytes=(e.bytes_read + e.bytes_written) if e else 0,
            compiled_bytes=(c.bytes_read + c.bytes_written) if c else 0,
            eager_flops=e.flops if e else 0, compiled_flops=c.flops if c else 0))
    unaccounted = eager.total_flops - compiled.total_flops - result.eliminated_flops
    return CompiledComparison(rows=tuple(rows), eager=eager, compiled=compiled, result=result,
                              eager_call_ms=eager_call, unaccounted_flops=unaccounted)
