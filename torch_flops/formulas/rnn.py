"""Recurrent layers: ``nn.LSTM``, ``nn.GRU``, ``nn.RNN``, their cells, and every aten form they run
as (``aten.lstm``/``gru``/``rnn_tanh``/``rnn_relu`` and their cells, CPU's ``mkldnn_rnn_layer``,
CUDA's ``_cudnn_rnn``, ROCm's ``miopen_rnn``). One helper (:func:`rnn_count`) counts them all, so
an LSTM counts the same on CPU (one oneDNN kernel per layer), on meta (the composite ATen
implementation: per step two addmm and the gate arithmetic) and on CUDA (cuDNN).

Per layer, direction, time step and batch row, with ``G`` gates (LSTM 4, GRU 3, RNN 1), hidden
size ``H``, layer input ``I`` (the input size, then ``H`` or ``proj_size`` x directions) and
recurrent input ``R`` (``H``, or ``proj_size``), following the equations of the ``nn.LSTM`` /
``nn.GRU`` / ``nn.RNN`` documentation as ATen's composite implementation evaluates them:

* MACs: ``G*H*(I + R)`` (the input and hidden projections), plus ``H*P`` for an LSTM projection;
* bias adds: ``G*H`` per bias vector (``b_ih`` and ``b_hh``);
* gate arithmetic per hidden unit: the ``x W_ih + h W_hh`` add (1 per gate), a sigmoid 3
  (exp, add, divide, as activation.py counts it), tanh 1, relu 1, and
  LSTM ``4 + 3*3 (i, f, o) + 1 (tanh g) + 3 (c = f*c + i*g) + 2 (h = o * tanh c)`` = 19;
  GRU ``3 (adds) + 2*3 (r, z) + 1 (r * h_n) + 1 (tanh n) + 3 (h = n + z*(h - n))`` = 14;
  RNN ``1 (add) + 1 (tanh or relu)`` = 2;
* dropout between layers while training: 2 per element of each layer's output but the last
  (mask multiply and rescale, as elementwise.py counts dropout).

``mm_macs`` (what FlopCounterMode counts on the device the node ran on): all the MACs where the
layer runs as addmm/mm (meta, GRU/RNN on CPU, packed sequences, cells), none where it runs as a
fused kernel FlopCounterMode has no formula for (an LSTM on CPU through oneDNN, any layer through
cuDNN or MIOpen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from torch_flops.formulas import Count, aten_ops, register
from torch_flops.formulas._shapes import arg, is_float, numel

__all__ = ["RnnShape", "rnn_cell_flops", "rnn_count", "rnn_flops"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
# gate arithmetic per hidden unit and step (see the module docstring)
_CELL = {"LSTM": 19, "GRU": 14, "RNN_TANH": 2, "RNN_RELU": 2}
# oneDNN's and cuDNN's mode numbers (aten mkldnn_rnn_layer / _cudnn_rnn / miopen_rnn)
_MODES = {0: "RNN_RELU", 1: "RNN_TANH", 2: "LSTM", 3: "GRU"}


@dataclass(frozen=True)
class RnnShape:
    """What the count of a recurrent layer depends on."""

    mode: str  # LSTM | GRU | RNN_TANH | RNN_RELU
    input_size: int
    hidden_size: int
    rows: int  # time steps x batch rows (a packed sequence: its data rows)
    num_layers: int = 1
    bidirectional: bool = False
    bias: bool = True
    proj_size: int = 0
    dropout: float = 0.0  # active only while training
    training: bool = False


def rnn_count(s: RnnShape, mm_counted: bool = True) -> Count:
    """The count of a whole recurrent layer stack (see the module docstring for the arithmetic)."""
    gates, h, p = _GATES[s.mode], s.hidden_size, s.proj_size
    out = p or h  # what each direction emits per step (and feeds back)
    directions = 2 if s.bidirectional else 1
    macs = flops = dots = 0
    for layer in range(s.num_layers):
        layer_in = s.input_size if layer == 0 else out * directions
        # input and recurrent projections (G*H outputs each), the LSTM projection (P outputs)
        step_macs = gates * h * (layer_in + out) + h * p
        step_flops = 2 * step_macs + (2 * gates * h if s.bias else 0) + _CELL[s.mode] * h
        macs += directions * s.rows * step_macs
        flops += directions * s.rows * step_flops
        dots += directions * s.rows * (2 * gates * h + p)
        if s.training and s.dropout > 0 and layer < s.num_layers - 1:
            flops += 2 * directions * s.rows * out  # dropout on this layer's output
    return Count(flops, macs, dots, macs if mm_counted else 0)


def _rows(x: Any, input_size: int) -> int:
    if isinstance(x, PackedSequence):
        return int(x.data.shape[0])
    return numel(x) // max(input_size, 1)


def _fused_on(x: Any, mode: str, packed: bool, proj: int) -> bool:
    """Whether this layer runs as a fused kernel FlopCounterMode does not count: CPU oneDNN
    (``mkldnn_rnn_layer``: LSTM without projections, unpacked, float32 or supported bf16/fp16;
    fp16 without grad) or cuDNN (``_cudnn_rnn``, what ``torch.backends.cudnn.is_acceptable``
    admits)."""
    if not isinstance(x, torch.Tensor):
        return False
    if x.device.type == "cpu":
        if mode != "LSTM" or packed or proj or x.numel() == 0 or not torch.backends.mkldnn.is_available() or \
                not torch._C._get_mkldnn_enabled():
            return False
        if x.dtype == torch.float32:
            return True
        if x.dtype == torch.bfloat16:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        if x.dtype == torch.float16:
            return not torch.is_grad_enabled() and bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
        return False
    if x.device.type == "cuda":
        return bool(torch.backends.cudnn.is_acceptable(x))
    return False


def _module_mode(module: nn.RNNBase) -> str:
    return {"LSTM": "LSTM", "GRU": "GRU", "RNN_TANH": "RNN_TANH", "RNN_RELU": "RNN_RELU"}[module.mode]


@register(nn.LSTM, nn.GRU, nn.RNN)
def rnn_flops(module: nn.RNNBase, out: Any, x: Any, *args: Any, **kwargs: Any) -> Count:
    # the whole stack: per layer, direction, step and row G*H*(I+R) (+ H*P) MACs, bias adds and
    # the gate arithmetic (module docstring)
    if not is_float(x.data if isinstance(x, PackedSequence) else x):
        return Count(0, 0, 0, 0)
    mode = _module_mode(module)
    packed = isinstance(x, PackedSequence)
    shape = RnnShape(mode, module.input_size, module.hidden_size, _rows(x, module.input_size), module.num_layers,
                     module.bidirectional, module.bias, getattr(module, "proj_size", 0), module.dropout,
                     module.training)
    return rnn_count(shape, not _fused_on(x.data if packed else x, mode, packed, shape.proj_size))


@register(nn.LSTMCell, nn.GRUCell, nn.RNNCell)
def rnn_cell_flops(module: nn.RNNCellBase, out: Any, x: Any, *args: Any, **kwargs: Any) -> Count:
    # one step of one layer: the same per-row count as the layers (cells run as addmm everywhere)
    if not is_float(x):
        return Count(0, 0, 0, 0)
    if isinstance(module, nn.LSTMCell):
        mode = "LSTM"
    elif isinstance(module, nn.GRUCell):
        mode = "GRU"
    else:
        mode = "RNN_RELU" if module.nonlinearity == "relu" else "RNN_TANH"
    return rnn_count(RnnShape(mode, module.input_size, module.hidden_size, _rows(x, module.input_size),
                              bias=module.bias))


# ---------------------------------------------------------------------------------------------
# aten forms. The layers: lstm(input, hx, params, has_biases, num_layers, dropout, train,
# bidirectional, batch_first) and gru/rnn_*(input, hx, params, has_biases, num_layers, dropout,
# train, bidirectional, batch_first); the packed overloads put batch_sizes after data. Sizes are
# read off the weights: params[0] is layer 0's w_ih (G*H, I), params[1] its w_hh (G*H, R), an
# LSTM projection adds w_hr (P, H) to each direction's group.
# ---------------------------------------------------------------------------------------------

def _from_params(mode: str, x: Any, params: Any, has_biases: bool, num_layers: int, dropout: float, train: bool,
                 bidirectional: bool) -> RnnShape:
    w_ih, w_hh = params[0], params[1]
    gates = _GATES[mode]
    hidden = int(w_ih.shape[0]) // gates
    per_group = 2 + 2 * int(bool(has_biases))
    proj = 0
    directions = 2 if bidirectional else 1
    if len(params) == num_layers * directions * (per_group + 1):  # an LSTM with projections
        proj = int(w_hh.shape[1])
    input_size = int(w_ih.shape[1])
    return RnnShape(mode, input_size, hidden, numel(x) // max(input_size, 1), int(num_layers), bool(bidirectional),
                    bool(has_biases), proj, float(dropout), bool(train))


def _layer_formula(mode: str) -> Any:
    def formula(module: Any, out: Any, x: Any, hx: Any, params: Any, *args: Any, **kwargs: Any) -> Count:
        # aten.<mode>.input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
        # batch_first) or .data(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
        # bidirectional): rnn_count over the weights' sizes
        packed = isinstance(params, torch.Tensor)  # .data: (data, batch_sizes, hx, params, ...)
        if packed:
            params, args = args[0], args[1:]
        if not is_float(x):
            return Count(0, 0, 0, 0)
        has_biases, num_layers, dropout, train, bidirectional = args[:5]
        shape = _from_params(mode, x, params, has_biases, num_layers, dropout, train, bidirectional)
        return rnn_count(shape, not _fused_on(x, mode, packed, shape.proj_size))

    formula.__name__ = formula.__qualname__ = f"{mode.lower()}_flops"
    return formula


for _mode, _name in (("LSTM", "lstm"), ("GRU", "gru"), ("RNN_TANH", "rnn_tanh"), ("RNN_RELU", "rnn_relu")):
    register(*aten_ops(_name))(_layer_formula(_mode))


def _cell_formula(mode: str) -> Any:
    def formula(module: Any, out: Any, x: Any, hx: Any, w_ih: Any, w_hh: Any, b_ih: Any = None, b_hh: Any = None,
                *args: Any, **kwargs: Any) -> Count:
        # aten.<mode>_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None): one step of one layer
        if not is_float(x):
            return Count(0, 0, 0, 0)
        hidden = int(w_ih.shape[0]) // _GATES[mode]
        return rnn_count(RnnShape(mode, int(w_ih.shape[1]), hidden, numel(x) // max(int(w_ih.shape[1]), 1),
                                  bias=b_ih is not None))

    formula.__name__ = formula.__qualname__ = f"{mode.lower()}_cell_flops"
    return formula


for _mode, _name in (("LSTM", "lstm_cell"), ("GRU", "gru_cell"), ("RNN_TANH", "rnn_tanh_cell"),
                     ("RNN_RELU", "rnn_relu_cell")):
    register(*aten_ops(_name))(_cell_formula(_mode))


@register(*aten_ops("mkldnn_rnn_layer"))
def mkldnn_rnn_layer_flops(module: Any, out: Any, x: Any, w_ih: Any, w_hh: Any, *args: Any, **kwargs: Any) -> Count:
    # mkldnn_rnn_layer(input, weight0 (w_ih), weight1 (w_hh), weight2, weight3, hx_, cx_, reverse,
    # batch_sizes, mode, hidden_size, num_layers, has_biases, bidirectional, batch_first, train):
    # one direction of one layer over every step (the stack's dropout is outside it); FlopCounterMode
    # has no formula for it (mm_macs 0)
    mode = _MODES[int(arg(args, kwargs, 6, "mode", 2))]
    has_biases = bool(arg(args, kwargs, 9, "has_biases", True))
    input_size, recurrent = int(w_ih.shape[1]), int(w_hh.shape[1])
    hidden = int(arg(args, kwargs, 7, "hidden_size", int(w_ih.shape[0]) // _GATES[mode]))
    shape = RnnShape(mode, input_size, hidden, numel(x) // max(input_size, 1), bias=has_biases,
                     proj_size=recurrent if recurrent != hidden else 0)
    return rnn_count(shape, False) if is_float(x) else Count(0, 0, 0, 0)


@register(*aten_ops("mkldnn_rnn_layer_backward"))
def mkldnn_rnn_layer_backward_flops(module: Any, out: Any, x: Any, w_ih: Any, w_hh: Any, *args: Any,
                                    **kwargs: Any) -> Count:
    # mkldnn_rnn_layer_backward(input, weight1 (w_ih), weight2 (w_hh), weight3, weight4, hx_, cx_tmp, output,
    # hy_, cy_, grad_output, grad_hy, grad_cy, reverse, mode, hidden_size, ...): the backward of one
    # mkldnn_rnn_layer. Per step and row, as for any linear map, the gradients of the layer input and of
    # the previous h (dGates W_ih, dGates W_hh) and of the weights (x^T dGates, h^T dGates): twice the
    # forward's G*H*(I+R) MACs; each bias gradient sums dGates over the rows (G*H adds per bias vector, as
    # the forward's bias adds); the gate arithmetic's chain rule, twice the forward's (each elementwise op
    # gives the gradients of its inputs from its output's). FlopCounterMode has no formula for it.
    if not is_float(x):
        return Count(0, 0, 0, 0)
    mode, hidden, has_biases = _MODES[int(args[11])], int(args[12]), bool(args[14])
    input_size, recurrent = int(w_ih.shape[1]), int(w_hh.shape[1])
    rows = numel(x) // max(input_size, 1)
    forward = rnn_count(RnnShape(mode, input_size, hidden, rows, bias=has_biases,
                                 proj_size=recurrent if recurrent != hidden else 0), False)
    macs = 2 * forward.macs
    bias = 2 * _GATES[mode] * hidden * rows if has_biases else 0
    return Count(2 * macs + bias + 2 * _CELL[mode] * hidden * rows, macs, None, 0)


def _fused_stack(name: str, x_pos: int, mode_pos: int, hidden_pos: int, proj_pos: int | None, layers_pos: int,
                 dropout_pos: int, train_pos: int, bidir_pos: int) -> None:
    def formula(module: Any, out: Any, *args: Any, **kwargs: Any) -> Count:
        # the whole stack in one vendor kernel; sizes from the flat weight's arguments (argument
        # positions of this op's schema); FlopCounterMode has no formula for it (mm_macs 0)
        x = args[x_pos]
        if not is_float(x):
            return Count(0, 0, 0, 0)
        mode, hidden = _MODES[int(args[mode_pos])], int(args[hidden_pos])
        proj = int(args[proj_pos]) if proj_pos is not None and args[proj_pos] else 0
        layers, directions = int(args[layers_pos]), 2 if args[bidir_pos] else 1
        # per layer and direction: w_ih, w_hh, (b_ih, b_hh), (w_hr)
        per_group = len(args[1]) // max(layers * directions, 1) - int(bool(proj))
        has_biases = per_group >= 4
        rows = numel(x) // max(int(x.shape[-1]), 1)
        shape = RnnShape(mode, int(x.shape[-1]), hidden, rows, layers, directions == 2, has_biases, proj, float(args[dropout_pos]), bool(args[train_pos]))
        return rnn_count(shape, False)

    formula.__name__ = formula.__qualname__ = f"{name}_flops"
    register(*aten_ops(name))(formula)


# _cudnn_rnn(input, weight[], weight_stride0, weight_buf, hx, cx, mode, hidden_size, proj_size,
# num_layers, batch_first, dropout, train, bidirectional, batch_sizes, dropout_state)
_fused_stack("_cudnn_rnn", 0, 6, 7, 8, 9, 11, 12, 13)
# miopen_rnn(input, weight[], weight_stride0, hx, cx, mode, hidden_size, num_layers, batch_first,
# dropout, train, bidirectional, batch_sizes, dropout_state)
_fused_stack("miopen_rnn", 0, 5, 6, None, 7, 9, 10, 11)
