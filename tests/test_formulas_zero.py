"""Ops that are 0 FLOPs by definition (torch_flops/formulas/zero.py), the bags of embeddings that
follow a free lookup with a reduction (torch_flops/formulas/embedding.py), and the register
decorators that fill the tables (torch_flops/formulas/__init__.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_flops import DuplicateFormulaError, formulas
from torch_flops.formulas import (
    ATEN_FLOPs_MAPPING,
    FUNCTION_FLOPs_MAPPING,
    METHOD_FLOPs_MAPPING,
    MODULE_FLOPs_MAPPING,
    register_aten,
    register_function,
    register_method,
    register_module,
    zero_flops,
)
from torch_flops.formulas.zero import ZERO_FUNCTIONS, ZERO_METHODS, ZERO_MODULES

# --------------------------------------------------------------------------- #
# zero.py
# --------------------------------------------------------------------------- #


def test_zero_flops_is_zero_for_anything() -> None:
    assert zero_flops() == (0, 0)
    assert zero_flops(torch.ones(3), torch.ones(3), dim=0) == (0, 0)


@pytest.mark.parametrize("name", ZERO_FUNCTIONS)
def test_zero_functions_registered(name: str) -> None:
    assert FUNCTION_FLOPs_MAPPING[name] is zero_flops


@pytest.mark.parametrize("name", ZERO_METHODS)
def test_zero_methods_registered(name: str) -> None:
    assert METHOD_FLOPs_MAPPING[name] is zero_flops


@pytest.mark.parametrize("cls", ZERO_MODULES, ids=lambda c: c.__name__)
def test_zero_modules_registered(cls: type) -> None:
    assert MODULE_FLOPs_MAPPING[cls.__name__] is zero_flops


def test_zero_lists_contain_the_usual_suspects() -> None:
    functions = {"view", "reshape", "permute", "transpose", "contiguous", "expand", "repeat", "cat", "stack",
                 "split", "chunk", "gather", "index_select", "getitem", "getattr", "flatten", "squeeze",
                 "unsqueeze", "clone", "zeros", "arange"}
    methods = {"view", "reshape", "permute", "transpose", "contiguous", "expand", "repeat", "split", "chunk",
               "gather", "index_select", "size", "to", "type_as", "float", "__getitem__", "flatten", "clone"}
    assert functions <= set(ZERO_FUNCTIONS), functions - set(ZERO_FUNCTIONS)
    assert methods <= set(ZERO_METHODS), methods - set(ZERO_METHODS)
    assert {nn.Identity, nn.Flatten, nn.Embedding} <= set(ZERO_MODULES)


def test_zero_lists_have_no_duplicates_and_no_arithmetic() -> None:
    assert len(ZERO_FUNCTIONS) == len(set(ZERO_FUNCTIONS))
    assert len(ZERO_METHODS) == len(set(ZERO_METHODS))
    # masked_fill_ selects per element: counted by elementwise.py, not zero
    assert "masked_fill_" not in ZERO_METHODS
    assert METHOD_FLOPs_MAPPING["masked_fill_"] is not zero_flops
    # Tensor has no cat/stack methods: those stay functions only
    assert not {"cat", "stack", "concat", "pad"} & set(ZERO_METHODS)


def test_zero_ops_on_real_tensors() -> None:
    x = torch.randn(2, 3, 4)
    assert FUNCTION_FLOPs_MAPPING["cat"](torch.cat([x, x]), [x, x]) == (0, 0)
    assert METHOD_FLOPs_MAPPING["view"](x, x.view(6, 4), 6, 4) == (0, 0)
    m = nn.Embedding(10, 4)
    idx = torch.tensor([1, 2, 3])
    assert MODULE_FLOPs_MAPPING["Embedding"](m, m(idx), idx) == (0, 0)  # a plain lookup is a copy


# --------------------------------------------------------------------------- #
# embedding.py: EmbeddingBag = lookup (free) + a reduction per bag
# --------------------------------------------------------------------------- #
# 6 indices into a (10, 4) table, bags at offsets [0, 2, 5] -> 3 bags of 2, 3, 1 rows -> out (3, 4)
# looked up values: 6 * 4 = 24; each is accumulated once (sum: add, max: compare) -> 24
# mean: + one divide per output element (3 * 4 = 12); per_sample_weights: + one multiply per value (24)

IDX = torch.tensor([1, 2, 4, 5, 4, 3])
OFFSETS = torch.tensor([0, 2, 5])
WEIGHT = torch.randn(10, 4)


@pytest.mark.parametrize(("mode", "flops"), [("sum", 24), ("mean", 36), ("max", 24)])
def test_embedding_bag_function(mode: str, flops: int) -> None:
    out = F.embedding_bag(IDX, WEIGHT, OFFSETS, mode=mode)
    assert out.shape == (3, 4)
    assert FUNCTION_FLOPs_MAPPING["embedding_bag"](out, IDX, WEIGHT, OFFSETS, mode=mode) == flops


def test_embedding_bag_per_sample_weights() -> None:
    psw = torch.rand(6)
    out = F.embedding_bag(IDX, WEIGHT, OFFSETS, mode="sum", per_sample_weights=psw)
    # 24 multiplies by the weights + 24 adds
    assert FUNCTION_FLOPs_MAPPING["embedding_bag"](out, IDX, WEIGHT, OFFSETS, mode="sum",
                                                   per_sample_weights=psw) == 48


def test_embedding_bag_default_mode_is_mean_and_2d_input() -> None:
    idx = torch.tensor([[1, 2, 3], [4, 5, 6]])  # 2 bags of 3, no offsets: out (2, 4)
    out = F.embedding_bag(idx, WEIGHT)
    assert FUNCTION_FLOPs_MAPPING["embedding_bag"](out, idx, WEIGHT) == 32  # 6*4 adds + 2*4 divides


@pytest.mark.parametrize(("mode", "flops"), [("sum", 24), ("mean", 36), ("max", 24)])
def test_embedding_bag_module(mode: str, flops: int) -> None:
    m = nn.EmbeddingBag(10, 4, mode=mode)
    out = m(IDX, OFFSETS)
    assert MODULE_FLOPs_MAPPING["EmbeddingBag"](m, out, IDX, OFFSETS) == flops
    assert MODULE_FLOPs_MAPPING["EmbeddingBag"](m, out, IDX, offsets=OFFSETS) == flops


def test_embedding_bag_module_per_sample_weights() -> None:
    m = nn.EmbeddingBag(10, 4, mode="sum")
    psw = torch.rand(6)
    out = m(IDX, OFFSETS, psw)
    assert MODULE_FLOPs_MAPPING["EmbeddingBag"](m, out, IDX, OFFSETS, psw) == 48  # 24 + 24
    out = m(IDX, OFFSETS, per_sample_weights=psw)
    assert MODULE_FLOPs_MAPPING["EmbeddingBag"](m, out, IDX, OFFSETS, per_sample_weights=psw) == 48


def test_embedding_bag_positional_mode_and_weights() -> None:
    out = F.embedding_bag(IDX, WEIGHT, OFFSETS, None, 2, False, "max")
    assert FUNCTION_FLOPs_MAPPING["embedding_bag"](out, IDX, WEIGHT, OFFSETS, None, 2, False, "max") == 24
    psw = torch.rand(6)
    out = F.embedding_bag(IDX, WEIGHT, OFFSETS, None, 2, False, "sum", False, psw)
    assert FUNCTION_FLOPs_MAPPING["embedding_bag"](out, IDX, WEIGHT, OFFSETS, None, 2, False, "sum", False,
                                                   psw) == 48


# --------------------------------------------------------------------------- #
# registry
# --------------------------------------------------------------------------- #

def _mine(*args: Any, **kwargs: Any) -> tuple[int, int]:
    return (1, 0)


def test_duplicate_registration_raises(clean_tables: None) -> None:
    before = FUNCTION_FLOPs_MAPPING["add"]
    with pytest.raises(DuplicateFormulaError, match="override=True"):
        register_function("add")(_mine)
    assert FUNCTION_FLOPs_MAPPING["add"] is before
    with pytest.raises(DuplicateFormulaError, match="METHOD_FLOPs_MAPPING"):
        register_method("view")(_mine)
    with pytest.raises(DuplicateFormulaError, match="MODULE_FLOPs_MAPPING"):
        register_module(nn.Linear)(_mine)
    assert issubclass(DuplicateFormulaError, ValueError)


def test_override_replaces(clean_tables: None) -> None:
    assert register_function("add", override=True)(_mine) is _mine  # the decorator returns the function
    assert FUNCTION_FLOPs_MAPPING["add"] is _mine
    register_module(nn.Linear, override=True)(_mine)
    assert MODULE_FLOPs_MAPPING["Linear"] is _mine  # a class is keyed by its name


def test_registering_the_same_function_again_is_allowed(clean_tables: None) -> None:
    register_function("my_new_op", "my_other_op")(_mine)
    register_function("my_new_op")(_mine)  # same object: not a conflict
    assert FUNCTION_FLOPs_MAPPING["my_new_op"] is FUNCTION_FLOPs_MAPPING["my_other_op"] is _mine


def test_register_keys_from_callables(clean_tables: None) -> None:
    def my_function() -> None: ...

    register_function(my_function)(_mine)
    assert FUNCTION_FLOPs_MAPPING["my_function"] is _mine
    with pytest.raises(TypeError, match="table key"):
        register_function(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one key"):
        register_method()


def test_register_aten_keys_by_overload_packet(clean_tables: None) -> None:
    ATEN_FLOPs_MAPPING.pop(torch.ops.aten.mm, None)
    register_aten(torch.ops.aten.mm.default)(_mine)
    assert ATEN_FLOPs_MAPPING[torch.ops.aten.mm] is _mine
    with pytest.raises(DuplicateFormulaError):
        register_aten(torch.ops.aten.mm)(zero_flops)
    register_aten(torch.ops.aten.mm, override=True)(zero_flops)
    assert ATEN_FLOPs_MAPPING[torch.ops.aten.mm] is zero_flops


def test_restore_fixture_left_tables_intact() -> None:
    # runs after the registry tests (file order): the originals are back
    assert FUNCTION_FLOPs_MAPPING["add"] is not _mine
    assert MODULE_FLOPs_MAPPING["Linear"] is not _mine
    assert "my_new_op" not in FUNCTION_FLOPs_MAPPING
    assert formulas.FUNCTION_FLOPs_MAPPING is FUNCTION_FLOPs_MAPPING  # the same dict objects, mutated back
