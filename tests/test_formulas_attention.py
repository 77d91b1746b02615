"""Hand-derived FLOPs/MACs of attention (torch_flops/formulas/attention.py): SDPA, MultiheadAttention
and the composite nn.Transformer* modules, with ``2 * macs == FlopCounterMode`` on meta tensors."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX
from torch_flops.formulas import FUNCTION_FLOPs_MAPPING, MODULE_FLOPs_MAPPING


def _sdpa(*args: Any, **kwargs: Any) -> tuple[int, int]:
    result = FUNCTION_FLOPs_MAPPING["scaled_dot_product_attention"](*args, **kwargs)
    assert isinstance(result, tuple)
    return result


def _module(key: str, *args: Any, **kwargs: Any) -> tuple[int, int]:
    """``MODULE_FLOPs_MAPPING[key](module, out, *inputs)``: attention formulas return (flops, macs)."""
    result = MODULE_FLOPs_MAPPING[key](*args, **kwargs)
    assert isinstance(result, tuple)
    return result


def _mha(*args: Any, **kwargs: Any) -> tuple[int, int]:
    return _module("MultiheadAttention", *args, **kwargs)


# d_model 8, 2 heads, feed-forward 16: small enough for hand arithmetic
E, H, FF = 8, 2, 16


def _randn(*shape: int) -> torch.Tensor:
    torch.manual_seed(len(shape) + sum(shape))
    return torch.randn(shape)


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def _counted(fn: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """(FlopCounterMode total, the call's output)."""
    with FlopCounterMode(display=False) as counter:
        out = fn(*args, **kwargs)
    return counter.get_total_flops(), out


def _norm(module: nn.Module, x: torch.Tensor) -> int:
    """A LayerNorm's own formula (locked in tests/test_formulas_norm.py)."""
    result = MODULE_FLOPs_MAPPING[type(module).__name__](module, x, x)
    return result if isinstance(result, int) else result[0]


# --------------------------------------------------------------------------- #
# scaled_dot_product_attention
# --------------------------------------------------------------------------- #

Q, K, V = (2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)
# scores = 2*3*5 query rows * 7 keys = 210; macs = 210 * 4 (Q K^T) + 210 * 6 (P V) = 2100
SCORES, SDPA_MACS = 210, 2100


@pytest.mark.parametrize(
    ("kwargs", "flops"),
    [
        ({}, 5460),  # 2*2100 + 210 * (1 scale + 5 softmax)
        ({"is_causal": True}, 5670),  # + 210 mask adds
        ({"attn_mask": "bool"}, 5670),  # + 210
        ({"attn_mask": "float"}, 5670),  # + 210
        ({"dropout_p": 0.1}, 5670),  # + 210 dropout multiplies
        ({"attn_mask": "float", "dropout_p": 0.1}, 5880),  # + 420
        ({"dropout_p": 0.0, "is_causal": False}, 5460),
        ({"scale": 0.5}, 5460),  # a custom scale is still one multiply per score
    ],
)
def test_sdpa_by_hand(kwargs: dict[str, Any], flops: int) -> None:
    q, k, v = _randn(*Q), _randn(*K), _randn(*V)
    kwargs = dict(kwargs)
    if kwargs.get("attn_mask") == "bool":
        kwargs["attn_mask"] = torch.ones(5, 7, dtype=torch.bool)
    elif kwargs.get("attn_mask") == "float":
        kwargs["attn_mask"] = torch.zeros(5, 7)
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert _sdpa(out, q, k, v, **kwargs) == (flops, SDPA_MACS)


def test_sdpa_positional_arguments() -> None:
    q, k, v = _randn(*Q), _randn(*K), _randn(*V)
    mask = torch.zeros(5, 7)
    # scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal)
    out = F.scaled_dot_product_attention(q, k, v, mask, 0.1, False)
    assert _sdpa(out, q, k, v, mask, 0.1, False) == (5880, SDPA_MACS)  # mask + dropout: 4200 + 210*8
    q5 = _randn(2, 3, 7, 4)  # causal needs L == S for a square mask here
    out = F.scaled_dot_product_attention(q5, k, v, None, 0.0, True)
    # scores = 2*3*7*7 = 294; macs = 294 * 10 = 2940; flops = 5880 + 294 * 7 = 7938
    assert _sdpa(out, q5, k, v, None, 0.0, True) == (7938, 2940)


@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"dropout_p": 0.5}, {"attn_mask": "float"}])
def test_sdpa_matches_flop_counter(kwargs: dict[str, Any]) -> None:
    kwargs = dict(kwargs)
    if kwargs.get("attn_mask") == "float":
        kwargs["attn_mask"] = _meta(5, 7)
    q, k, v = _meta(*Q), _meta(*K), _meta(*V)
    counted, out = _counted(F.scaled_dot_product_attention, q, k, v, **kwargs)
    assert counted == 2 * SDPA_MACS == 2 * _sdpa(out, q, k, v, **kwargs)[1]  # causal counted full L x S


def test_sdpa_grouped_query_attention() -> None:
    q, k, v = _meta(2, 8, 5, 4), _meta(2, 2, 7, 4), _meta(2, 2, 7, 6)
    counted, out = _counted(F.scaled_dot_product_attention, q, k, v, enable_gqa=True)
    # each of the 8 query heads does its own products: scores = 2*8*5*7 = 560
    # macs = 560 * (4 + 6) = 5600; flops = 11200 + 560 * 6 = 14560
    assert _sdpa(out, q, k, v, enable_gqa=True) == (14560, 5600)
    assert counted == 11200
    counted, out = _counted(F.scaled_dot_product_attention, q, k, v, enable_gqa=True, is_causal=True)
    assert _sdpa(out, q, k, v, enable_gqa=True, is_causal=True) == (15120, 5600)  # + 560 mask adds
    assert counted == 11200


def test_sdpa_unbatched_three_dims() -> None:
    q, k, v = _randn(3, 5, 4), _randn(3, 7, 4), _randn(3, 7, 4)
    out = F.scaled_dot_product_attention(q, k, v)
    # scores = 3*5*7 = 105; macs = 105 * 8 = 840; flops = 1680 + 105 * 6 = 2310
    assert _sdpa(out, q, k, v) == (2310, 840)


# --------------------------------------------------------------------------- #
# MultiheadAttention
# --------------------------------------------------------------------------- #
# L=5 queries, S=7 keys, N=2, E=8, H=2:
#   projections: q 5*2*8*8 = 640, k 7*2*8*8 = 896, v 896, out 640 -> 3072 MACs
#   attention:   Q K^T and P V over all heads, 2 * (N*L*S*E = 2*5*7*8 = 560) = 1120 MACs
#   total 4192 MACs; scores N*H*L*S = 140
#   bias adds: in_proj (5 + 2*7) * 2 * 8 = 304, out_proj 5*2*8 = 80 -> 384
#   per score: scale 1 + softmax 5 = 6 -> 840; averaging the weights over heads: 140
MHA_MACS = 4192
MHA_BASE = 2 * 4192 + 384 + 840  # 9608 without weights averaging


def _mha_inputs(batch_first: bool, kdim: int = E, vdim: int = E, meta: bool = False) -> tuple[torch.Tensor, ...]:
    make = _meta if meta else _randn
    if batch_first:
        return make(2, 5, E), make(2, 7, kdim), make(2, 7, vdim)
    return make(5, 2, E), make(7, 2, kdim), make(7, 2, vdim)


@pytest.mark.parametrize(
    ("kwargs", "flops"),
    [
        ({}, MHA_BASE + 140),  # need_weights=True, average_attn_weights=True by default
        ({"need_weights": False}, MHA_BASE),
        ({"need_weights": True, "average_attn_weights": False}, MHA_BASE),  # per-head weights: no mean
        ({"need_weights": False, "attn_mask": "mask"}, MHA_BASE + 140),  # one mask add per score
        ({"need_weights": False, "key_padding_mask": "kpm"}, MHA_BASE + 140),
        ({"need_weights": False, "attn_mask": "mask", "is_causal": True}, MHA_BASE + 140),
    ],
)
@pytest.mark.parametrize("batch_first", [False, True])
def test_mha_by_hand(kwargs: dict[str, Any], flops: int, batch_first: bool) -> None:
    m = nn.MultiheadAttention(E, H, batch_first=batch_first).eval()
    q, k, v = _mha_inputs(batch_first)
    kwargs = dict(kwargs)
    if kwargs.get("attn_mask") == "mask":
        kwargs["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(7)[:5]  # (L, S) float
    if kwargs.get("key_padding_mask") == "kpm":
        kwargs["key_padding_mask"] = torch.zeros(2, 7, dtype=torch.bool)
    with torch.no_grad():
        out = m(q, k, v, **kwargs)
    assert _mha(m, out, q, k, v, **kwargs) == (flops, MHA_MACS)


def test_mha_positional_arguments() -> None:
    m = nn.MultiheadAttention(E, H).eval()
    q, k, v = _mha_inputs(False)
    mask = torch.zeros(5, 7)
    # forward(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights)
    out = m(q, k, v, None, False, mask)
    assert _mha(m, out, q, k, v, None, False, mask) == (MHA_BASE + 140, MHA_MACS)
    out = m(q, k, v, None, True, None, False)
    assert _mha(m, out, q, k, v, None, True, None, False) == (MHA_BASE, MHA_MACS)


def test_mha_dropout_in_training_only() -> None:
    m = nn.MultiheadAttention(E, H, dropout=0.1)
    q, k, v = _mha_inputs(False)
    out = m.train()(q, k, v, need_weights=False)
    assert _mha(m, out, q, k, v, need_weights=False) == (MHA_BASE + 140, MHA_MACS)  # one multiply per score
    out = m.eval()(q, k, v, need_weights=False)
    assert _mha(m, out, q, k, v, need_weights=False) == (MHA_BASE, MHA_MACS)


def test_mha_without_bias_and_unbatched() -> None:
    m = nn.MultiheadAttention(E, H, bias=False).eval()
    q, k, v = _randn(5, E), _randn(7, E), _randn(7, E)  # unbatched: N = 1
    out = m(q, k, v, need_weights=False)
    # projections 5*64 + 7*64 + 7*64 + 5*64 = 1536; attention 2 * 5*7*8 = 560 -> 2096 MACs
    # scores 1*2*5*7 = 70, * 6 = 420; no bias adds -> flops = 4192 + 420 = 4612
    assert _mha(m, out, q, k, v, need_weights=False) == (4612, 2096)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_kdim_vdim_bias_kv_zero_attn_matches_flop_counter(batch_first: bool, need_weights: bool) -> None:
    with torch.device("meta"):
        m = nn.MultiheadAttention(E, H, batch_first=batch_first, kdim=3, vdim=5, add_bias_kv=True,
                                  add_zero_attn=True).eval()
    q, k, v = _mha_inputs(batch_first, kdim=3, vdim=5, meta=True)
    counted, out = _counted(m, q, k, v, need_weights=need_weights)
    # projections: q 5*2*8*8 = 640, k 7*2*3*8 = 336, v 7*2*5*8 = 560, out 640 -> 2176
    # keys: 7 + 1 (bias_k) + 1 (zero attention) = 9; attention 2 * 2*5*9*8 = 1440 -> 3616 MACs
    # scores 2*2*5*9 = 180: bias 304 + 80, per score 6 -> 1080, (+ 180 mean of the weights)
    flops, macs = _mha(m, out, q, k, v, need_weights=need_weights)
    assert macs == 3616
    assert flops == 7232 + 384 + 1080 + (180 if need_weights else 0)
    assert counted == 2 * macs


@pytest.mark.parametrize("batch_first", [False, True])
def test_mha_matches_flop_counter(batch_first: bool) -> None:
    with torch.device("meta"):
        m = nn.MultiheadAttention(E, H, batch_first=batch_first).eval()
    q, k, v = _mha_inputs(batch_first, meta=True)
    for kwargs in ({}, {"need_weights": False}, {"attn_mask": _meta(5, 7)}):
        counted, out = _counted(m, q, k, v, **kwargs)
        assert counted == 2 * _mha(m, out, q, k, v, **kwargs)[1] == 2 * MHA_MACS


# --------------------------------------------------------------------------- #
# Transformer layers: composed from the sub-formulas
# --------------------------------------------------------------------------- #

def test_encoder_layer_by_hand() -> None:
    layer = nn.TransformerEncoderLayer(E, H, FF).eval()
    src = _randn(5, 2, E)
    with torch.no_grad():
        out = layer(src)
    # self-attention, L = S = 5, N = 2: projections 4 * 5*2*64 = 2560, attention 2 * 2*5*5*8 = 800
    # feed-forward: linear1 10 rows * 8 * 16 = 1280, linear2 10 * 16 * 8 = 1280 -> 5920 MACs
    # attention block: 2*3360 + bias (5+10)*2*8 + 5*2*8 = 320 + scores 2*2*5*5 = 100 * 6 = 600
    #                  + residual add 80 = 7720
    # feed-forward block: 2*1280 + 160 bias + relu 160 + 2*1280 + 80 bias + residual 80 = 5600
    expected = 7720 + 5600 + _norm(layer.norm1, src) + _norm(layer.norm2, src)
    assert _module("TransformerEncoderLayer", layer, out, src) == (expected, 5920)
    # a mask adds one add per self-attention score: + 100
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    assert _module("TransformerEncoderLayer", layer, out, src, mask) == (expected + 100, 5920)
    assert _module("TransformerEncoderLayer", layer, out, src, None, None, True) == (
        expected + 100, 5920)
    assert _module("TransformerEncoderLayer", layer, out, src, is_causal=True) == (
        expected + 100, 5920)


def test_decoder_layer_by_hand() -> None:
    layer = nn.TransformerDecoderLayer(E, H, FF).eval()
    tgt, memory = _randn(5, 2, E), _randn(7, 2, E)
    with torch.no_grad():
        out = layer(tgt, memory)
    # self-attention block as in the encoder layer: 3360 MACs, 7720 FLOPs
    # cross-attention L=5, S=7: 3072 + 1120 = 4192 MACs; 2*4192 + 384 bias + 140*6 + 80 residual = 9688
    # feed-forward block: 2560 MACs, 5600 FLOPs; 3 norms
    expected = 7720 + 9688 + 5600 + 3 * _norm(layer.norm1, tgt)
    assert _module("TransformerDecoderLayer", layer, out, tgt, memory) == (expected, 10112)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    assert _module("TransformerDecoderLayer", layer, out, tgt, memory, mask) == (
        expected + 100, 10112)  # + one add per self-attention score 2*2*5*5


def test_layer_mask_passed_by_keyword() -> None:
    layer = nn.TransformerEncoderLayer(E, H, FF).eval()
    src = _randn(5, 2, E)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        out = layer(src, src_mask=mask)
    positional = _module("TransformerEncoderLayer", layer, out, src, mask)
    assert _module("TransformerEncoderLayer", layer, out, src, src_mask=mask) == positional


def test_decoder_layer_memory_mask_counts_cross_attention_mask_adds() -> None:
    layer = nn.TransformerDecoderLayer(E, H, FF).eval()
    tgt, memory = _randn(5, 2, E), _randn(7, 2, E)
    memory_mask = torch.zeros(5, 7)
    with torch.no_grad():
        out = layer(tgt, memory, None, memory_mask)
    plain = _module("TransformerDecoderLayer", layer, out, tgt, memory)[0]
    flops, _ = _module("TransformerDecoderLayer", layer, out, tgt, memory, None, memory_mask)
    assert flops == plain + 140  # one add per cross-attention score: 2*2*5*7


def test_decoder_layer_positional_tgt_key_padding_mask() -> None:
    layer = nn.TransformerDecoderLayer(E, H, FF).eval()
    tgt, memory = _randn(5, 2, E), _randn(7, 2, E)
    kpm = torch.zeros(2, 5, dtype=torch.bool)
    with torch.no_grad():
        out = layer(tgt, memory, None, None, kpm)
    plain = _module("TransformerDecoderLayer", layer, out, tgt, memory)[0]
    flops, _ = _module("TransformerDecoderLayer", layer, out, tgt, memory, None, None, kpm)
    assert flops == plain + 100  # one add per self-attention score: 2*2*5*5


def _meta_module(factory: Any) -> Any:
    with torch.device("meta"):
        return factory().eval()


@pytest.mark.parametrize(
    ("factory", "batch_first"),
    [
        (lambda: nn.TransformerEncoderLayer(E, H, FF), False),
        (lambda: nn.TransformerEncoderLayer(E, H, FF, batch_first=True, norm_first=True, activation="gelu"), True),
        (lambda: nn.TransformerEncoderLayer(E, H, FF, activation=nn.GELU(approximate="tanh"), bias=False), False),
    ],
)
def test_encoder_layer_matches_flop_counter(factory: Any, batch_first: bool) -> None:
    layer = _meta_module(factory)
    src = _meta(2, 5, E) if batch_first else _meta(5, 2, E)
    counted, out = _counted(layer, src)
    flops, macs = _module("TransformerEncoderLayer", layer, out, src)
    assert counted == 2 * macs == 2 * 5920  # as in test_encoder_layer_by_hand
    assert flops > 2 * macs


@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_layer_matches_flop_counter(batch_first: bool) -> None:
    layer = _meta_module(lambda: nn.TransformerDecoderLayer(E, H, FF, batch_first=batch_first))
    tgt, memory = (_meta(2, 5, E), _meta(2, 7, E)) if batch_first else (_meta(5, 2, E), _meta(7, 2, E))
    counted, out = _counted(layer, tgt, memory)
    flops, macs = _module("TransformerDecoderLayer", layer, out, tgt, memory)
    assert counted == 2 * macs == 2 * 10112  # as in test_decoder_layer_by_hand
    assert flops > 2 * macs


def test_encoder_and_decoder_stacks_match_flop_counter() -> None:
    encoder = _meta_module(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, FF), 2,
                                                         norm=nn.LayerNorm(E), enable_nested_tensor=False))
    src = _meta(5, 2, E)
    counted, out = _counted(encoder, src)
    flops, macs = _module("TransformerEncoder", encoder, out, src)
    assert counted == 2 * macs == 2 * (2 * 5920)  # two layers
    layer_flops = _module("TransformerEncoderLayer", encoder.layers[0], src, src)[0]
    assert flops == 2 * layer_flops + _norm(encoder.norm, src)

    decoder = _meta_module(lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, FF), 2))
    tgt, memory = _meta(5, 2, E), _meta(7, 2, E)
    counted, out = _counted(decoder, tgt, memory)
    flops, macs = _module("TransformerDecoder", decoder, out, tgt, memory)
    assert counted == 2 * macs == 2 * (2 * 10112)
    layer_flops = _module("TransformerDecoderLayer", decoder.layers[0], tgt, tgt, memory)[0]
    assert flops == 2 * layer_flops  # no final norm


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_matches_flop_counter(batch_first: bool) -> None:
    model = _meta_module(lambda: nn.Transformer(E, H, num_encoder_layers=2, num_decoder_layers=1,
                                                dim_feedforward=FF, batch_first=batch_first))
    src, tgt = (_meta(2, 6, E), _meta(2, 5, E)) if batch_first else (_meta(6, 2, E), _meta(5, 2, E))
    counted, out = _counted(model, src, tgt)
    flops, macs = _module("Transformer", model, out, src, tgt)
    assert counted == 2 * macs
    # the whole model is its encoder over src plus its decoder over tgt attending to memory (src's shape)
    memory = _meta(*src.shape)
    enc = _module("TransformerEncoder", model.encoder, memory, src)
    dec = _module("TransformerDecoder", model.decoder, out, tgt, memory)
    assert (flops, macs) == (enc[0] + dec[0], enc[1] + dec[1])


# --------------------------------------------------------------------------- broadcast batch and heads


@pytest.mark.parametrize(("q", "kv", "mask", "expected_macs"), [
    # Q K^T over bcast((1, 2), (3, 2)) = 6 rows of 4 queries x 5 keys x 8 = 960; P V the same 960
    ((1, 2, 4, 8), (3, 2, 5, 8), None, 960 + 960),
    # the mask broadcasts the scores to (3, 2): Q K^T on (1, 2): 2*4*5*8 = 320; P V on (3, 2): 960
    ((1, 2, 4, 8), (1, 2, 5, 8), (3, 2, 4, 5), 320 + 960),
    # heads broadcast from K/V: Q (2, 1, 4, 8), K/V (2, 3, 5, 8): 6 rows each: 960 + 960
    ((2, 1, 4, 8), (2, 3, 5, 8), None, 960 + 960),
])
def test_attention_broadcast_matches_flop_counter_on_every_front_door(
        q: tuple[int, ...], kv: tuple[int, ...], mask: tuple[int, ...] | None, expected_macs: int) -> None:
    from torch_flops import FORMULAS

    query, key = torch.empty(q, device="meta"), torch.empty(kv, device="meta")
    attn_mask = torch.empty(mask, device="meta") if mask is not None else None
    with FlopCounterMode(display=False) as mode:
        out = F.scaled_dot_product_attention(query, key, key, attn_mask=attn_mask)
    assert 2 * expected_macs == mode.get_total_flops()
    for formula in (FORMULAS.resolve_function(F.scaled_dot_product_attention),
                    FORMULAS.resolve_aten(torch.ops.aten.scaled_dot_product_attention.default)):
        count = formula(None, out, query, key, key, attn_mask)  # type: ignore[misc]
        # per score (B*L*S of the output: 6*4*5 = 120): scale + softmax 6 (+ mask add 1)
        assert count.macs == expected_macs and count.flops == 2 * count.macs + 120 * (6 + (mask is not None))
        # dot products: Q K^T scores of length 8 (MACs / 8) + output elements 6*4*8 = 192 of length 5
        assert count.dot_outputs == (expected_macs - 960) // 8 + 192 and count.mm_macs == expected_macs
    counter = TorchFLOPsByFX(_Sdpa())
    counter.propagate(query, key, key, attn_mask)
    assert counter.total_macs == expected_macs


class _Sdpa(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class _Attend(nn.Module):
    """An nn.MultiheadAttention (kept whole) inside a model, self-attention on one tensor."""

    def __init__(self, batch_first: bool, need_weights: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first)
        self.need_weights = need_weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=self.need_weights)[0]


def _flop_counter_side_by_side(model: nn.Module, x: torch.Tensor, grad: bool) -> tuple[int, int]:
    with torch.set_grad_enabled(grad):
        with FlopCounterMode(display=False) as mode:
            model(x)
        counter = TorchFLOPsByFX(model)
        counter.propagate(x)
    return mode.get_total_flops(), counter.profile.with_convention("flop_counter").total_flops


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize(("batch_first", "need_weights"), [(True, True), (True, False), (False, False)])
def test_multihead_attention_in_a_model_counts_what_flop_counter_mode_sees(
        batch_first: bool, need_weights: bool, training: bool, grad: bool) -> None:
    # on (2, 5, 8), 2 heads: projections 4 x 10 x 8 x 8 = 2560 MACs, attention 2 x N L S E MACs.
    # FlopCounterMode counts the matrix multiplies of the path the forward takes: the fused fast path
    # (eval, no grad needed, batch_first: torch._native_multi_head_attention) not at all; without the
    # weights, F.scaled_dot_product_attention's CPU flash kernel not, so only 2 x 2560 = 5120; with
    # the weights (bmm) everything: 5120 + 2 x (2 x 2 x 5 x 5 x 8) = 6720
    torch.manual_seed(0)
    model = _Attend(batch_first, need_weights).train(training)
    expected, ours = _flop_counter_side_by_side(model, torch.randn(2, 5, 8), grad)
    fused = batch_first and not training and not grad
    assert expected == (0 if fused else 6720 if need_weights else 5120)
    assert ours == expected


@pytest.mark.parametrize(("training", "grad"), [(True, True), (False, True), (False, False)])
def test_transformer_encoder_layer_in_a_model_counts_what_flop_counter_mode_sees(training: bool, grad: bool) -> None:
    # projections 5120 + feed-forward 2 x (10 x 8 x 16) x 2 = 5120; the attention runs on the CPU
    # flash kernel (uncounted); in eval with no gradient the fused torch._transformer_encoder_layer_fwd
    # runs instead, which FlopCounterMode counts 0
    torch.manual_seed(0)
    model = nn.Sequential(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)).train(training)
    expected, ours = _flop_counter_side_by_side(model, torch.randn(2, 5, 8), grad)
    assert expected == (10240 if training or grad else 0)
    assert ours == expected


def test_a_multihead_attention_model_runs_its_fused_kernel_under_the_profiler() -> None:
    # its forward takes the fused path only while no torch function mode is on: as the model itself it
    # is kept whole (one node), so it runs the kernel it runs without the profiler
    model = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad(), torch.profiler.profile() as prof:
        counter = TorchFLOPsByFX(model)
        out = counter.propagate(x, x, x)
    assert "aten::_native_multi_head_attention" in {e.name for e in prof.events()}
    assert [r.target for r in counter.records if r.op == "call_module"] == ["MultiheadAttention"]
    with torch.no_grad():
        assert torch.equal(out[0], model(x, x, x)[0])


@pytest.mark.parametrize("make", [
    lambda: nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
    lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2),
])
def test_a_transformer_encoder_model_runs_its_fused_kernel_under_the_profiler(make: Any) -> None:
    # the layer's fast path needs no forward hook on it and no mode on: as the model itself it is one
    # node with no hook of the recording's, so the fused kernel runs, bit for bit, and FlopCounterMode
    # counts 0 of it, as the flop_counter convention does
    torch.manual_seed(0)
    model, x = make().eval(), torch.randn(2, 5, 8)
    with torch.no_grad():
        eager = model(x)
        with FlopCounterMode(display=False) as reference:
            model(x)
        with torch.profiler.profile() as prof:
            counter = TorchFLOPsByFX(model)
            out = counter.propagate(x)
    assert "aten::_transformer_encoder_layer_fwd" in {e.name for e in prof.events()}
    assert torch.equal(out, eager)
    assert [r.op for r in counter.records] == ["placeholder", "call_module", "output"]
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops() == 0
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_a_transformer_encoder_layer_model_on_meta_runs_its_modules_as_torch_does() -> None:
    # torch's fast path has no meta kernels: on meta the layer runs self_attn, linear1 and linear2 as
    # modules, and FlopCounterMode attributes them so; kept whole, everything landed on the root
    with torch.device("meta"):
        model = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    x = torch.empty(2, 5, 16, device="meta")
    with torch.no_grad():
        with FlopCounterMode(display=False) as reference:
            model(x)
        counter = TorchFLOPsByFX(model)
        counter.propagate(x)
    expected = {k.removeprefix("TransformerEncoderLayer").lstrip("."): sum(v.values())
                for k, v in reference.get_flop_counts().items() if k != "Global"}
    # self_attn: in-projection 2*10*16*48 + scores and values 2 * 2*2*5*5*8 + out-projection 2*10*16*16
    # = 15360 + 3200 + 5120 = 23680; linear1 and linear2 2*10*16*32 = 10240 each
    assert expected == {"": 44160, "self_attn": 23680, "linear1": 10240, "linear2": 10240}
    got = {k: s.flops for k, s in counter.profile.with_convention("flop_counter").by_module().items() if s.flops}
    assert got == expected


def test_sdpa_under_cpu_autocast_with_mixed_dtypes_follows_the_kernel_that_runs() -> None:
    # q, k float32 (as after a float32 rotary embedding), v bfloat16 (from a Linear under autocast):
    # as the call reaches Python the kernel chooser picks the math path for mixed dtypes, but
    # autocast casts all three to bfloat16 first and the CPU flash kernel runs, which
    # FlopCounterMode counts as 0: the flop_counter convention counts the Linear alone,
    # 2*16*32*32 = 32768, as FlopCounterMode does
    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.v = nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = x.view(2, 8, 4, 8).transpose(1, 2)
            return F.scaled_dot_product_attention(q, q, self.v(x).view(2, 8, 4, 8).transpose(1, 2))

    model, x = Attention(), torch.randn(2, 8, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with FlopCounterMode(display=False) as reference:
            model(x)
        counter = TorchFLOPsByFX(model)
        counter.propagate(x)
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops() == 32768
