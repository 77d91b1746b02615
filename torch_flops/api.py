"""One-call entry points over :class:`~torch_flops.analyzer.TorchFLOPsByFX`.

* :func:`profile`: run the model once on the given inputs and return the :class:`Profile`,
  the data every view in :mod:`torch_flops.report` is made from.
* :func:`get_model_profile`: the argument list of DeepSpeed's flops profiler function of the same
  name, for users coming from it; prints the summary, module tree and top modules and returns
  ``(flops, macs, params)``.

Both run the forward pass under ``torch.no_grad()`` and leave the model as they found it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torch_flops import _validate, report
from torch_flops.analyzer import TorchFLOPsByFX, TracerName
from torch_flops.records import Profile

__all__ = ["get_model_profile", "profile"]


def profile(model: nn.Module, *args: Any, tracer: TracerName = "auto", warmup: int = 0, repeat: int = 1,
            ignore_ops: Iterable[str] = (), strict: bool = False, leaf_modules: Iterable[type | str] = (),
            **kwargs: Any) -> Profile:
    """Profile ``model(*args, **kwargs)`` and return its :class:`Profile`.

    >>> p = torch_flops.profile(model, x)
    >>> p.total_flops, p.by_module()["layer1"].flops, p.top_modules(3, by="time")
    >>> print(torch_flops.report.model_profile_text(p, depth=2))

    The keyword-only options are those of :class:`TorchFLOPsByFX`; every other keyword argument
    goes to the model (a model argument named like an option needs ``TorchFLOPsByFX`` itself).
    """
    counter = TorchFLOPsByFX(model, tracer=tracer, warmup=warmup, repeat=repeat, ignore_ops=ignore_ops,
                             strict=strict, leaf_modules=leaf_modules)
    with torch.no_grad():
        counter.propagate(*args, **kwargs)
    return counter.profile


def get_model_profile(
    model: nn.Module,
    input_shape: Sequence[int] | None = None,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    print_profile: bool = True,
    module_depth: int = -1,
    top_modules: int = 3,
    warm_up: int = 1,
    as_string: bool = True,
    output_file: str | None = None,
    ignore_modules: Iterable[type | str] | None = None,
) -> tuple[int | str, int | str, int | str]:
    """Profile one forward pass and return ``(flops, macs, params)``.

    Args:
        model: the model.
        input_shape: build one input: a float tensor of this shape (batch first) on the device
            and with the floating dtype of the model's first parameter or buffer (CPU float32
            when it has none). Give either this or ``args``/``kwargs``.
        args, kwargs: the model's positional and keyword arguments.
        print_profile: print the summary, the module tree down to ``module_depth`` and the top
            ``top_modules`` modules at that depth.
        module_depth: tree depth printed (0 = root, -1 = all) and depth of the top modules
            (-1 = innermost modules).
        top_modules: how many top modules to list (0 = none).
        warm_up: untimed runs before the measured one.
        as_string: return ``('8.21 GFLOPs', '4.09 GMACs', '25.6 M')`` instead of integers.
        output_file: write the printed profile to this file instead of stdout.
        ignore_modules: module classes (or class names) whose calls count 0 FLOPs.
    """
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
    _validate.check_depth("module_depth", module_depth)
    _validate.check_int("top_modules", top_modules, 0)
    ignore: list[str] = []
    for item in ignore_modules or ():
        if isinstance(item, type):
            ignore.append(item.__name__)
        elif isinstance(item, str):
            ignore.append(item)
        else:
            raise TypeError(f"ignore_modules entries must be module classes or class names, got {item!r}")
    result = profile(model, *(args or ()), warmup=warm_up, ignore_ops=ignore, **dict(kwargs or {}))
    if print_profile:
        text = report.model_profile_text(result, depth=module_depth, top=top_modules)
        if output_file is not None:
            with open(output_file, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
    flops, macs, params = result.total_flops, result.total_macs, result.total_params
    if as_string:
        return (report.format_count(flops, "FLOPs"), report.format_count(macs, "MACs"),
                report.format_count(params))
    return flops, macs, params


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
