"""Tests for ``torch_flops.api``: ``profile`` and the DeepSpeed-style ``get_model_profile``."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import torch_flops
from torch_flops import Profile, get_model_profile, profile


class MLP(nn.Module):
    """Linear(6, 10) -> ReLU -> Linear(10, 3): 70 + 33 = 103 parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 10)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(10, 3)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x))) * scale


# On a batch of 2:
#   fc1: 2*6*10 = 120 MACs, 2*120 + 20 bias = 260 FLOPs; ReLU: 20 FLOPs
#   fc2: 2*10*3 = 60 MACs, 2*60 + 6 bias = 126 FLOPs; "* scale": 6 FLOPs
MACS = 120 + 60
FLOPS = 260 + 20 + 126 + 6
PARAMS = 6 * 10 + 10 + 10 * 3 + 3


def test_exported_from_the_package() -> None:
    assert torch_flops.profile is profile and torch_flops.get_model_profile is get_model_profile
    assert {"profile", "get_model_profile"} <= set(torch_flops.__all__)


def test_profile_returns_the_profile() -> None:
    model = MLP()
    p = profile(model, torch.randn(2, 6))
    assert isinstance(p, Profile)
    assert (p.total_flops, p.total_macs, p.total_params) == (FLOPS, MACS, PARAMS)
    assert p.by_module()["fc1"].flops == 260
    assert p.batch_size == 2 and p.tracer == "eager"
    assert model.training  # left as it was


def test_profile_passes_kwargs_to_the_model_and_options_to_the_analyzer() -> None:
    # a Python float kwarg fixed at trace time would not show up as a node: use a tensor
    p = profile(MLP(), torch.randn(2, 6), scale=torch.tensor(2.0), ignore_ops=("ReLU",), repeat=2)
    assert p.total_flops == FLOPS - 20  # ReLU ignored
    assert p.settings["repeat"] == 2


@pytest.mark.parametrize("option", ["loss_fn", "backward"])
def test_profile_refuses_propagate_s_backward_options_naming_why(option: str) -> None:
    # they reached propagate under profile's own no_grad: "backward=True under torch.no_grad() ... call
    # propagate outside it", about a no_grad and a propagate the user never wrote
    model = MLP()
    with pytest.raises(TypeError, match=rf"profile\(\) records one forward under torch.no_grad\(\) and takes no "
                                        rf"{option}=: .*propagate\(\*inputs, loss_fn=...\)"):
        profile(model, torch.randn(2, 6), **{option: (lambda out: out.sum()) if option == "loss_fn" else True})
    assert all(p.grad is None for p in model.parameters())


def test_get_model_profile_numbers() -> None:
    flops, macs, params = get_model_profile(MLP(), input_shape=(2, 6), print_profile=False, as_string=False)
    assert (flops, macs, params) == (FLOPS, MACS, PARAMS)


def test_get_model_profile_strings_and_printout(capsys: pytest.CaptureFixture[str]) -> None:
    flops, macs, params = get_model_profile(MLP(), args=[torch.randn(2, 6)], module_depth=1, top_modules=1)
    # DeepSpeed's own text for 412, 180, 103: "412 " (its FLOPs have no unit), "180 MACs", "103"
    assert (flops, macs, params) == ("412 ", "180 MACs", "103")
    out = capsys.readouterr().out
    assert out.startswith("torch_flops profile\n")
    assert "fc1 (Linear)" in out and "Top 1 modules at depth 1:" in out
    assert "by FLOPs:    fc1 (Linear) 260" in out


def test_get_model_profile_big_numbers_read_well() -> None:
    model = nn.Linear(4096, 4096)
    flops, macs, params = get_model_profile(model, input_shape=(1, 4096), print_profile=False, warm_up=0)
    # 4096*4096 = 16.8 M MACs; 2*MACs + 4096 bias FLOPs; 4096*4096 + 4096 params
    # DeepSpeed's text (2 decimals): 33,558,528 -> "33.56 M", 16,777,216 -> "16.78 MMACs", 16,781,312 -> "16.78 M"
    assert (flops, macs, params) == ("33.56 M", "16.78 MMACs", "16.78 M")
    # a billion parameters and more: DeepSpeed's params_to_string writes B. Linear(50000, 30000) without
    # bias on meta: 1.5e9 parameters = MACs at batch 1, 3e9 FLOPs
    big = nn.Linear(50_000, 30_000, bias=False, device="meta")
    assert get_model_profile(big, input_shape=(1, 50_000), print_profile=False) == ("3 G", "1.5 GMACs", "1.5 B")


def test_get_model_profile_output_file_and_kwargs(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "profile.txt"
    get_model_profile(MLP(), args=(torch.randn(2, 6),), kwargs={"scale": torch.tensor(3.0)}, output_file=str(path))
    assert capsys.readouterr().out == ""
    text = path.read_text()
    assert text.startswith("torch_flops profile") and "Top 1 innermost modules:" in text  # DeepSpeed's default


def test_get_model_profile_ignore_modules_charges_their_work_to_the_caller(capsys: pytest.CaptureFixture[str]) -> None:
    # DeepSpeed 0.19.8 gives an ignored module no hooks: its work is charged to its parent and the
    # totals do not change. Sequential(Linear(16, 32), ReLU, Linear(32, 8)) at (4, 16), DeepSpeed:
    # (6272, 3072, 808) with ignore_modules None, [nn.Linear] and [nn.Sequential] alike (its FLOPs
    # leave out the biases, 4*32 + 4*8 = 160, which ours count: 6432)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    for ignore in (None, [nn.Linear], ["Sequential"]):
        assert get_model_profile(model, input_shape=(4, 16), print_profile=False, as_string=False,
                                 ignore_modules=ignore) == (6272 + 160, 4 * 16 * 32 + 4 * 32 * 8, 808)
    capsys.readouterr()
    get_model_profile(MLP(), input_shape=(2, 6), ignore_modules=[nn.ReLU, "Linear"], top_modules=0)
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.split()[:1] in (["MLP"], ["fc1"], ["act"])}
    # DeepSpeed prints an ignored module with 0 MACs, its work in the root's row (180 MACs, 412 FLOPs)
    assert rows["MLP"][1:6:2] == ["103", "180", "412"]
    assert rows["fc1"][2:7:2] == ["70", "0", "0"] and rows["act"][2:7:2] == ["0", "0", "0"]


def test_get_model_profile_kwargs_go_to_the_model_whatever_their_names() -> None:
    """DeepSpeed runs ``model(*args, **kwargs)``: a model keyword named like one of the profiler's
    options (``repeat``, ``strict``, ``warmup``) is the model's; ``input_shape`` goes with ``kwargs``
    (DeepSpeed builds ``args`` from it and keeps ``kwargs``)."""
    class Repeated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4, bias=False)

        def forward(self, x: torch.Tensor, repeat: int = 1, strict: bool = False, warmup: int = 0) -> torch.Tensor:
            for _ in range(repeat + warmup):
                x = self.fc(x)
            return x.abs() if strict else x

    x = torch.randn(2, 4)
    # 3 linears of 2x4 by 4x4: 3 * 2*4*4 = 96 MACs, 192 FLOPs
    assert get_model_profile(Repeated(), args=[x], kwargs={"repeat": 3}, print_profile=False,
                             as_string=False)[:2] == (192, 96)
    # repeat 1 + warmup 1: 2 linears (128 FLOPs) + abs over 2x4 (8)
    assert get_model_profile(Repeated(), args=[x], kwargs={"warmup": 1, "strict": True}, print_profile=False,
                             as_string=False)[:2] == (136, 64)
    assert get_model_profile(Repeated(), input_shape=(2, 4), kwargs={"repeat": 2}, print_profile=False,
                             as_string=False)[:2] == (128, 64)


def test_get_model_profile_on_meta() -> None:
    with torch.device("meta"):
        model = MLP()
    flops, macs, params = get_model_profile(model, input_shape=(2, 6), print_profile=False, as_string=False)
    assert (flops, macs, params) == (FLOPS, MACS, PARAMS)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({}, ValueError, "give input_shape or args"),
    ({"input_shape": (2, 6), "args": [torch.randn(2, 6)]}, ValueError, "either input_shape or args"),
    ({"input_shape": "2,6"}, TypeError, "input_shape must be"),
    ({"input_shape": (2, 0)}, ValueError, "input_shape must be"),
    ({"input_shape": (2, 6), "module_depth": -2}, ValueError, "module_depth"),
    ({"input_shape": (2, 6), "top_modules": -1}, ValueError, "top_modules"),
    ({"input_shape": (2, 6), "ignore_modules": [3]}, TypeError, "ignore_modules"),
])
def test_get_model_profile_checks_arguments(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        get_model_profile(MLP(), print_profile=False, **kwargs)


def test_get_model_profile_ignores_a_user_module_class_as_one_node() -> None:
    class Costly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * 2

    model = nn.Sequential(nn.Linear(8, 8), Costly())
    result = get_model_profile(model, input_shape=(2, 8), print_profile=False, as_string=False,
                               ignore_modules=[Costly])
    # totals unchanged (DeepSpeed's): 2 Linear(8, 8) at batch 2, 2*8*8 = 128 MACs and 2*128 + 16 bias
    # FLOPs each, + "* 2" on 16 elements
    assert result[:2] == (2 * 272 + 16, 2 * 128)


def test_get_model_profile_runs_in_eval_mode_and_restores_the_flags() -> None:
    class AuxNet(nn.Module):  # an auxiliary head used only in training (GoogLeNet/Inception's)
        def __init__(self) -> None:
            super().__init__()
            self.body, self.aux = nn.Linear(16, 16), nn.Linear(16, 64)

        def forward(self, x: torch.Tensor) -> Any:
            y = self.body(x)
            return (y, self.aux(y)) if self.training else y

    model = AuxNet()
    model.aux.eval()  # a mixed state, to be left as it was
    # DeepSpeed 0.19.8 calls model.eval(): 512 MACs (body 2*16*16), not 2560 (+ aux 2*16*64)
    _, macs, _ = get_model_profile(model, input_shape=(2, 16), print_profile=False, as_string=False)
    assert macs == 2 * 16 * 16
    assert model.training and model.body.training and not model.aux.training


def test_every_error_and_warning_is_importable_from_the_package() -> None:
    from torch_flops import errors

    for name in errors.__all__:
        assert getattr(torch_flops, name) is getattr(errors, name) and name in torch_flops.__all__
    for error in (torch_flops.TracingError, torch_flops.NodeExecutionError, torch_flops.UnsupportedOpError,
                  torch_flops.DuplicateFormulaError):
        assert issubclass(error, torch_flops.TorchFlopsError)
    # and what callers caught before keeps working
    assert issubclass(torch_flops.TracingError, RuntimeError)
    assert issubclass(torch_flops.DuplicateFormulaError, ValueError)
    for warning in (torch_flops.UnsupportedOpWarning, torch_flops.TracerFallbackWarning,
                    torch_flops.DroppedOutputWarning):
        assert issubclass(warning, UserWarning)


# --------------------------------------------------------------------------- coming from DeepSpeed


class LeNet5(nn.Module):
    """The model of DeepSpeed's own flops-profiler test (tests/unit/profiling/flops_profiler)."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.feature_extractor = nn.Sequential(
            nn.Conv2d(1, 6, kernel_size=5, stride=1), nn.Tanh(), nn.AvgPool2d(kernel_size=2),
            nn.Conv2d(6, 16, kernel_size=5, stride=1), nn.Tanh(), nn.AvgPool2d(kernel_size=2),
            nn.Conv2d(16, 120, kernel_size=5, stride=1), nn.Tanh(),
        )
        self.classifier = nn.Sequential(nn.Linear(120, 84), nn.Tanh(), nn.Linear(84, n_classes))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.flatten(self.feature_extractor(x), 1)
        logits = self.classifier(x)
        return logits, torch.nn.functional.softmax(logits, dim=1)


def test_deepspeeds_own_test_call_runs_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    mod = LeNet5(10)
    batch_size = 1024
    input = torch.randn(batch_size, 1, 32, 32)
    # the call in DeepSpeed's test_flops_profiler_in_inference, argument for argument
    flops, macs, params = get_model_profile(
        mod, tuple(input.shape), print_profile=True, detailed=True, module_depth=-1, top_modules=3, warm_up=1,
        as_string=False, ignore_modules=None)
    # MACs by hand, batch 1024: conv1 6*28*28*25 = 117600, conv2 16*10*10*150 = 240000,
    # conv3 120*400 = 48000, fc 120*84 = 10080 and 84*10 = 840: 416520 per image = 426,516,480,
    # exactly DeepSpeed's expected value; its FLOPs (866,076,672) and ours are within its 5%
    assert macs == 426_516_480
    assert abs(flops - 866_076_672) / 866_076_672 < 0.05  # type: ignore[operator]
    assert params == 61706
    assert "feature_extractor (Sequential)" in capsys.readouterr().out


def test_get_model_profile_detailed_and_mode(capsys: pytest.CaptureFixture[str]) -> None:
    get_model_profile(MLP(), input_shape=(2, 6), detailed=False, top_modules=1)
    out = capsys.readouterr().out
    assert "Top 1 innermost modules:" in out and "fc1 (Linear)" not in out.split("Top 1")[0]  # no tree
    with pytest.raises(ValueError, match="mode must be 'forward'"):
        get_model_profile(MLP(), input_shape=(2, 6), mode="generate")


# --------------------------------------------------------------------------- coming from fvcore


def test_fvcore_flop_count_analysis() -> None:
    from torch_flops import FlopCountAnalysis, flop_count_table

    class WithSpare(MLP):
        def __init__(self) -> None:
            super().__init__()
            self.spare = nn.Linear(3, 3)  # never called

    model = WithSpare()
    flops = FlopCountAnalysis(model, torch.randn(2, 6))
    # fvcore's convention: one per multiply-accumulate; fc1 120 MACs, fc2 60 (see MLP above)
    assert flops.total() == MACS == 180
    assert flops.total("fc1") == 120
    assert flops.by_module()["fc2"] == 60 and flops.by_module()[""] == 180
    assert flops.by_operator() == {"linear": 180}
    assert flops.by_module_and_operator()["fc2"] == {"linear": 60}
    assert flops.uncalled_modules() == {"spare"}
    assert flops.unsupported_ops() == {"aten::mul": 1}  # `* scale`: fvcore 0.1.5 reports it too
    assert flops.unsupported_ops_warnings(False).uncalled_modules_warnings(False) is flops
    table = flop_count_table(flops, max_depth=1)
    # fvcore 0.1.5's own table for this model, line for line
    assert table.splitlines() == ["| module   | #parameters or shape   | #flops   |",
                                  "|:---------|:-----------------------|:---------|",
                                  "| model    | 0.115K                 | 0.18K    |",
                                  "| fc1      | 70                     | 0.12K    |",
                                  "| fc2      | 33                     | 60       |",
                                  "| spare    | 12                     |          |"]
    assert FlopCountAnalysis(model, (torch.randn(2, 6),)).total() == 180  # inputs as a tuple


def test_bad_arguments_name_their_cause_up_front() -> None:
    from torch_flops import TorchFLOPsByFX, get_model_profile, sweep_generation

    model, x = nn.Linear(4, 2), torch.randn(3, 4)
    with pytest.raises(TypeError, match=r"args must be a list or tuple .*args=\[x\]"):
        get_model_profile(model, args=x, print_profile=False)
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        get_model_profile(model, args=[x], kwargs=[1], print_profile=False)  # type: ignore[arg-type]
    counter = TorchFLOPsByFX(model)
    counter.propagate(x)
    with pytest.raises(TypeError, match="show must be a bool"):
        counter.print_result_table(show="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="as_string must be a bool"):
        counter.print_result_table(show=False, as_string=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'not_a_target' is no Tensor method and no aten op"):
        TorchFLOPsByFX(model, custom_formulas={"not_a_target": lambda *a, **k: 1})
    with pytest.raises(ValueError, match="no aten op 'not_an_op'"):
        TorchFLOPsByFX(model, custom_formulas={"aten::not_an_op": lambda *a, **k: 1})
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=100)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        sweep_generation(config, [1], [8], [2], hardware="h100-sxm", dtype="bf16")  # type: ignore[arg-type]


def test_a_string_aten_key_is_the_aten_op() -> None:
    from torch_flops import TorchFLOPsByFX

    class MatMul(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.ops.aten.mm(a, b)

    counter = TorchFLOPsByFX(MatMul(), custom_formulas={"aten::mm": lambda module, out, *a, **k: 7})
    counter.propagate(torch.randn(2, 3), torch.randn(3, 4))
    assert counter.total_flops == 7  # the user's formula, keyed by name, on the op


@pytest.mark.parametrize(("returned", "expected"), [
    (3.0, (3, 0)), (np.int64(5), (5, 0)), ((8, 4), (8, 4)), ((8.0, np.int32(4)), (8, 4)),  # whole numbers
    (3.7, "3.7 (float)"), ("12", "'12' (str)"), (True, "True (bool)"), (None, "None (NoneType)"),
    (torch.tensor(5), "tensor(5) (Tensor)"), ((1, 2, 3), "(1, 2, 3) (tuple)"),
    ((1, 100), "fewer FLOPs than MACs (1, 100)"),
])
def test_a_formula_returning_no_count_fails_its_node_with_what_it_returned(returned: Any, expected: Any) -> None:
    from torch_flops import Status, TorchFLOPsByFX

    model, x = nn.Sequential(nn.ReLU()), torch.randn(3, 4)
    counter = TorchFLOPsByFX(model, custom_formulas={nn.ReLU: lambda module, out, *a, **k: returned})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counter.propagate(x)
    relu = next(r for r in counter.records if r.op == "call_module")
    if isinstance(expected, tuple):
        assert (relu.flops, relu.macs) == expected and relu.status is Status.COUNTED and not caught
    else:
        assert relu.status is Status.UNSUPPORTED and relu.flops is None and expected in relu.note
        assert any("ReLU" in str(w.message) and expected in str(w.message) for w in caught)


def test_a_formula_that_returns_a_negative_count_fails_its_node() -> None:
    from torch_flops import Status, TorchFLOPsByFX

    model, x = nn.Sequential(nn.Linear(4, 2)), torch.randn(3, 4)
    counter = TorchFLOPsByFX(model, custom_formulas={nn.Linear: lambda module, out, *a, **k: -5})
    with pytest.warns(UserWarning, match="negative count"):
        counter.propagate(x)
    linear = next(r for r in counter.records if r.op == "call_module")
    assert linear.status is Status.UNSUPPORTED and linear.flops is None and "negative count (-5)" in linear.note
    assert counter.total_flops == 0


def test_more_bad_arguments_name_their_cause() -> None:
    from torch_flops import TorchFLOPsByFX, TrainingProfiler, diff, flop_count_table

    model, x = nn.Sequential(nn.Linear(8, 4)), torch.randn(2, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with TrainingProfiler(model, optimizer) as prof:
        model(x).sum().backward()
        optimizer.step()
    with pytest.raises(TypeError, match="as_string must be a bool"):
        prof.get_total_flops(as_string="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="detailed must be a bool"):
        prof.print_model_profile(detailed="x")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="the path is empty"):
        prof.print_model_profile(output_file="")
    with pytest.raises(TypeError, match="as_string must be a bool"):
        get_model_profile(model, input_shape=(2, 8), print_profile=False, as_string="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ignore_modules must be a list"):
        get_model_profile(model, input_shape=(2, 8), print_profile=False, ignore_modules=5)  # type: ignore[arg-type]
    counter = TorchFLOPsByFX(model)
    counter.propagate(x)
    with pytest.raises(TypeError, match="show must be a bool"):
        counter.print_total_flops(show="no")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top must be an int >= 0"):
        counter.print_roofline("h100-sxm", top=-1, show=False)
    with pytest.raises(ValueError, match="top_modules must be an int >= 0, got -1"):
        counter.print_model_profile(top_modules=-1, show=False)
    with pytest.raises(TypeError, match="show must be a bool, got int 1"):
        counter.print_model_profile(show=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="depth must be an int >= 0, or -1"):
        counter.print_model_profile(depth=-3, show=False)
    with pytest.raises(ValueError, match="top must be None or an int >= 0"):
        diff(counter.profile, counter.profile).text(top=-1)
    with pytest.raises(TypeError, match="top must be None or an int >= 0"):
        diff(counter.profile, counter.profile).markdown(top="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a FlopCountAnalysis"):
        flop_count_table(5)  # type: ignore[arg-type]


def test_get_model_profile_draws_no_random_number_of_the_caller_and_checks_the_model() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    torch_flops.get_model_profile(model, input_shape=(2, 8), print_profile=False, warm_up=0)
    assert torch.equal(torch.rand(3), expected)  # its input comes from a generator of its own
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got function"):
        torch_flops.get_model_profile(lambda x: x, input_shape=(2, 8))


def test_get_model_profile_names_warm_up_as_the_caller_wrote_it() -> None:
    with pytest.raises(ValueError, match="warm_up must be an int >= 0, got -1"):
        torch_flops.get_model_profile(torch.nn.Linear(2, 2), input_shape=(1, 2), warm_up=-1)
