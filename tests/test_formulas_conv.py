"""Hand-derived FLOPs/MACs of convolutions (torch_flops/formulas/conv.py), and
``2 * macs == FlopCounterMode`` on meta tensors for every rank, direct and transposed."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops.formulas import FUNCTION_FLOPs_MAPPING, MODULE_FLOPs_MAPPING

FAST = settings(max_examples=25, deadline=None, database=None)


def _randn(*shape: int) -> torch.Tensor:
    torch.manual_seed(len(shape) + sum(shape))
    return torch.randn(shape)


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def _counted(fn: Any, *args: Any, **kwargs: Any) -> int:
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


# --------------------------------------------------------------------------- #
# by hand
# --------------------------------------------------------------------------- #

def test_conv2d_strided_padded_dilated_grouped() -> None:
    x, w, b = _randn(2, 4, 9, 9), _randn(6, 2, 3, 3), _randn(6)
    kw = {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}
    out = F.conv2d(x, w, b, **kw)
    # out side = floor((9 + 2*1 - 2*(3-1) - 1) / 2) + 1 = floor(6/2) + 1 = 4 -> (2, 6, 4, 4): 192 outputs
    assert out.shape == (2, 6, 4, 4)
    # macs = N * prod(w) * out positions = 2 * (6*2*3*3 = 108) * 16 = 3456
    # flops = 2*3456 + 192 bias adds = 7104
    assert FUNCTION_FLOPs_MAPPING["conv2d"](out, x, w, b, **kw) == (7104, 3456)
    assert FUNCTION_FLOPs_MAPPING["conv2d"](out, x, w, b, 2, 1, 2, 2) == (7104, 3456)  # positional
    out = F.conv2d(x, w, None, **kw)
    assert FUNCTION_FLOPs_MAPPING["conv2d"](out, x, w, None, **kw) == (6912, 3456)
    assert FUNCTION_FLOPs_MAPPING["conv2d"](out, x, w, **kw) == (6912, 3456)
    assert _counted(F.conv2d, _meta(2, 4, 9, 9), _meta(6, 2, 3, 3), _meta(6), **kw) == 6912


def test_conv1d_and_conv3d() -> None:
    x, w = _randn(2, 3, 10), _randn(4, 3, 3)
    out = F.conv1d(x, w, stride=3)  # L_out = floor((10 - 3) / 3) + 1 = 3 -> (2, 4, 3)
    assert FUNCTION_FLOPs_MAPPING["conv1d"](out, x, w, stride=3) == (432, 216)  # 2 * (4*3*3=36) * 3
    x, w, b = _randn(1, 2, 4, 4, 4), _randn(3, 2, 2, 2, 2), _randn(3)
    out = F.conv3d(x, w, b, stride=2)  # (1, 3, 2, 2, 2): 24 outputs
    # macs = 1 * (3*2*2*2*2 = 48) * 8 = 384; flops = 768 + 24 = 792
    assert FUNCTION_FLOPs_MAPPING["conv3d"](out, x, w, b, stride=2) == (792, 384)


def test_conv_unbatched_input() -> None:
    x, w = _randn(4, 9, 9), _randn(6, 2, 3, 3)
    out = F.conv2d(x, w, stride=2, padding=1, dilation=2, groups=2)  # (6, 4, 4): N = 1
    # macs = 1 * (6*2*3*3 = 108) * 16 = 1728
    assert FUNCTION_FLOPs_MAPPING["conv2d"](out, x, w, stride=2, padding=1, dilation=2, groups=2) == (3456, 1728)


def test_conv_transpose2d_with_output_padding() -> None:
    x, w, b = _randn(2, 4, 5, 5), _randn(4, 3, 3, 3), _randn(6)
    kw = {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}
    out = F.conv_transpose2d(x, w, b, **kw)
    # side = (5-1)*2 - 2*1 + (3-1) + 1 + 1 = 10; C_out = 3 * groups = 6 -> (2, 6, 10, 10): 1200 outputs
    assert out.shape == (2, 6, 10, 10)
    # every input position is scattered through the kernel: 2 * (4*3*3*3 = 108) * 25 = 5400 macs
    # flops = 2*5400 + 1200 bias adds = 12000
    assert FUNCTION_FLOPs_MAPPING["conv_transpose2d"](out, x, w, b, **kw) == (12000, 5400)
    assert _counted(F.conv_transpose2d, _meta(2, 4, 5, 5), _meta(4, 3, 3, 3), _meta(6), **kw) == 10800


def test_torch_convolution_reads_transposed_flag() -> None:
    x, w = _randn(2, 4, 5), _randn(4, 3, 3)
    # torch.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    out = torch.convolution(x, w, None, [1], [0], [1], True, [0], 1)  # transposed: (2, 3, 7)
    # transposed: N * prod(w) * input positions = 2 * (4*3*3 = 36) * 5 = 360 macs
    assert FUNCTION_FLOPs_MAPPING["convolution"](out, x, w, None, [1], [0], [1], True, [0], 1) == (720, 360)
    w2 = _randn(3, 4, 3)
    out = torch.convolution(x, w2, None, [1], [0], [1], False, [0], 1)  # direct: (2, 3, 3)
    # direct: N * prod(w) * output positions = 2 * (3*4*3 = 36) * 3 = 216 macs
    assert FUNCTION_FLOPs_MAPPING["convolution"](out, x, w2, None, [1], [0], [1], False, [0], 1) == (432, 216)
    # transposed as a keyword
    assert FUNCTION_FLOPs_MAPPING["convolution"](out, x, w2, None, transposed=False) == (432, 216)


@pytest.mark.parametrize(
    ("module", "shape", "expected"),
    [
        # Conv2d(4, 6, 3, padding=1) on (1, 4, 5, 5): out (1, 6, 5, 5) = 150; macs 1 * 216 * 25 = 5400
        (lambda: nn.Conv2d(4, 6, 3, padding=1), (1, 4, 5, 5), (10950, 5400)),  # 2*5400 + 150
        (lambda: nn.Conv2d(4, 6, 3, padding=1, bias=False), (1, 4, 5, 5), (10800, 5400)),
        # Conv1d(2, 4, 3, groups=2) on (3, 2, 6): out (3, 4, 4) = 48; w (4,1,3): macs 3 * 12 * 4 = 144
        (lambda: nn.Conv1d(2, 4, 3, groups=2), (3, 2, 6), (336, 144)),  # 288 + 48
        # ConvTranspose1d(2, 4, 3, stride=2) on (1, 2, 5): w (2,4,3), out (1, 4, 11) = 44; macs 24 * 5 = 120
        (lambda: nn.ConvTranspose1d(2, 4, 3, stride=2), (1, 2, 5), (284, 120)),  # 240 + 44
        # Conv3d(1, 2, 2) on (1, 1, 3, 3, 3): out (1, 2, 2, 2, 2) = 16; macs 16 * 8 = 128
        (lambda: nn.Conv3d(1, 2, 2), (1, 1, 3, 3, 3), (272, 128)),  # 256 + 16
    ],
)
def test_conv_modules(module: Any, shape: tuple[int, ...], expected: tuple[int, int]) -> None:
    m = module()
    x = _randn(*shape)
    out = m(x)
    assert MODULE_FLOPs_MAPPING[type(m).__name__](m, out, x) == expected
    with torch.device("meta"):
        mm = module()
    assert _counted(mm, _meta(*shape)) == 2 * expected[1]


def test_lazy_conv_is_served_after_materialisation() -> None:
    m = nn.LazyConv2d(6, 3, padding=1)
    x = _randn(1, 4, 5, 5)
    out = m(x)  # now a Conv2d with weight (6, 4, 3, 3)
    assert MODULE_FLOPs_MAPPING[type(m).__name__](m, out, x) == (10950, 5400)  # as nn.Conv2d above


# --------------------------------------------------------------------------- #
# property-based: every rank, groups, stride, padding, dilation, transposed + output_padding
# --------------------------------------------------------------------------- #

@st.composite
def _conv_case(draw: st.DrawFn) -> dict[str, Any]:
    rank = draw(st.integers(1, 3))
    transposed = draw(st.booleans())
    groups = draw(st.sampled_from([1, 2, 3]))
    c_in = groups * draw(st.integers(1, 2))
    c_out = groups * draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(rank))
    if transposed:
        # output_padding must be smaller than stride or dilation; padding must not eat the output
        output_padding = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
        spatial = tuple(draw(st.integers(1, 4)) + 2 * p for p in padding)
    else:
        output_padding = (0,) * rank
        # the input must cover one dilated kernel after padding
        spatial = tuple(max(1, d * (k - 1) + 1 - 2 * p) + draw(st.integers(0, 3))
                        for k, d, p in zip(kernel, dilation, padding))
    batched = draw(st.booleans())
    return {
        "rank": rank, "transposed": transposed, "groups": groups, "c_in": c_in, "c_out": c_out, "kernel": kernel,
        "stride": stride, "dilation": dilation, "padding": padding, "output_padding": output_padding,
        "spatial": spatial, "batch": draw(st.integers(1, 2)) if batched else None, "bias": draw(st.booleans()),
    }


@FAST
@given(_conv_case())
def test_conv_matches_flop_counter(case: dict[str, Any]) -> None:
    rank, g = case["rank"], case["groups"]
    lead = (case["batch"],) if case["batch"] is not None else ()
    x = _meta(*lead, case["c_in"], *case["spatial"])
    if case["transposed"]:
        w = _meta(case["c_in"], case["c_out"] // g, *case["kernel"])
        name = f"conv_transpose{rank}d"
        kw = {"stride": case["stride"], "padding": case["padding"], "output_padding": case["output_padding"],
                  "groups": g, "dilation": case["dilation"]}
    else:
        w = _meta(case["c_out"], case["c_in"] // g, *case["kernel"])
        name = f"conv{rank}d"
        kw = {"stride": case["stride"], "padding": case["padding"], "dilation": case["dilation"], "groups": g}
    b = _meta(case["c_out"]) if case["bias"] else None
    fn = getattr(F, name)
    out = fn(x, w, b, **kw)
    result = FUNCTION_FLOPs_MAPPING[name](out, x, w, b, **kw)
    assert isinstance(result, tuple)
    flops, macs = result
    assert flops == 2 * macs + (out.numel() if case["bias"] else 0)
    assert _counted(fn, x, w, b, **kw) == 2 * macs
    # the generic torch.convolution front door agrees
    conv_out = torch.convolution(x if lead else x.unsqueeze(0), w, b, list(case["stride"]), list(case["padding"]),
                                 list(case["dilation"]), case["transposed"], list(case["output_padding"]), g)
    assert FUNCTION_FLOPs_MAPPING["convolution"](
        conv_out, x if lead else x.unsqueeze(0), w, b, list(case["stride"]), list(case["padding"]),
        list(case["dilation"]), case["transposed"], list(case["output_padding"]), g) == (
        2 * macs + (conv_out.numel() if case["bias"] else 0), macs)
