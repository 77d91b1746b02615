"""Hand-derived FLOPs of the loss family (torch_flops/formulas/loss.py), through the module, the
functional and the aten front doors, and in a model."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_flops import FORMULAS, TorchFLOPsByFX

aten = torch.ops.aten
R, C = 4, 5  # rows, classes: a (4, 5) input has N = 20 elements


def _x() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(R, C)


def _module(loss: nn.Module, *inputs: torch.Tensor) -> int:
    formula = FORMULAS.resolve_module(type(loss))
    assert formula is not None
    return int(formula(loss, loss(*inputs), *inputs))  # type: ignore[arg-type]


def _function(fn: Any, *args: Any, **kwargs: Any) -> int:
    formula = FORMULAS.resolve_function(fn)
    assert formula is not None, fn
    return int(formula(None, fn(*args, **kwargs), *args, **kwargs))  # type: ignore[arg-type]


def _aten(op: Any, *args: Any) -> int:
    formula = FORMULAS.resolve_aten(op)
    assert formula is not None, op
    return int(formula(None, op(*args), *args))  # type: ignore[arg-type]


def test_regression_losses() -> None:
    x, y = _x(), torch.randn(R, C)
    # MSE: 2 per element (sub, square) = 40, mean: 20 adds + 1 divide = 21
    assert _module(nn.MSELoss(), x, y) == _function(F.mse_loss, x, y) == 40 + 21
    assert _function(F.mse_loss, x, y, reduction="sum") == 40 + 20
    assert _function(F.mse_loss, x, y, reduction="none") == 40
    assert _aten(aten.mse_loss.default, x, y, 2) == 40 + 20  # aten reduction 2 = sum
    # L1: 2 per element (sub, abs)
    assert _module(nn.L1Loss(reduction="sum"), x, y) == 40 + 20
    # SmoothL1 / Huber: 6 per element
    assert _module(nn.SmoothL1Loss(), x, y) == _module(nn.HuberLoss(delta=0.5), x, y) == 120 + 21
    assert _aten(aten.huber_loss.default, x, y, 0, 1.0) == 120
    # Gaussian NLL (var per element): 7 per element (+1 with full)
    var = torch.rand(R, C) + 0.1
    assert _module(nn.GaussianNLLLoss(), x, y, var) == 140 + 21
    assert _function(F.gaussian_nll_loss, x, y, var, full=True) == 160 + 21
    # Poisson NLL: 3 per element with log_input, 4 without, +7 with full
    assert _module(nn.PoissonNLLLoss(), x, y.abs()) == 60 + 21
    assert _function(F.poisson_nll_loss, x.abs(), y.abs(), log_input=False, full=True) == 80 + 140 + 21


def test_binary_losses() -> None:
    p, t = torch.rand(R, C).clamp(0.05, 0.95), torch.randint(0, 2, (R, C)).float()
    # BCE: 8 per element = 160 (+20 with weight); mean 21
    assert _module(nn.BCELoss(), p, t) == _function(F.binary_cross_entropy, p, t) == 160 + 21
    assert _module(nn.BCELoss(weight=torch.ones(C)), p, t) == 180 + 21
    # BCE with logits: 6 per element = 120; pos_weight +3 (60); weight +1 (20)
    x = _x()
    assert _module(nn.BCEWithLogitsLoss(), x, t) == 120 + 21
    assert _function(F.binary_cross_entropy_with_logits, x, t, pos_weight=torch.ones(C), reduction="sum") == \
        180 + 20
    assert _aten(aten.binary_cross_entropy_with_logits.default, x, t, torch.ones(C), None, 1) == 140 + 21
    # soft margin: 4 per element; multi-label soft margin: 13 per element + a mean per row (4)
    assert _module(nn.SoftMarginLoss(), x, t * 2 - 1) == 80 + 21
    assert _module(nn.MultiLabelSoftMarginLoss(), x, t) == 260 + 4 + 5  # rows reduced: 4 adds + 1 divide


def test_class_indexed_losses() -> None:
    x, y = _x(), torch.tensor([0, 3, 4, 1])
    logp = F.log_softmax(x, -1)
    # NLL: 2 per target (negate, ignore_index compare) = 8, mean over 4 targets: 4 + 1 = 5
    assert _module(nn.NLLLoss(), logp, y) == _function(F.nll_loss, logp, y) == 8 + 5
    # weighted: + 1 per target (4), and the weighted mean also sums the 4 weights
    assert _module(nn.NLLLoss(weight=torch.ones(C)), logp, y) == 12 + 5 + 4
    assert _aten(aten.nll_loss_forward.default, logp, y, None, 2, -100) == 8 + 4  # sum
    # cross entropy: log-softmax 5 x 20 = 100, + NLL 13
    assert _module(nn.CrossEntropyLoss(), x, y) == _function(F.cross_entropy, x, y) == 100 + 13
    # label smoothing 0.1: + the class sum (20) + mixing 3 per target (12)
    assert _module(nn.CrossEntropyLoss(label_smoothing=0.1), x, y) == 100 + 13 + 20 + 12
    assert _aten(aten.cross_entropy_loss.default, x, y, None, 1, -100, 0.1) == 100 + 13 + 20 + 12
    # probability targets: 100 + y*log p summed (2 x 20) + mean over the 4 rows (4 + 1)
    probs = torch.softmax(torch.randn(R, C), -1)
    assert _function(F.cross_entropy, x, probs) == 100 + 40 + 5
    # multi margin (p = 1): 3 per element + the class sum 20 + a divide per row 4 + mean over rows 5
    assert _module(nn.MultiMarginLoss(), x, y) == 60 + 20 + 4 + 5
    assert _module(nn.MultiMarginLoss(p=2, weight=torch.ones(C)), x, y) == 100 + 20 + 4 + 5


def test_embedding_and_distribution_losses() -> None:
    a, b, target = _x(), torch.randn(R, C), torch.tensor([1.0, -1.0, 1.0, -1.0])
    # KL divergence: 3 per element = 60; batchmean: 20 adds + 1 divide
    logq, p = F.log_softmax(a, -1), torch.softmax(b, -1)
    assert _module(nn.KLDivLoss(reduction="batchmean"), logq, p) == 60 + 21
    assert _aten(aten.kl_div.default, logq, p, 0) == 60  # reduction 0 = none
    # margin ranking on (4,): 4 per element + mean 5; hinge embedding: 3 per element
    s1, s2 = a[:, 0], b[:, 0]
    assert _module(nn.MarginRankingLoss(), s1, s2, target) == 16 + 5
    assert _module(nn.HingeEmbeddingLoss(), s1, target) == 12 + 5
    # cosine embedding, rows 4 of D = 5: 4 x (6*5 + 6) = 144 + mean 5
    assert _module(nn.CosineEmbeddingLoss(), a, b, target) == 144 + 5
    # triplet margin: 4 x (2 x (4*5 + 1) + 3) = 180 + mean 5; swap: 4 x (3 x 21 + 1 + 3) = 268
    c = torch.randn(R, C)
    assert _module(nn.TripletMarginLoss(), a, b, c) == 180 + 5
    assert _function(F.triplet_margin_loss, a, b, c, swap=True) == 268 + 5


def test_losses_in_a_model_on_both_front_ends() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, C)
            self.ce = nn.CrossEntropyLoss()

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            z = self.fc(x)
            return self.ce(z, y) + F.mse_loss(z, torch.zeros_like(z))

    x, y = torch.randn(R, 8), torch.tensor([0, 3, 4, 1])
    for tracer in ("fx", "export"):
        counter = TorchFLOPsByFX(Net(), tracer=tracer)  # type: ignore[arg-type]
        counter.propagate(x, y)
        assert counter.unsupported == {}, tracer
        # Linear(8, 5) on (4, 8): 160 MACs, 320 + 20 bias = 340; CE 113 (above); MSE 61; the add 1
        assert counter.total_flops == 340 + 113 + 61 + 1, tracer


@pytest.mark.parametrize("loss", [nn.CTCLoss(), nn.MultiLabelMarginLoss()])
def test_losses_that_depend_on_target_values_have_no_formula(loss: nn.Module) -> None:
    assert FORMULAS.resolve_module(type(loss)) is None
