"""Meta without surprises and the front door's small defects: every way a model reads tensor values
falls back to torch.export on meta (or gets an error that says what to do), failures no front end
can remove say why, and options that cannot apply are named."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_flops import TorchFLOPsByFX, TracerFallbackWarning, UnsupportedOpError


class _Reads(nn.Module):
    """A Linear(8, 8) whose forward reads a value in one of the ways models do."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.how = how

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if self.how == "item_int":  # an int read with .item() for a check
            torch._check(lengths.max().item() < 10_000)
            return y
        if self.how == "item_bool":  # a bool read as transformers' input checks do (skipped under export)
            if not torch.compiler.is_exporting() and bool((lengths < 0).any()):
                raise ValueError("negative lengths")
            return y
        if self.how == "tolist":  # a list read for a check
            torch._check(len(lengths.tolist()) == 3)
            return y
        if self.how == "scale":  # an int read that the computation uses
            return y * lengths.max().item()
        if self.how == "nonzero":  # a shape from data
            return y[lengths.nonzero().squeeze(1)]
        if self.how == "pad":  # a tensor-valued pad width
            return F.pad(y, (0, int(lengths[0] - 3)))
        raise AssertionError(self.how)


@pytest.mark.parametrize("how", ["item_int", "item_bool", "tolist"])
def test_every_way_of_reading_values_falls_back_to_export_on_meta(how: str) -> None:
    torch.manual_seed(0)
    model = _Reads(how)
    x, lengths = torch.randn(3, 8), torch.tensor([4, 5, 6])
    cpu = TorchFLOPsByFX(model)
    cpu.propagate(x, lengths)
    meta_model = _Reads(how).to("meta")
    counter = TorchFLOPsByFX(meta_model)
    with pytest.warns(TracerFallbackWarning, match="reads tensor values"):
        counter.propagate(x.to("meta"), lengths.to("meta"))
    assert counter.tracer_used == "export"
    # the same work on meta as on CPU: Linear(8, 8) on 3 rows: 3*8*8 = 192 MACs
    assert counter.total_macs == cpu.total_macs == 192


@pytest.mark.parametrize("how", ["scale", "nonzero", "pad"])
def test_reads_export_cannot_follow_either_get_a_clear_error(how: str) -> None:
    model = _Reads(how).to("meta")
    with pytest.raises(Exception) as info:
        TorchFLOPsByFX(model).propagate(torch.randn(3, 8, device="meta"), torch.ones(3, dtype=torch.long, device="meta"))
    note = "\n".join(info.value.__notes__)
    assert "cannot be profiled on meta" in note and "Run it on CPU with small shapes" in note
    assert "torch_flops: running node" in note  # which op read values (in which module, when in one)


def test_a_failed_export_does_not_print_its_partial_graph(capfd: pytest.CaptureFixture[str]) -> None:
    # torch.export prints the graph it traced so far to stderr when it fails (``def forward(self, ...)``,
    # tens of kB for a real model); the error torch_flops raises says what happened. Other writes to
    # stderr meanwhile (the model's own) pass through.
    class Nonzero(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            print("model says hi", file=sys.stderr)
            out = x * 2
            for i in (x.sum(1) > 0).nonzero():  # export fails here (a loop over an unbacked size)
                out = out + x[i]
            return out

    with pytest.raises(Exception, match="nonzero"):
        TorchFLOPsByFX(Nonzero().to("meta")).propagate(torch.randn(3, 8, device="meta"))
    err = capfd.readouterr().err
    assert "def forward(self" not in err
    assert "model says hi" in err
    assert type(sys.stderr).__name__ != "_PartialGraphDropped"  # nothing left installed


def test_cpu_tensors_built_in_forward_say_what_to_do_on_meta() -> None:
    class MakesCpuTensors(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) + torch.arange(4.0)  # no device=: a CPU tensor

    model = MakesCpuTensors().to("meta")
    with pytest.raises(RuntimeError) as info:  # tracer="eager": the program as it is, which meta refuses
        TorchFLOPsByFX(model, tracer="eager").propagate(torch.randn(2, 4, device="meta"))
    assert "makes CPU tensors in its forward" in "\n".join(info.value.__notes__)
    # the default front end makes such tensors on meta, with a warning: Linear(4, 4) on 2 rows is
    # 2 x 4 x 4 = 32 MACs, 64 + 8 bias = 72 FLOPs; the add 8 more
    counter = TorchFLOPsByFX(model)
    with pytest.warns(TracerFallbackWarning, match="ran a second time with meta as the default device"):
        counter.propagate(torch.randn(2, 4, device="meta"))
    assert counter.total_flops == 80


def test_grouped_matmul_in_float32_on_meta_counts_as_on_cpu() -> None:
    class Experts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(2, 16, 8, device="meta"))

        def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
            return torch._grouped_mm(x, self.w, offs=offsets)

    offsets = torch.tensor([16, 32], dtype=torch.int32, device="meta")
    x = torch.randn(32, 16, device="meta")
    with pytest.raises(RuntimeError, match="BF16"):  # plain PyTorch: its meta kernel takes bfloat16 only
        Experts()(x, offsets)
    counter = TorchFLOPsByFX(Experts())  # the CPU kernel runs float32: so does the profile on meta
    out = counter.propagate(x, offsets)
    assert out.shape == (32, 8) and out.dtype == torch.float32 and out.is_meta
    assert counter.total_flops == 2 * 32 * 16 * 8  # each of 32 rows through one (16, 8) expert


def test_options_that_cannot_apply_are_named() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with pytest.warns(UserWarning, match="concrete_args fixes arguments of a symbolic trace"):
        TorchFLOPsByFX(model, concrete_args={"x": None})
    counter = TorchFLOPsByFX(model, ignore_ops=("ReLU", "relux", "Linear"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counter.propagate(torch.randn(2, 4))
        counter.propagate(torch.randn(2, 4))  # warned once per counter
    messages = [str(w.message) for w in caught if "ignore_ops" in str(w.message)]
    assert messages == [("torch_flops: ignore_ops ['relux'] matched no node of this call: give module class names "
                        "('ReLU'), module paths ('layer1.0'), function or method names ('relu', 'view') or aten op "
                        "names ('aten.relu')")]
    assert counter.total_flops == 0  # both modules ignored: 0 by request


def test_strict_names_the_users_call_beside_the_aten_op() -> None:
    class Sinc(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.special.sinc(x) + 1

    with pytest.raises(UnsupportedOpError, match=r"'sinc' \(aten.sinc, called as torch._C._special.special_sinc\)"):
        TorchFLOPsByFX(Sinc(), strict=True).propagate(torch.randn(3, 3))




def test_grouped_matmul_on_meta_refuses_what_the_cpu_kernel_refuses() -> None:
    # an out_dtype other than the operands' (the CPU kernel refuses it), and a float32 matrix too
    # narrow for the bfloat16 kernel's 16-byte strides: the meta kernel's own error stands
    class Experts(nn.Module):
        def __init__(self, k: int, n: int) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(2, k, n, device="meta"))

        def forward(self, x: torch.Tensor, offsets: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            return torch._grouped_mm(x, self.w, offs=offsets, **kwargs)

    offsets = torch.tensor([8, 16], dtype=torch.int32, device="meta")
    with pytest.raises(RuntimeError, match="BF16"):
        TorchFLOPsByFX(Experts(16, 8).half()).propagate(torch.randn(16, 16, device="meta", dtype=torch.half),
                                                         offsets, out_dtype=torch.float32)
    with pytest.raises(RuntimeError, match="BF16"):
        TorchFLOPsByFX(Experts(4, 4)).propagate(torch.randn(16, 4, device="meta"), offsets)
