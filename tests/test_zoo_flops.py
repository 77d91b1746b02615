"""Every zoo model counted against independent references: ``FlopCounterMode`` on the same meta
inputs (``2 * total_macs`` must equal its total, see the convention in ``torch_flops.formulas``),
the published ResNet-50 total, and, on CPU with small configs, the eager output and model state."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX, UnsupportedOpWarning, zoo


def _flop_counter_total(model: nn.Module, inputs: tuple[Any, ...]) -> int:
    with FlopCounterMode(display=False) as mode, torch.no_grad():
        model(*inputs)
    return int(mode.get_total_flops())


def _count(model: nn.Module, inputs: tuple[Any, ...], **kwargs: Any) -> tuple[TorchFLOPsByFX, Any]:
    counter = TorchFLOPsByFX(model, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsupportedOpWarning)  # every zoo op has a formula
        with torch.no_grad():
            out = counter.propagate(*inputs)
    return counter, out


@pytest.mark.parametrize("tracer", ["eager", "fx"])
@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_zoo_default_config_matches_flop_counter_mode_on_meta(name: str, tracer: str) -> None:
    entry = zoo.ZOO[name]
    with torch.device("meta"):
        model = entry.build().eval()
    inputs = entry.example_inputs(batch_size=2, device="meta")
    counter, out = _count(model, inputs, tracer=tracer)
    assert counter.unsupported == {}
    assert counter.tracer_used == tracer
    assert out.device.type == "meta"
    reference = _flop_counter_total(model, inputs)
    assert reference > 0
    assert 2 * counter.total_macs == reference
    # the same profile in FlopCounterMode's own convention: exactly its total
    assert counter.profile.with_convention("flop_counter").total_flops == reference
    # flops = 2*macs + the non-dot-product work (norms, activations, softmax, adds...), never less
    assert counter.total_flops > 2 * counter.total_macs
    assert counter.total_time_ms is None  # nothing timed on meta


def test_resnet50_published_total() -> None:
    # ResNet-50 at 1x3x224x224: 4,089,184,256 multiply-accumulates, the "4.09 GFLOPs" published for it
    # (torchvision's ResNet50_Weights meta "_ops": 4.089, fvcore's count, the ResNet paper's 3.8e9
    # for v1 with the stride on the first 1x1 conv).
    with torch.device("meta"):
        model = zoo.resnet50().eval()
    counter, _ = _count(model, zoo.resnet50_example_inputs(1, device="meta"))
    assert counter.total_macs == 4_089_184_256
    assert counter.profile.total_params == 25_557_032  # the published parameter count, for the same model


SMALL: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[Any, ...]]]] = {
    "vit_b16": (lambda: zoo.vit_b16(image_size=32, patch=8, dim=64, depth=2, heads=4, mlp_dim=128),
                lambda: zoo.vit_b16_example_inputs(2, image_size=32)),
    "gpt2": (lambda: zoo.gpt2(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64),
             lambda: zoo.gpt2_example_inputs(2, seq_len=16, vocab_size=100)),
    "llama": (lambda: zoo.llama(vocab_size=100, hidden_size=64, intermediate_size=128, num_layers=2,
                                num_heads=4, num_kv_heads=2),
              lambda: zoo.llama_example_inputs(2, seq_len=16, vocab_size=100)),
    "unet": (lambda: zoo.unet(), lambda: zoo.unet_example_inputs(1, image_size=32)),
    "resnet50": (lambda: zoo.resnet50(), lambda: zoo.resnet50_example_inputs(1, image_size=64)),
    "mobilenet_v3_large": (lambda: zoo.mobilenet_v3_large(),
                           lambda: zoo.mobilenet_v3_large_example_inputs(1, image_size=64)),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_zoo_on_cpu_matches_eager_and_keeps_state(name: str, capture_state: Any) -> None:
    build, make_inputs = SMALL[name]
    model = build().eval()
    inputs = make_inputs()
    with torch.no_grad():
        reference = model(*inputs)
    check = capture_state(model)
    counter, out = _count(model, inputs)
    assert torch.equal(out, reference)
    check()
    # every op and module call timed (the inputs, parameter reads, tuple items and output run nothing)
    assert all(r.time_ms is not None for r in counter.records if r.op.startswith("call_") and "getitem" not in r.target)
    # The reference count on meta: on CPU, FlopCounterMode has no formula for the CPU flash-attention
    # kernel that F.scaled_dot_product_attention dispatches to (gpt2, llama), so it would undercount.
    with torch.device("meta"):
        meta_model = build().eval()
    meta_inputs = tuple(t.to("meta") for t in inputs)
    assert 2 * counter.total_macs == _flop_counter_total(meta_model, meta_inputs)
    meta_counter, _ = _count(meta_model, meta_inputs)
    assert (meta_counter.total_flops, meta_counter.total_macs) == (counter.total_flops, counter.total_macs)


def test_training_mode_batchnorm_stats_move_once(same_state: Any) -> None:
    model = zoo.unet(base_channels=8, depth=2).train()
    (x,) = zoo.unet_example_inputs(2, image_size=16)
    eager = copy.deepcopy(model)
    counter = TorchFLOPsByFX(model, warmup=1, repeat=2)  # three training-mode calls, one of them for real
    with torch.no_grad():
        out = counter.propagate(x)
        reference = eager(x)  # one eager call
    assert torch.equal(out, reference)
    # running_mean/var and num_batches_tracked moved once, bit for bit as in one eager call
    same_state(model, eager)
    assert int(model.get_buffer("down.0.block.1.num_batches_tracked")) == 1