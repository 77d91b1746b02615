"""Tests for ``torch_flops.api``: ``profile`` and the DeepSpeed-style ``get_model_profile``."""

from __future__ import annotations

from typing import Any

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
    assert p.batch_size == 2 and p.tracer == "fx"
    assert model.training  # left as it was


def test_profile_passes_kwargs_to_the_model_and_options_to_the_analyzer() -> None:
    # a Python float kwarg fixed at trace time would not show up as a node: use a tensor
    p = profile(MLP(), torch.randn(2, 6), scale=torch.tensor(2.0), ignore_ops=("ReLU",), repeat=2)
    assert p.total_flops == FLOPS - 20  # ReLU ignored
    assert p.settings["repeat"] == 2


def test_get_model_profile_numbers() -> None:
    flops, macs, params = get_model_profile(MLP(), input_shape=(2, 6), print_profile=False, as_string=False)
    assert (flops, macs, params) == (FLOPS, MACS, PARAMS)


def test_get_model_profile_strings_and_printout(capsys: pytest.CaptureFixture[str]) -> None:
    flops, macs, params = get_model_profile(MLP(), args=[torch.randn(2, 6)], module_depth=1, top_modules=1)
    assert (flops, macs, params) == ("412 FLOPs", "180 MACs", "103")
    out = capsys.readouterr().out
    assert out.startswith("torch_flops profile\n")
    assert "fc1 (Linear)" in out and "Top 1 modules at depth 1:" in out
    assert "by FLOPs:    fc1 (Linear) 260" in out


def test_get_model_profile_big_numbers_read_well() -> None:
    model = nn.Linear(4096, 4096)
    flops, macs, params = get_model_profile(model, input_shape=(1, 4096), print_profile=False, warm_up=0)
    # 4096*4096 = 16.8 M MACs; 2*MACs + 4096 bias FLOPs; 4096*4096 + 4096 params
    assert (flops, macs, params) == ("33.6 MFLOPs", "16.8 MMACs", "16.8 M")


def test_get_model_profile_output_file_and_kwargs(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "profile.txt"
    get_model_profile(MLP(), args=(torch.randn(2, 6),), kwargs={"scale": torch.tensor(3.0)}, output_file=str(path))
    assert capsys.readouterr().out == ""
    text = path.read_text()
    assert text.startswith("torch_flops profile") and "Top 3 innermost modules:" in text


def test_get_model_profile_ignore_modules() -> None:
    flops, macs, _ = get_model_profile(MLP(), input_shape=(2, 6), print_profile=False, as_string=False,
                                       ignore_modules=[nn.ReLU, "Linear"])
    assert (flops, macs) == (6, 0)  # only "* scale" is left


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
    flops, macs, _ = get_model_profile(model, input_shape=(2, 8), print_profile=False, as_string=False,
                                       ignore_modules=[Costly])
    # only the first Linear counts: 2*8*8 = 128 MACs, flops 2*128 + 16 bias
    assert (flops, macs) == (272, 128)


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
