"""The one formula table: keyed by the target itself, one calling convention for every front door,
the name-keyed dicts as views onto it, composite formulas bound to each counter's own table."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_flops import (
    FORMULAS,
    DuplicateFormulaError,
    FUNCTION_FLOPs_MAPPING,
    METHOD_FLOPs_MAPPING,
    MODULE_FLOPs_MAPPING,
    TorchFLOPsByFX,
    register,
    register_method,
)
from torch_flops.formulas import Name, functions, methods

aten = torch.ops.aten


@pytest.mark.parametrize(("module", "function", "method", "aten_op"), [
    (nn.ReLU, F.relu, "relu", aten.relu.default),
    (nn.GELU, F.gelu, None, aten.gelu.default),
    (nn.Softmax, F.softmax, "softmax", aten._softmax.default),
    (nn.Dropout, F.dropout, None, aten.dropout.default),
    (nn.Linear, F.linear, None, aten.linear.default),
    (nn.LayerNorm, F.layer_norm, None, aten.layer_norm.default),
    (nn.MaxPool2d, F.max_pool2d, None, aten.max_pool2d.default),
])
def test_one_formula_object_serves_every_front_door(module: type, function: Any, method: str | None,
                                                    aten_op: Any) -> None:
    formula = FORMULAS.resolve_module(module)
    assert formula is not None
    assert FORMULAS.resolve_function(function) is formula
    assert FORMULAS.resolve_aten(aten_op) is formula
    if method is not None:
        assert FORMULAS.resolve_method(method) is formula


def test_one_convention_module_first() -> None:
    x = torch.randn(2, 3, 4)  # 24 elements
    gelu = FORMULAS.resolve_function(F.gelu)
    assert gelu is not None
    # formula(module, out, *args, **kwargs): exact GELU 5 per element, tanh form 9 (activation.py)
    assert gelu(nn.GELU(), F.gelu(x), x) == (120, 0)
    assert gelu(nn.GELU(approximate="tanh"), F.gelu(x), x) == (216, 0)
    assert gelu(None, F.gelu(x), x, approximate="tanh") == (216, 0)
    relu = FORMULAS.resolve_method("relu")
    assert relu is not None and relu(None, x.relu(), x) == (24, 0)  # a method's self comes first


def test_same_name_different_targets_have_their_own_formulas() -> None:
    # F.batch_norm(input, running_mean, running_var, weight, bias, training) and
    # torch.batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
    assert F.batch_norm.__name__ == torch.batch_norm.__name__ == "batch_norm"
    f_form, torch_form = FORMULAS.resolve_function(F.batch_norm), FORMULAS.resolve_function(torch.batch_norm)
    assert f_form is not None and torch_form is not None and f_form is not torch_form
    x, w = torch.randn(2, 4, 3, 3), torch.ones(4)  # 72 elements
    rm, rv = torch.zeros(4), torch.ones(4)
    # running statistics with an affine weight: 72 x (2 + 1) = 216, whichever argument order
    assert f_form(None, x, x, rm, rv, w) == (216, 0)
    assert torch_form(None, x, x, w, None, rm, rv, False, 0.1, 1e-5, False) == (216, 0)
    # the name-keyed view gives the first registered (F's); the target itself picks exactly
    assert FUNCTION_FLOPs_MAPPING["batch_norm"](x, x, rm, rv, w) == (216, 0)
    assert FUNCTION_FLOPs_MAPPING[torch.batch_norm](x, x, w, None, rm, rv, False, 0.1, 1e-5, False) == (216, 0)


def test_unknown_alias_falls_back_to_the_name() -> None:
    def relu(x: torch.Tensor) -> torch.Tensor:  # another function called relu
        return x.clamp_min(0)

    assert FORMULAS.resolve_function(relu) is FORMULAS.resolve_function(F.relu)
    assert FORMULAS.resolve_function(lambda x: x) is None


@pytest.mark.usefixtures("clean_tables")
def test_assigning_a_name_gives_every_target_of_that_name_the_formula() -> None:
    before = TorchFLOPsByFX(nn.Sequential(nn.ReLU()))  # copies the table now

    def mine(out: torch.Tensor, *args: Any, **kwargs: Any) -> int:
        return 7

    FUNCTION_FLOPs_MAPPING["relu"] = mine
    assert FUNCTION_FLOPs_MAPPING["relu"] is mine
    for target in (torch.relu, F.relu):
        formula = FORMULAS.resolve_function(target)
        assert formula is not None and formula(None, torch.zeros(3), torch.zeros(3)) == 7
    # a method of the same name is another kind of target: untouched
    assert METHOD_FLOPs_MAPPING["relu"](torch.ones(3), torch.ones(3)) == (3, 0)
    assert "relu" in FUNCTION_FLOPs_MAPPING and len(FUNCTION_FLOPs_MAPPING) > 100
    # the counter made before keeps its own copy
    assert before.tables.resolve_function(F.relu) is not FORMULAS.resolve_function(F.relu)


@pytest.mark.usefixtures("clean_tables")
def test_method_formulas_take_the_original_torch_flops_order() -> None:
    # zugexiaodui/torch_flops calls METHOD_FLOPs_MAPPING[name](self_obj, result, *args_tail, **kwargs)
    seen = []

    def summed(self_obj: torch.Tensor, result: torch.Tensor, *args_tail: Any, **kwargs: Any) -> int:
        seen.append((tuple(self_obj.shape), tuple(result.shape), args_tail))
        return result.numel() * (self_obj.shape[1] - 1)  # (3, 4).sum(1): 3 rows x 3 adds = 9

    class Sum(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum(1)

    METHOD_FLOPs_MAPPING["sum"] = summed
    assert METHOD_FLOPs_MAPPING["sum"] is summed
    counter = TorchFLOPsByFX(Sum())
    counter.propagate(torch.randn(3, 4))
    assert counter.total_flops == 9 and seen == [((3, 4), (3,), (1,))]

    @register_method("my_scale", override=True)
    def scaled(self_obj: torch.Tensor, result: torch.Tensor, factor: float) -> int:
        return self_obj.numel()  # one multiply per element of the tensor the method is called on

    assert FORMULAS.resolve_method("my_scale")(None, torch.zeros(2), torch.zeros(5, 2), 3.0) == 10
    # the package's own method formulas come back in the same order
    x = torch.randn(3, 4)
    assert METHOD_FLOPs_MAPPING["sum"] is summed and METHOD_FLOPs_MAPPING["relu"](x, x.relu()) == (12, 0)


@pytest.mark.usefixtures("clean_tables")
def test_composite_formulas_use_the_counters_own_table() -> None:
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True).eval()
    x = torch.randn(1, 5, 8)
    first = TorchFLOPsByFX(nn.Sequential(layer))
    with torch.no_grad():
        first.propagate(x)
    MODULE_FLOPs_MAPPING["Linear"] = lambda module, out, *args, **kwargs: (0, 0)  # edited after `first` exists
    again = TorchFLOPsByFX(nn.Sequential(layer))
    with torch.no_grad():
        first.propagate(x)
        again.propagate(x)
    # the feed-forward Linears of the layer (8->16->8 on 5 tokens) are counted by each counter's own
    # table: 5*8*16 + 5*16*8 = 1280 MACs fewer for the counter made after the edit
    assert first.total_macs - again.total_macs == 1280
    assert first.total_macs > 1280


def test_register_takes_targets_not_names() -> None:
    with pytest.raises(TypeError, match="functions\\('relu'\\)"):
        register("relu")
    with pytest.raises(TypeError, match="table key"):
        register(object())(lambda *a: 0)
    with pytest.raises(DuplicateFormulaError, match="override=True"):
        register(torch.relu)(lambda *a: 0)
    assert issubclass(DuplicateFormulaError, ValueError)


def test_name_helpers_find_every_namespace() -> None:
    assert set(functions("relu")) >= {torch.relu, F.relu}
    assert F.logsigmoid in functions("logsigmoid") and torch.special.expit in functions("special_expit")
    assert functions("no_such_function") == (Name("function", "no_such_function"),)
    assert methods("relu", "real", "__neg__") == (torch.Tensor.relu, Name("method", "real"), torch.Tensor.neg)


@pytest.mark.parametrize("tracer", ["auto", "fx"])
def test_an_aten_key_serves_the_functions_and_methods_of_its_name(tracer: str) -> None:
    """FlopCounterMode's ``custom_mapping`` is keyed by aten ops; the front ends record ``torch.mm``,
    ``Tensor.mm`` and ``a + b`` whole (their own formulas), so an ``aten.mm`` / ``aten.add`` key
    serves them too, and FlopCounterMode with the same mapping agrees."""
    from torch.utils.flop_counter import FlopCounterMode

    class Products(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.mm(a, b) + a.mm(b)

    a = torch.randn(3, 3)
    mm = torch.ops.aten.mm
    counter = TorchFLOPsByFX(Products(), tracer=tracer, custom_formulas={mm: lambda module, out, *args, **kw: (2000, 1000)})
    counter.propagate(a, a)
    # two products at 2000 each, one add of 3 x 3 = 9 elements
    assert counter.total_flops == 2 * 2000 + 9
    with FlopCounterMode(display=False, custom_mapping={mm: lambda *args, **kwargs: 2000}) as reference:
        Products()(a, a)
    assert counter.in_convention("flop_counter").total_flops == reference.get_total_flops() == 4000
    adds = TorchFLOPsByFX(Products(), tracer=tracer, custom_formulas={torch.ops.aten.add.Tensor: lambda *a, **k: 7})
    adds.propagate(a, a)
    assert adds.total_flops == 2 * (2 * 27) + 7  # the products' own 2 x 27 MACs each, the add 7
    plain = TorchFLOPsByFX(Products(), tracer=tracer)  # the package's own table is untouched
    plain.propagate(a, a)
    assert plain.total_flops == 2 * (2 * 27) + 9


def test_a_torch_function_formula_keeps_the_default_front_end() -> None:
    """The eager recording keeps torch functions and Tensor methods whole (``__torch_function__``),
    so a formula for one applies there: no detour through fx, no warning that it does not apply
    (only a plain Python function's formula needs a graph)."""
    import warnings

    class Branchy(nn.Module):  # fx cannot trace a branch on a tensor's value
        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return a + a if a.sum() > -1e9 else a

    counter = TorchFLOPsByFX(Branchy(), custom_formulas={"add": lambda module, out, *args, **kwargs: 5})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no TracerFallbackWarning
        counter.propagate(torch.ones(2, 2))
    # the add 5 (the formula given), the sum over 4 elements 4 (one per element), the comparison 1
    assert (counter.total_flops, counter.tracer_used) == (5 + 4 + 1, "eager")


def test_an_aten_key_skips_python_functions_of_its_name_and_decomposed_ops() -> None:
    # F.embedding(input, weight) orders its arguments otherwise than aten.embedding(weight, indices),
    # and aten.linear decomposes before any dispatch mode sees it: neither takes the aten formula
    seen: list[Any] = []

    def spy(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
        seen.append(args)
        return 1000

    class Lookup(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table, self.proj = nn.Parameter(torch.randn(10, 4)), nn.Parameter(torch.randn(3, 4))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return F.linear(F.embedding(ids, self.table), self.proj)

    ids = torch.tensor([[1, 2]])
    plain = TorchFLOPsByFX(Lookup())
    plain.propagate(ids)
    counter = TorchFLOPsByFX(Lookup(), custom_formulas={torch.ops.aten.embedding: spy, torch.ops.aten.linear: spy})
    counter.propagate(ids)
    assert seen == [] and counter.total_flops == plain.total_flops == 2 * 2 * 4 * 3  # 2 rows x 4 x 3 MACs


def test_register_refuses_a_formula_that_is_not_callable() -> None:
    class Block(nn.Module):
        pass

    with pytest.raises(TypeError, match="a formula must be callable, got int 3"):
        register(Block)(3)
    assert FORMULAS.resolve_module(Block) is None  # nothing registered


def test_a_custom_op_counted_by_flop_counter_mode_s_registered_formula() -> None:
    # a custom op with a formula registered for FlopCounterMode (torch.utils.flop_counter.
    # register_flop_formula) and none of ours: counted by that formula, in every convention
    import torch
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

    from torch_flops import TorchFLOPsByFX

    @torch.library.custom_op("torch_flops_test::matmul_op", mutates_args=())
    def matmul_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b

    @matmul_op.register_fake
    def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.new_empty(a.shape[0], b.shape[1])

    @register_flop_formula(torch.ops.torch_flops_test.matmul_op)
    def _formula(a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]

    class Model(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.ops.torch_flops_test.matmul_op(a, b)

    a, b = torch.randn(4, 5), torch.randn(5, 6)
    with FlopCounterMode(display=False) as reference:
        Model()(a, b)
    counter = TorchFLOPsByFX(Model())
    counter.propagate(a, b)
    # 2 * 4*5*6 = 240, as 120 MACs
    assert reference.get_total_flops() == 240
    assert counter.profile.total_flops == counter.profile.with_convention("flop_counter").total_flops == 240
    assert counter.profile.total_macs == 120
    assert [r.status.value for r in counter.records if r.op == "call_function"] == ["counted"]
    # a formula dropped by the user stays dropped (FlopCounterMode's is not put back in its place)
    dropped = TorchFLOPsByFX(Model(), custom_formulas={torch.ops.torch_flops_test.matmul_op: None})
    with pytest.warns(UserWarning, match="no FLOPs formula"):
        dropped.propagate(a, b)
    assert [r.status.value for r in dropped.records if r.op == "call_function"] == ["unsupported"]
