"""tracer="export" runs the program the eager call runs, or refuses before running it.

Each test builds its model inline and compares the profiled call with an eager twin (a deepcopy
called the plain way): output and model state bit for bit, or a ``TracingError`` naming what the
forward changed, with the model left exactly as it was (no traced tensor left in it).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.nn.utils import prune
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX, TracerFallbackWarning, TracingError


def _state(model: nn.Module) -> list[Any]:
    """Everything of the model a call can change: each module's entries (names and kinds), plain
    attribute names, training flag, and each parameter's and buffer's type, flags and bytes."""
    out: list[Any] = []
    for path, m in model.named_modules():
        if isinstance(m, torch.jit.ScriptModule):  # (its entries are views of the C++ module)
            continue
        out.append((path, type(m).__name__, m.training, list(m._parameters), list(m._buffers), list(m._modules),
                    sorted(k for k in vars(m) if not k.startswith("_"))))
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        out.append((name, type(t).__name__, t.dtype, tuple(t.shape), t.requires_grad, t.is_leaf, t.grad_fn is None,
                    t.detach().clone()))
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if len(x) != len(y):
            return False
        for u, v in zip(x, y):
            if isinstance(u, torch.Tensor):
                if not (isinstance(v, torch.Tensor) and u.shape == v.shape and torch.equal(u, v)):
                    return False
            elif u != v:
                return False
    return True


def _no_fakes(model: nn.Module) -> bool:
    return not any(isinstance(t, FakeTensor) for t in [*model.parameters(), *model.buffers()])


def _profiled_equals_eager(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Profile ``model`` with tracer='export'; assert output and state equal an eager twin's."""
    twin = copy.deepcopy(model)
    expected = twin(x)
    got = TorchFLOPsByFX(model, tracer="export").propagate(x)
    assert torch.equal(got, expected)
    assert got.requires_grad == expected.requires_grad
    assert _same(_state(model), _state(twin))
    return got


def _refused(model: nn.Module, x: torch.Tensor, match: str, twin: nn.Module | None = None) -> None:
    """The export profile refuses with a TracingError matching ``match``; the model is as before,
    and a plain call afterwards gives what a fresh twin's (``twin``, else a deepcopy) does."""
    twin = copy.deepcopy(model) if twin is None else twin
    before = _state(model)
    with pytest.raises(TracingError, match=match):
        TorchFLOPsByFX(model, tracer="export").propagate(x)
    assert _same(_state(model), before)
    assert _no_fakes(model)
    assert torch.equal(model(x), twin(x))
    assert _same(_state(model), _state(twin))


# --- 1. parameters and submodules created in forward -------------------------------------------

class _RegistersParam(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "w"):
            self.register_parameter("w", nn.Parameter(torch.ones(x.shape[-1], 2)))
        return x @ self.w


def test_a_parameter_registered_in_forward_is_refused_and_not_left_as_a_traced_tensor() -> None:
    _refused(_RegistersParam(), torch.ones(1, 3), r"assigns module state \(w\).*w: a parameter registered")


class _GrowsDict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = nn.ParameterDict({"w3": nn.Parameter(torch.ones(3, 3))})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = f"w{x.shape[-1] + 1}"
        if key not in self.p:
            self.p[key] = nn.Parameter(torch.ones(x.shape[-1], 2))
        return x @ self.p[key]


def test_a_parameter_dict_growing_in_forward_is_refused() -> None:
    _refused(_GrowsDict(), torch.ones(1, 3), r"p\.w4: a parameter registered")


class _CreatesSubmodule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.l is None:
            self.l = nn.Linear(x.shape[-1], 3)
        return self.l(x)


def test_a_submodule_created_in_forward_is_refused_and_the_model_keeps_its_none() -> None:
    model = _CreatesSubmodule()
    with pytest.raises(TracingError, match=r"l: a submodule registered"):
        TorchFLOPsByFX(model, tracer="export").propagate(torch.ones(2, 6))
    assert "l" in vars(model) and model.l is None and "l" not in model._modules  # (was: a shadowed fake Linear)
    torch.manual_seed(0)
    y = model(torch.ones(2, 6))
    assert type(y) is torch.Tensor and y.requires_grad and isinstance(model.l, nn.Linear)


class _RegistersThenFails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.register_parameter("w", nn.Parameter(torch.ones(3, 3)))
        if (x @ self.w).sum() > 0:  # data-dependent: torch.export cannot trace it
            return x
        return -x


def test_the_model_is_restored_when_the_trace_fails() -> None:
    model = _RegistersThenFails()
    with pytest.raises(TracingError, match="could not trace"):
        TorchFLOPsByFX(model, tracer="export").propagate(torch.ones(1, 3))
    assert "w" not in model._parameters and _no_fakes(model)


# --- 2. / 4. grad-mode regions of the forward ----------------------------------------------------

class _EMA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for pb, pa in zip(self.b.parameters(), self.a.parameters()):
                pb.mul_(0.9).add_(pa, alpha=0.1)
        return self.a(x) + self.b(x)


class _EMAForeach(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            torch._foreach_lerp_(list(self.b.parameters()), list(self.a.parameters()), 0.2)
        return self.b(self.a(x))


@pytest.mark.parametrize("cls", [_EMA, _EMAForeach])
def test_an_ema_update_under_no_grad_leaves_the_frozen_parameters_frozen_leaves(cls: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = cls()
    _profiled_equals_eager(model, torch.randn(3, 4))
    # (was: b.weight requires_grad=True, is_leaf=False, grad_fn=AddBackward0)
    assert all(p.is_leaf and not p.requires_grad for p in model.b.parameters())


class _ScalesItsWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.l(x)
        with torch.no_grad():
            self.l.weight.mul_(0.5)
        return y


def test_an_in_place_update_of_a_trainable_parameter_under_no_grad_runs_as_eager() -> None:
    torch.manual_seed(0)
    _profiled_equals_eager(_ScalesItsWeight(), torch.ones(1, 2))  # (was: autograd's leaf RuntimeError)


class _NoGradOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.l(x)


def test_an_output_computed_under_no_grad_does_not_require_grad() -> None:
    torch.manual_seed(0)
    y = _profiled_equals_eager(_NoGradOutput(), torch.ones(1, 2))
    assert not y.requires_grad  # (was: True)


class _Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = self.a(x)
            with torch.enable_grad():
                g = self.b(h)
            h = h * 2
        return g + h


def test_nested_grad_regions_run_under_their_modes_and_every_node_is_counted() -> None:
    torch.manual_seed(0)
    model = _Nested()
    x = torch.randn(3, 4)
    with FlopCounterMode(display=False) as reference:
        copy.deepcopy(model)(x)
    y = _profiled_equals_eager(model, x)
    assert y.requires_grad
    counter = TorchFLOPsByFX(model, tracer="export")
    counter.propagate(x)
    # 2 linears of (3x4)@(4x4): 2*3*4*4 = 96 FLOPs each, FlopCounterMode's count (no add, no mul)
    assert reference.get_total_flops() == 192
    assert counter.profile.with_convention("flop_counter").total_flops == 192


def test_a_graph_captured_under_no_grad_is_captured_again_for_a_call_with_grad() -> None:
    torch.manual_seed(0)
    model = _EMA()
    twin = copy.deepcopy(model)
    x = torch.randn(3, 4)
    counter = TorchFLOPsByFX(model, tracer="export")
    with torch.no_grad():
        assert torch.equal(counter.propagate(x), twin(x))
    expected = twin(x)
    got = counter.propagate(x)  # the no_grad region must run under no_grad now that grad is on
    assert torch.equal(got, expected) and got.requires_grad
    assert _same(_state(model), _state(twin))


# --- 3. / 5. state a graph cannot replay ---------------------------------------------------------

class _ReplacesParam(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.w
        self.w = nn.Parameter(self.w.detach() * 0.5)
        return y


class _ReplacesLinearWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.l.weight = nn.Parameter(torch.ones(2, 2))
        return self.l(x)


class _DeletesParam(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(2, 2))
        self.extra = nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "extra"):
            del self.extra
        return x @ self.w


class _Freezes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.a.requires_grad_(False)
        return self.a(x)


class _AssignsData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.w.data = torch.ones(2, 5)
        return x @ self.w


class _Switches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.d = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.d.eval()
        return self.d(x)


class _Pruned(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(2, 2)
        prune.identity(self.l, "weight")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.l.weight_mask.zero_()
        return self.l(x)


@pytest.mark.parametrize(("cls", "match"), [
    (_ReplacesParam, r"w: a parameter replaced"),
    (_ReplacesLinearWeight, r"l\.weight: a parameter replaced"),
    (_DeletesParam, r"extra: a parameter deleted"),
    (_Freezes, r"a\.weight: requires_grad set to False"),
    (_AssignsData, r"w: its \.data assigned"),
    (_Switches, r"d\.training: switched to eval mode"),
    (_Pruned, r"l\.weight: a tensor attribute rebound"),  # prune's pre-hook: module.weight = orig * mask
])
def test_a_forward_changing_what_a_graph_cannot_replay_is_refused(cls: type[nn.Module], match: str) -> None:
    torch.manual_seed(0)
    model = cls().train()
    torch.manual_seed(0)
    twin = cls().train()  # (a pruned module's weight is not a leaf: no deepcopy)
    _refused(model, torch.ones(3, 2), match, twin)


@pytest.mark.parametrize("train", [True, False])
def test_spectral_norm_hooks_are_refused_not_failed_or_left_stale(train: bool) -> None:
    torch.manual_seed(0)
    model = nn.utils.spectral_norm(nn.Linear(6, 6)).train(train)
    x = torch.randn(3, 6)
    # (was, train: autograd's RuntimeError from div(..., out=...); eval: module.weight left stale. torch's own
    # pre-hook, not one of the user's: refused for the weight it assigns)
    _refused(model, x, r"assigns module state \(weight\).*weight: a tensor attribute rebound")


class _ScriptedPart(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.jit.script(nn.Linear(6, 6))
        self.b = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def test_a_torchscript_submodule_is_left_to_torch_export_to_refuse() -> None:
    # its parameter entries are views of the C++ module, not dicts to snapshot (was: their TypeError)
    torch.manual_seed(0)
    model = _ScriptedPart()
    torch.manual_seed(0)
    twin = _ScriptedPart()  # (a deepcopy of a scripted module holds plain tensors, not parameters)
    _refused(model, torch.ones(3, 6), "could not trace _ScriptedPart", twin)


def test_a_module_registered_under_two_names_is_profiled_not_refused() -> None:
    # torch.export's non-strict tracer stands proxies in for a module it finds under two paths;
    # the forward changes nothing
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)
            self.alias = self.l

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.alias(self.l(x))

    torch.manual_seed(0)
    model = Shared()
    _profiled_equals_eager(model, torch.randn(2, 4))
    assert model.alias is model.l and list(model._modules) == ["l", "alias"]


def test_the_meta_fallback_counts_a_forward_that_changes_state_with_a_warning() -> None:
    # like transformers' BigBird, which swaps its attention submodule for a short input; .item()
    # makes the model unable to run on meta, so tracer='auto' counts the graph torch.export traces
    class Switches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[1] < 8:
                self.attn = nn.Linear(4, 4, device=x.device)  # replaced while it runs
            # a value read in Python (none on meta), left out when exported, as transformers do
            scale = 1.0 if torch.compiler.is_exporting() else x.abs().max().item()
            return self.attn(x) * scale

    model = Switches().to("meta")
    counter = TorchFLOPsByFX(model)
    with pytest.warns(TracerFallbackWarning, match=r"changes module state \(attn: a submodule replaced\)"):
        counter.propagate(torch.empty(2, 4, 4, device="meta"))
    # Linear(4, 4) on 8 rows: 8 x 4 x 4 = 128 MACs
    assert counter.total_macs == 128
    with pytest.raises(TracingError, match="a submodule replaced"):  # asked for export itself: refused
        TorchFLOPsByFX(model, tracer="export").propagate(torch.empty(2, 4, 4, device="meta"))


def test_an_equal_number_written_back_is_no_change_of_state() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head_dim, self.scaling = 4, 0.5
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.scaling = self.head_dim ** -0.5  # a new float each call, equal to the one held
            return self.l(x) * self.scaling

    torch.manual_seed(0)
    _profiled_equals_eager(Scaled(), torch.randn(2, 4))


@pytest.mark.parametrize("kind", ["inference_mode", "reentrant checkpoint"])
def test_an_autograd_state_the_export_graph_does_not_replay_is_refused(kind: str) -> None:
    # torch.export keeps no inference_mode region (its output required grad, a backward filled the
    # weight's gradient where eager refuses), nor the gradient of checkpoint(use_reentrant=True), an
    # autograd.Function run without grad (its output, and the later layer's, required no grad)
    from torch.utils.checkpoint import checkpoint

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if kind == "inference_mode":
                with torch.inference_mode():
                    return self.b(self.a(x))
            return self.b(checkpoint(self.a, x, use_reentrant=True))

    torch.manual_seed(0)
    model, x = Model(), torch.randn(3, 8, requires_grad=True)
    with pytest.raises(TracingError, match="does not replay the forward's autograd state.*tracer='auto'"):
        TorchFLOPsByFX(model, tracer="export").propagate(x)
    out = TorchFLOPsByFX(model).propagate(x)  # the default front end runs it as it is
    expected = model(x)
    assert torch.equal(out, expected) and out.requires_grad == expected.requires_grad
    assert out.is_inference() == expected.is_inference() == (kind == "inference_mode")


def test_a_later_call_needing_other_gradients_runs_on_the_same_graph() -> None:
    # the output's autograd state is checked on the first replay only: a later input that needs its
    # gradient (a saliency map of a frozen model), or a model frozen since, is replayed as eager runs it
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3)).requires_grad_(False)
    counter = TorchFLOPsByFX(model, tracer="export")
    assert not counter.propagate(torch.randn(2, 4)).requires_grad
    x = torch.randn(2, 4, requires_grad=True)
    out = counter.propagate(x)
    assert out.requires_grad and torch.equal(out, model(x))


@pytest.mark.parametrize(("forward", "inputs"), [
    ("view", ((3, 4),)),  # x.view(5, -1) of 12 elements
    ("linear", ((3, 5),)),  # a (3, 5) input to Linear(4, 4)
    ("broadcast", ((3,), (4,))),  # (3,) + (4,)
])
def test_an_op_s_own_error_comes_out_as_the_eager_call_raises_it(forward: str, inputs: tuple[Any, ...]) -> None:
    # torch.export meets the error through fake tensors, in their words ("a and b must have same
    # reduction dim"); the profiled call raises what the plain call raises, its input and model untouched
    class Bad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
            if forward == "view":
                return self.l(x.view(5, -1))
            if forward == "linear":
                return self.l(x)
            return x + y

    model = Bad()
    args = [torch.randn(*shape) for shape in inputs]
    copies = [a.clone() for a in args]
    with pytest.raises(RuntimeError) as eager:
        model(*args)
    before = _state(model)
    with pytest.raises(RuntimeError) as profiled:
        TorchFLOPsByFX(model, tracer="export").propagate(*args)
    assert type(profiled.value) is type(eager.value) and str(profiled.value) == str(eager.value)
    assert _same(before, _state(model)) and all(torch.equal(a, c) for a, c in zip(args, copies))


def test_a_refusal_after_an_error_leaves_the_model_as_it_was() -> None:
    # torch.export refuses .numpy() with a RuntimeError; the plain call runs. Finding out (the same call
    # eagerly) ran the real model: its buffer write and BatchNorm's statistics stayed
    class Numpy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(4)
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count += 1
            return torch.from_numpy(self.bn(x).detach().numpy().copy())

    model = Numpy().train()
    before = _state(model)
    with pytest.raises(TracingError, match=r"numpy"):
        TorchFLOPsByFX(model, tracer="export").propagate(torch.randn(3, 4))
    assert _same(before, _state(model))  # count 0, num_batches_tracked 0, running stats as made
