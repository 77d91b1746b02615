"""Shape-only helpers of torch_flops/formulas/_shapes.py, by hand and against brute force."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from torch_flops.formulas._shapes import (
    adaptive_window_total,
    arg,
    as_tuple,
    conv_macs,
    einsum_macs,
    float_numel,
    is_float,
    matmul_macs,
    numel,
    sdpa_macs,
)

FAST = settings(max_examples=25, deadline=None, database=None)


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def _counted(fn, *args, **kwargs) -> int:
    """FLOPs that FlopCounterMode records for one call (2 per MAC)."""
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


# --------------------------------------------------------------------------- #
# small helpers
# --------------------------------------------------------------------------- #

def test_arg_binds_positional_then_keyword_then_default() -> None:
    assert arg((1, 2), {}, 1, "b") == 2
    assert arg((1,), {"b": 5}, 1, "b") == 5
    assert arg((1,), {}, 1, "b", "dflt") == "dflt"


def test_as_tuple() -> None:
    assert as_tuple(3, 2) == (3, 3)
    assert as_tuple([2, 4], 2) == (2, 4)
    assert as_tuple((1, 2, 3), 3) == (1, 2, 3)


def test_float_numel_and_friends() -> None:
    f = torch.ones(2, 3)
    i = torch.ones(2, 3, dtype=torch.int64)
    b = torch.ones(2, 3, dtype=torch.bool)
    assert float_numel(f) == 6
    assert float_numel(i, i) == 0
    assert float_numel(b, f) == 6  # a comparison of floats: bool out, float input
    assert float_numel(b, i) == 0  # a comparison of ints
    assert float_numel(b, b) == 0  # mask logic
    assert float_numel(b, 0.5, f) == 6  # the first *tensor* input decides
    assert float_numel(3) == 0  # Python number from size arithmetic
    assert float_numel(torch.ones(2, dtype=torch.complex64)) == 2
    assert is_float(f) and not is_float(i) and not is_float(1.0)
    assert numel(f) == 6 and numel(None) == 0


# --------------------------------------------------------------------------- #
# matmul_macs
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((4,), (4,), 4),  # dot: (1,4)@(4,1) = 1*4*1
        ((3, 4), (4,), 12),  # mv: 3*4*1
        ((4,), (4, 5), 20),  # vm: 1*4*5
        ((2, 3, 4), (4,), 24),  # batched mv: 2 * 3*4*1
        ((4,), (2, 4, 5), 40),  # batched vm: 2 * 1*4*5
        ((3, 4), (4, 5), 60),  # mm: 3*4*5
        ((2, 3, 4), (2, 4, 5), 120),  # bmm: 2 * 60
        ((2, 1, 3, 4), (5, 4, 6), 720),  # batch (2,1) x (5,) -> (2,5): 10 * 3*4*6
        ((1, 3, 4), (7, 4, 2), 168),  # batch (1,) x (7,) -> 7: 7 * 3*4*2
    ],
)
def test_matmul_macs(a: tuple[int, ...], b: tuple[int, ...], expected: int) -> None:
    assert matmul_macs(a, b) == expected
    assert torch.matmul(_meta(*a), _meta(*b)) is not None  # the shapes are legal matmul operands


# --------------------------------------------------------------------------- #
# conv_macs
# --------------------------------------------------------------------------- #

def test_conv_macs_batched_and_unbatched() -> None:
    w = torch.empty(6, 2, 3, 3)  # C_out=6, C_in/groups=2 (groups=2, C_in=4), 3x3
    x = torch.empty(2, 4, 8, 8)
    out = F.conv2d(x, w, stride=2, padding=1, groups=2)  # (2, 6, 4, 4)
    assert out.shape == (2, 6, 4, 4)
    # N * prod(w) * prod(out spatial) = 2 * (6*2*3*3=108) * 16 = 3456
    assert conv_macs(x.shape, w.shape, out.shape, transposed=False) == 3456
    out1 = F.conv2d(x[0], w, stride=2, padding=1, groups=2)  # unbatched (6, 4, 4)
    assert conv_macs(x[0].shape, w.shape, out1.shape, transposed=False) == 1728  # 1 * 108 * 16


def test_conv_macs_transposed_uses_input_positions() -> None:
    w = torch.empty(4, 3, 3)  # C_in=4, C_out/groups=3 (groups=2 -> C_out=6), k=3
    x = torch.empty(2, 4, 5)
    out = F.conv_transpose1d(x, w, stride=2, groups=2)  # (2, 6, 11): (5-1)*2 + 3
    assert out.shape == (2, 6, 11)
    assert conv_macs(x.shape, w.shape, out.shape, transposed=True) == 360  # 2 * (4*3*3=36) * 5
    assert conv_macs(x[0].shape, w.shape, out[0].shape, transposed=True) == 180  # 1 * 36 * 5


# --------------------------------------------------------------------------- #
# sdpa_macs
# --------------------------------------------------------------------------- #

def test_sdpa_macs_grouped_query() -> None:
    # Q (2,8,5,4), K (2,2,7,4), V (2,2,7,6): scores = 2*8*5 * 7 = 560; macs = 560 * (4 + 6) = 5600
    assert sdpa_macs((2, 8, 5, 4), (2, 2, 7, 4), (2, 2, 7, 6)) == (5600, 560)
    # unbatched single head: scores = 5*7 = 35, macs = 35 * (3 + 2) = 175
    assert sdpa_macs((5, 3), (7, 3), (7, 2)) == (175, 35)


# --------------------------------------------------------------------------- #
# einsum_macs
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize(
    ("equation", "shapes", "expected"),
    [
        ("ij,jk->ik", [(3, 4), (4, 5)], (60, 0)),  # 3*4*5
        ("ij,jk", [(3, 4), (4, 5)], (60, 0)),  # implicit output 'ik': same contraction
        ("ij, jk -> ik", [(3, 4), (4, 5)], (60, 0)),  # spaces are ignored
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], (120, 0)),  # 2*3*4*5
        ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)], (720, 0)),  # batch (2,3): 6 * 4*5*6
        ("...ij,jk->...ik", [(2, 3, 4), (4, 5)], (120, 0)),  # 2*3*4*5
        ("i,j->ij", [(3,), (4,)], (0, 12)),  # outer product: 3*4 multiplies, no MACs
        ("ij,ij->ij", [(3, 4), (3, 4)], (0, 12)),  # Hadamard product: 12 multiplies
        ("ij,jk->i", [(3, 4), (4, 5)], (12, 20)),  # k summed out of (4,5) first: 20 adds; then 3*4
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], (64, 0)),  # 2*3*4 = 24, then 2*4*5 = 40
        ("ij->ji", [(3, 4)], (0, 0)),  # one operand: a transpose
    ],
)
def test_einsum_macs_by_hand(equation: str, shapes: list[tuple[int, ...]], expected: tuple[int, int]) -> None:
    assert einsum_macs(equation, shapes) == expected
    operands = [_meta(*s) for s in shapes]
    # every MAC is what torch itself contracts: 2 FLOPs each in FlopCounterMode
    with torch.backends.opt_einsum.flags(enabled=False):
        assert _counted(torch.einsum, equation, *operands) == 2 * expected[0]


def test_einsum_macs_implicit_output_keeps_ellipsis() -> None:
    # torch.einsum('i...,i', (3,4), (3,)) -> (4,): for each of 4 outputs a dot over i=3: 12 MACs
    a, b = _meta(3, 4), _meta(3)
    assert torch.einsum("i...,i", a, b).shape == (4,)
    with torch.backends.opt_einsum.flags(enabled=False):
        assert _counted(torch.einsum, "i...,i", a, b) == 24  # 2 * 12
    assert einsum_macs("i...,i", [(3, 4), (3,)]) == (12, 0)


# --------------------------------------------------------------------------- #
# adaptive_window_total
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize(
    ("in_size", "out_size", "expected"),
    [
        (8, 4, 8),  # divisible: 4 windows of 2
        (7, 3, 9),  # [0,3) [2,5) [4,7): 3 + 3 + 3
        (5, 2, 6),  # [0,3) [2,5): 3 + 3
        (3, 5, 7),  # upsampling: [0,1) [0,2) [1,2) [1,3) [2,3): 1+2+1+2+1
        (4, 1, 4),  # global pool
    ],
)
def test_adaptive_window_total_by_hand(in_size: int, out_size: int, expected: int) -> None:
    assert adaptive_window_total(in_size, out_size) == expected


def _brute_window_total(in_size: int, out_size: int) -> int:
    # Input cell j lies in window i iff [j, j+1) overlaps (i*I/O, (i+1)*I/O) in the scaled
    # coordinates: i*I < (j+1)*O and j*O < (i+1)*I.
    return sum(
        1
        for i in range(out_size)
        for j in range(in_size)
        if i * in_size < (j + 1) * out_size and j * out_size < (i + 1) * in_size
    )


def _torch_window_total(in_size: int, out_size: int) -> int:
    # ATen's own windows: pool one-hot rows, count the outputs each input reaches.
    one_hot = torch.eye(in_size).unsqueeze(0)  # (1, C=in_size, L=in_size)
    return int((F.adaptive_avg_pool1d(one_hot, out_size) != 0).sum())


@FAST
@given(st.integers(1, 24), st.integers(1, 24))
def test_adaptive_window_total_brute_force(in_size: int, out_size: int) -> None:
    total = adaptive_window_total(in_size, out_size)
    assert total == _brute_window_total(in_size, out_size)
    assert total == _torch_window_total(in_size, out_size)


@pytest.mark.parametrize(("equation", "a", "b", "expected"), [
    # j broadcasts (1 vs 3): torch sums B over j first (12 adds), then multiplies (2*4 = 8): no MACs
    ("ij,jk->ik", (2, 1), (3, 4), (0, 12 + 8)),
    # j is 1 in both: nothing to accumulate, a broadcast multiply of 2*4
    ("ij,jk->ik", (2, 1), (1, 4), (0, 8)),
    # j broadcasts (1 vs 4) and k (3) is a real contraction: B summed over j (4*3*5 = 60 adds),
    # then 2*3*5 = 30 MACs
    ("ijk,jkl->il", (2, 1, 3), (4, 3, 5), (30, 60)),
    # a broadcast batch is not a contraction: b = 5 rows of 2*3*4 = 120 MACs
    ("bij,bjk->bik", (1, 2, 3), (5, 3, 4), (120, 0)),
])
def test_einsum_contraction_that_broadcasts(equation: str, a: tuple[int, ...], b: tuple[int, ...],
                                           expected: tuple[int, int]) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    assert einsum_macs(equation, [a, b]) == expected
    with FlopCounterMode(display=False) as mode:
        torch.einsum(equation, torch.empty(a, device="meta"), torch.empty(b, device="meta"))
    assert mode.get_total_flops() == 2 * expected[0]  # FlopCounterMode sees the same matmuls
