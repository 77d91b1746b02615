"""torch_flops: where the compute, time and memory of a PyTorch model go, per node, per module
and in total. See :class:`TorchFLOPsByFX` and the counting convention in
:mod:`torch_flops.formulas`."""

from torch_flops import hardware
from torch_flops.analyzer import TorchFLOPsByFX
from torch_flops.api import FlopCountAnalysis, flop_count_table, get_model_profile, profile
from torch_flops.errors import (
    DroppedOutputWarning,
    DuplicateFormulaError,
    NodeExecutionError,
    TorchFlopsError,
    TracerFallbackWarning,
    TracingError,
    UnsupportedOpError,
    UnsupportedOpWarning,
)
from torch_flops.formulas import (
    FORMULAS,
    ATEN_FLOPs_MAPPING,
    FUNCTION_FLOPs_MAPPING,
    METHOD_FLOPs_MAPPING,
    MODULE_FLOPs_MAPPING,
    register,
    register_aten,
    register_function,
    register_method,
    register_module,
    zero_flops,
)
from torch_flops.hardware import HardwareSpec
from torch_flops.measure import Timer
from torch_flops.records import NodeRecord, Profile, Status
from torch_flops.roofline import Roofline, RooflineRow, roofline

__version__ = "0.1.0"

__all__ = [
    "FORMULAS",
    "ATEN_FLOPs_MAPPING",
    "DroppedOutputWarning",
    "DuplicateFormulaError",
    "FUNCTION_FLOPs_MAPPING",
    "FlopCountAnalysis",
    "HardwareSpec",
    "METHOD_FLOPs_MAPPING",
    "MODULE_FLOPs_MAPPING",
    "NodeExecutionError",
    "NodeRecord",
    "Profile",
    "Roofline",
    "RooflineRow",
    "Status",
    "Timer",
    "TorchFLOPsByFX",
    "TorchFlopsError",
    "TracerFallbackWarning",
    "TracingError",
    "UnsupportedOpError",
    "UnsupportedOpWarning",
    "__version__",
    "flop_count_table",
    "get_model_profile",
    "hardware",
    "profile",
    "register",
    "register_aten",
    "register_function",
    "register_method",
    "register_module",
    "roofline",
    "zero_flops",
]
