"""Tests for ``torch_flops.zoo``: parameter counts, FX traceability, meta-device runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_flops import zoo


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _build_meta(
    build: Callable[..., nn.Module], *args: Any, **kwargs: Any
) -> nn.Module:
    with torch.device("meta"):
        return build(*args, **kwargs)


# --------------------------------------------------------------------------- #
# Registry
# --------------------------------------------------------------------------- #


def test_registry_names() -> None:
    assert set(zoo.ZOO) == {
        "resnet50",
        "vit_b16",
        "mobilenet_v3_large",
        "gpt2",
        "llama",
        "unet",
    }
    for name, entry in zoo.ZOO.items():
        assert entry.name == name
        assert zoo.get(name) is entry
        assert entry.description


def test_get_unknown_lists_names() -> None:
    with pytest.raises(KeyError) as excinfo:
        zoo.get("alexnet")
    msg = str(excinfo.value)
    for name in zoo.ZOO:
        assert name in msg


# --------------------------------------------------------------------------- #
# Parameter counts (meta device: no memory, fast)
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "name, expected",
    [
        ("resnet50", 25_557_032),
        ("vit_b16", 86_567_656),
        ("mobilenet_v3_large", 5_483_032),
        ("gpt2", 124_439_808),
    ],
)
def test_param_counts(name: str, expected: int) -> None:
    model = _build_meta(zoo.get(name).build)
    assert _n_params(model) == expected
    assert all(p.device.type == "meta" for p in model.parameters())


def test_gpt2_lm_head_tied() -> None:
    model = _build_meta(zoo.gpt2)
    assert isinstance(model, zoo.GPT2)
    assert model.lm_head.weight is model.wte.weight


def test_llama2_70b_meta_param_count() -> None:
    cfg = zoo.llama2_70b_config()
    start = time.perf_counter()
    model = _build_meta(zoo.llama, cfg)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"building 70B on meta took {elapsed:.2f}s"
    V, H, I, L = cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    kv_dim = cfg.num_kv_heads * (H // cfg.num_heads)
    # embed V*H
    # + L * [ H*H (q) + 2*H*kv_dim (k, v) + H*H (o) + 3*H*I (gate, up, down) + 2*H (two RMSNorms) ]
    # + H (final norm) + V*H (untied lm_head)
    # = 262,144,000 + 80 * (67,108,864 + 16,777,216 + 67,108,864 + 704,643,072 + 16,384)
    #   + 8,192 + 262,144,000
    # = 262,144,000 + 80 * 855,654,400 + 8,192 + 262,144,000 = 68,976,648,192
    expected = (
        V * H + L * (H * H + 2 * H * kv_dim + H * H + 3 * H * I + 2 * H) + H + V * H
    )
    assert expected == 68_976_648_192
    assert _n_params(model) == expected


def test_llama_tie_embeddings() -> None:
    model = _build_meta(zoo.llama, tie_embeddings=True)
    assert isinstance(model, zoo.Llama)
    assert model.lm_head.weight is model.embed_tokens.weight
    cfg = zoo.LlamaConfig()
    untied = _build_meta(zoo.llama)
    assert _n_params(untied) - _n_params(model) == cfg.vocab_size * cfg.hidden_size


# --------------------------------------------------------------------------- #
# FX tracing: GraphModule output == eager output on small real CPU inputs
# --------------------------------------------------------------------------- #

SMALL_VIT: dict[str, Any] = {
    "image_size": 32,
    "patch": 8,
    "dim": 64,
    "depth": 2,
    "heads": 4,
    "mlp_dim": 128,
    "num_classes": 10,
}
SMALL_GPT2: dict[str, Any] = {
    "vocab_size": 512,
    "n_positions": 64,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 4,
}
SMALL_LLAMA: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
}

# name -> (build kwargs, example-input kwargs) for small, fast real-CPU checks
SMALL_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "resnet50": ({"num_classes": 10}, {"image_size": 64}),
    "vit_b16": (SMALL_VIT, {"image_size": 32}),
    "mobilenet_v3_large": ({"num_classes": 10}, {"image_size": 64}),
    "gpt2": (SMALL_GPT2, {"seq_len": 16, "vocab_size": 512}),
    "llama": (SMALL_LLAMA, {"seq_len": 16, "vocab_size": 512}),
    "unet": ({}, {"image_size": 32}),
}


@pytest.mark.parametrize("name", sorted(SMALL_CASES))
def test_symbolic_trace_matches_eager(name: str) -> None:
    entry = zoo.get(name)
    build_kw, input_kw = SMALL_CASES[name]
    torch.manual_seed(0)
    model = entry.build(**build_kw).eval()
    gm = torch.fx.symbolic_trace(model)
    assert isinstance(gm, torch.fx.GraphModule)
    args = entry.example_inputs(batch_size=2, device="cpu", **input_kw)
    with torch.no_grad():
        expected = model(*args)
        actual = gm(*args)
    assert torch.isfinite(expected).all()
    torch.testing.assert_close(actual, expected)


def test_full_size_defaults_trace() -> None:
    """The default (full-size) configs trace too; built on meta so it stays cheap."""
    for name, entry in zoo.ZOO.items():
        gm = torch.fx.symbolic_trace(_build_meta(entry.build))
        assert len(gm.graph.nodes) > 3, name


def test_vit_uses_explicit_attention() -> None:
    gm = torch.fx.symbolic_trace(zoo.vit_b16(**SMALL_VIT))
    targets = {n.target for n in gm.graph.nodes}
    assert F.scaled_dot_product_attention not in targets
    assert not any(isinstance(m, nn.MultiheadAttention) for m in gm.modules())
    assert "softmax" in targets


def test_llama_rmsnorm_is_own_module() -> None:
    model = zoo.llama(**SMALL_LLAMA)
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    norms = [m for m in model.modules() if isinstance(m, zoo.RMSNorm)]
    assert len(norms) == 2 * SMALL_LLAMA["num_layers"] + 1
    assert all(type(m).__name__ == "RMSNorm" for m in norms)
    x = torch.randn(3, 5, 64)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norms[0].weight
    torch.testing.assert_close(norms[0](x), ref)


# --------------------------------------------------------------------------- #
# Meta device: full-size models run, output shapes by hand
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "name, batch_size, input_kw, expected_shape",
    [
        ("resnet50", 2, {}, (2, 1000)),
        ("vit_b16", 2, {}, (2, 1000)),
        ("mobilenet_v3_large", 2, {}, (2, 1000)),
        ("gpt2", 1, {"seq_len": 128}, (1, 128, 50257)),
        ("llama", 2, {"seq_len": 64}, (2, 64, 32000)),
        ("unet", 1, {}, (1, 2, 64, 64)),
    ],
)
def test_meta_forward_shapes(
    name: str,
    batch_size: int,
    input_kw: dict[str, Any],
    expected_shape: tuple[int, ...],
) -> None:
    entry = zoo.get(name)
    model = _build_meta(entry.build)
    args = entry.example_inputs(batch_size=batch_size, device="meta", **input_kw)
    assert all(a.device.type == "meta" for a in args)
    out = model(*args)
    assert out.device.type == "meta"
    assert tuple(out.shape) == expected_shape
    # the traced graph runs on meta too
    out_gm = torch.fx.symbolic_trace(model)(*args)
    assert tuple(out_gm.shape) == expected_shape


def test_llama2_70b_meta_forward() -> None:
    model = _build_meta(zoo.llama, zoo.llama2_70b_config())
    (ids,) = zoo.llama_example_inputs(
        batch_size=1, device=torch.device("meta"), seq_len=32
    )
    assert ids.dtype == torch.long
    assert tuple(model(ids).shape) == (1, 32, 32000)


# --------------------------------------------------------------------------- #
# Llama grouped-query attention vs. a hand-written repeat_interleave reference
# --------------------------------------------------------------------------- #


def test_llama_gqa_matches_repeat_interleave_reference() -> None:
    torch.manual_seed(0)
    cfg = zoo.LlamaConfig(**SMALL_LLAMA)
    assert cfg.num_kv_heads < cfg.num_heads
    attn = zoo.LlamaAttention(cfg).eval()
    B, T, H, nh, nkv = 2, 7, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads
    hd = H // nh
    x = torch.randn(B, T, H)
    # rotary angles written out independently of the model code
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.outer(torch.arange(T).float(), inv_freq)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    with torch.no_grad():
        out = attn(x, cos, sin)

        def rope(t: torch.Tensor) -> torch.Tensor:
            half = hd // 2
            rot = torch.cat([-t[..., half:], t[..., :half]], -1)
            return t * cos + rot * sin

        q = rope((x @ attn.q_proj.weight.T).view(B, T, nh, hd).transpose(1, 2))
        k = rope((x @ attn.k_proj.weight.T).view(B, T, nkv, hd).transpose(1, 2))
        v = (x @ attn.v_proj.weight.T).view(B, T, nkv, hd).transpose(1, 2)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        scores = (q @ k.transpose(-2, -1)) / hd**0.5
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)
        ref = y @ attn.o_proj.weight.T
    torch.testing.assert_close(out, ref)

    # and the model-level rotary angles equal the hand-written ones
    model = zoo.llama(**SMALL_LLAMA)
    c2, s2 = model.rotary(torch.zeros(1, T, dtype=torch.long), torch.float32)
    torch.testing.assert_close(c2, cos)
    torch.testing.assert_close(s2, sin)


# --------------------------------------------------------------------------- #
# Example inputs
# --------------------------------------------------------------------------- #


def test_example_inputs_are_deterministic_and_in_range() -> None:
    (a,) = zoo.gpt2_example_inputs(batch_size=3, seq_len=20)
    (b,) = zoo.gpt2_example_inputs(batch_size=3, seq_len=20)
    assert a.dtype == torch.long and a.shape == (3, 20) and a.device.type == "cpu"
    assert torch.equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < 50257
    (ids,) = zoo.llama_example_inputs(seq_len=9, vocab_size=100)
    assert ids.shape == (1, 9) and int(ids.max()) < 100
    (img,) = zoo.resnet50_example_inputs(batch_size=2, image_size=32)
    assert img.shape == (2, 3, 32, 32) and img.dtype == torch.float32
    torch.testing.assert_close(
        img, zoo.resnet50_example_inputs(batch_size=2, image_size=32)[0]
    )
    (u,) = zoo.unet_example_inputs()
    assert u.shape == (1, 3, 64, 64)
    (m,) = zoo.vit_b16_example_inputs(device="meta")
    assert m.device.type == "meta" and m.shape == (1, 3, 224, 224)
