"""FLOPs of normalisation layers: layer / group / instance / batch / RMS / local response norm and
``F.normalize``.

All of them are "a few FLOPs per element of the input": one shape helper (:func:`_norm_flops`)
serves every front door, ``(per-element cost + weight + bias) * input elements``, 0 for
non-floating data. Per-element costs (a square root or reciprocal square root applied once per
normalised group is not counted: it is O(groups), not O(elements)):

* statistics computed from the input (LayerNorm, GroupNorm, InstanceNorm, BatchNorm in training
  or without running stats): 5 = mean add 1, ``x - mean`` 1, square 1, variance add 1,
  ``* rstd`` 1;
* running statistics (BatchNorm / InstanceNorm in eval with ``track_running_stats``): 2 =
  ``x - running_mean`` 1, ``* rstd`` 1;
* RMSNorm: 3 = square 1, mean add 1, ``* rstd`` 1;
* plus 1 per element for an affine weight and 1 for an affine bias, when present.

``torch.batch_norm`` / ``torch.instance_norm`` share their ``__name__`` with the ``F`` forms but
take ``(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled)``
(always 9 arguments): they are told apart by that argument count (or an explicit
``cudnn_enabled``).
"""

from __future__ import annotations

from typing import Any

from torch_flops.formulas import register_function, register_module
from torch_flops.formulas._shapes import arg, is_float, numel

__all__: list[str] = []

_INPUT_STATS = 5  # mean add, sub mean, square, var add, mul rstd
_RUNNING_STATS = 2  # sub running mean, mul rstd
_RMS = 3  # square, mean add, mul rstd


def _norm_flops(x: Any, per_element: int, weight: Any = None, bias: Any = None) -> tuple[int, int]:
    """``(per_element + [weight] + [bias]) * numel(x)`` FLOPs, 0 unless ``x`` is floating point."""
    if not is_float(x):
        return (0, 0)
    cost = per_element + (weight is not None) + (bias is not None)
    return (cost * numel(x), 0)


def _module_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return arg(args, kwargs, 0, "input")


# ---------------------------------------------------------------------------------------------
# LayerNorm / GroupNorm / InstanceNorm
# ---------------------------------------------------------------------------------------------

@register_module("LayerNorm", "GroupNorm")
def layer_group_norm_module_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element (mean add, sub, square, var add, mul rstd) + 1 weight + 1 bias when affine
    return _norm_flops(_module_input(args, kwargs), _INPUT_STATS,
                       getattr(module, "weight", None), getattr(module, "bias", None))


@register_function("layer_norm", "group_norm")
def layer_group_norm_function_flops(out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element + 1 weight + 1 bias when given;
    # F./torch.layer_norm(input, normalized_shape, weight, bias, ...),
    # F./torch.group_norm(input, num_groups, weight, bias, ...)
    return _norm_flops(arg(args, kwargs, 0, "input"), _INPUT_STATS,
                       arg(args, kwargs, 2, "weight"), arg(args, kwargs, 3, "bias"))


def _uses_input_stats_module(module: Any) -> bool:
    # As _BatchNorm.forward / _InstanceNorm.forward decide: batch statistics in training mode or
    # when no running statistics are tracked.
    return bool(getattr(module, "training", False)) or getattr(module, "running_mean", None) is None


@register_module("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
                 "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d")
def instance_norm_module_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element from input stats (2 with running stats in eval) + 1 weight + 1 bias if affine
    stats = _INPUT_STATS if _uses_input_stats_module(module) else _RUNNING_STATS
    return _norm_flops(_module_input(args, kwargs), stats,
                       getattr(module, "weight", None), getattr(module, "bias", None))


def _is_aten_order(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    # torch.batch_norm / torch.instance_norm: 9 required args, weight/bias before running stats.
    return len(args) >= 9 or "cudnn_enabled" in kwargs


@register_function("instance_norm")
def instance_norm_function_flops(out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element when use_input_stats (default) else 2, + 1 weight + 1 bias when given
    if _is_aten_order(args, kwargs):
        weight, bias = arg(args, kwargs, 1, "weight"), arg(args, kwargs, 2, "bias")
    else:
        weight, bias = arg(args, kwargs, 3, "weight"), arg(args, kwargs, 4, "bias")
    use_input_stats = arg(args, kwargs, 5, "use_input_stats", True)
    stats = _INPUT_STATS if use_input_stats else _RUNNING_STATS
    return _norm_flops(arg(args, kwargs, 0, "input"), stats, weight, bias)


# ---------------------------------------------------------------------------------------------
# BatchNorm
# ---------------------------------------------------------------------------------------------

@register_module("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                 "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d")
def batch_norm_module_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element with batch stats (training / no running stats), 2 with running stats;
    # + 1 weight + 1 bias when affine
    stats = _INPUT_STATS if _uses_input_stats_module(module) else _RUNNING_STATS
    return _norm_flops(_module_input(args, kwargs), stats,
                       getattr(module, "weight", None), getattr(module, "bias", None))


@register_function("batch_norm")
def batch_norm_function_flops(out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element with batch stats (training=True or no running stats), else 2;
    # + 1 weight + 1 bias when given
    if _is_aten_order(args, kwargs):
        weight, bias = arg(args, kwargs, 1, "weight"), arg(args, kwargs, 2, "bias")
        running_mean, running_var = arg(args, kwargs, 3, "running_mean"), arg(args, kwargs, 4, "running_var")
    else:
        running_mean, running_var = arg(args, kwargs, 1, "running_mean"), arg(args, kwargs, 2, "running_var")
        weight, bias = arg(args, kwargs, 3, "weight"), arg(args, kwargs, 4, "bias")
    training = bool(arg(args, kwargs, 5, "training", False))
    batch_stats = training or (running_mean is None and running_var is None)
    stats = _INPUT_STATS if batch_stats else _RUNNING_STATS
    return _norm_flops(arg(args, kwargs, 0, "input"), stats, weight, bias)


# ---------------------------------------------------------------------------------------------
# RMSNorm
# ---------------------------------------------------------------------------------------------

@register_module("RMSNorm")
def rms_norm_module_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 3 per element (square, mean add, mul rstd) + 1 weight when elementwise_affine
    return _norm_flops(_module_input(args, kwargs), _RMS, getattr(module, "weight", None))


@register_function("rms_norm")
def rms_norm_function_flops(out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 3 per element (square, mean add, mul rstd) + 1 weight when given;
    # F./torch.rms_norm(input, normalized_shape, weight, eps)
    return _norm_flops(arg(args, kwargs, 0, "input"), _RMS, arg(args, kwargs, 2, "weight"))


# ---------------------------------------------------------------------------------------------
# LocalResponseNorm (Krizhevsky et al. 2012, sec. 3.3; torch.nn.LocalResponseNorm docs):
# b = a / (k + alpha/n * sum_{window of n channels} a^2) ^ beta
# ---------------------------------------------------------------------------------------------

def _lrn_cost(size: Any) -> int:
    # square 1 + (size - 1) window adds + mul alpha/n 1 + add k 1 + pow beta 1 + div 1 = size + 4
    return int(size) + 4


@register_module("LocalResponseNorm")
def local_response_norm_module_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # size + 4 per element (square, size-1 window adds, mul alpha/n, add k, pow beta, div)
    return _norm_flops(_module_input(args, kwargs), _lrn_cost(module.size))


@register_function("local_response_norm")
def local_response_norm_function_flops(out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # size + 4 per element (square, size-1 window adds, mul alpha/n, add k, pow beta, div)
    return _norm_flops(arg(args, kwargs, 0, "input"), _lrn_cost(arg(args, kwargs, 1, "size")))


# ---------------------------------------------------------------------------------------------
# F.normalize: x / max(||x||_p, eps) along dim
# ---------------------------------------------------------------------------------------------

@register_function("normalize")
def normalize_function_flops(out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 3 per element: abs/pow, sum along dim, div by the norm
    return _norm_flops(arg(args, kwargs, 0, "input"), 3)
