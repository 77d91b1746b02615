"""A sample of transformers' architectures, one per category, shrunk to toy sizes (built by
benchmarks/sweep_transformers.py, which runs all of them): torch_flops in the flop_counter
convention equals FlopCounterMode over the same eager call, on CPU and on meta, with no node
left without a formula."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import warnings

import pytest
import torch

import torch_flops
from torch_flops.records import Status

pytest.importorskip("transformers")

_SWEEP = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "sweep_transformers.py"
_spec = importlib.util.spec_from_file_location("sweep_transformers", _SWEEP)
assert _spec is not None and _spec.loader is not None
sweep = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("sweep_transformers", sweep)  # its dataclasses look their module up
_spec.loader.exec_module(sweep)

#: model type -> what it stands for
SAMPLE = {
    "llama": "decoder LLM with grouped-query attention (4 heads, 2 KV heads)",
    "bert": "encoder",
    "t5": "encoder-decoder",
    "resnet": "vision CNN",
    "vit": "vision transformer",
    "wav2vec2": "speech with a convolutional front end",
    "mixtral": "mixture of experts (grouped matmul)",
    "idefics3_vision": "vision encoder with bucketize'd position ids",
    "fnet": "FFT token mixing (_fft_c2c)",
    "llama4_text": "complex rotary embeddings (polar)",
}
#: meta needs the lead's fallback for these (grouped matmul refuses float32 on meta)
CPU_ONLY = {"mixtral"}


def _inputs(model: torch.nn.Module) -> dict:
    for inputs in sweep._candidates(model):
        try:
            with torch.no_grad():
                model(**inputs)
            return inputs
        except Exception:  # noqa: BLE001, S112 - the next input set
            continue
    raise AssertionError("no input set runs")


@pytest.mark.parametrize("model_type", list(SAMPLE))
def test_exact_against_flop_counter_mode(model_type: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sweep.tiny_model(model_type)
        inputs = _inputs(model)
        devices = ["cpu"] if model_type in CPU_ONLY else ["cpu", "meta"]
        for device in devices:
            m = model if device == "cpu" else sweep.tiny_model(model_type, "meta")
            x = {k: sweep._to(v, device) for k, v in inputs.items()}
            try:
                reference = sweep.reference_flops(m, x)
            except (RuntimeError, NotImplementedError):  # reads values on meta: torch_flops falls back
                reference = sweep.reference_flops(model, inputs, as_meta=True)  # to torch.export
            profile = torch_flops.profile(m, **x)
            assert [r.target for r in profile.records if r.status is Status.UNSUPPORTED] == [], device
            assert profile.with_convention("flop_counter").total_flops == reference, device
            assert profile.total_flops >= reference  # the full count keeps the CPU attention kernels
