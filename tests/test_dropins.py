"""The fvcore drop-in against real fvcore 0.1.5 (numbers it printed for the zoo ResNet-50 at
1x3x224x224, CPU) and DeepSpeed's FLOPs on the same model derived from our records."""

from __future__ import annotations

import pytest
import torch

import torch_flops
from torch_flops import ActivationCountAnalysis, FlopCountAnalysis, flop_count_table, zoo
from torch_flops.formulas._shapes import prod


@pytest.fixture(scope="module")
def resnet() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return zoo.resnet50().eval(), torch.randn(1, 3, 224, 224)


def test_fvcore_numbers_names_and_unsupported(resnet) -> None:
    flops = FlopCountAnalysis(*resnet)
    # fvcore 0.1.5: total 4,111,512,576; batch_norm 2 per element in eval (22,227,968), the
    # adaptive average pool 1 per input element (2048 x 7 x 7)
    assert flops.total() == 4_111_512_576
    assert dict(flops.by_operator()) == {"conv": 4_087_136_256, "batch_norm": 22_227_968,
                                         "adaptive_avg_pool2d": 100_352, "linear": 2_048_000}
    assert dict(flops.unsupported_ops()) == {"aten::max_pool2d": 1, "aten::add": 16}
    assert flops.by_module()["conv1"] == 118_013_952 and flops.by_module()["bn1"] == 1_605_632
    assert len(flops.uncalled_modules()) == 12  # the nn.Identity downsamples, as fvcore reports
    table = flop_count_table(flops, max_depth=1, show_param_shapes=False).splitlines()
    assert table[0].split("|")[1:-1] == [" module   ", " #parameters   ", " #flops   "]
    assert table[2] == "| model    | 25.557M       | 4.112G   |"
    assert table[-1] == "| avgpool  |               | 0.1M     |"  # fvcore's order: parameter owners first
    shapes = flop_count_table(flops, max_depth=2)
    assert "| conv1.weight | (64, 3, 7, 7)          |          |" in shapes.splitlines()
    flops.set_op_handle("aten::batch_norm", None)  # ignored: neither counted nor unsupported
    assert flops.total() == 4_111_512_576 - 22_227_968 and "aten::batch_norm" not in flops.unsupported_ops()
    flops.set_op_handle("aten::max_pool2d", lambda module, out, x, *a, **k: x.numel())
    assert flops.by_operator()["max_pool2d"] == 64 * 112 * 112
    assert dict(flops.unsupported_ops()) == {"aten::add": 16}


def test_fvcore_activations(resnet) -> None:
    acts = ActivationCountAnalysis(*resnet)
    assert acts.total() == 11_114_984  # fvcore: conv 11,113,984 + linear 1,000
    assert dict(acts.by_operator()) == {"conv": 11_113_984, "linear": 1_000}


def test_deepspeed_flops_follow_from_its_rules(resnet) -> None:
    # DeepSpeed's get_model_profile gives 8,211,108,352 FLOPs on this model. Its profiler patches
    # torch.nn.functional: conv 2 x MACs (+ bias), linear 2 x MACs without the bias, batch_norm 2 per
    # element in eval, relu 1 per element, pools 1 per INPUT element; `out + identity` is
    # Tensor.__add__, which it does not patch (0). Our records give exactly its number.
    p = torch_flops.profile(*resnet)
    total = 0
    for r in p.records:
        kind = r.module_type if r.op == "call_module" else r.target
        elements = prod(r.output_shape) if r.output_shape else 0
        total += {"Conv2d": 2 * (r.macs or 0), "Linear": 2 * (r.macs or 0), "BatchNorm2d": 2 * elements,
                  "ReLU": elements, "MaxPool2d": 64 * 112 * 112, "AdaptiveAvgPool2d": 2048 * 7 * 7}.get(kind, 0)
    assert total == 8_211_108_352
    assert p.total_flops - total == 28_551_144  # ours: + linear bias 1,000, + residual adds, pools, relu
