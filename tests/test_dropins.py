"""The fvcore drop-in against real fvcore 0.1.5 (numbers it printed for the zoo ResNet-50 at
1x3x224x224, CPU) and DeepSpeed's FLOPs on the same model derived from our records."""

from __future__ import annotations

import logging
import warnings
from typing import Any

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


# --------------------------------------------------------------------------- fvcore's JitModelAnalysis semantics


class _Shared(torch.nn.Module):
    """One Linear(10, 10) reached through two parents, one Linear(10, 1) under two names, and a
    Linear(10, 1) of a submodule run through a method other than its forward."""

    def __init__(self) -> None:
        super().__init__()
        inner = torch.nn.Linear(10, 10)
        self.submod1, self.submod2 = torch.nn.Sequential(inner), torch.nn.Sequential(inner)
        self.multiname1 = self.multiname2 = torch.nn.Linear(10, 1)
        self.side = torch.nn.Module()
        self.side.fc = torch.nn.Linear(10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.submod1(x) + self.submod2(x)
        return self.multiname1(x) + self.multiname2(x) + self.side.fc(x)


def test_fvcore_names_a_module_called_conv_by_the_op_it_runs() -> None:
    """transformers' ``Conv1D`` (GPT-2's projections) runs ``torch.addmm``: fvcore's trace shows
    ``aten::addmm``, never a convolution, and a handle for ``aten::addmm`` reaches it."""
    pytest.importorskip("transformers")
    from transformers.pytorch_utils import Conv1D

    model = torch.nn.Sequential(Conv1D(16, 8))
    x = torch.randn(3, 8)
    assert dict(FlopCountAnalysis(model, x).by_operator()) == {"addmm": 3 * 8 * 16}  # fvcore: MACs, 384
    handled = FlopCountAnalysis(model, x).set_op_handle("aten::addmm", lambda *args, **kwargs: 1)
    assert dict(handled.by_operator()) == {"addmm": 1}
    conv = FlopCountAnalysis(model, x).set_op_handle("aten::_convolution", lambda *args, **kwargs: 7)
    assert dict(conv.by_operator()) == {"addmm": 384}
    # custom_formulas {cls: None} removes the class's formula, registered by name or not: its ops count
    p = torch_flops.profile(model, x, custom_formulas={Conv1D: None})
    assert [r.target for r in p.records if r.op.startswith("call_")] != ["Conv1D"]
    assert p.total_macs == 384


def test_fvcore_shared_modules_aliases_and_ancestor_modes() -> None:
    # MACs at batch 1: the shared Linear(10, 10) 100 per call (2 calls), Linear(10, 1) 10 per call
    # (2 calls under its two names), side.fc 10: total 200 + 20 + 10 = 230
    x = torch.randn(1, 10)
    owner = FlopCountAnalysis(_Shared(), x)  # fvcore's default: counted into the owners by name
    assert owner.by_module() == {"": 230, "submod1": 200, "submod1.0": 200, "submod2": 0, "multiname1": 20,
                                 "side": 10, "side.fc": 10}
    assert owner.canonical_module_name("multiname2") == "multiname1"
    assert owner.canonical_module_name("submod2.0") == "submod1.0"
    assert owner.total("multiname2") == 20 and owner.by_operator("submod2.0") == {"linear": 200}
    assert owner.uncalled_modules() == set()
    with pytest.raises(KeyError, match="nope"):
        owner.total("nope")
    caller = FlopCountAnalysis(_Shared(), x).ancestor_mode("caller")  # into the modules called on the way
    assert caller.by_module() == {"": 230, "submod1": 100, "submod1.0": 200, "submod2": 100, "multiname1": 20,
                                  "side": 0, "side.fc": 10}
    assert caller.uncalled_modules() == {"side"}  # its forward never ran
    with pytest.raises(ValueError, match="owner"):
        caller.ancestor_mode("parent")


def test_fvcore_copy_clear_handles_warnings_and_logging(caplog: pytest.LogCaptureFixture) -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.conv, self.unused = torch.nn.Linear(8, 4), torch.nn.Conv1d(2, 3, 1), torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            warnings.warn("from the model", RuntimeWarning)
            return self.fc(x).sum() + self.conv(x.view(-1, 2, 4)).sum()

    x = torch.randn(2, 8)
    with caplog.at_level(logging.WARNING):
        flops = FlopCountAnalysis(Net(), x).tracer_warnings("none")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "none": the model's own warnings are silenced
            # linear 2*8*4 = 64 MACs, conv 2 x (3 out channels x 4 positions x 2 in) = 48
            assert flops.by_operator() == {"linear": 64, "conv": 48}
    log = caplog.text
    assert "Unsupported operator aten::sum encountered 2 time(s)" in log and "never called" in log and "unused" in log
    caplog.clear()
    quiet = flops.copy().unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    assert quiet._warn_trace == "none" and quiet.total() == 112 and caplog.text == ""
    assert flops.copy(new_inputs=torch.randn(3, 8)).total() == 112 // 2 * 3  # batch 3
    with pytest.warns(RuntimeWarning, match="from the model"):
        flops.copy().tracer_warnings("all").total()
    with pytest.raises(ValueError, match="no_tracer_warning"):
        flops.tracer_warnings("loud")
    flops.set_op_handle("aten::_convolution", lambda module, out, *args, **kwargs: 7)  # every convolution
    assert flops.by_operator() == {"linear": 64, "conv": 7}
    acts = ActivationCountAnalysis(Net(), x).tracer_warnings("none")
    assert acts.set_op_handle("aten::_convolution", lambda *a, **k: 7).total() == 8 + 7  # linear: 2 x 4 outputs
    flops.clear_op_handles()  # fvcore's defaults go too: nothing counted, every op unsupported
    assert flops.by_module_and_operator()["fc"] == {} and flops.unsupported_ops()["aten::linear"] == 1


def test_fvcore_table_aligns_numbers_as_fvcore() -> None:
    # fvcore 0.1.5's table for this model: a column of plain numbers is right-aligned
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10))
    x = torch.randn(1, 10)
    table = flop_count_table(FlopCountAnalysis(model, x), activations=ActivationCountAnalysis(model, x),
                             show_param_shapes=False)
    assert table.splitlines() == ["| module   | #parameters   | #flops   |   #activations |",
                                  "|:---------|:--------------|:---------|---------------:|",
                                  "| model    | 0.22K         | 0.2K     |             20 |",
                                  "| 0        | 0.11K         | 100      |             10 |",
                                  "| 1        | 0.11K         | 100      |             10 |"]


# --------------------------------------------------------------------------- fault round 6: fvcore 0.1.5's numbers


class _Attend(torch.nn.Module):
    """An nn.MultiheadAttention(8, 2) called with fixed keyword arguments (a ViT-style block)."""

    def __init__(self, **call: object) -> None:
        super().__init__()
        self.attn, self.call = torch.nn.MultiheadAttention(8, 2, batch_first=True), call

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return self.attn(q, kv, kv, **self.call)[0]


def test_fvcore_multihead_attention_inside_a_model_counts_its_projections() -> None:
    torch.manual_seed(0)
    x, kv = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    flops = FlopCountAnalysis(layer, x)
    # fvcore 0.1.5: total 5920, self_attn 2560 = in_proj 10 tokens x 8 x 24 (1920) + out_proj 10 x 8 x 8 (640);
    # linear 5120 (+ linear1/linear2 1280 each), layer_norm 800 (5 per element of 80, twice)
    assert flops.total() == 5920 and flops.by_module()["self_attn"] == 2560
    assert dict(flops.by_operator()) == {"linear": 5120, "layer_norm": 800}
    # need_weights (the default): the scores and the weighted sum are aten::bmm, N*L*S*E = 2*5*7*8 = 560
    # MACs each; fvcore: linear 3072 (q 640 + k, v 2 x 2*7*8*8 + out 640), bmm 1120
    assert dict(FlopCountAnalysis(_Attend(), (x, kv)).by_operator()) == {"linear": 3072, "bmm": 1120}
    # under a mask the scores are aten::baddbmm (unsupported in fvcore): bmm 560; without need_weights
    # scaled_dot_product_attention (unsupported): linear only
    masked = _Attend(attn_mask=torch.zeros(5, 7, dtype=torch.bool))
    assert dict(FlopCountAnalysis(masked, (x, kv)).by_operator()) == {"linear": 3072, "bmm": 560}
    assert dict(FlopCountAnalysis(_Attend(need_weights=False), (x, kv)).by_operator()) == {"linear": 3072}
    # fvcore's activations: projections' outputs 2 x 10 x 8 + 2 x 14 x 8 = 384; scores 2 x 2 x 5 x 7 = 140 and
    # the weighted sum 10 x 8 = 80 (bmm 220): 604
    assert dict(ActivationCountAnalysis(_Attend(), (x, kv)).by_operator()) == {"linear": 384, "bmm": 220}


class _Fn(torch.nn.Module):
    def __init__(self, fn: object) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)  # type: ignore[operator]


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x * x

    @staticmethod
    def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:
        return g


def test_fvcore_op_names_as_its_trace_shows_them() -> None:
    torch.manual_seed(0)
    # fvcore 0.1.5: grid_sampler 4 per output element, output (1, 2, 3, 3): 72
    grid = FlopCountAnalysis(_Fn(lambda x, g: torch.nn.functional.grid_sample(x, g, align_corners=False)),
                             (torch.randn(1, 2, 4, 4), torch.randn(1, 3, 3, 2)))
    assert dict(grid.by_operator()) == {"grid_sampler": 72} and not grid.unsupported_ops()
    # torch.mm: 3 x 4 x 5 = 60, named mm
    assert dict(FlopCountAnalysis(_Fn(torch.mm), (torch.randn(3, 4), torch.randn(4, 5))).by_operator()) == {"mm": 60}
    # a BatchNorm2d as the model: no aten::dim (x.dim() is a Python int to a trace); eval 2 per element of 200
    bn = FlopCountAnalysis(torch.nn.BatchNorm2d(4).eval(), torch.randn(2, 4, 5, 5))
    assert bn.total() == 400 and not bn.unsupported_ops()
    # a BatchNorm2d submodule in training: its num_batches_tracked.add_(1) is fvcore's unsupported aten::add_;
    # conv 4 x 4 x 4 outputs x 27 = 1728, batch_norm 5 per element of 64 = 320
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    train = FlopCountAnalysis(net, torch.randn(1, 3, 6, 6))
    assert dict(train.by_operator()) == {"conv": 1728, "batch_norm": 320}
    assert dict(train.unsupported_ops()) == {"aten::add_": 1}
    assert "aten::add_" not in FlopCountAnalysis(net.eval(), torch.randn(1, 3, 6, 6)).unsupported_ops()


def test_fvcore_python_op_handles_are_accepted() -> None:
    # fvcore names a custom autograd.Function prim::PythonOp.<Name> and takes a handle for it (Mamba's code
    # sets one in a set_op_handle(**handles) call); ours counts it through its ops and says the handle is unused
    model = _Fn(lambda x: _Square.apply(x))
    flops = FlopCountAnalysis(model, torch.randn(2, 4))
    with pytest.warns(UserWarning, match="PythonOp.Square.*not applied"):
        flops.set_op_handle(**{"prim::PythonOp.Square": lambda *a, **k: 8, "aten::mul": lambda *a, **k: 3})
    assert dict(flops.by_operator()) == {"mul": 3}
    with pytest.raises(ValueError, match="aten::nope"):
        flops.set_op_handle("aten::nope", lambda *a, **k: 1)


def test_fvcore_table_as_fvcore_prints_it(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[bool] = []

    class Twice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(10, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.is_grad_enabled())
            return self.fc(self.fc(x)) + 1

    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING):
        table = flop_count_table(FlopCountAnalysis(Twice(), torch.randn(2, 10)))
    # fvcore 0.1.5 (2 calls x 2 x 10 x 10 = 400): the root shown as its one child, the rows below named
    # without its prefix; no log of the unsupported aten::add; the forward ran with grad enabled
    assert table.splitlines() == ["| module   | #parameters or shape   | #flops   |",
                                  "|:---------|:-----------------------|:---------|",
                                  "| fc       | 0.11K                  | 0.4K     |",
                                  "| weight   | (10, 10)               |          |",
                                  "| bias     | (10,)                  |          |"]
    assert caplog.text == "" and seen == [True]
    # a model without parameters: an empty #parameters cell (nearest 2x upsampling: 1 per output, 3 x 8 x 8)
    up = flop_count_table(FlopCountAnalysis(torch.nn.Upsample(scale_factor=2), torch.randn(1, 3, 4, 4)))
    assert up.splitlines()[2] == "| model    |                        | 0.192K   |"


# --------------------------------------------------------------------------- fvcore.nn's functions
class _SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3),
                                            torch.nn.ReLU())
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)).flatten(1))


class _SharedFC(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(10, 10)
        self.alias = self.fc  # the same module under a second name
        self.inner = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.Tanh(), torch.nn.Linear(20, 10, bias=False))
        self.unused = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.alias(self.inner(self.fc(x)) + x) * 2


def test_parameter_count_as_fvcore(resnet) -> None:
    # fvcore 0.1.5 printed these dicts (every prefix of every parameter name, shared parameters once)
    assert dict(torch_flops.parameter_count(_SmallCNN())) == {
        "": 1578, "features": 1408, "features.0": 224, "features.0.weight": 216, "features.0.bias": 8,
        "features.1": 16, "features.1.weight": 8, "features.1.bias": 8, "features.4": 1168,
        "features.4.weight": 1152, "features.4.bias": 16, "head": 170, "head.weight": 160, "head.bias": 10}
    shared = torch_flops.parameter_count(_SharedFC())
    assert dict(shared) == {
        "": 542, "fc": 110, "fc.weight": 100, "fc.bias": 10, "inner": 420, "inner.0": 220, "inner.0.weight": 200,
        "inner.0.bias": 20, "inner.2": 200, "inner.2.weight": 200, "unused": 12, "unused.weight": 9,
        "unused.bias": 3}
    assert shared["alias"] == 0 and shared.default_factory is int  # a defaultdict(int), as fvcore's
    counts = torch_flops.parameter_count(resnet[0])
    assert (counts[""], counts["layer1"]) == (25_557_032, 215_808)  # fvcore 0.1.5 printed


def test_parameter_count_table_as_fvcore(resnet) -> None:
    # fvcore 0.1.5 printed (tabulate 0.10 drops the indent fvcore asks it to preserve: both call it alike)
    assert torch_flops.parameter_count_table(_SmallCNN()).splitlines() == [
        "| name              | #elements or shape   |",
        "|:------------------|:---------------------|",
        "| model             | 1.6K                 |",
        "| features          | 1.4K                 |",
        "| features.0        | 0.2K                 |",
        "| features.0.weight | (8, 3, 3, 3)         |",
        "| features.0.bias   | (8,)                 |",
        "| features.1        | 16                   |",
        "| features.1.weight | (8,)                 |",
        "| features.1.bias   | (8,)                 |",
        "| features.4        | 1.2K                 |",
        "| features.4.weight | (16, 8, 3, 3)        |",
        "| features.4.bias   | (16,)                |",
        "| head              | 0.2K                 |",
        "| head.weight       | (10, 16)             |",
        "| head.bias         | (10,)                |"]
    assert torch_flops.parameter_count_table(_SharedFC(), max_depth=1).splitlines() == [
        "| name   | #elements or shape   |",
        "|:-------|:---------------------|",
        "| model  | 0.5K                 |",
        "| fc     | 0.1K                 |",
        "| inner  | 0.4K                 |",
        "| unused | 12                   |"]
    table = torch_flops.parameter_count_table(resnet[0]).splitlines()
    assert len(table) == 131  # fvcore 0.1.5: 129 rows under the header and its rule
    assert table[:3] == ["| name                | #elements or shape   |",
                         "|:--------------------|:---------------------|",
                         "| model               | 25.6M                |"]
    assert table[8:10] == ["| layer1              | 0.2M                 |", "| layer1.0            | 75.0K                |"]
    assert table[16] == "| layer1.0.downsample | 16.9K                |"
    assert table[121] == "| layer4.2            | 4.5M                 |"
    assert table[-2:] == ["| fc.weight           | (1000, 2048)         |", "| fc.bias             | (1000,)              |"]
    assert torch_flops.parameter_count_table(resnet[0], max_depth=1).splitlines()[-2:] == [
        "| layer4 | 15.0M                |", "| fc     | 2.0M                 |"]
    with pytest.raises(TypeError, match="torch.nn.Module"):
        torch_flops.parameter_count_table("resnet")  # type: ignore[arg-type]


def test_flop_count_and_activation_count_as_fvcore(resnet) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16)
    # fvcore 0.1.5 printed: conv 2x8x16x16x27 + 2x16x6x6x72 = 110,592 + 82,944 = 193,536 MACs; batch_norm
    # (eval, affine) 2 per element of 2x8x16x16; adaptive_avg_pool2d 1 per input element 2x16x6x6; linear 2x16x10
    gflops, unsupported = torch_flops.flop_count(_SmallCNN().eval(), (x,))
    assert dict(gflops) == {"conv": 0.000193536, "batch_norm": 8.192e-06, "adaptive_avg_pool2d": 1.152e-06,
                            "linear": 3.2e-07}
    assert gflops.default_factory is float and unsupported == {"aten::max_pool2d": 1}
    macts, unsupported = torch_flops.activation_count(_SmallCNN().eval(), (x,))
    assert dict(macts) == {"conv": 0.005248, "linear": 2e-05}  # outputs 2x8x16x16 + 2x16x6x6 = 5,248; 2x10
    assert unsupported == {"aten::batch_norm": 1, "aten::max_pool2d": 1, "aten::adaptive_avg_pool2d": 1}
    # the shared fc runs twice: 2 x 3x10x10 + 3x10x20 + 3x20x10 = 1,800
    shared = torch_flops.flop_count(_SharedFC(), (torch.randn(3, 10),))
    assert (dict(shared[0]), dict(shared[1])) == ({"linear": 1.8e-06}, {"aten::tanh": 1, "aten::add": 1, "aten::mul": 1})
    # a handle of ours through supported_ops: max_pool2d counted as its input's elements (2x8x16x16)
    handled, unsupported = torch_flops.flop_count(_SmallCNN().eval(), (x,), supported_ops={
        "aten::max_pool2d": lambda module, out, inp, *args, **kwargs: inp.numel()})
    assert handled["max_pool2d"] == 4.096e-06 and unsupported == {}
    model, xr = resnet
    gflops, unsupported = torch_flops.flop_count(model, (xr,))
    assert dict(gflops) == {"conv": 4.087136256, "batch_norm": 0.022227968, "adaptive_avg_pool2d": 0.000100352,
                            "linear": 0.002048}  # fvcore 0.1.5 printed
    assert unsupported == {"aten::max_pool2d": 1, "aten::add": 16}
    macts, unsupported = torch_flops.activation_count(model, (xr,))
    assert dict(macts) == {"conv": 11.113984, "linear": 0.001}  # fvcore 0.1.5 printed
    assert unsupported == {"aten::batch_norm": 53, "aten::max_pool2d": 1, "aten::add": 16,
                           "aten::adaptive_avg_pool2d": 1}


def test_flop_count_str_as_fvcore() -> None:
    torch.manual_seed(0)
    model, x = _SharedFC(), torch.randn(3, 10)
    text = torch_flops.flop_count_str(FlopCountAnalysis(model, x), activations=ActivationCountAnalysis(model, x))
    # fvcore 0.1.5 printed (fc runs twice: 2 x 3x10x10 = 600; inner 3x10x20 + 3x20x10 = 1,200; activations
    # the outputs 2 x 3x10 + 3x20 + 3x10 = 150); the shared module's second name and a 0 module show no stats
    assert text.splitlines() == [
        ("N/A indicates a possibly missing statistic due to how the module was called. Missing values are still "
         "included in the parent's total."),
        "_SharedFC(",
        "  #params: 0.54K, #flops: 1.8K, #acts: 0.15K",
        "  (fc): Linear(",
        "    in_features=10, out_features=10, bias=True",
        "    #params: 0.11K, #flops: 0.6K, #acts: 60",
        "  )",
        "  (alias): Linear(in_features=10, out_features=10, bias=True)",
        "  (inner): Sequential(",
        "    #params: 0.42K, #flops: 1.2K, #acts: 90",
        "    (0): Linear(",
        "      in_features=10, out_features=20, bias=True",
        "      #params: 0.22K, #flops: 0.6K, #acts: 60",
        "    )",
        "    (1): Tanh()",
        "    (2): Linear(",
        "      in_features=20, out_features=10, bias=False",
        "      #params: 0.2K, #flops: 0.6K, #acts: 30",
        "    )",
        "  )",
        "  (unused): Linear(",
        "    in_features=3, out_features=3, bias=True",
        "    #params: 12, #flops: N/A, #acts: N/A",
        "  )",
        ")"]
    # fvcore 0.1.5 printed: no note when every module ran; BatchNorm2d 2 x 2x8x16x16 = 8,192; a pool of no
    # parameters shows #params: 0; ReLU and MaxPool2d (all 0) keep their one-line repr
    cnn = torch_flops.flop_count_str(FlopCountAnalysis(_SmallCNN().eval(), torch.randn(2, 3, 16, 16))).splitlines()
    assert cnn[:14] == [
        "_SmallCNN(",
        "  #params: 1.58K, #flops: 0.2M",
        "  (features): Sequential(",
        "    #params: 1.41K, #flops: 0.2M",
        "    (0): Conv2d(",
        "      3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)",
        "      #params: 0.22K, #flops: 0.11M",
        "    )",
        "    (1): BatchNorm2d(",
        f"      {torch.nn.BatchNorm2d(8).extra_repr()}",  # (torch 2.13 added "bias=True"; 2.11 has none)
        "      #params: 16, #flops: 8.19K",
        "    )",
        "    (2): ReLU()",
        "    (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"]
    assert cnn[-9:] == ["  (pool): AdaptiveAvgPool2d(", "    output_size=1", "    #params: 0, #flops: 1.15K", "  )",
                        "  (head): Linear(", "    in_features=16, out_features=10, bias=True",
                        "    #params: 0.17K, #flops: 0.32K", "  )", ")"]
    with pytest.raises(TypeError, match="FlopCountAnalysis"):
        torch_flops.flop_count_str(model)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- fault round 29: fvcore 0.1.5's numbers
@pytest.mark.parametrize(("make", "op"), [(lambda: torch.nn.GRU(4, 6, batch_first=True), "aten::gru"),
                                          (lambda: torch.nn.LSTM(4, 6, batch_first=True), "aten::lstm"),
                                          (lambda: torch.nn.RNN(4, 6, batch_first=True), "aten::rnn_tanh"),
                                          (lambda: torch.nn.RNN(4, 6, nonlinearity="relu"), "aten::rnn_relu")])
def test_fvcore_recurrent_layers_are_the_one_op_its_trace_shows(make: object, op: str) -> None:
    # fvcore 0.1.5 traces an RNN layer as one op it has no handle for: 0, that op unsupported once, as the
    # model itself or inside one (where the Linear(6, 2) over 2 x 3 positions counts 6 x 6 x 2 = 72)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    layer = make()  # type: ignore[operator]
    alone = FlopCountAnalysis(layer, x)
    assert alone.total() == 0 and dict(alone.unsupported_ops()) == {op: 1}
    assert ActivationCountAnalysis(layer, x).total() == 0
    model = torch.nn.Module()
    model.rnn, model.fc = layer, torch.nn.Linear(6, 2)
    model.forward = lambda v: model.fc(model.rnn(v)[0])  # type: ignore[method-assign]
    inside = FlopCountAnalysis(model, x)
    assert inside.total() == 72 and dict(inside.unsupported_ops()) == {op: 1}


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_fvcore_activations_name_a_2d_upsample_as_its_trace_does(mode: str) -> None:
    # fvcore 0.1.5: an nn.Upsample model shows aten::upsample_nearest2d / upsample_bilinear2d, unsupported
    # in ActivationCountAnalysis (counted in FlopCountAnalysis: 1 or 4 per output element of 72)
    x = torch.randn(1, 2, 3, 3)
    model = torch.nn.Upsample(scale_factor=2, mode=mode)
    assert dict(ActivationCountAnalysis(model, x).unsupported_ops()) == {f"aten::upsample_{mode}2d": 1}
    assert dict(FlopCountAnalysis(model, x).by_operator()) == {f"upsample_{mode}2d": 72 * (1 if mode == "nearest" else 4)}


def test_fvcore_table_with_an_uncalled_module_aligns_as_fvcore() -> None:
    # fvcore 0.1.5's table: an uncalled module's cells hold its row's indent, which tabulate reads as text, so
    # the activations column of plain numbers is aligned left (the parameters column stays right)
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.unused = torch.nn.Linear(8, 8), torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    model, x = M(), torch.randn(2, 8)
    table = flop_count_table(FlopCountAnalysis(model, x), activations=ActivationCountAnalysis(model, x),
                             show_param_shapes=False)
    assert table.splitlines() == ["| module   |   #parameters | #flops   | #activations   |",
                                  "|:---------|--------------:|:---------|:---------------|",
                                  "| model    |            78 | 0.128K   | 16             |",
                                  "| fc       |            72 | 0.128K   | 16             |",
                                  "| unused   |             6 |          |                |"]


def test_fvcore_counts_a_parametrized_norm_as_its_op() -> None:
    # fvcore's trace shows aten::batch_norm for a BatchNorm2d whose weight is parametrized (its class is
    # parametrize's ParametrizedBatchNorm2d): 2 x 36 elements x 2 (affine, eval) = 144, as unparametrized
    from torch import nn
    from torch.nn.utils import parametrize

    class Double(nn.Module):
        def forward(self, w: torch.Tensor) -> torch.Tensor:
            return w * 2

    model = nn.Sequential(nn.BatchNorm2d(4)).eval()
    parametrize.register_parametrization(model[0], "weight", Double())
    analysis = FlopCountAnalysis(model, torch.randn(2, 4, 3, 3))
    assert analysis.by_operator() == {"batch_norm": 144} and analysis.total() == 144
    assert not analysis.unsupported_ops()


def test_fvcore_counts_a_transformer_layer_inside_a_model_as_its_ops() -> None:
    # fvcore's trace shows a TransformerEncoderLayer's ops (no op of its own), inside a model as alone:
    # linear, one MAC each: 10 tokens x (in_proj 8x24 + out_proj 8x8 + 8x16 + 16x8) = 5,120; layer_norm,
    # fvcore's 5 per element with an affine weight: 2 norms x 10 tokens x 8 x 5 = 800
    from torch import nn

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = layer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l(x)

    x = torch.randn(2, 5, 8)
    alone, wrapped = FlopCountAnalysis(layer, x), FlopCountAnalysis(Wrapped(), x)
    assert wrapped.by_operator() == alone.by_operator() == {"linear": 5120, "layer_norm": 800}
    assert wrapped.total() == alone.total() == 5920


def test_fvcore_names_a_module_inside_a_model_by_the_op_its_trace_shows() -> None:
    # nested, nn.SiLU, nn.LeakyReLU and nn.PReLU were named after their classes (aten::si_lu, leaky_re_lu,
    # pre_lu) and a handle for the real op never reached them. fvcore's trace: aten::silu, leaky_relu,
    # prelu. With a handle counting one per output element (8 each): linear 2*4*4 = 32 + 3 * 8 = 56
    logging.disable(logging.WARNING)
    try:
        net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.SiLU(), torch.nn.LeakyReLU(), torch.nn.PReLU())
        x = torch.randn(2, 4)
        assert dict(FlopCountAnalysis(net, x).unsupported_ops()) == \
            {"aten::silu": 1, "aten::leaky_relu": 1, "aten::prelu": 1}
        count = lambda module, out, *args, **kwargs: out.numel()
        handled = FlopCountAnalysis(net, x).set_op_handle("aten::silu", count, "aten::leaky_relu", count,
                                                          "aten::prelu", count)
        assert handled.total() == 56 and not handled.unsupported_ops()
        assert dict(handled.by_operator()) == {"linear": 32, "silu": 8, "leaky_relu": 8, "prelu": 8}
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize(("cell", "total"), [
    (torch.nn.LSTMCell(3, 4), 2 * 3 * 16 + 2 * 4 * 16),  # two linears into 4 gates x 4: 96 + 128 = 224
    (torch.nn.GRUCell(3, 4), 2 * 3 * 12 + 2 * 4 * 12),  # into 3 gates x 4: 72 + 96 = 168
])
def test_fvcore_counts_a_recurrent_cell_inside_a_model_as_alone(cell: torch.nn.Module, total: int) -> None:
    # fvcore's trace shows a cell's linears, bare or nested; nested it was one unsupported aten::lstmcell (0)
    logging.disable(logging.WARNING)
    try:
        x = torch.randn(2, 3)
        assert FlopCountAnalysis(cell, x).total() == FlopCountAnalysis(torch.nn.Sequential(cell), x).total() == total
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("call", [lambda a, b: a @ b, lambda a, b: a.matmul(b), torch.matmul])
def test_fvcore_matmul_handle_reaches_every_spelling(call: Any) -> None:
    # (2, 3) @ (3, 4): fvcore's 24 MACs; a handle for aten::matmul counts every spelling of it (a @ b
    # kept torch_flops' count, 48, whatever the handle)
    x = (torch.randn(2, 3), torch.randn(3, 4))
    assert FlopCountAnalysis(_Fn(call), x).total() == 24
    assert FlopCountAnalysis(_Fn(call), x).set_op_handle("aten::matmul", lambda m, o, *a, **k: 1000).total() == 1000


@pytest.mark.parametrize("make", [
    lambda: _Fn(lambda x: torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")),
    lambda: torch.nn.Upsample(scale_factor=2, mode="bilinear"),
])
def test_fvcore_upsample_handle_counts_the_mode_it_is_for(make: Any) -> None:
    # (1, 2, 4, 4) up 2x: 128 outputs. fvcore's bilinear rule 4 each = 512; a handle of 11 per output for
    # aten::upsample_bilinear2d: 1408 (it turned the op into an unsupported aten::upsample counting 0); a
    # handle for the nearest op leaves a bilinear call to fvcore's rule
    logging.disable(logging.WARNING)
    try:
        x = torch.randn(1, 2, 4, 4)
        per_output = lambda m, out, *a, **k: 11 * out.numel()
        assert dict(FlopCountAnalysis(make(), x).by_operator()) == {"upsample_bilinear2d": 512}
        handled = FlopCountAnalysis(make(), x).set_op_handle("aten::upsample_bilinear2d", per_output)
        assert dict(handled.by_operator()) == {"upsample_bilinear2d": 1408} and not handled.unsupported_ops()
        other = FlopCountAnalysis(make(), x).set_op_handle("aten::upsample_nearest2d", per_output)
        assert dict(other.by_operator()) == {"upsample_bilinear2d": 512}
    finally:
        logging.disable(logging.NOTSET)


def test_fvcore_upsample_subclass_and_other_modes_are_named_as_their_trace_ops() -> None:
    # a subclass of nn.Upsample (its forward) is an upsample_nearest2d, in step with the F.interpolate after
    # it (its name went to the next call, and the subclass was an unsupported aten::my_up): 2 x 8 x 8 = 128
    # outputs, nearest 1 each, bilinear 4 each = 128 + 512. F.interpolate(mode="area") runs an adaptive
    # average pooling, fvcore's 1 per input element: 2 x 4 x 4 = 32 (it was an unsupported upsample_area2d)
    class MyUp(torch.nn.Upsample):
        pass

    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = MyUp(scale_factor=2, mode="nearest")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.up(x) + torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")

    logging.disable(logging.WARNING)
    try:
        x = torch.randn(1, 2, 4, 4)
        two = FlopCountAnalysis(Two(), x)
        assert dict(two.by_operator()) == {"upsample_nearest2d": 128, "upsample_bilinear2d": 512}
        assert two.by_module()["up"] == 128
        area = FlopCountAnalysis(_Fn(lambda t: torch.nn.functional.interpolate(t, size=(2, 2), mode="area")), x)
        assert dict(area.by_operator()) == {"adaptive_avg_pool2d": 32} and not area.unsupported_ops()
    finally:
        logging.disable(logging.NOTSET)


def test_fvcore_subclasses_overriding_forward_count_their_base_op_and_the_rest() -> None:
    # a BatchNorm2d subclass doubling its output: fvcore's trace shows aten::batch_norm (eval: 2 per element
    # of 1 x 3 x 4 x 4 = 96) and an unsupported aten::mul; an Upsample subclass adding 1: upsample_bilinear2d
    # (4 per output of 1 x 3 x 8 x 8 = 768) and aten::add. Both counted 0 as one node each
    class Doubled(torch.nn.BatchNorm2d):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 2

    class Shifted(torch.nn.Upsample):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) + 1

    logging.disable(logging.WARNING)
    try:
        x = torch.randn(1, 3, 4, 4)
        bn = FlopCountAnalysis(torch.nn.Sequential(Doubled(3).eval()), x)
        assert dict(bn.by_operator()) == {"batch_norm": 96} and dict(bn.unsupported_ops()) == {"aten::mul": 1}
        up = FlopCountAnalysis(torch.nn.Sequential(Shifted(scale_factor=2, mode="bilinear")), x)
        assert dict(up.by_operator()) == {"upsample_bilinear2d": 768} and dict(up.unsupported_ops()) == {"aten::add": 1}
    finally:
        logging.disable(logging.NOTSET)
