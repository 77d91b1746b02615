"""The aten ops autograd runs in backward (torch_flops/formulas/backward.py and the backward
entries of zero.py): numbers derived by hand, the dot-product ops against FlopCounterMode on
meta tensors, and every op the backward of each counted family runs resolves in the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from torch_flops.formulas import FORMULAS, Count, zero_flops

aten = torch.ops.aten


def _count(op: Any, out: Any, *args: Any, **kwargs: Any) -> Count:
    formula = FORMULAS.resolve_aten(op)
    assert formula is not None, op
    result = formula(None, out, *args, **kwargs)
    if isinstance(result, int):
        return Count(result, 0, 0, 0)
    return Count(*result) if len(result) > 2 else Count(result[0], result[1])


class _Backward(TorchDispatchMode):
    """Sums the formulas of the ops run by autograd's backward; records the ops without one."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = self.macs = self.mm_macs = 0
        self.ops: set[Any] = set()
        self.missing: set[Any] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if torch._C._current_autograd_node() is None:
            return out
        packet = func.overloadpacket
        self.ops.add(packet)
        formula = FORMULAS.resolve_aten(packet)
        if formula is None:
            self.missing.add(packet)
            return out
        result = formula(None, out, *args, **kwargs)
        count = Count(result, 0, 0, 0) if isinstance(result, int) else Count(*result) if len(result) > 2 \
            else Count(result[0], result[1])
        assert isinstance(count.flops, int) and isinstance(count.macs, int), (packet, count)
        self.flops += count.flops
        self.macs += count.macs
        self.mm_macs += count.macs if count.mm_macs is None else count.mm_macs
        return out


def _backward_vs_flop_counter(loss: torch.Tensor) -> tuple[_Backward, int]:
    with FlopCounterMode(display=False) as counter, _Backward() as mine:
        loss.backward()
    assert not mine.missing
    return mine, counter.get_total_flops()


# --------------------------------------------------------------------------- recurrent layers, by hand

@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="the oneDNN LSTM kernel is CPU's with mkldnn")
def test_cpu_lstm_backward_by_hand() -> None:
    """CPU's fused LSTM layer (``mkldnn_rnn_layer``) has a fused backward: counted, never silently 0."""
    from torch_flops import TorchFLOPsByFX

    model, x = nn.LSTM(4, 8, batch_first=True), torch.randn(2, 5, 4)
    counter = TorchFLOPsByFX(model)
    counter.propagate(x, loss_fn=lambda out: out[0].sum())
    # rows = 2*5 = 10, G = 4 gates, H = 8, I = 4, R = 8. forward MACs 10 * 4*8*(4+8) = 3840; backward:
    # dx, dh, dW_ih, dW_hh twice as many, 7680 MACs; bias gradients 10 * 2 * 4*8 = 640 adds; gate
    # arithmetic twice the forward's 19 per unit: 10 * 2*19*8 = 3040. FLOPs 2*7680 + 640 + 3040 = 19040
    assert (counter.total_backward_flops, counter.total_backward_macs) == (19040, 7680)
    assert counter.profile.backward is not None and not counter.profile.backward["unsupported"]


# --------------------------------------------------------------------------- convolution, by hand

def test_convolution_backward_by_hand() -> None:
    # conv2d of a 1x3x8x8 input with 4 filters 3x3: output 1x4x6x6.
    # forward MACs = N * prod(w) * out positions = 1 * (4*3*3*3) * 36 = 3888
    x, w = torch.empty(1, 3, 8, 8, device="meta"), torch.empty(4, 3, 3, 3, device="meta")
    dy = torch.empty(1, 4, 6, 6, device="meta")
    call = (dy, x, w, [4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    out = aten.convolution_backward(*call, [True, True, True])
    # dX = 3888 MACs, dW = 3888 MACs; dBias: 1*4*36 = 144 adds; dot outputs: dX 192 + dW 108
    assert _count(aten.convolution_backward, out, *call, [True, True, True]) == (2 * 7776 + 144, 7776, 300, 7776)
    # the input needs no gradient (a first layer): dW and dBias only
    assert _count(aten.convolution_backward, out, *call, [False, True, True]) == (2 * 3888 + 144, 3888, 108, 3888)
    # no bias: dX and dW only
    assert _count(aten.convolution_backward, out, *call, [True, True, False]) == (2 * 7776, 7776, 300, 7776)


def test_grouped_convolution_backward_weight_counted_groups_times_by_flop_counter() -> None:
    # conv2d 1x4x6x6, weight 6x2x3x3, groups=2: output 1x6x4x4; forward MACs = 1 * 108 * 16 = 1728
    x, w, dy = (torch.empty(*s, device="meta") for s in ((1, 4, 6, 6), (6, 2, 3, 3), (1, 6, 4, 4)))
    args = (dy, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 2, [True, True, False])
    count = _count(aten.convolution_backward, aten.convolution_backward(*args), *args)
    # dX 1728 + dW 1728 MACs; FlopCounterMode: dX 1728 + dW 2 * 1728 (all 4 C_in with all 6 C_out)
    assert (count.macs, count.mm_macs) == (3456, 1728 + 2 * 1728)
    with FlopCounterMode(display=False) as counter:
        aten.convolution_backward(*args)
    assert counter.get_total_flops() == 2 * count.mm_macs


def test_transposed_convolution_backward_by_hand() -> None:
    # conv_transpose1d of 2x4x5 by weight 4x3x3 (C_in, C_out, k), stride 2: output 2x3x11
    # forward MACs = N * prod(w) * input positions = 2 * 36 * 5 = 360
    x, w, dy = (torch.empty(*s, device="meta") for s in ((2, 4, 5), (4, 3, 3), (2, 3, 11)))
    args = (dy, x, w, [3], [2], [0], [1], True, [0], 1, [True, True, True])
    # dX 360 + dW 360 MACs + dBias 66 adds; dot outputs dX 40 + dW 36
    assert _count(aten.convolution_backward, aten.convolution_backward(*args), *args) == (1440 + 66, 720, 76, 720)


_CONVS: list[tuple[str, Callable[[], nn.Module], tuple[int, ...], bool]] = [
    ("conv1d", lambda: nn.Conv1d(4, 6, 3), (2, 4, 10), True),
    ("conv2d", lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2), (2, 4, 9, 9), True),
    ("conv3d", lambda: nn.Conv3d(2, 3, 2, bias=False), (1, 2, 4, 4, 4), True),
    ("conv2d first layer", lambda: nn.Conv2d(3, 4, 3), (2, 3, 6, 6), False),
    ("conv_transpose1d", lambda: nn.ConvTranspose1d(4, 6, 3, stride=2), (2, 4, 5), True),
    ("conv_transpose2d", lambda: nn.ConvTranspose2d(4, 2, 3, output_padding=1, stride=2), (1, 4, 4, 4), True),
    ("conv_transpose3d", lambda: nn.ConvTranspose3d(2, 2, 2), (1, 2, 3, 3, 3), True),
    ("grouped conv2d", lambda: nn.Conv2d(4, 6, 3, groups=2), (2, 4, 6, 6), True),
    ("depthwise conv2d", lambda: nn.Conv2d(4, 4, 3, groups=4), (1, 4, 6, 6), True),
    ("grouped conv_transpose2d", lambda: nn.ConvTranspose2d(4, 6, 3, groups=2, stride=2), (1, 4, 3, 3), True),
]


@pytest.mark.parametrize("name,make,shape,input_grad", _CONVS, ids=[c[0] for c in _CONVS])
def test_convolution_backward_matches_flop_counter(name: str, make: Callable[[], nn.Module], shape: tuple[int, ...],
                                                   input_grad: bool) -> None:
    conv = make().to("meta")
    x = torch.empty(*shape, device="meta", requires_grad=input_grad)
    mine, theirs = _backward_vs_flop_counter(conv(x).sum())
    assert theirs > 0 and 2 * mine.mm_macs == theirs
    groups = conv.groups
    if groups == 1:
        assert 2 * mine.macs == theirs
    else:  # FlopCounterMode counts dW `groups` times: the true MACs are (dX + dW) forward MACs
        forward = conv(torch.empty(*shape, device="meta"))
        positions = (x.shape if conv.transposed else forward.shape)[2:]
        fwd_macs = shape[0] * conv.weight.numel() * torch.Size(positions).numel()
        assert mine.macs == fwd_macs * (int(input_grad) + 1)
        assert theirs == 2 * fwd_macs * (int(input_grad) + groups)


# --------------------------------------------------------------------------- attention

def test_cpu_flash_attention_backward_by_hand() -> None:
    # B=1, H=2, L=S=4, E=Ev=8 on CPU runs _scaled_dot_product_flash_attention_for_cpu_backward
    q, k, v = (torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v)
    with _Backward() as mine:
        out.sum().backward()
    assert aten._scaled_dot_product_flash_attention_for_cpu_backward in mine.ops
    # scores = 1*2*4*4 = 32; MACs = scores * (3E + 2Ev) = 32 * 40 = 1280 (recomputed QK^T, dP, dV, dQ, dK)
    # flops = 2*1280 + 6 per score (192) + rowsum(dO * O) 2 per dO element (2 * 64 = 128) = 2880;
    # the backward also sums nothing else (the loss's grad is expanded: a view)
    assert (mine.flops, mine.macs, mine.mm_macs) == (2880, 1280, 0)  # FlopCounterMode counts this CPU kernel 0


def test_attention_backward_masks_dropout_and_grouped_heads_by_hand() -> None:
    g = q = torch.empty(1, 4, 4, 8)  # B=1, Hq=4, L=4, E=8
    k = v = torch.empty(1, 2, 4, 8)  # 2 key/value heads (grouped-query)
    out = (g, k, v)
    args = (g, q, k, v, g, torch.empty(1, 4, 4), 0.0, True)  # causal, no dropout
    count = _count(aten._scaled_dot_product_flash_attention_for_cpu_backward, out, *args)
    # scores = 4*4*4 = 64; MACs 64 * 40 = 2560; per score 6 + 1 causal = 7 (448); rowsum 2*128 = 256;
    # dK, dV per query head (128 each) summed into 2 heads (64 each): 64 + 64 adds
    assert count.macs == 2560 and count.flops == 5120 + 448 + 256 + 128
    # dot outputs: 2 per score (QK^T, dP) + dQ 128 + dK 128 + dV 128 per query head
    assert count.dot_outputs == 128 + 384
    args = (g, q, k, v, g, torch.empty(1, 4, 4), 0.5, False)  # dropout: 2 more per score
    assert _count(aten._scaled_dot_product_flash_attention_for_cpu_backward, out, *args).flops == \
        5120 + 64 * 8 + 256 + 128


_SDPA_FORWARD: list[tuple[str, Callable[..., Any]]] = [
    ("efficient", lambda q, k, v: aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, False)),
    ("efficient masked", lambda q, k, v: aten._scaled_dot_product_efficient_attention(
        q, k, v, torch.empty(2, 3, 5, 6, device="meta"), True, 0.0, False)),
    ("flash causal", lambda q, k, v: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)),
    ("cudnn", lambda q, k, v: aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False)),
]


@pytest.mark.parametrize("name,forward", _SDPA_FORWARD, ids=[c[0] for c in _SDPA_FORWARD])
def test_sdpa_backward_kernels_match_flop_counter(name: str, forward: Callable[..., Any]) -> None:
    # B=2, H=3, L=5, S=6, E=Ev=8 on meta: the fused backward FlopCounterMode counts
    q = torch.empty(2, 3, 5, 8, device="meta", requires_grad=True)
    k, v = (torch.empty(2, 3, 6, 8, device="meta", requires_grad=True) for _ in range(2))
    mine, theirs = _backward_vs_flop_counter(forward(q, k, v)[0].sum())
    # 2 * scores * (3E + 2Ev) = 2 * (2*3*5*6) * 40 = 14400
    assert theirs == 2 * mine.macs == 2 * mine.mm_macs == 14400


@pytest.mark.parametrize("op", [aten._efficient_attention_backward, aten._flash_attention_backward])
def test_raw_attention_backward_kernels(op: Any) -> None:
    # (B, M, H, K) tensors; FlopCounterMode reads them as (B, H, M, K): it agrees when H == M == S
    b, m, h, e = 2, 4, 4, 8
    t = [torch.empty(b, m, h, e, device="meta") for _ in range(5)]  # dO, Q, K, V, O
    lse = torch.empty(b, h, m, device="meta")
    seed = torch.empty((), dtype=torch.int64, device="meta")
    if op is aten._efficient_attention_backward:
        args = (*t[:4], None, t[4], None, None, m, m, lse, 0.0, seed, seed, 0, False)
    else:
        args = (*t[:4], t[4], lse, None, None, m, m, 0.0, False, seed, seed)
    with FlopCounterMode(display=False) as counter:
        out = op(*args)
    count = _count(op, out, *args)
    # scores = 2*4*4*4 = 128; MACs = 128 * 40 = 5120
    assert count.macs == count.mm_macs == 5120 and counter.get_total_flops() == 2 * count.macs
    # with M != S the layouts differ: L=4 queries, S=8 keys, H=2 heads -> scores = 2*2*4*8 = 128
    q, kv = torch.empty(2, 4, 2, 8, device="meta"), torch.empty(2, 8, 2, 8, device="meta")
    shapes = (q, q, kv, kv)
    args = (*shapes, *args[4:])
    if op is aten._efficient_attention_backward:
        args = (*shapes, None, q, None, None, 4, 8, torch.empty(2, 2, 4, device="meta"), *args[11:])
    assert _count(op, None, *args).macs == 128 * 40


@pytest.mark.parametrize("op", [aten._efficient_attention_backward, aten._flash_attention_backward])
def test_raw_attention_backward_packed_sequences(op: Any) -> None:
    # 10 tokens of 2 sequences packed, H=2, E=8, longest sequence 6; on meta the offsets are
    # unknown: every sequence counts as 6 long, as FlopCounterMode counts it there:
    # scores = 2*2*6*6 = 144, MACs = 144 * 40 = 5760
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    seed = torch.empty((), dtype=torch.int64, device="meta")
    lse = torch.empty(2, 2, 6, device="meta")
    if op is aten._efficient_attention_backward:
        t = torch.empty(1, 10, 2, 8, device="meta")  # (1, total, H, K)
        args: tuple[Any, ...] = (t, t, t, t, None, t, cu, cu, 6, 6, lse, 0.0, seed, seed, 0, False)
    else:
        t = torch.empty(10, 2, 8, device="meta")  # (total, H, K)
        args = (t, t, t, t, t, lse, cu, cu, 6, 6, 0.0, False, seed, seed)
    with FlopCounterMode(display=False) as counter:
        out = op(*args)
    count = _count(op, out, *args)
    assert count.macs == 5760 and counter.get_total_flops() == 2 * 5760


def test_attention_math_path_and_modules_match_flop_counter() -> None:
    # on meta sdpa takes the math path (bmm, _softmax_backward_data): FlopCounterMode counts the bmm
    # and mm of the backward; the sum of our MACs over the same ops is half of it
    torch.manual_seed(0)
    for model, inputs in [
        (nn.MultiheadAttention(8, 2, batch_first=True), (torch.empty(2, 5, 8),) * 3),
        (nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0), (torch.empty(2, 5, 8),)),
        (nn.Linear(8, 4), (torch.empty(3, 8),)),
    ]:
        model = model.to("meta")
        inputs = tuple(x.to("meta").requires_grad_() for x in inputs)
        result = model(*inputs)
        mine, theirs = _backward_vs_flop_counter(first(result).sum())
        assert theirs > 0 and 2 * mine.macs == theirs == 2 * mine.mm_macs, type(model).__name__


def first(x: Any) -> Any:
    return x[0] if isinstance(x, tuple) else x


def test_cnn_backward_matches_flop_counter() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, groups=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    model = model.to("meta")
    x = torch.empty(2, 3, 8, 8, device="meta")
    mine, theirs = _backward_vs_flop_counter(F.cross_entropy(model(x), torch.zeros(2, dtype=torch.long,
                                                                                      device="meta")))
    assert theirs > 0 and 2 * mine.macs == 2 * mine.mm_macs == theirs
    assert mine.flops > theirs  # plus the norms, activations, pools and the loss


# --------------------------------------------------------------------------- bilinear

def test_trilinear_of_the_bilinear_backward() -> None:
    # F.bilinear(x1 (2,3), x2 (2,4), W (5,3,4)): dW[o,i,j] = sum_n dy[n,o] x1[n,i] x2[n,j] is
    # _trilinear(dy, x1, x2) over (n, o, i, j) summing n: dy * x1 is an outer product (2*5*3 = 30
    # multiplies), then the sum over n with x2: 2*5*3*4 = 120 MACs, one dot product per dW element
    dy, x1, x2 = torch.randn(2, 5), torch.randn(2, 3), torch.randn(2, 4)
    args = (dy, x1, x2, [2, 3], [1, 3], [1, 2], [0])
    out = aten._trilinear(*args)
    assert out.shape == (5, 3, 4)
    assert _count(aten._trilinear, out, *args) == (240 + 30, 120, 60, 0)  # FlopCounterMode: 0


# --------------------------------------------------------------------------- norms

def test_norm_backwards_by_hand() -> None:
    x, dy = torch.randn(2, 8), torch.randn(2, 8)
    w, b = torch.ones(8), torch.zeros(8)
    _, mean, rstd = aten.native_layer_norm(x, [8], w, b, 1e-5)
    args = (dy, x, [8], mean, rstd, w, b)
    grads = aten.native_layer_norm_backward(*args, [True, True, True])
    # 16 elements: x_hat 2 + dX 7 + weight 1 + dW 2 + dBias 1 = 13 per element = 208
    assert _count(aten.native_layer_norm_backward, grads, *args, [True, True, True]).flops == 208
    # only dX: x_hat 2 + 7 + 1 = 10 per element
    assert _count(aten.native_layer_norm_backward, grads, *args, [True, False, False]).flops == 160

    x4 = torch.randn(2, 3, 2, 2)  # 24 elements
    w3, rm, rv = torch.ones(3), torch.zeros(3), torch.ones(3)
    bn = (x4, x4, w3, rm, rv, torch.zeros(3), torch.ones(3))
    # training: 13 per element = 312; eval (running stats): dX 1 + x_hat 2 + dW 2 + dBias 1 = 6 = 144
    assert _count(aten.native_batch_norm_backward, None, *bn, True, 1e-5, [True, True, True]).flops == 312
    assert _count(aten.native_batch_norm_backward, None, *bn, False, 1e-5, [True, True, True]).flops == 144
    # eval, frozen affine: dX only, 1 per element
    assert _count(aten.native_batch_norm_backward, None, *bn, False, 1e-5, [True, False, False]).flops == 24
    # group norm without affine (dX only): x_hat 2 + 7 = 9 per element = 216
    gn = (x4, x4, torch.zeros(2, 1), torch.ones(2, 1), None, 2, 3, 4, 1)
    assert _count(aten.native_group_norm_backward, None, *gn, [True, False, False]).flops == 216
    # fused RMS norm with weight: x_hat 1 + dX 5 + weight 1 + dW 2 = 9 per element = 144
    assert _count(aten._fused_rms_norm_backward, None, dy, x, [8], torch.ones(2, 1), w, [True, True]).flops == 144


# --------------------------------------------------------------------------- elementwise gradients

def _g(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


_POINTWISE: list[tuple[Any, tuple[Any, ...], dict[str, Any], int]] = [
    (aten.threshold_backward, (_g(4, 6), _g(4, 6), 0.0), {}, 1),
    (aten.hardtanh_backward, (_g(4, 6), _g(4, 6), -1.0, 1.0), {}, 2),
    (aten.leaky_relu_backward, (_g(4, 6), _g(4, 6), 0.01, False), {}, 2),
    (aten._prelu_kernel_backward, (_g(4, 6), _g(4, 6), _g(1, 6)), {}, 3),
    (aten.rrelu_with_noise_backward, (_g(4, 6), _g(4, 6), _g(4, 6), 0.1, 0.3, True, False), {}, 1),
    (aten.rrelu_with_noise_backward, (_g(4, 6), _g(4, 6), _g(4, 6), 0.1, 0.3, False, False), {}, 2),
    (aten.elu_backward, (_g(4, 6), 1.0, 1.0, 1.0, False, _g(4, 6)), {}, 5),
    (aten.elu_backward, (_g(4, 6), 1.0, 1.0, 1.0, True, _g(4, 6)), {}, 4),
    (aten.gelu_backward, (_g(4, 6), _g(4, 6)), {}, 11),
    (aten.gelu_backward, (_g(4, 6), _g(4, 6)), {"approximate": "tanh"}, 18),
    (aten.silu_backward, (_g(4, 6), _g(4, 6)), {}, 8),
    (aten.sigmoid_backward, (_g(4, 6), _g(4, 6)), {}, 3),
    (aten.tanh_backward, (_g(4, 6), _g(4, 6)), {}, 3),
    (aten.log_sigmoid_backward, (_g(4, 6), _g(4, 6), _g(4, 6)), {}, 4),
    (aten.mish_backward, (_g(4, 6), _g(4, 6)), {}, 13),
    (aten.softplus_backward, (_g(4, 6), _g(4, 6), 1.0, 20.0), {}, 6),
    (aten.hardswish_backward, (_g(4, 6), _g(4, 6)), {}, 5),
    (aten.hardsigmoid_backward, (_g(4, 6), _g(4, 6)), {}, 3),
    (aten.hardshrink_backward, (_g(4, 6), _g(4, 6), 0.5), {}, 2),
    (aten.softshrink_backward, (_g(4, 6), _g(4, 6), 0.5), {}, 2),
    (aten._softmax_backward_data, (_g(4, 6), _g(4, 6), -1, torch.float32), {}, 4),
    (aten._log_softmax_backward_data, (_g(4, 6), _g(4, 6), -1, torch.float32), {}, 4),
    (aten.native_dropout_backward, (_g(4, 6), torch.ones(4, 6, dtype=torch.bool), 2.0), {}, 2),
    (aten.logit_backward, (_g(4, 6), torch.rand(4, 6)), {}, 3),
    (aten.logit_backward, (_g(4, 6), torch.rand(4, 6), 1e-6), {}, 5),
    (aten.logit, (torch.rand(4, 6),), {}, 3),
]


@pytest.mark.parametrize("op,args,kwargs,per_element", _POINTWISE, ids=[f"{c[0]}-{c[3]}" for c in _POINTWISE])
def test_elementwise_gradients(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], per_element: int) -> None:
    out = op(*args, **kwargs)
    # 4 * 6 = 24 gradient elements, each the per-element cost stated next to the formula
    assert _count(op, out, *args, **kwargs)[:2] == (24 * per_element, 0)
    meta = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    assert _count(op, op(*meta, **kwargs), *meta, **kwargs)[:2] == (24 * per_element, 0)


def test_glu_backward_per_output_gradient() -> None:
    x, dy = torch.randn(4, 6), torch.randn(4, 3)
    # 12 output-gradient elements x 8 (sigmoid 3, da mul, 1 - s, 3 muls for db) = 96
    assert _count(aten.glu_backward, aten.glu_backward(dy, x, -1), dy, x, -1)[:2] == (96, 0)


def test_integer_data_is_free() -> None:
    dy = torch.ones(4, 6, dtype=torch.int64)
    assert _count(aten.threshold_backward, dy, dy, dy, 0)[:2] == (0, 0)


# --------------------------------------------------------------------------- embeddings, pooling, resampling

def test_embedding_backwards_by_hand() -> None:
    dy, idx = torch.randn(2, 2, 4), torch.tensor([[1, 2], [3, 1]])
    # 4 looked-up rows of 4: 16 adds into the weight's gradient; scale_grad_by_freq: + 16 divides
    assert _count(aten.embedding_dense_backward, None, dy, idx, 10, -1, False).flops == 16
    assert _count(aten.embedding_dense_backward, None, dy, idx, 10, -1, True).flops == 32
    bag_grad, indices = torch.randn(2, 4), torch.tensor([1, 2, 3, 4, 5])
    bag = (bag_grad, indices, torch.tensor([0, 2]), indices, torch.tensor([2, 3]), indices, 10, False)
    # mean: each of 5 looked-up rows of 4 gets its bag's gradient / bag size 1 and an add 1: 40
    assert _count(aten._embedding_bag_backward, None, *bag, 1, False, None).flops == 40
    # sum with per-sample weights: multiply 1 + add 1 = 40; max: the 2 bags' 8 gradients added: 8
    assert _count(aten._embedding_bag_backward, None, *bag, 0, False, torch.ones(5)).flops == 40
    assert _count(aten._embedding_bag_backward, None, *bag, 2, False, None).flops == 8
    # per-sample weight gradients: a row dot of length 4 per index, mul + add: 2 * 5 * 4 = 40
    args = (bag_grad, torch.randn(10, 4), indices, torch.tensor([0, 2]), indices, 0)
    assert _count(aten._embedding_bag_per_sample_weights_backward, None, *args)[:2] == (40, 0)


def test_pooling_and_upsampling_backwards_by_hand() -> None:
    x = torch.randn(1, 2, 6, 6)
    dy = torch.randn(1, 2, 3, 3)  # 18 output gradients
    # max pool: each added to its arg-max position, 18 adds
    args = (dy, x, [2, 2], [2, 2], [0, 0], [1, 1], False, torch.zeros(1, 2, 3, 3, dtype=torch.long))
    assert _count(aten.max_pool2d_with_indices_backward, x, *args)[:2] == (18, 0)
    # avg pool 2x2: / divisor 1 + 4 adds = 5 per output gradient: 90
    assert _count(aten.avg_pool2d_backward, x, dy, x, [2, 2], [2, 2], [0, 0], False, True, None)[:2] == (90, 0)
    # adaptive avg 6 -> 4 per dim: windows [0,2) [1,3) [3,5) [4,6): S = 8 per dim, 64 adds + 16 divides
    # per (N, C) slice, 2 slices: 160
    dy4 = torch.randn(1, 2, 4, 4)
    assert _count(aten._adaptive_avg_pool2d_backward, x, dy4, x)[:2] == (160, 0)
    # nearest upsampling 3x3 -> 6x6: 72 gradients each added to its source: 72
    big = torch.randn(1, 2, 6, 6)
    assert _count(aten.upsample_nearest2d_backward, dy, big, [6, 6], [1, 2, 3, 3])[:2] == (72, 0)
    # bilinear: 4 taps x (2 weight multiplies + 1 add) = 12 per output gradient: 864
    assert _count(aten.upsample_bilinear2d_backward, dy, big, [6, 6], [1, 2, 3, 3], False)[:2] == (864, 0)
    # antialiased bilinear 8x8 -> 4x4 (downsampling x2: support 2): windows [0,3) [1,5) [3,7) [5,8)
    # = 14 taps per dim, 14*14 per (N, C) slice of 2, 3 FLOPs a tap: 1176
    dy_aa = torch.randn(1, 2, 4, 4)
    assert _count(aten._upsample_bilinear2d_aa_backward, None, dy_aa, [4, 4], [1, 2, 8, 8], False)[:2] == (1176, 0)
    # reflection pad of 1 on each side of 6x6 -> 8x8: 64 - 36 = 28 gradients per (N, C) slice of 2
    # added to the border they copied: 56
    assert _count(aten.reflection_pad2d_backward, x, torch.randn(1, 2, 8, 8), x, [1, 1, 1, 1])[:2] == (56, 0)


def test_loss_backwards_by_hand() -> None:
    x, y, g = torch.rand(4, 5), torch.rand(4, 5), torch.tensor(1.0)
    # mse: sub, mul by 2 dy / N: 2 per element = 40
    assert _count(aten.mse_loss_backward, None, g, x, y, 1)[:2] == (40, 0)
    # BCE with weight: 6 + 1 per element = 140
    assert _count(aten.binary_cross_entropy_backward, None, g, x, y, torch.ones(5), 1)[:2] == (140, 0)
    # smooth L1 / Huber: sub, 2 compares, mul = 4 per element = 80
    assert _count(aten.smooth_l1_loss_backward, None, g, x, y, 1, 1.0)[:2] == (80, 0)
    assert _count(aten.huber_loss_backward, None, g, x, y, 1, 1.0)[:2] == (80, 0)
    # NLL over 4 targets with class weights: compare, multiply, weight = 3 per target = 12
    target = torch.tensor([1, 0, 4, 2])
    args = (g, x, target, torch.ones(5), 1, -100, torch.tensor(4.0))
    assert _count(aten.nll_loss_backward, None, *args)[:2] == (12, 0)
    # multi margin, p = 1, no weight: 5 per element = 100
    assert _count(aten.multi_margin_loss_backward, None, g, x, target, 1, 1.0, None, 1)[:2] == (100, 0)


def test_backward_views_are_zero() -> None:
    for name in ("select_backward", "slice_backward", "diagonal_backward", "masked_scatter_backward", "rot90"):
        assert FORMULAS.resolve_aten(getattr(aten, name)) is zero_flops, name


# --------------------------------------------------------------------------- coverage

def _q(device: str, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=device, requires_grad=True)


def _r(device: str, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=device)


def _long(device: str, *values: int) -> torch.Tensor:
    return torch.tensor(values, device=device)


def _modules(device: str) -> list[tuple[nn.Module, tuple[int, ...]]]:
    """(module, input shape) for every module family the forward counts."""
    act = [nn.ReLU(), nn.ReLU6(), nn.Hardtanh(), nn.LeakyReLU(), nn.PReLU(), nn.RReLU(), nn.ELU(), nn.CELU(),
           nn.SELU(), nn.SiLU(), nn.Sigmoid(), nn.LogSigmoid(), nn.Tanh(), nn.Mish(), nn.Softplus(), nn.Softsign(),
           nn.Hardswish(), nn.Hardsigmoid(), nn.Hardshrink(), nn.Softshrink(), nn.Tanhshrink(), nn.GELU(),
           nn.GELU("tanh"), nn.GLU(), nn.Threshold(0.1, 2.0), nn.Softmax(-1), nn.LogSoftmax(-1), nn.Softmin(-1),
           nn.Dropout(0.5), nn.AlphaDropout(0.3)]
    mods: list[tuple[nn.Module, tuple[int, ...]]] = [(m, (4, 6)) for m in act]
    mods += [
        (nn.Linear(6, 3), (4, 6)), (nn.Bilinear(6, 6, 2), (4, 6)), (nn.LayerNorm(6), (4, 6)),
        (nn.RMSNorm(6), (4, 6)), (nn.GroupNorm(2, 4), (2, 4, 5)), (nn.BatchNorm1d(4), (3, 4, 5)),
        (nn.BatchNorm2d(4).eval(), (2, 4, 3, 3)), (nn.BatchNorm3d(4), (2, 4, 2, 2, 2)), (nn.InstanceNorm2d(4), (2, 4, 3, 3)),
        (nn.LocalResponseNorm(3), (2, 4, 3, 3)), (nn.Dropout2d(0.3), (2, 4, 3, 3)),
        (nn.Conv1d(4, 2, 3), (2, 4, 6)), (nn.Conv2d(4, 4, 3, groups=2), (2, 4, 6, 6)), (nn.Conv3d(4, 2, 2), (1, 4, 3, 3, 3)),
        (nn.ConvTranspose1d(4, 2, 3), (2, 4, 6)), (nn.ConvTranspose2d(4, 2, 3, stride=2), (1, 4, 3, 3)),
        (nn.ConvTranspose3d(4, 2, 2), (1, 4, 2, 2, 2)),
        (nn.MaxPool1d(2), (2, 4, 6)), (nn.MaxPool2d(3, 2, 1), (2, 4, 6, 6)), (nn.MaxPool3d(2), (1, 4, 4, 4, 4)),
        (nn.AvgPool1d(2), (2, 4, 6)), (nn.AvgPool2d(3, 2, 1), (2, 4, 6, 6)), (nn.AvgPool3d(2), (1, 4, 4, 4, 4)),
        (nn.LPPool2d(2, 2), (2, 4, 6, 6)), (nn.AdaptiveAvgPool1d(4), (2, 4, 6)), (nn.AdaptiveAvgPool2d(4), (2, 4, 6, 6)),
        (nn.AdaptiveAvgPool3d(2), (1, 4, 3, 3, 3)), (nn.AdaptiveMaxPool1d(4), (2, 4, 6)),
        (nn.AdaptiveMaxPool2d(4), (2, 4, 6, 6)), (nn.AdaptiveMaxPool3d(2), (1, 4, 3, 3, 3)),
        (nn.FractionalMaxPool2d(2, output_size=3), (1, 2, 6, 6)),
        (nn.Upsample(scale_factor=2), (1, 2, 3)), (nn.Upsample(scale_factor=2), (1, 2, 3, 3)),
        (nn.Upsample(scale_factor=2), (1, 2, 2, 2, 2)), (nn.Upsample(scale_factor=2, mode="nearest-exact"), (1, 2, 3, 3)),
        (nn.Upsample(scale_factor=2, mode="linear"), (1, 2, 3)), (nn.Upsample(scale_factor=2, mode="bilinear"), (1, 2, 3, 3)),
        (nn.Upsample(scale_factor=2, mode="bicubic"), (1, 2, 3, 3)),
        (nn.Upsample(scale_factor=2, mode="trilinear"), (1, 2, 2, 2, 2)),
        (nn.ReflectionPad2d(1), (1, 2, 3, 3)), (nn.ReplicationPad1d(1), (1, 2, 3)), (nn.Unfold(2), (1, 2, 3, 3)),
        (nn.PixelShuffle(2), (1, 8, 2, 2)),
        (nn.MultiheadAttention(8, 2, batch_first=True), (2, 5, 8)),
        (nn.TransformerEncoderLayer(8, 2, 16, activation="gelu"), (5, 2, 8)),
    ]
    if device == "cpu":
        mods.append((nn.FractionalMaxPool3d(2, output_size=2), (1, 2, 4, 4, 4)))  # no meta kernel
    return mods


def _functions(device: str) -> list[Callable[[], torch.Tensor]]:
    """Functional forms: attention, embeddings, losses, interpolation modes, elementwise/views."""
    def q(*s: int) -> torch.Tensor:
        return _q(device, *s)

    def r(*s: int) -> torch.Tensor:
        return _r(device, *s)

    target = _long(device, 1, 0, 4, 2)
    emb = nn.Embedding(10, 4, padding_idx=0, scale_grad_by_freq=True).to(device)
    bag_mean = nn.EmbeddingBag(10, 4, mode="mean").to(device)
    bag_max = nn.EmbeddingBag(10, 4, mode="max").to(device)
    bag_sum = nn.EmbeddingBag(10, 4, mode="sum").to(device)
    idx, offsets = _long(device, 1, 2, 3, 4, 5), _long(device, 0, 2)
    fns: list[Callable[[], torch.Tensor]] = [
        lambda: F.scaled_dot_product_attention(q(1, 2, 4, 8), q(1, 2, 4, 8), q(1, 2, 4, 8)),
        lambda: F.scaled_dot_product_attention(q(1, 2, 4, 8), q(1, 2, 5, 8), q(1, 2, 5, 8), is_causal=True),
        lambda: F.scaled_dot_product_attention(q(1, 4, 4, 8), q(1, 2, 5, 8), q(1, 2, 5, 8), enable_gqa=True),
        lambda: F.scaled_dot_product_attention(q(1, 2, 4, 8), q(1, 2, 5, 8), q(1, 2, 5, 8), attn_mask=q(4, 5)),
        lambda: F.scaled_dot_product_attention(q(2, 4, 8), q(2, 5, 8), q(2, 5, 4), dropout_p=0.5),
        lambda: emb(_long(device, 0, 2, 3, 1)), lambda: bag_mean(idx, offsets), lambda: bag_max(idx, offsets),
        lambda: bag_sum(idx, offsets, per_sample_weights=q(5)),
        lambda: F.mse_loss(q(4, 5), r(4, 5)), lambda: F.l1_loss(q(4, 5), q(4, 5), reduction="none"),
        lambda: F.smooth_l1_loss(q(4, 5), r(4, 5), reduction="sum"), lambda: F.huber_loss(q(4, 5), r(4, 5)),
        lambda: F.binary_cross_entropy(torch.sigmoid(q(4, 5)), torch.sigmoid(q(4, 5)), weight=r(5)),
        lambda: F.binary_cross_entropy_with_logits(q(4, 5), r(4, 5), pos_weight=r(5)),
        lambda: F.nll_loss(q(4, 5), target, weight=r(5)), lambda: F.cross_entropy(q(4, 5), target, label_smoothing=0.1),
        lambda: F.cross_entropy(q(2, 5, 3, 3), torch.zeros(2, 3, 3, dtype=torch.long, device=device)),
        lambda: F.cross_entropy(q(4, 5), torch.softmax(r(4, 5), -1)), lambda: F.kl_div(q(4, 5), q(4, 5), reduction="batchmean"),
        lambda: F.soft_margin_loss(q(4, 5), r(4, 5).sign()),
        lambda: F.multilabel_soft_margin_loss(q(4, 5), (r(4, 5) > 0).float()),
        lambda: F.margin_ranking_loss(q(4), q(4), r(4).sign()), lambda: F.hinge_embedding_loss(q(4, 5), r(4, 5).sign()),
        lambda: F.cosine_embedding_loss(q(4, 5), q(4, 5), r(4).sign()),
        lambda: F.triplet_margin_loss(q(4, 5), q(4, 5), q(4, 5), swap=True),
        lambda: F.poisson_nll_loss(q(4, 5), r(4, 5).abs(), full=True),
        lambda: F.interpolate(q(1, 2, 8, 8), size=(3, 5), mode="bilinear", antialias=True),
        lambda: F.interpolate(q(1, 2, 8, 8), size=(3, 5), mode="bicubic", antialias=True),
        lambda: F.interpolate(q(1, 2, 4, 4), size=(3, 3), mode="area"),
        lambda: F.normalize(q(3, 8), dim=-1), lambda: F.pad(q(1, 2, 3), (1, 2), mode="circular"),
        lambda: torch.einsum("bij,bjk->bik", q(2, 3, 4), q(2, 4, 5)), lambda: torch.baddbmm(q(2, 3, 5), q(2, 3, 4), q(2, 4, 5)),
        lambda: torch.addmv(q(3), q(3, 4), q(4)), lambda: torch.outer(q(3), q(4)),
        lambda: q(4, 6).var(0) + q(4, 6).std(-1).sum() + q(4, 6).norm(dim=-1).sum() + q(4, 6).logsumexp(-1).sum(),
        lambda: q(4, 6).amax(0) + q(4, 6).max(0)[0] + q(4, 6).cumsum(0)[0] + q(4, 6).prod(0),
        lambda: q(4, 6)[1:3, ::2].sum() + q(4, 6).diagonal().sum() + q(4, 6).unfold(1, 2, 1).sum(),
        lambda: q(4, 6)[_long(device, 0, 2, 2)].sum() + q(4, 6).gather(1, torch.zeros(4, 2, dtype=torch.long,
                                                                                       device=device)).sum(),
        lambda: q(4, 6).take(_long(device, 0, 5)).sum() + q(4, 6).rot90().sum() + q(4, 6)[1].sum(),
        lambda: torch.cat([q(2, 3), q(2, 3)]).repeat(2, 1).flip(0).roll(1, 0).tril(),
        lambda: torch.where(q(4, 6) > 0, q(4, 6), q(4, 6)).clamp(-0.5, 0.5) * q(4, 6).abs().sqrt() / 2,
        lambda: q(4, 6).exp().log1p().sin().pow(2).atan2(q(4, 6)).lerp(q(4, 6), 0.3),
    ]
    if device == "cpu":  # no meta kernels
        fns.append(lambda: F.multi_margin_loss(q(4, 5), target, p=2, weight=r(5)))
        fns.append(lambda: F.gaussian_nll_loss(q(4, 5), r(4, 5), q(4, 5).abs(), full=True))
    return fns


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_every_backward_op_of_the_counted_families_resolves(device: str) -> None:
    torch.manual_seed(0)
    losses: list[torch.Tensor] = []
    for module, shape in _modules(device):
        module = module.to(device)
        x = _q(device, *shape)
        if isinstance(module, nn.MultiheadAttention):
            out = module(x, x, x)[0]
        elif isinstance(module, nn.Bilinear):
            out = module(x, _q(device, *shape))
        else:
            out = module(x)
        losses.append(first(out).pow(2).sum())
    losses += [fn().pow(2).sum() for fn in _functions(device)]
    seen: set[Any] = set()
    for loss in losses:
        with _Backward() as mine:
            loss.backward()
        assert not mine.missing, f"no formula for backward op(s) {sorted(map(str, mine.missing))}"
        seen |= mine.ops
    # the backward ops of the families, each counted or zero by definition
    for name in ("convolution_backward", "native_layer_norm_backward", "native_batch_norm_backward",
                 "native_group_norm_backward", "_softmax_backward_data", "_log_softmax_backward_data",
                 "threshold_backward", "gelu_backward", "embedding_dense_backward", "_embedding_bag_backward",
                 "max_pool2d_with_indices_backward", "avg_pool2d_backward", "_adaptive_avg_pool2d_backward",
                 "upsample_bilinear2d_backward", "nll_loss_backward", "mse_loss_backward", "_trilinear",
                 "select_backward", "slice_backward"):
        assert getattr(aten, name) in seen, name
    if device == "cpu":
        assert aten._scaled_dot_product_flash_attention_for_cpu_backward in seen
