"""The aten table: every entry is callable the way an exported graph calls it, the function formulas
it reuses give the same numbers through the aten door, and the adapters for ops with their own
argument order or tuple outputs are right by hand."""

from __future__ import annotations

import pytest
import torch

from torch_flops.formulas import ATEN_FLOPs_MAPPING, FUNCTION_FLOPs_MAPPING, zero_flops

aten = torch.ops.aten


def _count(op: object, out: object, *args: object, **kwargs: object) -> tuple[int, int]:
    result = ATEN_FLOPs_MAPPING[op](out, *args, **kwargs)
    return (result, 0) if isinstance(result, int) else result


def test_same_as_function_entries_share_the_formula_object() -> None:
    # one formula, several front doors: aten.linear *is* the F.linear formula
    for name in ("linear", "conv2d", "scaled_dot_product_attention", "layer_norm", "gelu", "add", "mean"):
        assert ATEN_FLOPs_MAPPING[getattr(aten, name)] is FUNCTION_FLOPs_MAPPING[name], name
    # in-place aten variants share it too
    assert ATEN_FLOPs_MAPPING[aten.relu_] is FUNCTION_FLOPs_MAPPING["relu"]
    assert ATEN_FLOPs_MAPPING[aten.add_] is FUNCTION_FLOPs_MAPPING["add"]


def test_views_and_checks_are_zero() -> None:
    for name in ("view", "permute", "_to_copy", "slice", "index", "_assert_tensor_metadata", "_assert_scalar",
                 "lift_fresh_copy", "unsqueeze", "cat", "embedding", "arange"):
        assert ATEN_FLOPs_MAPPING[getattr(aten, name)] is zero_flops, name


def test_linear_and_addmm_through_aten() -> None:
    x, w, b = torch.randn(2, 3, 4), torch.randn(5, 4), torch.randn(5)
    # rows 2*3 = 6, 6*4*5 = 120 MACs; flops 2*120 + 30 bias adds
    assert _count(aten.linear, aten.linear(x, w, b), x, w, b) == (270, 120)
    m1, m2, inp = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5)
    # 3*4*5 = 60 MACs; + 15 adds of input
    assert _count(aten.addmm, aten.addmm(inp, m1, m2), inp, m1, m2) == (135, 60)


def test_convolution_transposed_flag_position() -> None:
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 2, 3, 3)
    # aten.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    out = aten.convolution(x, w, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1)
    # transposed: N * prod(w) * prod(input spatial) = 1 * (4*2*9) * 25 = 1800 MACs
    assert _count(aten.convolution, out, x, w, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1) == (3600, 1800)


def test_native_layer_norm_tuple_output() -> None:
    x, w, b = torch.randn(2, 8), torch.ones(8), torch.zeros(8)
    out = aten.native_layer_norm(x, [8], w, b, 1e-5)
    assert isinstance(out, tuple)
    # 16 elements x (5 statistics/normalise + 1 weight + 1 bias) = 112
    assert _count(aten.native_layer_norm, out, x, [8], w, b, 1e-5) == (112, 0)


def test_native_batch_norm_variants() -> None:
    x = torch.randn(2, 3, 4)
    w, b, rm, rv = torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)
    out = aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)
    # 24 elements x (2 running-stats + 2 affine) = 96
    assert _count(aten._native_batch_norm_legit_no_training, out, x, w, b, rm, rv, 0.1, 1e-5) == (96, 0)
    out = aten.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    # training: 24 x (5 batch-stats + 2 affine) = 168
    assert _count(aten.native_batch_norm, out, x, w, b, rm, rv, True, 0.1, 1e-5) == (168, 0)
    # aten.batch_norm: (input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
    out = aten.batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5, False)
    assert _count(aten.batch_norm, out, x, w, b, rm, rv, False, 0.1, 1e-5, False) == (96, 0)


@pytest.mark.parametrize("name,args,masked", [
    # (query, key, value, dropout_p, is_causal, ...)
    ("_scaled_dot_product_flash_attention_for_cpu", (0.0, True), True),
    ("_scaled_dot_product_flash_attention_for_cpu", (0.0, False), False),
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal)
    ("_scaled_dot_product_efficient_attention", (None, False, 0.0, False), False),
    ("_scaled_dot_product_efficient_attention", (torch.zeros(2, 4, 6, 10), False, 0.0, False), True),
])
def test_attention_backends_count_like_sdpa(name: str, args: tuple[object, ...], masked: bool) -> None:
    q, k, v = torch.empty(2, 4, 6, 8, device="meta"), torch.empty(2, 4, 10, 8, device="meta"), \
        torch.empty(2, 4, 10, 16, device="meta")
    # scores = 2*4*6*10 = 480; MACs = 480*(8 + 16) = 11520; per score 1 scale + 5 softmax (+ 1 mask)
    expected = (2 * 11520 + 480 * (6 + int(masked)), 11520)
    assert _count(getattr(aten, name), (None,), q, k, v, *args) == expected


def test_upsample_ops() -> None:
    x = torch.randn(1, 2, 4, 4)
    out = aten.upsample_bilinear2d(x, [8, 8], False)
    # 2*8*8 = 128 outputs x 9 (three lerps)
    assert _count(aten.upsample_bilinear2d, out, x, [8, 8], False) == (1152, 0)
    assert ATEN_FLOPs_MAPPING[aten.upsample_nearest2d] is zero_flops


def test_embedding_bag_aten_order() -> None:
    weight = torch.randn(10, 3)
    indices = torch.tensor([1, 2, 4, 5, 4, 3])
    offsets = torch.tensor([0, 2])
    # aten._embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode=1 (mean), ...)
    out = aten._embedding_bag(weight, indices, offsets, False, 1)
    # 6 looked-up rows x 3 = 18 adds, + 2 bags x 3 = 6 divisions
    assert _count(aten._embedding_bag, out, weight, indices, offsets, False, 1) == (24, 0)
    assert _count(aten.embedding_bag, out, weight, indices, offsets, False, 1) == (24, 0)


def test_index_put_counts_only_when_accumulating() -> None:
    x, values = torch.zeros(5, 3), torch.ones(2, 3)
    idx = [torch.tensor([0, 2])]
    assert _count(aten.index_put, aten.index_put(x, idx, values, True), x, idx, values, True) == (6, 0)
    assert _count(aten.index_put, aten.index_put(x, idx, values, False), x, idx, values, False) == (0, 0)


def test_grouped_mm_custom_op_key() -> None:
    # MoE experts: 16 token rows of width 32, each through one of 4 experts' (32, 128) matrices
    a, b = torch.empty(16, 32, device="meta"), torch.empty(4, 32, 128, device="meta")
    out = torch.empty(16, 128, device="meta")
    # 16*32*128 = 65536 MACs
    assert ATEN_FLOPs_MAPPING["transformers.grouped_mm_fallback"](out, a, b, None) == (131072, 65536)
