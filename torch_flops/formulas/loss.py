"""FLOPs of the losses in ``torch.nn``: one cost function per loss serves its module, its
``torch.nn.functional`` form and its aten op (each front door keeps its options in its own
argument positions, listed next to it).

Per-element costs (``N`` = elements of the input, ``R`` = rows (samples) of a class-indexed
input, ``C`` = classes, ``D`` = the feature dim of a pairwise loss; transcendental = 1, as everywhere):

* MSE: sub, square = 2N. L1: sub, abs = 2N.
* SmoothL1 / Huber: sub, abs, compare, square, scale (quadratic branch), sub (linear branch) = 6N.
* BCE: log x, 1 - x, log(1 - x), 1 - y, two multiplies, add, negate = 8N (+N with ``weight``).
* BCE with logits: softplus(-x) (exp, add, log) 3, (1 - y) * x 2, add 1 = 6N (+3N with
  ``pos_weight``: (pos_weight - 1) * y + 1 scales the softplus term; +N with ``weight``).
* NLL on log-probabilities: per target element a negate and the ``ignore_index`` compare = 2R
  (+R with ``weight``; with ``weight`` a mean also sums the R weights).
* Cross entropy = log-softmax (5N, as activation.py) + NLL; with ``label_smoothing``: the sum of
  every class's -log p (N) and mixing the two terms (3R); with probability targets:
  y * log p summed over classes, 2N (+N with ``weight``) (+2N to smooth the targets).
* KL divergence: log y (or exp y for ``log_target``), sub, multiply = 3N.
* Soft margin: log(1 + exp(-y x)) = mul, exp, add, log = 4N.
* Multi-label soft margin: two log-sigmoids (4 each), 1 - y, two multiplies, add = 12N, the mean
  over classes N (+N with ``weight``).
* Margin ranking: sub, multiply by -y, add margin, max = 4N. Hinge embedding: sub, max, select =
  3N.
* Cosine embedding: per row the dot product and the two squared norms (2D each), the norms'
  product, square root and division (3), then ``1 - cos`` or ``max(0, cos - margin)`` and the
  select (3): 6D + 6.
* Triplet margin: two pairwise distances (sub, add eps, abs/pow, sum: 4D, and the root: 1),
  three with ``swap`` (+ a min), then sub, add margin, max (3): 8D + 5 (12D + 7 with swap).
* Multi margin: per element margin - x[y] + x[i] (2) and max (1) = 3N (+N for p = 2, +N with
  ``weight``), the sum over classes N and a divide per row R.
* Poisson NLL: exp(x) - y x = 3N (``log_input=False``: x - y log(x + eps) = 4N); ``full``
  (Stirling's term) +7N. Gaussian NLL: clamp var, log var, sub, square, divide, add, halve = 7N.

Then the reduction: ``"mean"`` adds the terms and divides once, ``"sum"`` adds them,
``"none"`` does neither (``"batchmean"``: the sum and one division). aten forms give the
reduction as an int (0 none, 1 mean, 2 sum). Losses are FLOPs only: no dot products, no MACs.
(CTC and multi-label margin losses depend on the targets' values and have no formula.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch.nn.functional as F
from torch import nn

from torch_flops.formulas import aten_ops, register
from torch_flops.formulas._shapes import arg, is_float, numel

__all__: list[str] = []

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduce(terms: int, reduction: Any) -> int:
    """FLOPs of reducing ``terms`` loss terms: mean = adds + 1 divide, sum = adds, none = 0."""
    reduction = _REDUCTIONS.get(reduction, reduction) if isinstance(reduction, int) else reduction
    if reduction in ("mean", "batchmean", "elementwise_mean"):
        return terms + 1
    if reduction == "sum":
        return terms
    return 0


Options = dict[str, Any]
Cost = Callable[[Any, tuple[Any, ...], Options], int]


def _loss(name: str, cost: Cost, tensors: int, module: type[nn.Module] | None,
          front_doors: Mapping[Any, Mapping[str, int]], defaults: Options) -> None:
    """Register one formula for a loss: its first ``tensors`` arguments are tensors (input,
    target, ...); ``front_doors`` maps each function/aten target to where it keeps each option
    (position among all the arguments); a module keeps them as attributes of the same names."""

    def options_of(module_: Any, target_positions: Mapping[str, int], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Options:
        if module_ is not None:
            return {k: getattr(module_, k, v) for k, v in defaults.items()}
        return {k: arg(args, kwargs, target_positions[k], k, v) if k in target_positions else kwargs.get(k, v)
                for k, v in defaults.items()}

    def make(positions: Mapping[str, int]) -> Callable[..., int]:
        def formula(module_: Any, out: Any, *args: Any, **kwargs: Any) -> int:
            inputs = tuple(args[:tensors])
            if not is_float(inputs[0]):
                return 0
            return cost(out, inputs, options_of(module_, positions, args, kwargs))

        formula.__name__ = formula.__qualname__ = f"{name}_flops"
        formula.__doc__ = cost.__doc__
        return formula

    if module is not None:
        register(module)(make({}))
    for target, positions in front_doors.items():
        register(*((target,) if not isinstance(target, str) else aten_ops(target)))(make(positions))


# ----------------------------------------------------------------------------- regression losses

def _mse(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """2 per element (sub, square) + the reduction."""
    return 2 * numel(t[0]) + _reduce(numel(t[0]), o["reduction"])


def _l1(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """2 per element (sub, abs) + the reduction."""
    return 2 * numel(t[0]) + _reduce(numel(t[0]), o["reduction"])


def _smooth_l1(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """6 per element (sub, abs, compare, square, scale, sub) + the reduction."""
    return 6 * numel(t[0]) + _reduce(numel(t[0]), o["reduction"])


_MEAN: Options = {"reduction": "mean"}
# F.mse_loss(input, target, size_average, reduce, reduction); aten.mse_loss(self, target, reduction)
_loss("mse_loss", _mse, 2, nn.MSELoss, {F.mse_loss: {"reduction": 4}, "mse_loss": {"reduction": 2}}, _MEAN)
_loss("l1_loss", _l1, 2, nn.L1Loss, {F.l1_loss: {"reduction": 4}, "l1_loss": {"reduction": 2}}, _MEAN)
# F.smooth_l1_loss(input, target, size_average, reduce, reduction, beta); aten (self, target, reduction, beta)
_loss("smooth_l1_loss", _smooth_l1, 2, nn.SmoothL1Loss,
      {F.smooth_l1_loss: {"reduction": 4}, "smooth_l1_loss": {"reduction": 2}}, _MEAN)
# F.huber_loss(input, target, reduction, delta); aten.huber_loss(self, target, reduction, delta)
_loss("huber_loss", _smooth_l1, 2, nn.HuberLoss, {F.huber_loss: {"reduction": 2}, "huber_loss": {"reduction": 2}},
      _MEAN)


def _gaussian_nll(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """7 per element (clamp var, log, sub, square, divide, add, halve) + the reduction."""
    return 7 * numel(t[0]) + (numel(t[0]) if o["full"] else 0) + _reduce(numel(t[0]), o["reduction"])


# F.gaussian_nll_loss(input, target, var, full=False, eps, reduction)
_loss("gaussian_nll_loss", _gaussian_nll, 3, nn.GaussianNLLLoss,
      {F.gaussian_nll_loss: {"full": 3, "reduction": 5}}, {"full": False, "reduction": "mean"})


def _poisson_nll(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """3 per element (exp, mul, sub), 4 without log_input; +7 with full; + the reduction."""
    n = numel(t[0])
    return (3 if o["log_input"] else 4) * n + (7 * n if o["full"] else 0) + _reduce(n, o["reduction"])


# F.poisson_nll_loss(input, target, log_input, full, size_average, eps, reduce, reduction);
# aten.poisson_nll_loss(input, target, log_input, full, eps, reduction)
_loss("poisson_nll_loss", _poisson_nll, 2, nn.PoissonNLLLoss,
      {F.poisson_nll_loss: {"log_input": 2, "full": 3, "reduction": 7},
       "poisson_nll_loss": {"log_input": 2, "full": 3, "reduction": 5}},
      {"log_input": True, "full": False, "reduction": "mean"})


# ----------------------------------------------------------------------------- binary losses

def _bce(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """8 per element (log x, 1 - x, log, 1 - y, 2 mul, add, neg), +1 with weight, + the reduction."""
    n = numel(t[0])
    return (8 + (o["weight"] is not None)) * n + _reduce(n, o["reduction"])


# F.binary_cross_entropy(input, target, weight, size_average, reduce, reduction);
# aten.binary_cross_entropy(self, target, weight, reduction)
_loss("binary_cross_entropy", _bce, 2, nn.BCELoss,
      {F.binary_cross_entropy: {"weight": 2, "reduction": 5}, "binary_cross_entropy": {"weight": 2, "reduction": 3}},
      {"weight": None, "reduction": "mean"})


def _bce_logits(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """6 per element (softplus 3, (1 - y) x 2, add), +3 with pos_weight, +1 with weight, + the reduction."""
    n = numel(t[0])
    cost = 6 + (3 if o["pos_weight"] is not None else 0) + (o["weight"] is not None)
    return cost * n + _reduce(n, o["reduction"])


# F.binary_cross_entropy_with_logits(input, target, weight, size_average, reduce, reduction, pos_weight);
# aten (self, target, weight, pos_weight, reduction)
_loss("binary_cross_entropy_with_logits", _bce_logits, 2, nn.BCEWithLogitsLoss,
      {F.binary_cross_entropy_with_logits: {"weight": 2, "reduction": 5, "pos_weight": 6},
       "binary_cross_entropy_with_logits": {"weight": 2, "pos_weight": 3, "reduction": 4}},
      {"weight": None, "pos_weight": None, "reduction": "mean"})


def _soft_margin(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """4 per element (mul, exp, add, log) + the reduction."""
    return 4 * numel(t[0]) + _reduce(numel(t[0]), o["reduction"])


_loss("soft_margin_loss", _soft_margin, 2, nn.SoftMarginLoss,
      {F.soft_margin_loss: {"reduction": 4}, "soft_margin_loss": {"reduction": 2}}, _MEAN)


def _multilabel_soft_margin(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """12 per element, the mean over classes (N adds + a divide per row), +1 with weight, + the
    reduction over rows."""
    n, rows = numel(t[0]), numel(t[0]) // max(t[0].shape[-1], 1)
    return (12 + 1 + (o["weight"] is not None)) * n + rows + _reduce(rows, o["reduction"])


# F.multilabel_soft_margin_loss(input, target, weight, size_average, reduce, reduction)
_loss("multilabel_soft_margin_loss", _multilabel_soft_margin, 2, nn.MultiLabelSoftMarginLoss,
      {F.multilabel_soft_margin_loss: {"weight": 2, "reduction": 5}}, {"weight": None, "reduction": "mean"})


# ----------------------------------------------------------------------------- class-indexed losses

def _targets(t: tuple[Any, ...]) -> int:
    return numel(t[1])


def _nll_terms(targets: int, weight: Any, reduction: Any) -> int:
    # per target element: negate, ignore_index compare (+ weight multiply); a weighted mean also
    # sums the weights
    weighted = weight is not None
    reduce = _reduce(targets, reduction)
    if weighted and reduce > targets:
        reduce += targets
    return (2 + weighted) * targets + reduce


def _nll(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """2 per target element (negate, ignore_index compare), +1 with weight, + the reduction."""
    return _nll_terms(_targets(t), o["weight"], o["reduction"])


_NLL: Options = {"weight": None, "reduction": "mean"}
# F.nll_loss(input, target, weight, size_average, ignore_index, reduce, reduction);
# aten.nll_loss / nll_loss_forward / nll_loss2d_forward (self, target, weight, reduction, ignore_index)
_loss("nll_loss", _nll, 2, nn.NLLLoss,
      {F.nll_loss: {"weight": 2, "reduction": 6},
       **{op: {"weight": 2, "reduction": 3}
          for op in ("nll_loss", "nll_loss_forward", "nll_loss2d", "nll_loss2d_forward", "nll_loss_nd")}},
      _NLL)


def _cross_entropy(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """log-softmax 5 per element + NLL, or the probability-target sum; label smoothing adds the
    per-class sum and the mixing (see the module docstring)."""
    x, target = t[0], t[1]
    n = numel(x)
    smoothing = float(o["label_smoothing"] or 0.0)
    if is_float(target):  # class probabilities, the shape of the input
        rows = n // max(x.shape[1] if x.dim() > 1 else x.shape[0], 1)
        flops = 5 * n + 2 * n + (n if o["weight"] is not None else 0) + (2 * n if smoothing > 0 else 0)
        return flops + _reduce(rows, o["reduction"])
    flops = 5 * n + _nll_terms(numel(target), o["weight"], o["reduction"])
    if smoothing > 0:
        flops += n + 3 * numel(target)
    return flops


# F.cross_entropy(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing);
# aten.cross_entropy_loss(self, target, weight, reduction, ignore_index, label_smoothing)
_loss("cross_entropy", _cross_entropy, 2, nn.CrossEntropyLoss,
      {F.cross_entropy: {"weight": 2, "reduction": 6, "label_smoothing": 7},
       "cross_entropy_loss": {"weight": 2, "reduction": 3, "label_smoothing": 5}},
      {"weight": None, "reduction": "mean", "label_smoothing": 0.0})


def _multi_margin(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """3 per element (+1 for p = 2, +1 with weight), the sum over classes and a divide per row,
    + the reduction over rows."""
    x = t[0]
    n = numel(x)
    rows = n // max(x.shape[-1], 1)
    cost = 3 + (int(o["p"]) == 2) + (o["weight"] is not None)
    return cost * n + n + rows + _reduce(rows, o["reduction"])


# F.multi_margin_loss(input, target, p, margin, weight, size_average, reduce, reduction);
# aten.multi_margin_loss(self, target, p, margin, weight, reduction)
_loss("multi_margin_loss", _multi_margin, 2, nn.MultiMarginLoss,
      {F.multi_margin_loss: {"p": 2, "weight": 4, "reduction": 7},
       "multi_margin_loss": {"p": 2, "weight": 4, "reduction": 5}},
      {"p": 1, "weight": None, "reduction": "mean"})


# ----------------------------------------------------------------------------- distribution and embedding losses

def _kl_div(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """3 per element (log y or exp y, sub, mul) + the reduction (batchmean: the sum and a divide)."""
    return 3 * numel(t[0]) + _reduce(numel(t[0]), o["reduction"])


# F.kl_div(input, target, size_average, reduce, reduction, log_target); aten.kl_div(self, target, reduction, log_target)
_loss("kl_div", _kl_div, 2, nn.KLDivLoss, {F.kl_div: {"reduction": 4}, "kl_div": {"reduction": 2}}, _MEAN)


def _margin_ranking(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """4 per element (sub, mul by -y, add margin, max) + the reduction."""
    return 4 * numel(t[0]) + _reduce(numel(t[0]), o["reduction"])


# F.margin_ranking_loss(input1, input2, target, margin, size_average, reduce, reduction);
# aten.margin_ranking_loss(input1, input2, target, margin, reduction)
_loss("margin_ranking_loss", _margin_ranking, 3, nn.MarginRankingLoss,
      {F.margin_ranking_loss: {"reduction": 6}, "margin_ranking_loss": {"reduction": 4}}, _MEAN)


def _hinge_embedding(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """3 per element (margin - x, max, select) + the reduction."""
    return 3 * numel(t[0]) + _reduce(numel(t[0]), o["reduction"])


# F.hinge_embedding_loss(input, target, margin, size_average, reduce, reduction);
# aten.hinge_embedding_loss(self, target, margin, reduction)
_loss("hinge_embedding_loss", _hinge_embedding, 2, nn.HingeEmbeddingLoss,
      {F.hinge_embedding_loss: {"reduction": 5}, "hinge_embedding_loss": {"reduction": 3}}, _MEAN)


def _rows_and_dim(x: Any) -> tuple[int, int]:
    dim = x.shape[-1] if x.dim() else 1
    return numel(x) // max(dim, 1), dim


def _cosine_embedding(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """Per row: 6D (dot product and two squared norms) + 6 (norms, divide, margin, select), + the
    reduction over rows."""
    rows, dim = _rows_and_dim(t[0])
    return rows * (6 * dim + 6) + _reduce(rows, o["reduction"])


# F.cosine_embedding_loss(input1, input2, target, margin, size_average, reduce, reduction);
# aten.cosine_embedding_loss(input1, input2, target, margin, reduction)
_loss("cosine_embedding_loss", _cosine_embedding, 3, nn.CosineEmbeddingLoss,
      {F.cosine_embedding_loss: {"reduction": 6}, "cosine_embedding_loss": {"reduction": 4}}, _MEAN)


def _triplet_margin(out: Any, t: tuple[Any, ...], o: Options) -> int:
    """Per row: two distances (4D + 1 each; three and a min with swap) + 3, + the reduction."""
    rows, dim = _rows_and_dim(t[0])
    per_row = 3 * (4 * dim + 1) + 1 + 3 if o["swap"] else 2 * (4 * dim + 1) + 3
    return rows * per_row + _reduce(rows, o["reduction"])


# F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, size_average, reduce, reduction);
# aten.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction)
_loss("triplet_margin_loss", _triplet_margin, 3, nn.TripletMarginLoss,
      {F.triplet_margin_loss: {"swap": 6, "reduction": 9}, "triplet_margin_loss": {"swap": 6, "reduction": 7}},
      {"swap": False, "reduction": "mean"})

