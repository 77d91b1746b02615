"""Models whose program depends on tensor values: nonzero, boolean masks, masked_select, unique,
torch.where(cond), repeat_interleave with a tensor of repeats, MoE routing with an empty expert,
sampling and dropout. On CPU each profiles as it runs (output, RNG state and the flop_counter
convention against FlopCounterMode on the same call); on meta each fails with an error that names
the node and the cause (it reads values), before any long work, and leaves nothing installed.
test_faithful.py covers .item()/.tolist() control flow; this file the value-reading ops."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils.flop_counter import FlopCounterMode

import torch_flops
from torch_flops import TorchFLOPsByFX, TrainingProfiler, UnsupportedOpWarning
from torch_flops.session import installed


def _nothing_installed() -> bool:
    return (installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}
            and not _get_current_dispatch_mode_stack() and not _get_current_function_mode_stack()
            and not nn.modules.module._has_any_global_hook())


class MaskedSelect(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.masked_select(y, y > 0).pow(2).sum()


class RepeatInterleave(nn.Module):
    """Row i repeated counts[i] times, counts read from the data."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        counts = (x[:, 0].abs() * 3).long()
        return torch.relu(torch.repeat_interleave(self.fc(x), counts, dim=0))


class WhereRows(nn.Module):
    """torch.where(cond) (the one-argument form, a nonzero) picks the rows a head runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (rows,) = torch.where(x[:, 0] > 0)
        return self.fc(x[rows])


class MoE(nn.Module):
    """Top-1 routing by argmax, tokens gathered per expert with nonzero; expert 3 gets no token
    (its router bias is -1e4), so it runs on a (0, 8) batch."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 4)
        with torch.no_grad():
            self.router.bias[3] = -1e4
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        choice = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            idx = (choice == e).nonzero().squeeze(1)
            out[idx] = expert(x[idx])
        return out


class Sampler(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.fc(self.drop(x)).softmax(-1)
        s = torch.multinomial(p, 3, replacement=True)
        return p.gather(1, s), s


_CPU_MODELS = [MaskedSelect, RepeatInterleave, WhereRows, MoE, Sampler]


@pytest.mark.parametrize("build", _CPU_MODELS, ids=lambda b: b.__name__)
def test_value_reading_models_profile_as_they_run(build: Any) -> None:
    torch.manual_seed(0)
    model = build().train()  # Sampler: dropout draws random numbers
    x = torch.randn(6, 8)
    torch.manual_seed(1)
    with FlopCounterMode(display=False) as mode, torch.no_grad():
        expected = copy.deepcopy(model)(x)
    rng_expected = torch.get_rng_state()
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsupportedOpWarning)
        counter = TorchFLOPsByFX(model)
        with torch.no_grad():
            out = counter.propagate(x)
    assert torch.equal(torch.get_rng_state(), rng_expected)  # random numbers drawn as in one call
    assert all(torch.equal(a, b) for a, b in zip(out, expected)) if isinstance(out, tuple) else torch.equal(out, expected)
    assert counter.profile.with_convention("flop_counter").total_flops == mode.get_total_flops()
    assert _nothing_installed()


# ----------------------------------------------------------------------------- meta: a clear error

_VALUE_CAUSE = "reads tensor values"


@pytest.mark.parametrize(("build", "node"), [(MaskedSelect, "'masked_select'"), (RepeatInterleave, "'repeat_interleave'"),
                                             (WhereRows, "'where'"), (MoE, "'nonzero'")],
                         ids=lambda v: getattr(v, "__name__", v))
def test_on_meta_the_error_names_the_node_and_that_it_needs_values(build: Any, node: str) -> None:
    # Before the fix, torch.masked_select and torch.repeat_interleave (function nodes of their own)
    # failed on meta with torch's bare message ("no fake impl or Meta kernel", "without
    # output_size"): no word of reading values, no export fallback tried.
    torch.manual_seed(0)
    model = build().to("meta")
    x = torch.empty(6, 8, device="meta")
    for profile in (lambda: torch_flops.profile(model, x),  # auto: tries torch.export's graph, then says why
                    lambda: TorchFLOPsByFX(model, tracer="eager").propagate(x)):
        with pytest.raises(Exception) as info:
            profile()
        notes = " ".join(getattr(info.value, "__notes__", []))
        assert node in notes and _VALUE_CAUSE in notes and "meta" in notes, notes
        assert _nothing_installed()
    with pytest.raises(Exception) as info, TrainingProfiler(model):
        model(x).float().pow(2).mean().backward()
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert node in notes and _VALUE_CAUSE in notes, notes
    assert _nothing_installed()


# ----------------------------------------------------------------------------- fx: unique and numel

class Uniques(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        return torch.unique(x, dim=0), x.unique(), x.numel()


def test_fx_counts_unique_and_numel_as_eager_does() -> None:
    # Before the fix, tracer="fx" left torch.unique and Tensor.numel unsupported (warned, excluded).
    x = torch.arange(24.0).view(3, 8).repeat(2, 1)  # (6, 8): 3 distinct rows, 24 distinct values
    counts = {}
    for tracer in ("eager", "fx"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnsupportedOpWarning)
            counter = TorchFLOPsByFX(Uniques(), tracer=tracer)
            out = counter.propagate(x)
        assert out[0].shape == (3, 8) and out[1].shape == (24,) and out[2] == 48
        counts[tracer] = counter.total_flops
    # unique along dim 0: sort 6 rows, 48 elements x (ceil(log2 6) = 3 comparisons + 1 with the neighbour) = 192;
    # unique of all 48 values: 48 x (ceil(log2 48) = 6 + 1) = 336; numel: 0
    assert counts["fx"] == counts["eager"] == 192 + 336


class Positions(nn.Module):
    """``torch.arange(n)`` without ``device=``: a CPU tensor, which cannot meet meta tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x + torch.arange(x.shape[-1]) / x.shape[-1])


def test_on_meta_tensors_made_without_a_device_are_made_on_meta() -> None:
    # (2, 4, 8): the division 8 FLOPs, the add 64; Linear(8, 8) 2 x 4 x 8 x 8 = 512 MACs, 2 x 512 + 64 bias
    # = 1088 FLOPs
    torch.manual_seed(0)
    cpu = torch_flops.profile(Positions(), torch.randn(2, 4, 8))
    with torch.device("meta"):
        model = Positions()
    x = torch.empty(2, 4, 8, device="meta")
    with pytest.raises(RuntimeError), torch.no_grad():  # plain PyTorch refuses it on meta
        model(x)
    with pytest.warns(torch_flops.TracerFallbackWarning, match="ran a second time with meta as the default device"):
        meta = torch_flops.profile(model, x)
    assert cpu.total_flops == meta.total_flops == 8 + 64 + 1088 and meta.tracer == "eager"
    assert _nothing_installed()
    with pytest.raises(RuntimeError) as failed:  # tracer="eager" runs only the program as it is
        torch_flops.profile(model, x, tracer="eager")
    assert "makes CPU tensors in its forward" in str(failed.value.__notes__)
