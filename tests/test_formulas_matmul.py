"""Hand-derived FLOPs/MACs of the linear and matmul family (torch_flops/formulas/matmul.py), and
``2 * macs == FlopCounterMode`` on meta tensors wherever FlopCounterMode counts the op."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX
from torch_flops.formulas import FORMULAS, FUNCTION_FLOPs_MAPPING, METHOD_FLOPs_MAPPING, MODULE_FLOPs_MAPPING

FAST = settings(max_examples=25, deadline=None, database=None)


def _randn(*shape: int) -> torch.Tensor:
    torch.manual_seed(len(shape) + sum(shape))
    return torch.randn(shape)


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def _counted(fn: Any, *args: Any, **kwargs: Any) -> int:
    """FLOPs that FlopCounterMode records for one call (2 per MAC, bias adds excluded)."""
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


def _fn(name: str, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    result = FUNCTION_FLOPs_MAPPING[name](out, *args, **kwargs)
    assert isinstance(result, tuple)  # this family always returns (flops, macs)
    return result


# --------------------------------------------------------------------------- #
# linear
# --------------------------------------------------------------------------- #

def test_linear_function_with_and_without_bias() -> None:
    x, w, b = _randn(2, 3, 4), _randn(5, 4), _randn(5)
    out = F.linear(x, w, b)  # (2, 3, 5): 30 outputs
    # macs = 30 outputs * 4 in_features = 120; flops = 2*120 + 30 bias adds = 270
    assert _fn("linear", out, x, w, b) == (270, 120)
    out = F.linear(x, w)
    assert _fn("linear", out, x, w) == (240, 120)  # 2*120, no bias
    assert _fn("linear", out, x, w, None) == (240, 120)
    assert _counted(F.linear, _meta(2, 3, 4), _meta(5, 4), _meta(5)) == 240  # = 2 * macs


@pytest.mark.parametrize("bias", [True, False])
def test_linear_module(bias: bool) -> None:
    m = nn.Linear(4, 5, bias=bias)
    x = _randn(2, 3, 4)
    out = m(x)
    # 30 outputs * 4 = 120 macs; + 30 bias adds when bias
    assert MODULE_FLOPs_MAPPING["Linear"](m, out, x) == (240 + (30 if bias else 0), 120)
    with torch.device("meta"):
        mm = nn.Linear(4, 5, bias=bias)
    assert _counted(mm, _meta(2, 3, 4)) == 240


def test_linear_aliases_share_the_formula() -> None:
    f = MODULE_FLOPs_MAPPING["Linear"]
    assert MODULE_FLOPs_MAPPING["NonDynamicallyQuantizableLinear"] is f
    assert MODULE_FLOPs_MAPPING["LazyLinear"] is f


# --------------------------------------------------------------------------- #
# bilinear: counted here, 0 in FlopCounterMode (documented difference)
# --------------------------------------------------------------------------- #

def test_bilinear_function_and_module() -> None:
    x1, x2, w, b = _randn(2, 3), _randn(2, 4), _randn(5, 3, 4), _randn(5)
    out = F.bilinear(x1, x2, w, b)  # (2, 5): 10 outputs
    # per output: W_k x2 = 3*4 = 12 MACs, then dot with x1 = 3 MACs -> 15; 10 * 15 = 150 macs
    # flops = 2*150 + 10 bias adds = 310
    assert _fn("bilinear", out, x1, x2, w, b) == (310, 150)
    assert _fn("bilinear", F.bilinear(x1, x2, w), x1, x2, w) == (300, 150)
    m = nn.Bilinear(3, 4, 5)
    assert MODULE_FLOPs_MAPPING["Bilinear"](m, m(x1, x2), x1, x2) == (310, 150)
    # documented difference: FlopCounterMode counts aten._trilinear as 0
    assert _counted(F.bilinear, _meta(2, 3), _meta(2, 4), _meta(5, 3, 4), _meta(5)) == 0


# --------------------------------------------------------------------------- #
# mm / bmm / matmul / mv / dot
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize(
    ("name", "a", "b", "macs"),
    [
        ("mm", (3, 4), (4, 5), 60),  # 3*4*5
        ("bmm", (2, 3, 4), (2, 4, 5), 120),  # 2 * 3*4*5
        ("matmul", (3, 4), (4, 5), 60),
        ("matmul", (2, 1, 3, 4), (5, 4, 6), 720),  # batch (2,5) = 10 * 3*4*6
        ("matmul", (4,), (2, 4, 5), 40),  # (1,4) @ (2,4,5): 2 * 1*4*5
        ("matmul", (4,), (4, 5), 20),  # vector @ matrix: 1*4*5
    ],
)
def test_matmul_family_counted_by_flop_counter(name: str, a: tuple[int, ...], b: tuple[int, ...],
                                               macs: int) -> None:
    x, y = _randn(*a), _randn(*b)
    fn = getattr(torch, name)
    assert _fn(name, fn(x, y), x, y) == (2 * macs, macs)
    assert METHOD_FLOPs_MAPPING[name](x, getattr(x, name)(y), y) == (2 * macs, macs)
    assert _counted(fn, _meta(*a), _meta(*b)) == 2 * macs


def test_operator_matmul_and_dunder() -> None:
    x, y = _randn(2, 3, 4), _randn(4, 5)
    out = x @ y
    assert _fn(operator.matmul.__name__, out, x, y) == (240, 120)  # "matmul": 2 * 3*4*5 = 120
    assert METHOD_FLOPs_MAPPING["__matmul__"](x, out, y) == (240, 120)


def test_rmatmul_method_counts_other_at_self() -> None:
    x, y = _randn(3, 4), _randn(2, 3)
    out = x.__rmatmul__(y)  # y @ x: (2,3) @ (3,4) -> (2,4)
    assert out.shape == (2, 4)
    assert METHOD_FLOPs_MAPPING["__rmatmul__"](x, out, y) == (48, 24)  # 2*3*4 = 24 macs


def test_mv_and_dot_documented_difference() -> None:
    a, v, w = _randn(3, 4), _randn(4), _randn(4)
    # mv: 3 rows * 4 = 12 MACs; dot / inner / vdot of vectors: 4 MACs
    assert _fn("mv", torch.mv(a, v), a, v) == (24, 12)
    assert _fn("matmul", a @ v, a, v) == (24, 12)
    assert _fn("dot", torch.dot(v, w), v, w) == (8, 4)
    assert _fn("inner", torch.inner(v, w), v, w) == (8, 4)
    assert _fn("vdot", torch.vdot(v, w), v, w) == (8, 4)
    assert METHOD_FLOPs_MAPPING["dot"](v, v.dot(w), w) == (8, 4)
    # FlopCounterMode has no formula for aten.mv / aten.dot: 0 where we count the MACs
    assert _counted(torch.mv, _meta(3, 4), _meta(4)) == 0
    assert _counted(torch.dot, _meta(4), _meta(4)) == 0
    assert _counted(torch.matmul, _meta(3, 4), _meta(4)) == 0  # matrix @ vector dispatches to mv
    assert _counted(torch.matmul, _meta(2, 3, 4), _meta(4)) == 0  # folded to (6,4) mv


def test_inner_of_matrices() -> None:
    a, b = _randn(2, 3, 4), _randn(5, 4)
    out = torch.inner(a, b)  # (2, 3, 5): 30 outputs, each a dot of 4
    assert out.shape == (2, 3, 5)
    assert _counted(torch.inner, _meta(2, 3, 4), _meta(5, 4)) == 240  # 2 * 30*4
    assert _fn("inner", out, a, b) == (240, 120)


def test_outer() -> None:
    a, b = _randn(3), _randn(4)
    out = torch.outer(a, b)
    assert _fn("outer", out, a, b) == (12, 0)  # 3*4 multiplies, nothing summed
    assert _fn("ger", torch.ger(a, b), a, b) == (12, 0)
    assert METHOD_FLOPs_MAPPING["outer"](a, a.outer(b), b) == (12, 0)
    assert _counted(torch.outer, _meta(3), _meta(4)) == 0


# --------------------------------------------------------------------------- #
# addmm / addmv / baddbmm / addbmm with beta and alpha
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize(
    ("kwargs", "flops"),
    [
        ({}, 135),  # 2*60 + 15 adds
        ({"beta": 2}, 150),  # + 15 beta multiplies
        ({"alpha": 0.5}, 150),  # + 15 alpha multiplies
        ({"beta": 2, "alpha": 3}, 165),  # 120 + 15 + 15 + 15
        ({"beta": 0}, 120),  # input ignored: the product only
        ({"beta": 0, "alpha": 2}, 135),  # the product scaled: 120 + 15
        ({"beta": 1, "alpha": 1}, 135),
    ],
)
def test_addmm_beta_alpha(kwargs: dict[str, Any], flops: int) -> None:
    inp, a, b = _randn(3, 5), _randn(3, 4), _randn(4, 5)
    out = torch.addmm(inp, a, b, **kwargs)  # (3, 5): 15 outputs; a @ b is 3*4*5 = 60 MACs
    assert _fn("addmm", out, inp, a, b, **kwargs) == (flops, 60)
    assert METHOD_FLOPs_MAPPING["addmm"](inp, inp.addmm(a, b, **kwargs), a, b, **kwargs) == (flops, 60)


def test_addmm_flop_counter_counts_the_product_only() -> None:
    assert _counted(torch.addmm, _meta(3, 5), _meta(3, 4), _meta(4, 5), beta=2, alpha=3) == 120  # 2*60


def test_baddbmm() -> None:
    inp, a, b = _randn(2, 3, 5), _randn(2, 3, 4), _randn(2, 4, 5)
    out = torch.baddbmm(inp, a, b)  # (2, 3, 5): 30 outputs; 2 * 3*4*5 = 120 MACs
    assert _fn("baddbmm", out, inp, a, b) == (270, 120)  # 2*120 + 30 adds
    out = torch.baddbmm(inp, a, b, beta=0.5, alpha=2)
    assert _fn("baddbmm", out, inp, a, b, beta=0.5, alpha=2) == (330, 120)  # 240 + 30*3
    # broadcast input (5,) is added to every one of the 30 outputs
    inp1 = _randn(5)
    assert _fn("baddbmm", torch.baddbmm(inp1, a, b), inp1, a, b) == (270, 120)
    assert _counted(torch.baddbmm, _meta(2, 3, 5), _meta(2, 3, 4), _meta(2, 4, 5)) == 240


def test_addmv_and_addbmm() -> None:
    inp, a, v = _randn(3), _randn(3, 4), _randn(4)
    out = torch.addmv(inp, a, v)  # (3,): 3*4 = 12 MACs + 3 adds
    assert _fn("addmv", out, inp, a, v) == (27, 12)
    inp, a, b = _randn(3, 5), _randn(2, 3, 4), _randn(2, 4, 5)
    out = torch.addbmm(inp, a, b)  # (3, 5): 2 * 3*4*5 = 120 MACs (batch sum is accumulation) + 15 adds
    assert _fn("addbmm", out, inp, a, b) == (255, 120)
    assert METHOD_FLOPs_MAPPING["addbmm"](inp, inp.addbmm(a, b), a, b) == (255, 120)


# --------------------------------------------------------------------------- #
# einsum
# --------------------------------------------------------------------------- #

def test_einsum_contraction_and_list_form() -> None:
    a, b = _randn(2, 3, 4), _randn(2, 4, 5)
    out = torch.einsum("bij,bjk->bik", a, b)
    assert _fn("einsum", out, "bij,bjk->bik", a, b) == (240, 120)  # 2*3*4*5 = 120 MACs
    out = torch.einsum("bij,bjk->bik", [a, b])  # operands passed as one list
    assert _fn("einsum", out, "bij,bjk->bik", [a, b]) == (240, 120)
    with torch.backends.opt_einsum.flags(enabled=False):
        assert _counted(torch.einsum, "bij,bjk->bik", _meta(2, 3, 4), _meta(2, 4, 5)) == 240


def test_einsum_outer_product_documented_difference() -> None:
    a, b = _randn(3), _randn(4)
    out = torch.einsum("i,j->ij", a, b)
    assert _fn("einsum", out, "i,j->ij", a, b) == (12, 0)  # 12 multiplies, no MACs
    with torch.backends.opt_einsum.flags(enabled=False):
        assert _counted(torch.einsum, "i,j->ij", _meta(3), _meta(4)) == 0  # a mul, not counted


def test_einsum_lone_index_summed_first() -> None:
    a, b = _randn(3, 4), _randn(4, 5)
    out = torch.einsum("ij,jk->i", a, b)  # k is summed out of b first: 4*5 = 20 adds; then 3*4 MACs
    assert _fn("einsum", out, "ij,jk->i", a, b) == (44, 12)  # 2*12 + 20


def test_einsum_single_operand_sum() -> None:
    a = _randn(3, 4)
    assert _fn("einsum", torch.einsum("ij->i", a), "ij->i", a) == (12, 0)  # one add per element
    assert _fn("einsum", torch.einsum("ij->", a), "ij->", a) == (12, 0)


def test_einsum_single_operand_permutation_is_free() -> None:
    a = _randn(3, 4)
    assert _fn("einsum", torch.einsum("ij->ji", a), "ij->ji", a) == (0, 0)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_einsum_with_an_empty_operand_does_no_arithmetic(device: str) -> None:
    def run(equation: str, *shapes: tuple[int, ...]) -> tuple[int, int]:
        operands = [torch.zeros(s, device=device) for s in shapes]
        flops, macs = _fn("einsum", torch.einsum(equation, *operands), equation, *operands)
        with torch.backends.opt_einsum.flags(enabled=False):
            assert _counted(torch.einsum, equation, *operands) == 2 * macs  # FlopCounterMode agrees
        return flops, macs

    # (0, 4) x (4, 2): 0 output rows x 2 columns x 4 terms = 0 MACs (a size-0 i is no size-1 i)
    assert run("ij,jk->ik", (0, 4), (4, 2)) == (0, 0)
    assert run("ij,jk->ik", (3, 4), (4, 0)) == (0, 0)  # 3 x 0 outputs
    assert run("ij,jk->ik", (3, 0), (0, 2)) == (0, 0)  # K = 0: the (3, 2) output is zeros, no product
    assert run("bij,bjk->bik", (0, 3, 4), (1, 4, 2)) == (0, 0)  # b: 0 against a broadcast 1
    assert run("i,j->ij", (0,), (3,)) == (0, 0)  # an empty outer product: 0 multiplies
    # three operands, left to right: (3,0)x(0,2) is nothing, then (3,2)x(2,5) = 3*2*5 = 30 MACs
    assert run("ij,jk,kl->il", (3, 0), (0, 2), (2, 5)) == (60, 30)
    # (3,4)x(4,2) = 24 MACs, then (3,2)x(2,0) is empty: 24 MACs
    assert run("ij,jk,kl->il", (3, 4), (4, 2), (2, 0)) == (48, 24)


LETTERS = "abcdef"


@st.composite
def _einsum_case(draw: st.DrawFn) -> tuple[str, list[tuple[int, ...]]]:
    sizes = {c: draw(st.integers(2, 4)) for c in LETTERS}
    n_ops = draw(st.integers(2, 3))
    terms = []
    for _ in range(n_ops):
        term = draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=3, unique=True))
        terms.append("".join(term))
    used = sorted(set("".join(terms)))
    out = draw(st.lists(st.sampled_from(used), max_size=3, unique=True))
    equation = ",".join(terms) + "->" + "".join(out)
    return equation, [tuple(sizes[c] for c in t) for t in terms]


@FAST
@given(_einsum_case())
def test_einsum_matches_flop_counter(case: tuple[str, list[tuple[int, ...]]]) -> None:
    equation, shapes = case
    operands = [_meta(*s) for s in shapes]
    out = torch.einsum(equation, *operands)
    flops, macs = _fn("einsum", out, equation, *operands)
    assert flops >= 2 * macs
    with torch.backends.opt_einsum.flags(enabled=False):  # torch contracts left to right, as we do
        assert _counted(torch.einsum, equation, *operands) == 2 * macs


# --------------------------------------------------------------------------- #
# matmul broadcasting, property-based
# --------------------------------------------------------------------------- #

@st.composite
def _matmul_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    # k >= 2: with k == 1 torch may compute a vector @ batch as a broadcast multiply (no bmm),
    # which FlopCounterMode does not count
    m, k, n = draw(st.integers(1, 4)), draw(st.integers(2, 4)), draw(st.integers(1, 4))

    def operand(core: tuple[int, ...], vector: bool) -> tuple[int, ...]:
        if vector:
            return core
        keep = draw(st.integers(0, len(batch)))
        lead = [1 if draw(st.booleans()) else d for d in batch[len(batch) - keep:]]
        return (*lead, *core)

    a_vec, b_vec = draw(st.booleans()), draw(st.booleans())
    a = operand((k,), True) if a_vec else operand((m, k), False)
    b = operand((k,), True) if b_vec else operand((k, n), False)
    return a, b


@FAST
@given(_matmul_shapes())
def test_matmul_broadcasting_matches_flop_counter(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a_shape, b_shape = shapes
    a, b = _meta(*a_shape), _meta(*b_shape)
    out = torch.matmul(a, b)
    flops, macs = _fn("matmul", out, a, b)
    assert flops == 2 * macs
    counted = _counted(torch.matmul, a, b)
    if len(b_shape) == 1:
        # documented difference: a matrix (or batch folded into one) times a vector is aten.mv,
        # a vector times a vector aten.dot; FlopCounterMode counts 0, we count every MAC
        assert counted == 0
        assert macs == a.numel()  # each element of a meets one element of b once
    else:
        assert counted == 2 * macs


# --------------------------------------------------------------------------- out=, keywords, fp8/int8, complex


class _OutArgs(nn.Module):
    """Ops called with out= (and keyword operands): the out tensor is the node's output."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = a.new_empty((3, 5))  # made from an input, so that fx records it (torch.empty would be a constant)
        torch.mm(a, b, out=c)
        d = a.new_empty((3, 5))
        torch.matmul(input=a, other=b, out=d)
        e = a.new_empty((3, 5))
        torch.add(c, d, out=e)
        return e


def test_out_keyword_never_reaches_a_formula() -> None:
    counter = TorchFLOPsByFX(_OutArgs())
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    out = counter.propagate(a, b)
    assert torch.allclose(out, 2 * (a @ b))
    assert counter.unsupported == {}
    rec = {r.name: r for r in counter.records}
    # mm and matmul: 3*4*5 = 60 MACs, 120 FLOPs each; the add: 15
    assert (rec["mm"].macs, rec["mm"].flops, rec["matmul"].macs, rec["add"].flops) == (60, 120, 60, 15)


def test_scaled_and_int_matmuls_against_flop_counter() -> None:
    class Fp8(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
            return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)

    fp8 = torch.float8_e4m3fn
    a = torch.empty(16, 32, dtype=fp8, device="meta")
    b = torch.empty(64, 32, dtype=fp8, device="meta").t()
    scale = torch.empty((), device="meta")
    counter = TorchFLOPsByFX(Fp8())
    counter.propagate(a, b, scale, scale)
    with FlopCounterMode(display=False) as mode:
        torch._scaled_mm(a, b, scale, scale, out_dtype=torch.bfloat16)
    # 16*32*64 = 32768 MACs; FLOPs 2*32768 + 2 scale multiplies per output (16*64 = 1024)
    assert counter.total_macs == 32768 and 2 * counter.total_macs == mode.get_total_flops()
    assert counter.total_flops == 65536 + 2048
    assert counter.records[-2].dtype == "float8_e4m3fn"  # it computes in fp8 (and writes bfloat16)

    ai, bi = torch.randint(-5, 5, (32, 64), dtype=torch.int8), torch.randint(-5, 5, (64, 32), dtype=torch.int8)
    formula = FORMULAS.resolve_function(torch._int_mm)
    count = formula(None, torch._int_mm(ai, bi), ai, bi)  # type: ignore[misc]
    # 32*64*32 = 65536 MACs into 32*32 outputs; FlopCounterMode counts _int_mm as 0
    assert count == (2 * 65536, 65536, 1024, 0)
    assert FORMULAS.resolve_aten(torch.ops.aten._scaled_grouped_mm.default) is not None


@pytest.mark.filterwarnings("ignore:Complex modules")
def test_complex_matmul_counts_real_operations() -> None:
    a, b = torch.randn(3, 4, dtype=torch.complex64), torch.randn(4, 5, dtype=torch.complex64)
    # 3*4*5 = 60 complex MACs = 240 real MACs (4 real multiplies and 4 real adds each)
    assert _fn("mm", a @ b, a, b) == (480, 240)
    lin = nn.Linear(4, 5).to(torch.complex64)
    # Linear on (3, 4): 60 complex MACs = 240 real; the bias adds 15 complex adds = 30 real FLOPs
    assert MODULE_FLOPs_MAPPING["Linear"](lin, lin(a), a) == (480 + 30, 240)
    # einsum: the same 60 complex MACs
    assert _fn("einsum", torch.einsum("ij,jk->ik", a, b), "ij,jk->ik", a, b) == (480, 240)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_vector_times_a_batch_in_flop_counter_mode_s_kernels(requires_grad: bool) -> None:
    # (4,) @ (2, 4, 5): 2 * 4 * 5 MACs = 80 FLOPs; torch runs a bmm, but an mv when the vector requires
    # grad (it folds the batch), which FlopCounterMode counts 0; the torch_flops count is the same 80
    class MatMul(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.matmul(a, b)

    a, b = torch.randn(4, requires_grad=requires_grad), torch.randn(2, 4, 5)
    with FlopCounterMode(display=False) as reference:
        MatMul()(a, b)
    counter = TorchFLOPsByFX(MatMul())
    counter.propagate(a, b)
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops() \
        == (0 if requires_grad else 80)
    assert counter.profile.total_flops == 80


_BATCHES = {
    # (2, 3, 4) three ways: batch dims that view as one (folded: one mv, 0 in FlopCounterMode's
    # table) or not (broadcast into a bmm: 2 * 2*3*4 = 48 FLOPs)
    "contiguous": lambda: torch.randn(2, 3, 4),
    "last two transposed": lambda: torch.randn(2, 4, 3).mT,  # strides (12, 1, 3): 12 != 1 * 3
    "every other batch": lambda: torch.randn(4, 3, 4)[::2],  # strides (24, 4, 1): 24 != 4 * 3
}


@pytest.mark.parametrize("layout", list(_BATCHES))
@pytest.mark.parametrize("side", ["batch @ vector", "vector @ batch"])
def test_a_batch_and_a_vector_count_the_kernel_torch_chooses_by_strides(layout: str, side: str) -> None:
    # ATen's matmul folds a batch with a vector into one mv when the batch's leading dimensions view
    # as one without a copy; a batch on the right is read transposed (so a contiguous (2, 4, 3) there
    # runs a bmm): it is given as batch.mT, folded when batch is. Either way 2*3*4 = 24 MACs = 48
    # FLOPs of real work.
    class MatMul(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.matmul(a, b)

    batch = _BATCHES[layout]()
    args = (batch, torch.randn(4)) if side == "batch @ vector" else (torch.randn(4), batch.mT)
    with FlopCounterMode(display=False) as reference:
        MatMul()(*args)
    counter = TorchFLOPsByFX(MatMul())
    counter.propagate(*args)
    folded = layout == "contiguous"
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops() \
        == (0 if folded else 48)
    assert counter.profile.total_flops == 48


def test_in_place_addmm_is_work_flop_counter_mode_does_not_count() -> None:
    # c.addmm_(a, b), (4, 6) + (4, 5) @ (5, 6): 2 * 4*5*6 = 240 FLOPs + 24 adds of c in torch_flops'
    # count; FlopCounterMode's table has aten.addmm, not aten.addmm_: 0
    class InPlace(nn.Module):
        def forward(self, c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return c.clone().addmm_(a, b)

    args = (torch.randn(4, 6), torch.randn(4, 5), torch.randn(5, 6))
    with FlopCounterMode(display=False) as reference:
        InPlace()(*args)
    counter = TorchFLOPsByFX(InPlace())
    counter.propagate(*args)
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops() == 0
    assert counter.profile.total_flops == 240 + 24
