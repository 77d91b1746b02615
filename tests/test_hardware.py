"""Tests for ``torch_flops.hardware``: the table's names, dense figures checked against the
datasheets' numbers (and against PyTorch's own device table where it prints the same part), a
source for every figure, dtype fallbacks, defining and overriding specs, and recognising a CUDA
device from its name."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import TorchFLOPsByFX, hardware
from torch_flops.hardware import HardwareSpec

T = 1e12

REQUIRED = ("h100-sxm", "h100-pcie", "h200", "a100-sxm-80gb", "a100-pcie-40gb", "l4", "l40s", "a10g", "v100-sxm",
            "rtx-4090", "mi300x", "b200")


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Specs a test registers are gone after it."""
    monkeypatch.setattr(hardware, "_SPECS", dict(hardware._SPECS))


def test_every_required_part_is_in_the_table() -> None:
    assert set(REQUIRED) <= set(hardware.names())
    assert hardware.names()[: len(REQUIRED)] == sorted(REQUIRED)


@pytest.mark.parametrize("name", REQUIRED)
def test_every_figure_has_a_source(name: str) -> None:
    spec = hardware.get(name)
    for item in (*spec.peak, "memory_bandwidth", "memory_bytes"):
        assert len(spec.source(item)) > 20, (name, item)
    assert spec.memory_bandwidth > 0 and spec.memory_bytes > 0
    assert all(k in hardware.DTYPES for k in spec.peak)


@pytest.mark.parametrize(("name", "dtype", "dense"), [
    # H100 SXM datasheet: BF16 tensor core 1,979 TFLOPS "with sparsity" -> 989.5 dense; FP8 3,958 -> 1,979;
    # TF32 989 -> 494.5; FP32 (non-tensor) 67
    ("h100-sxm", torch.bfloat16, 989.5 * T), ("h100-sxm", torch.float16, 989.5 * T),
    ("h100-sxm", torch.float8_e4m3fn, 1979 * T), ("h100-sxm", "tf32", 494.5 * T), ("h100-sxm", torch.float32, 67 * T),
    # H100 PCIe: BF16 1,513 with sparsity -> 756.5
    ("h100-pcie", torch.bfloat16, 756.5 * T),
    # A100 datasheet prints dense figures: BF16 312, TF32 156, FP64 tensor 19.5
    ("a100-sxm-80gb", torch.bfloat16, 312 * T), ("a100-sxm-80gb", "tf32", 156 * T),
    ("a100-sxm-80gb", torch.float64, 19.5 * T),
    # L4: FP8 485 with sparsity -> 242.5; BF16 242 -> 121
    ("l4", torch.float8_e5m2, 242.5 * T), ("l4", torch.bfloat16, 121 * T),
    # MI300X (ROCm table, dense): BF16 1307.4, FP8 2614.9
    ("mi300x", torch.bfloat16, 1307.4 * T), ("mi300x", torch.float8_e4m3fnuz, 2614.9 * T),
    # HGX B200: FP8 9 PFLOPS with sparsity -> 4.5 dense; BF16 4.5 -> 2.25
    ("b200", torch.bfloat16, 2250 * T), ("b200", torch.float8_e4m3fn, 4500 * T),
])
def test_dense_peaks(name: str, dtype: Any, dense: float) -> None:
    assert hardware.get(name).peak_flops(dtype) == dense


@pytest.mark.parametrize(("name", "bandwidth", "memory"), [  # a memory's GB: 2^30 bytes (JEDEC)
    ("h100-sxm", 3.35e12, 80 << 30), ("h200", 4.8e12, 141 << 30), ("a100-sxm-80gb", 2.039e12, 80 << 30),
    ("a100-pcie-40gb", 1.555e12, 40 << 30), ("l4", 300e9, 24 << 30), ("mi300x", 5.3e12, 192 << 30),
    ("v100-sxm", 900e9, 32 << 30),
])
def test_memory_figures(name: str, bandwidth: float, memory: float) -> None:
    spec = hardware.get(name)
    assert (spec.memory_bandwidth, spec.memory_bytes) == (pytest.approx(bandwidth), memory)


def test_agrees_with_pytorchs_device_table_where_it_prints_the_part() -> None:
    device_info = pytest.importorskip("torch._inductor.analysis.device_info")
    for ours, theirs in (("h100-sxm", "NVIDIA H100"), ("mi300x", "AMD MI300X")):
        info = device_info.lookup_device_info(theirs)
        if info is None:
            pytest.skip(f"this torch has no {theirs} entry")
        spec = hardware.get(ours)
        factor = getattr(info, "tops_sparsity_factor", 1)  # PyTorch keeps the sparse figure and this factor
        for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int8):
            assert spec.peak_flops(dtype) == pytest.approx(info.tops[dtype] * T / (factor if dtype.itemsize < 4 else 1))
        assert spec.memory_bandwidth == pytest.approx(info.dram_bw_gbs * 1e9)


def test_dtypes_without_a_figure_fall_back_to_a_wider_one() -> None:
    v100 = hardware.get("v100-sxm")  # no bf16 / tf32 / fp8 / int8 on Volta
    assert v100.peak_flops(torch.bfloat16) == v100.peak_flops(torch.float16) == 125 * T
    assert v100.peak_flops("tf32") == 15.7 * T
    assert v100.peak_flops(torch.float8_e4m3fn) == 125 * T
    a100 = hardware.get("a100-sxm-80gb")
    assert a100.peak_flops(torch.float8_e4m3fn) == 312 * T  # no fp8 on Ampere: runs as bf16
    # no float64 figure: GA10x/AD10x parts run FP64 at 1/64 of FP32 (the architecture whitepapers)
    assert hardware.get("l4").peak_flops(torch.float64) == 30.3 * T / 64
    b200 = hardware.get("b200")
    assert b200.peak_flops("fp4") == 9000 * T and a100.peak_flops("fp4") == 312 * T  # fp4 -> fp8 -> bf16
    assert a100.peak_flops(torch.complex64) == a100.peak_flops(torch.float32)
    assert a100.peak_flops(torch.int64) == 624 * T
    with pytest.raises(ValueError, match="no peak dtype"):
        a100.peak_flops("float128")


def test_vector_rate_is_the_float32_figure_or_lower() -> None:
    tensor_only = HardwareSpec("npu", "bf16 only", {"bfloat16": 100 * T}, 1e12, 1 << 30,
                               {"peak": "hand", "memory_bandwidth": "hand"}, kind="accelerator")
    assert tensor_only.vector_flops(torch.bfloat16) == 100 * T  # no float32 figure: its own rate
    h100 = hardware.get("h100-sxm")
    assert h100.vector_flops(torch.bfloat16) == 67 * T  # elementwise bf16 runs on the vector units
    cpu = HardwareSpec("cpu", "toy", {"float32": 2 * T, "float64": 1 * T}, 1e11, 1 << 30,
                       {"peak": "hand", "memory_bandwidth": "hand"}, kind="cpu")
    assert cpu.vector_flops(torch.float64) == 1 * T


def test_define_register_and_override_a_cpu(table: None) -> None:
    cpu = HardwareSpec("my-cpu", "a 32-core CPU", {"float32": 2.0 * T, "bfloat16": 4.0 * T}, 200e9, 512 << 30,
                       {"peak": "a measured GEMM", "memory_bandwidth": "STREAM triad"}, kind="cpu")
    assert hardware.register(cpu) is cpu
    assert hardware.get("my-cpu") is cpu and hardware.names()[-1] == "my-cpu"
    with pytest.raises(ValueError, match="already defined"):
        hardware.register(cpu)
    faster = HardwareSpec("h100-sxm", "an overclocked H100", {"bfloat16": 1200 * T}, 4e12, 80 * 10**9,
                          {"peak": "measured", "memory_bandwidth": "measured"})
    hardware.register(faster, override=True)
    assert hardware.get("H100-SXM").peak_flops(torch.bfloat16) == 1200 * T  # names are case-insensitive
    hardware.register(HardwareSpec("My-GPU", "capitals", {"float32": T}, 1e11, 1 << 30,
                                   {"peak": "hand", "memory_bandwidth": "hand"}))
    assert hardware.get("My-GPU").name == hardware.get("my-gpu").name == "My-GPU"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"peak": {"float32": 1e12}, "sources": {"peak": "x"}}, "every figure needs a source"),
    ({"peak": {"fp6": 1e12}}, "unknown peak dtype"),
    ({"peak": {"float32": 0.0}}, "positive"),
    ({"peak": {}}, "positive"),
    ({"memory_bandwidth": -1.0}, "memory_bandwidth must be positive"),
    ({"name": ""}, "needs a name"),
    ({"peak": {"float32": float("inf")}}, "positive, finite"),
    ({"memory_bandwidth": float("inf")}, "memory_bandwidth must be positive and finite"),
    ({"memory_bytes": -5}, "memory_bytes must be a positive whole number"),
    ({"memory_bytes": 0}, "memory_bytes must be a positive whole number"),
    ({"memory_bytes": 1.5}, "memory_bytes must be a positive whole number"),
    ({"kind": "tpu"}, "kind must be 'gpu', 'cpu' or 'accelerator'"),
])
def test_bad_specs_name_the_problem(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"name": "x", "description": "d", "peak": {"float32": 1e12}, "memory_bandwidth": 1e11,
                              "memory_bytes": 1 << 30, "sources": {"peak": "a", "memory_bandwidth": "b"}}
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        HardwareSpec(**fields)


def test_device_names_must_be_patterns_not_one_string() -> None:
    # a string was taken one character at a time as patterns: "MyGPU9" matched any name with a 9 (or a G, a P...)
    fields: dict[str, Any] = {"name": "x", "description": "d", "peak": {"float32": 1e12}, "memory_bandwidth": 1e11,
                              "memory_bytes": 1 << 30, "sources": {"peak": "a", "memory_bandwidth": "b"}}
    with pytest.raises(TypeError, match=r"device_names must be a tuple of regular expressions \(str\), got str 'MyGPU9'"):
        HardwareSpec(**fields, device_names="MyGPU9")  # type: ignore[arg-type]
    spec = HardwareSpec(**fields, device_names=["MyGPU9"])  # type: ignore[arg-type]  (a list: kept as a tuple)
    assert spec.device_names == ("MyGPU9",) and spec.matches("NVIDIA MyGPU9") and not spec.matches("RTX 3090")
    # a pattern that does not compile broke every later lookup of another device (re.error, the spec unnamed)
    with pytest.raises(ValueError, match=r"^x: device_names holds 'MyGPU \(rev', not a regular expression"):
        HardwareSpec(**fields, device_names=("MyGPU (rev",))


def test_a_spec_and_a_roofline_pickle_and_deep_copy() -> None:
    # their read-only mappings (MappingProxyType) made pickle and deepcopy fail with a TypeError
    import copy
    import pickle

    spec = hardware.get("h100-sxm")
    for clone in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec)):
        assert clone == spec and clone.peak_flops(torch.bfloat16) == 989.5e12 and clone.matches("NVIDIA H100 80GB HBM3")
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class MySpec(HardwareSpec):
        tdp_watts: float = 0.0

    mine = MySpec("mine", "d", {"float32": 1e12}, 1e11, 1 << 30, {"peak": "a", "memory_bandwidth": "b"}, tdp_watts=350.0)
    assert copy.deepcopy(mine) == mine and copy.deepcopy(mine).tdp_watts == 350.0  # (a subclass's fields kept)
    counter = TorchFLOPsByFX(nn.Linear(8, 4))
    counter.propagate(torch.randn(2, 8))
    line = counter.roofline("h100-sxm")
    for clone_line in (pickle.loads(pickle.dumps(line)), copy.deepcopy(line)):
        assert clone_line.hardware == spec and clone_line.total_roofline_ms == line.total_roofline_ms



@pytest.mark.parametrize(("kwargs", "message"), [
    ({"peak": {"float32": "1e12"}}, r"x: peak\['float32'\] must be a number, got str"),
    ({"memory_bandwidth": "1e11"}, "x: memory_bandwidth must be a number, got str"),
    ({"memory_bytes": True}, "x: memory_bytes must be a number, got bool"),
    ({"peak": [1e12]}, "x: peak must be a mapping"),
])
def test_figures_of_the_wrong_type_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"name": "x", "description": "d", "peak": {"float32": 1e12}, "memory_bandwidth": 1e11,
                              "memory_bytes": 1 << 30, "sources": {"peak": "a", "memory_bandwidth": "b"}}
    fields.update(kwargs)
    with pytest.raises(TypeError, match=message):
        HardwareSpec(**fields)
    fields.update(memory_bytes=80e9, peak={"float32": 1e12}, memory_bandwidth=1e11)  # a whole float is bytes
    assert HardwareSpec(**fields).memory_bytes == 80_000_000_000


@pytest.mark.parametrize("kwargs", [{"memory_bytes": 10**400}, {"memory_bandwidth": 10**400},
                                    {"peak": {"float32": 10**400}}])
def test_an_integer_too_large_for_a_float_names_the_field(kwargs: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"name": "x", "description": "d", "peak": {"float32": 1e12}, "memory_bandwidth": 1e11,
                              "memory_bytes": 1 << 30, "sources": {"peak": "a", "memory_bandwidth": "b"}}
    fields.update(kwargs)
    with pytest.raises(ValueError, match=r"x: .* must be finite, got an integer of 401 digits"):
        HardwareSpec(**fields)


def test_unknown_names_list_the_table() -> None:
    with pytest.raises(ValueError, match="unknown hardware 'h1000'.*h100-sxm"):
        hardware.get("h1000")
    with pytest.raises(TypeError, match="a name or a HardwareSpec"):
        hardware.get(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a HardwareSpec"):
        hardware.register("h100-sxm")  # type: ignore[arg-type]


@pytest.mark.parametrize(("device_name", "spec"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"), ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"), ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA A10G", "a10g"), ("Tesla V100-SXM2-32GB", "v100-sxm"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("AMD Instinct MI300X", "mi300x"), ("NVIDIA B200", "b200"),
])
def test_cuda_device_names_are_recognised(device_name: str, spec: str) -> None:
    assert hardware.spec_for_device_name(device_name).name == spec


@pytest.mark.parametrize("device_name", ["NVIDIA GH200 480GB", "NVIDIA L40", "NVIDIA A100-SXM4-40GB",
                                         "NVIDIA GB200", "NVIDIA GeForce RTX 3090", "NVIDIA H200 NVL"])
def test_unknown_devices_get_a_clear_message(device_name: str) -> None:
    with pytest.raises(ValueError, match=f"the device '{device_name}' is not in the hardware table"):
        hardware.spec_for_device_name(device_name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_detect_without_cuda() -> None:
    with pytest.raises(ValueError, match="no CUDA device"):
        hardware.detect()
