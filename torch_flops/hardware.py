"""Accelerators for the roofline model: dense peak throughput per dtype, memory bandwidth and size,
each number with the vendor document it comes from.

>>> from torch_flops import hardware
>>> h100 = hardware.get("h100-sxm")
>>> h100.peak_flops(torch.bfloat16), h100.memory_bandwidth     # 989.5e12 FLOP/s, 3.35e12 B/s
>>> hardware.names()
>>> hardware.register(hardware.HardwareSpec("my-cpu", "a 32-core CPU", {"float32": 2.0e12}, 200e9, 512 << 30,
...                                         {"peak": "measured with a GEMM", "memory": "measured (STREAM)"},
...                                         kind="cpu"))

Figures are **dense** peaks: where a vendor prints only the 2:4-sparsity figure (NVIDIA marks it
"with sparsity"), it is halved, and the source says so. float16/bfloat16/fp8 are tensor-core
(matrix) rates with FP32 accumulation where the vendor separates them (PyTorch's matmuls
accumulate in FP32); float32 is the non-tensor rate (PyTorch does not use TF32 for float32
matmuls unless asked: ``torch.backends.cuda.matmul.allow_tf32``); float64 the tensor/matrix
rate where there is one (a part without a float64 figure: 1/64 of its float32 rate, as NVIDIA's
GA10x/AD10x parts run it). ``int8`` is in operations per second; ``fp4`` (Blackwell) falls back
to fp8 on parts without it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch

__all__ = ["DTYPES", "HardwareSpec", "detect", "get", "names", "register"]

#: the dtype keys a spec's ``peak`` may hold
DTYPES: tuple[str, ...] = ("float64", "float32", "tf32", "bfloat16", "float16", "fp8", "fp4", "int8")

# what a dtype without a figure of its own runs at: the closest wider type (an fp8 matmul on a part
# without fp8 runs upcast to bf16/fp16; tf32 falls back to fp32; int8 to fp16)
_FALLBACK = {"fp4": ("fp8", "bfloat16", "float16"), "fp8": ("bfloat16", "float16"), "tf32": ("float32",),
             "int8": ("float16", "bfloat16"), "bfloat16": ("float16", "float32"), "float16": ("bfloat16", "float32")}
# A part without a float64 figure: NVIDIA's GA10x and AD10x parts (A10G, L4, L40S, RTX 4090 here) run
# FP64 at 1/64 of their FP32 rate (NVIDIA Ampere GA102 whitepaper; Ada Lovelace whitepaper, Appendix A)
_FP64_SHARE_WITHOUT_A_FIGURE = 1 / 64


def dtype_key(dtype: Any) -> str:
    """``torch.bfloat16`` / ``"bfloat16"`` -> ``"bfloat16"``; every float8 -> ``"fp8"``; complex
    -> its real type; integer and bool types -> ``"int8"``."""
    name = str(dtype).removeprefix("torch.")
    if name in DTYPES:
        return name
    if name.startswith("float8") or name == "fp8":
        return "fp8"
    if name.startswith("float4") or name == "fp4":
        return "fp4"
    if name in ("complex128", "double"):
        return "float64"
    if name in ("complex64", "float", "complex32"):
        return "float32" if name != "complex32" else "float16"
    if name in ("half",):
        return "float16"
    if name.startswith(("int", "uint", "bool", "qint", "quint")):
        return "int8"
    raise ValueError(f"no peak dtype for {dtype!r}: expected a torch dtype or one of {DTYPES}")


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator (or CPU): its dense peak FLOP/s per dtype, memory bandwidth (bytes/s) and
    memory size (bytes), and where each figure comes from."""

    name: str
    description: str
    #: dtype key (DTYPES) -> dense peak FLOP/s (ops/s for int8)
    peak: Mapping[str, float]
    memory_bandwidth: float  #: bytes/s
    memory_bytes: int
    #: what each figure comes from: keys "peak", "memory_bandwidth", "memory_bytes" (or a dtype key)
    sources: Mapping[str, str]
    kind: Literal["gpu", "cpu", "accelerator"] = "gpu"
    #: patterns (regular expressions, case-insensitive) of the device names it is recognised by
    device_names: tuple[str, ...] = ()
    notes: str = ""
    _lookup: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("a hardware spec needs a name")
        if not isinstance(self.peak, Mapping):
            raise TypeError(f"{self.name}: peak must be a mapping dtype -> FLOP/s, got {type(self.peak).__name__}")
        bad = [k for k in self.peak if k not in DTYPES]
        if bad:
            raise ValueError(f"{self.name}: unknown peak dtype(s) {bad}; use {DTYPES}")
        for what, value in [*((f"peak[{k!r}]", v) for k, v in self.peak.items()),
                            ("memory_bandwidth", self.memory_bandwidth), ("memory_bytes", self.memory_bytes)]:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{self.name}: {what} must be a number, got {type(value).__name__} {value!r}")
            try:
                float(value)
            except OverflowError:
                raise ValueError(f"{self.name}: {what} must be finite, got an integer of {len(str(value))} digits") \
                    from None
        if not self.peak or any(not (0 < v < math.inf) for v in self.peak.values()):
            raise ValueError(f"{self.name}: every peak must be a positive, finite FLOP/s figure")
        if not 0 < self.memory_bandwidth < math.inf:
            raise ValueError(f"{self.name}: memory_bandwidth must be positive and finite (bytes/s)")
        if not (0 < self.memory_bytes < math.inf and float(self.memory_bytes).is_integer()):
            raise ValueError(f"{self.name}: memory_bytes must be a positive whole number of bytes, "
                             f"got {self.memory_bytes!r}")
        object.__setattr__(self, "memory_bytes", int(self.memory_bytes))  # 80e9 -> 80000000000
        if not isinstance(self.device_names, (tuple, list)) or not all(isinstance(p, str) for p in self.device_names):
            raise TypeError(f"{self.name}: device_names must be a tuple of regular expressions (str), got "
                            f"{type(self.device_names).__name__} {self.device_names!r}")
        object.__setattr__(self, "device_names", tuple(self.device_names))
        for pattern in self.device_names:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{self.name}: device_names holds {pattern!r}, not a regular expression: {e}") from None
        if self.kind not in ("gpu", "cpu", "accelerator"):
            raise ValueError(f"{self.name}: kind must be 'gpu', 'cpu' or 'accelerator', got {self.kind!r}")
        missing = [k for k in ("peak", "memory_bandwidth") if k not in self.sources]
        if missing:
            raise ValueError(f"{self.name}: every figure needs a source; missing {missing}")
        object.__setattr__(self, "peak", MappingProxyType(dict(self.peak)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def peak_flops(self, dtype: Any) -> float:
        """The dense peak FLOP/s for ``dtype`` (a torch dtype or a DTYPES key). A dtype the part
        has no figure for runs at the closest wider type it has (fp8 -> bf16, tf32 -> fp32, ...)."""
        key = dtype_key(dtype)
        cached = self._lookup.get(key)
        if cached is not None:
            return cached
        if key == "float64" and key not in self.peak and "float32" in self.peak:
            value = self.peak["float32"] * _FP64_SHARE_WITHOUT_A_FIGURE
        else:
            candidates = [c for c in (key, *_FALLBACK.get(key, ()), "float32") if c in self.peak]
            if not candidates:
                raise ValueError(f"{self.name} has no peak for {key} nor a wider type (it has {sorted(self.peak)})")
            value = self.peak[candidates[0]]
        self._lookup[key] = value
        return value

    def vector_flops(self, dtype: Any) -> float:
        """The FLOP/s of work outside dot products (elementwise ops, norms, softmax, reductions),
        which runs on the vector units, not the tensor cores: the part's float32 rate (the
        non-tensor figure of every datasheet here), or ``dtype``'s own peak where that is lower."""
        peak = self.peak_flops(dtype)
        return min(peak, self.peak["float32"]) if "float32" in self.peak else peak

    def source(self, item: str) -> str:
        """Where a figure comes from: a dtype key, "peak", "memory_bandwidth" or "memory_bytes"."""
        return self.sources.get(item) or self.sources.get("peak" if item in DTYPES else item, "")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and deep-copied) by its fields, rebuilt through its class's constructor (a subclass's
        fields too; its mappings are read-only views, which pickle cannot copy)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return (_spec_from_fields, (type(self), {k: dict(v) if isinstance(v, MappingProxyType) else v
                                                 for k, v in fields.items()}))

    def matches(self, device_name: str) -> bool:
        return any(re.search(p, device_name, re.IGNORECASE) for p in self.device_names)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "kind": self.kind, "peak": dict(self.peak),
                "memory_bandwidth": self.memory_bandwidth, "memory_bytes": self.memory_bytes,
                "sources": dict(self.sources)}


# TFLOP/s and TB/s are decimal; a memory's "GB" (80GB HBM3, 24GB GDDR6) is 2^30 bytes, JEDEC's unit
# for memory capacity (JESD100B.01, "giga (G) as a prefix to units of semiconductor storage capacity":
# 2^30): an "80GB" H100 reports 81559 MiB in nvidia-smi (79.6 GiB usable), not 80e9 bytes (74.5 GiB)
T, TB, _GB = 1e12, 1e12, 2**30

_H100 = "NVIDIA H100 Tensor Core GPU datasheet (https://www.nvidia.com/en-us/data-center/h100/); dense = half the " \
        "'with sparsity' tf32/bf16/fp16/fp8/int8 figures"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (https://www.nvidia.com/en-us/data-center/h200/); same GH100 " \
        "compute as H100 SXM; dense = half the 'with sparsity' figures"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/" \
        "a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf); dense figures as printed"
_L4 = "NVIDIA L4 Tensor Core GPU datasheet (https://www.nvidia.com/en-us/data-center/l4/); dense = half the " \
      "'with sparsity' figures"
_L40S = "NVIDIA L40S datasheet (https://www.nvidia.com/en-us/data-center/l40s/); dense figures as printed"
_A10 = "NVIDIA A10 Tensor Core GPU datasheet: NVIDIA publishes no A10G figures; the A10G (AWS's A10 variant) is " \
       "said to have lower tensor throughput, so these are an upper bound"
_A10G = "third-party (GPU spec tables; Baseten, 'NVIDIA A10 vs A10G for ML model inference'): no vendor datasheet"
_V100 = "NVIDIA Tesla V100 datasheet (V100 SXM2 column, 1,530 MHz)"
_ADA = "NVIDIA Ada Lovelace GPU architecture whitepaper v2.02, Appendix A, Table 2 (dense column; FP16/BF16/FP8 " \
       "with FP32 accumulate)"
_MI300X = "AMD ROCm documentation, 'AMD Instinct MI300 series microarchitecture', MI300X peak-performance table " \
          "(https://rocm.docs.amd.com/en/latest/conceptual/gpu-arch/mi300.html)"
_B200 = "NVIDIA HGX platform page, 'Individual Blackwell GPU Specifications', HGX B200 " \
        "(https://www.nvidia.com/en-us/data-center/hgx/); dense = half the 'with sparsity' figures"

_SPECS: dict[str, HardwareSpec] = {}


def _spec_from_fields(cls: type[HardwareSpec], fields: dict[str, Any]) -> HardwareSpec:
    return cls(**fields)


def register(spec: HardwareSpec, override: bool = False) -> HardwareSpec:
    """Add ``spec`` to the table (``override=True`` to replace one of the same name)."""
    if not isinstance(spec, HardwareSpec):
        raise TypeError(f"register takes a HardwareSpec, got {type(spec).__name__}")
    key = spec.name.lower()  # names are case-insensitive
    if key in _SPECS and not override:
        raise ValueError(f"hardware {spec.name!r} is already defined; pass override=True to replace it")
    _SPECS[key] = spec
    return spec


def _gpu(name: str, description: str, peak_t: Mapping[str, float], bandwidth: float, memory_gb: float,
         source: str, device_names: tuple[str, ...], memory_source: str | None = None, notes: str = "",
         kind: Literal["gpu", "accelerator"] = "gpu") -> None:
    register(HardwareSpec(
        name=name, description=description, peak={k: v * T for k, v in peak_t.items()}, memory_bandwidth=bandwidth,
        memory_bytes=int(memory_gb * _GB), sources={"peak": source, "memory_bandwidth": memory_source or source,
                                                    "memory_bytes": memory_source or source},
        kind=kind, device_names=device_names, notes=notes))


_gpu("h100-sxm", "NVIDIA H100 SXM5 80GB (HBM3)",
     {"float64": 67, "float32": 67, "tf32": 494.5, "bfloat16": 989.5, "float16": 989.5, "fp8": 1979, "int8": 1979},
     3.35 * TB, 80, _H100, (r"H100.*(SXM|HBM3)", r"^NVIDIA H100 80GB HBM3$"))
_gpu("h100-pcie", "NVIDIA H100 PCIe 80GB (HBM2e)",
     {"float64": 51, "float32": 51, "tf32": 378, "bfloat16": 756.5, "float16": 756.5, "fp8": 1513, "int8": 1513},
     2.0 * TB, 80, _H100 + "; bandwidth from the H100 PCIe product brief PB-11133-001_v02", (r"H100.*PCIe",))
_gpu("h200", "NVIDIA H200 SXM 141GB (HBM3e)",
     {"float64": 67, "float32": 67, "tf32": 494.5, "bfloat16": 989.5, "float16": 989.5, "fp8": 1979, "int8": 1979},
     4.8 * TB, 141, _H200, (r"(?<!G)H200(?!.*NVL)",))
_gpu("a100-sxm-80gb", "NVIDIA A100 SXM4 80GB (HBM2e)",
     {"float64": 19.5, "float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312, "int8": 624},
     2039e9, 80, _A100, (r"A100-SXM4?-80GB",))
_gpu("a100-pcie-40gb", "NVIDIA A100 PCIe 40GB (HBM2)",
     {"float64": 19.5, "float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312, "int8": 624},
     1555e9, 40, _A100 + " (the 40GB PCIe column)", (r"A100.*PCIE.*40", r"A100-PCIE-40GB"),
     notes="NVIDIA prints the SXM part's peaks; a 250 W PCIe card sustains less under heavy tensor load")
_gpu("l4", "NVIDIA L4 24GB (GDDR6)",
     {"float32": 30.3, "tf32": 60, "bfloat16": 121, "float16": 121, "fp8": 242.5, "int8": 242.5},
     300e9, 24, _L4, (r"\bL4\b",), notes="the datasheet does not say whether the fp16/bf16 rate holds with FP32 "
                                          "accumulation: an upper bound for PyTorch matmuls")
_gpu("l40s", "NVIDIA L40S 48GB (GDDR6)",
     {"float32": 91.6, "tf32": 183, "bfloat16": 362.05, "float16": 362.05, "fp8": 733, "int8": 733},
     864e9, 48, _L40S, (r"L40S",), notes="the accumulation type behind the fp16/bf16 rate is not stated")
register(HardwareSpec(
    name="a10g", description="NVIDIA A10G 24GB (GDDR6), the AWS G5 GPU",
    peak={"float32": 31.2e12, "tf32": 62.5e12, "bfloat16": 125e12, "float16": 125e12, "int8": 250e12},
    memory_bandwidth=600e9, memory_bytes=24 * _GB,
    sources={"peak": _A10, "float32": _A10G, "memory_bandwidth": _A10G,
             "memory_bytes": "AWS EC2 G5 instance documentation (24 GB per GPU)"},
    device_names=(r"A10G",), notes="tensor peaks are the A10's, an upper bound: measure a GEMM on a g5 to refine"))
_gpu("v100-sxm", "NVIDIA V100 SXM2 32GB (HBM2)", {"float64": 7.8, "float32": 15.7, "float16": 125},
     900e9, 32, _V100, (r"V100.*SXM", r"V100-SXM2"), notes="no bf16/tf32/fp8: those run at the fp16/fp32 rates")
_gpu("rtx-4090", "NVIDIA GeForce RTX 4090 24GB (GDDR6X)",
     {"float32": 82.6, "tf32": 82.6, "bfloat16": 165.2, "float16": 165.2, "fp8": 330.3, "int8": 660.6},
     1008e9, 24, _ADA, (r"RTX 4090",))
_gpu("mi300x", "AMD Instinct MI300X 192GB (HBM3)",
     {"float64": 163.4, "float32": 163.4, "tf32": 653.7, "bfloat16": 1307.4, "float16": 1307.4, "fp8": 2614.9,
      "int8": 2614.9},
     5.3 * TB, 192, _MI300X, (r"MI300X",),
     memory_source=_MI300X + " (5.3 TB/s); 192 GB: AMD's MLPerf Inference v4.1 system description",
     notes="fp8 is the FNUZ format (torch.float8_e4m3fnuz)", kind="accelerator")
_gpu("b200", "NVIDIA B200 180GB (HBM3e), per GPU of an HGX B200",
     {"float64": 37, "float32": 75, "tf32": 1100, "bfloat16": 2250, "float16": 2250, "fp8": 4500, "fp4": 9000,
      "int8": 4500},
     7.7 * TB, 180, _B200, (r"(?<!G)B200",), notes="the DGX B200 page prints 8 TB/s per GPU; the HGX page's 7.7 is used")

_BUILTIN = frozenset(_SPECS)


def names() -> list[str]:
    """The specs defined, the package's first (sorted), then the ones registered."""
    return sorted(_BUILTIN) + sorted(set(_SPECS) - _BUILTIN)


def get(name: str | HardwareSpec) -> HardwareSpec:
    """The spec called ``name`` (or ``name`` itself when it is a spec); ``ValueError`` listing the
    names for an unknown one."""
    if isinstance(name, HardwareSpec):
        return name
    if not isinstance(name, str):
        raise TypeError(f"hardware must be a name or a HardwareSpec, got {type(name).__name__}")
    spec = _SPECS.get(name.lower())
    if spec is None:
        raise ValueError(f"unknown hardware {name!r}; known: {', '.join(names())} (or define one with "
                         "torch_flops.hardware.register(HardwareSpec(...)))")
    return spec


def detect(device: torch.device | str | None = None) -> HardwareSpec:
    """The spec of a CUDA device, recognised from its name (``torch.cuda.get_device_name``);
    ``ValueError`` naming it when the table does not know it."""
    if not torch.cuda.is_available():
        raise ValueError("no CUDA device to recognise: name the hardware (torch_flops.hardware.names())")
    name = torch.cuda.get_device_name(device)
    return spec_for_device_name(name)


def spec_for_device_name(device_name: str) -> HardwareSpec:
    for spec in _SPECS.values():
        if spec.matches(device_name):
            return spec
    raise ValueError(f"the device {device_name!r} is not in the hardware table ({', '.join(names())}); name the "
                     "closest one or define it with torch_flops.hardware.register(HardwareSpec(...))")
