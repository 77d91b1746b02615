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

``F.batch_norm(input, running_mean, running_var, weight, bias, training, ...)`` and
``torch.batch_norm`` / ``aten.batch_norm(input, weight, bias, running_mean, running_var,
training, ...)`` share a name but not an argument order: each target has its own formula (the
same holds for ``instance_norm``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torch_flops.formulas import aten_ops, functions, modules, register
from torch_flops.formulas._shapes import arg, has_tensor, is_float, numel

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


def _input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return arg(args, kwargs, 0, "input")


def _uses_input_stats(module: Any) -> bool:
    # As _BatchNorm.forward / _InstanceNorm.forward decide: batch statistics in training mode or
    # when no running statistics are tracked.
    return bool(getattr(module, "training", False)) or getattr(module, "running_mean", None) is None


def _stats(batch_stats: bool) -> int:
    return _INPUT_STATS if batch_stats else _RUNNING_STATS


# ---------------------------------------------------------------------------------------------
# LayerNorm / GroupNorm: F./torch./aten.layer_norm(input, normalized_shape, weight, bias, ...),
# F./torch./aten.group_norm(input, num_groups, weight, bias, ...)
# ---------------------------------------------------------------------------------------------

@register(nn.LayerNorm, nn.GroupNorm, *functions("layer_norm", "group_norm"), *aten_ops("layer_norm", "group_norm"))
def layer_group_norm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element (mean add, sub, square, var add, mul rstd) + 1 weight + 1 bias when affine
    if module is not None:
        weight, bias = has_tensor(module, "weight") or None, has_tensor(module, "bias") or None
    else:
        weight, bias = arg(args, kwargs, 2, "weight"), arg(args, kwargs, 3, "bias")
    return _norm_flops(_input(args, kwargs), _INPUT_STATS, weight, bias)


@register(*aten_ops("native_layer_norm"))
def native_layer_norm_flops(module: Any, out: Any, x: Any, normalized_shape: Any, weight: Any = None,
                            bias: Any = None, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd): as layer_norm
    return _norm_flops(x, _INPUT_STATS, weight, bias)


@register(*aten_ops("native_group_norm"))
def native_group_norm_flops(module: Any, out: Any, x: Any, weight: Any = None, bias: Any = None, *args: Any,
                            **kwargs: Any) -> tuple[int, int]:
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd)
    return _norm_flops(x, _INPUT_STATS, weight, bias)


# ---------------------------------------------------------------------------------------------
# BatchNorm and InstanceNorm: 5 per element with batch statistics, 2 with running statistics;
# + 1 weight + 1 bias when affine
# ---------------------------------------------------------------------------------------------

@register(*modules("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "InstanceNorm1d", "InstanceNorm2d",
                   "InstanceNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d",
                   "LazyInstanceNorm2d", "LazyInstanceNorm3d"))
def batch_instance_norm_module_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    return _norm_flops(_input(args, kwargs), _stats(_uses_input_stats(module)),
                       has_tensor(module, "weight") or None, has_tensor(module, "bias") or None)


@register(F.batch_norm)
def batch_norm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # F.batch_norm(input, running_mean, running_var, weight, bias, training=False, momentum, eps):
    # batch statistics when training or without running statistics
    running_mean, running_var = arg(args, kwargs, 1, "running_mean"), arg(args, kwargs, 2, "running_var")
    training = bool(arg(args, kwargs, 5, "training", False))
    batch_stats = training or (running_mean is None and running_var is None)
    return _norm_flops(_input(args, kwargs), _stats(batch_stats), arg(args, kwargs, 3, "weight"),
                       arg(args, kwargs, 4, "bias"))


@register(torch.batch_norm, *aten_ops("batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                                      "_native_batch_norm_legit_functional"))
def aten_batch_norm_flops(module: Any, out: Any, x: Any, weight: Any = None, bias: Any = None,
                          running_mean: Any = None, running_var: Any = None, training: Any = False, *args: Any,
                          **kwargs: Any) -> tuple[int, int]:
    # torch.batch_norm / aten.batch_norm / native_batch_norm / _native_batch_norm_legit(input, weight,
    # bias, running_mean, running_var, training, momentum, eps, ...): batch statistics when
    # training or without running statistics (the native forms return (out, mean, rstd))
    return _norm_flops(x, _stats(bool(training) or running_mean is None), weight, bias)


@register(*aten_ops("_native_batch_norm_legit_no_training"))
def batch_norm_no_training_flops(module: Any, out: Any, x: Any, weight: Any = None, bias: Any = None,
                                 *args: Any, **kwargs: Any) -> tuple[int, int]:
    # _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps)
    return _norm_flops(x, _RUNNING_STATS, weight, bias)


@register(F.instance_norm)
def instance_norm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats=True, ...)
    use_input_stats = bool(arg(args, kwargs, 5, "use_input_stats", True))
    return _norm_flops(_input(args, kwargs), _stats(use_input_stats), arg(args, kwargs, 3, "weight"),
                       arg(args, kwargs, 4, "bias"))


@register(torch.instance_norm, *aten_ops("instance_norm"))
def aten_instance_norm_flops(module: Any, out: Any, x: Any, weight: Any = None, bias: Any = None,
                             running_mean: Any = None, running_var: Any = None, use_input_stats: Any = True,
                             *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.instance_norm / aten.instance_norm(input, weight, bias, running_mean, running_var,
    # use_input_stats, momentum, eps, cudnn_enabled)
    return _norm_flops(x, _stats(bool(use_input_stats)), weight, bias)


# ---------------------------------------------------------------------------------------------
# Weight normalisation (Salimans & Kingma 2016; torch.nn.utils.parametrizations.weight_norm):
# torch._weight_norm(v, g, dim) = v * (g / ||v||), one norm per slice along ``dim`` (g's elements)
# ---------------------------------------------------------------------------------------------

@register(*functions("_weight_norm"), *aten_ops("_weight_norm", "_weight_norm_interface"))
def weight_norm_flops(module: Any, out: Any, v: Any, g: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # each norm: a square and an add per element of its slice, a sqrt per slice (numel(v) squares,
    # numel(v) - numel(g) adds, numel(g) sqrts: 2*numel(v)); then g / norm per slice (numel(g)) and
    # one multiply per element (numel(v)): 3*numel(v) + numel(g). FlopCounterMode counts 0.
    if not is_float(v):
        return (0, 0)
    return (3 * numel(v) + numel(g), 0)


# ---------------------------------------------------------------------------------------------
# RMSNorm: F./torch./aten.rms_norm(input, normalized_shape, weight, eps)
# ---------------------------------------------------------------------------------------------

@register(*modules("RMSNorm"), *functions("rms_norm"), *aten_ops("rms_norm"))
def rms_norm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 3 per element (square, mean add, mul rstd) + 1 weight when elementwise_affine / given
    weight = (has_tensor(module, "weight") or None) if module is not None else arg(args, kwargs, 2, "weight")
    return _norm_flops(_input(args, kwargs), _RMS, weight)


# ---------------------------------------------------------------------------------------------
# LocalResponseNorm (Krizhevsky et al. 2012, sec. 3.3; torch.nn.LocalResponseNorm docs):
# b = a / (k + alpha/n * sum_{window of n channels} a^2) ^ beta
# ---------------------------------------------------------------------------------------------

@register(nn.LocalResponseNorm, *functions("local_response_norm"))
def local_response_norm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # size + 4 per element: square 1 + (size - 1) window adds + mul alpha/n 1 + add k 1 + pow beta 1
    # + div 1
    size = module.size if module is not None else arg(args, kwargs, 1, "size")
    return _norm_flops(_input(args, kwargs), int(size) + 4)


# ---------------------------------------------------------------------------------------------
# F.normalize: x / max(||x||_p, eps) along dim
# ---------------------------------------------------------------------------------------------

@register(*functions("normalize"))
def normalize_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 3 per element: abs/pow, sum along dim, div by the norm
    return _norm_flops(_input(args, kwargs), 3)
