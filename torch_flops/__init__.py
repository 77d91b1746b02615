"""torch_flops: where the compute, time and memory of a PyTorch model go, per node, per module
and in total. See :class:`TorchFLOPsByFX` and the counting convention in
:mod:`torch_flops.formulas`."""

from torch_flops import hardware
from torch_flops._version import __version__
from torch_flops.analyzer import TorchFLOPsByFX
from torch_flops.api import (
    ActivationCountAnalysis,
    FlopCountAnalysis,
    activation_count,
    compare_compiled,
    flop_count,
    flop_count_str,
    flop_count_table,
    get_model_profile,
    parameter_count,
    parameter_count_table,
    profile,
)
from torch_flops.compiled import profile_compiled
from torch_flops.diff import ProfileDiff, diff
from torch_flops.errors import (
    DroppedOutputWarning,
    DuplicateFormulaError,
    LossError,
    NodeExecutionError,
    TorchFlopsError,
    TracerFallbackWarning,
    TracingError,
    UnsupportedOpError,
    UnsupportedOptimizerError,
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
from torch_flops.generation import GenerationPrediction, GenerationProfile, GenerationStep, profile_generate
from torch_flops.generation_sweep import GenerationSweep, SweepPoint, sweep_generation
from torch_flops.hardware import HardwareSpec
from torch_flops.measure import Timer
from torch_flops.optim import OPTIMIZER_FLOPs_MAPPING, optimizer_step_counts, optimizer_step_flops, register_optimizer
from torch_flops.records import NodeRecord, Profile, Status
from torch_flops.roofline import Roofline, RooflineRow, roofline
from torch_flops.training import TrainingProfiler, utilization

__all__ = [
    "FORMULAS",
    "ATEN_FLOPs_MAPPING",
    "ActivationCountAnalysis",
    "DroppedOutputWarning",
    "DuplicateFormulaError",
    "FUNCTION_FLOPs_MAPPING",
    "FlopCountAnalysis",
    "GenerationPrediction",
    "GenerationProfile",
    "GenerationStep",
    "GenerationSweep",
    "HardwareSpec",
    "LossError",
    "METHOD_FLOPs_MAPPING",
    "MODULE_FLOPs_MAPPING",
    "NodeExecutionError",
    "NodeRecord",
    "OPTIMIZER_FLOPs_MAPPING",
    "Profile",
    "ProfileDiff",
    "Roofline",
    "RooflineRow",
    "Status",
    "SweepPoint",
    "Timer",
    "TorchFLOPsByFX",
    "TorchFlopsError",
    "TracerFallbackWarning",
    "TracingError",
    "TrainingProfiler",
    "UnsupportedOpError",
    "UnsupportedOpWarning",
    "UnsupportedOptimizerError",
    "__version__",
    "activation_count",
    "compare_compiled",
    "diff",
    "flop_count",
    "flop_count_str",
    "flop_count_table",
    "get_model_profile",
    "hardware",
    "optimizer_step_counts",
    "optimizer_step_flops",
    "parameter_count",
    "parameter_count_table",
    "profile",
    "profile_compiled",
    "profile_generate",
    "register",
    "register_aten",
    "register_function",
    "register_method",
    "register_module",
    "register_optimizer",
    "roofline",
    "sweep_generation",
    "utilization",
    "zero_flops",
]
