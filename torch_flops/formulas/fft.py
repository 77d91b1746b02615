"""Fast Fourier transforms: the aten kernels every ``torch.fft`` function (and ``torch.stft``)
runs, ``_fft_c2c`` (complex to complex), ``_fft_r2c`` (real to complex) and ``_fft_c2r``.

Convention (FFTW's benchFFT, https://www.fftw.org/speed/method.html, "the standard estimate of the
flop count"): a complex transform of ``N`` points costs ``5 N log2 N`` real FLOPs (radix-2
Cooley-Tukey: ``N/2 log2 N`` butterflies of one complex multiply, 6, and two complex adds, 4);
a real-data transform (r2c or c2r) half of it, ``2.5 N log2 N``. A transform over several dims
is one transform of ``N`` = the product of their sizes; each one of the batch (the other dims)
is counted. ``N log2 N`` is real-valued for ``N`` not a power of 2 and rounded once per node.
A normalisation (``norm="ortho"`` or ``"forward"``/``"backward"`` where it scales) multiplies
each output element by a real scalar: 2 FLOPs per complex element, 1 per real one. These are
FLOPs, not MACs; FlopCounterMode counts FFTs as 0.
"""

from __future__ import annotations

import math
from typing import Any

from torch_flops.formulas import aten_ops, register
from torch_flops.formulas._shapes import arg, numel, prod

__all__ = ["fft_c2c_flops", "fft_c2r_flops", "fft_r2c_flops"]


def _transforms(points: int, batch: int, per_point_log: float) -> int:
    # per_point_log * N log2 N FLOPs per transform of N points, batch transforms
    if points <= 1:
        return 0
    return round(batch * per_point_log * points * math.log2(points))


def _fft(signal: Any, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any], per_point_log: float,
         per_scaled_element: int) -> int:
    # the aten FFTs' (self, dim, normalization, ...): N = product of signal's sizes over dim, one
    # transform per numel(signal) / N; a normalisation (normalization != 0) scales each output
    # element: per_scaled_element FLOPs (2 complex, 1 real)
    dim = arg(args, kwargs, 0, "dim")
    points = prod(int(signal.shape[int(d) % signal.dim()]) for d in (dim if isinstance(dim, (list, tuple)) else [dim]))
    scale = per_scaled_element * numel(out) if arg(args, kwargs, 1, "normalization", 0) else 0
    return _transforms(points, numel(signal) // max(points, 1), per_point_log) + scale


@register(*aten_ops("_fft_c2c"))
def fft_c2c_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # _fft_c2c(self, dim, normalization, forward): 5 N log2 N per transform + 2 per output element
    # when normalised
    return _fft(x, out, args, kwargs, per_point_log=5, per_scaled_element=2)


@register(*aten_ops("_fft_r2c"))
def fft_r2c_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # _fft_r2c(self, dim, normalization, onesided): 2.5 N log2 N per transform of the real input
    # + 2 per complex output element when normalised
    return _fft(x, out, args, kwargs, per_point_log=2.5, per_scaled_element=2)


@register(*aten_ops("_fft_c2r"))
def fft_c2r_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # _fft_c2r(self, dim, normalization, last_dim_size): 2.5 N log2 N per transform of the real
    # output (N from the output's dims) + 1 per real output element when normalised
    return _fft(out, out, args, kwargs, per_point_log=2.5, per_scaled_element=1)
