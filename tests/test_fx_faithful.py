"""tracer="fx" runs the program the user's eager call runs, or refuses before running with a
TracingError naming the cause (fault round 7): hooks fx would skip or run once at trace time,
parameters swapped for one call, ``param.data = ...``, training-flag switches, grad-mode changes,
submodules replaced inside forward; torch.fx's own errors are TracingError; parametrizations are
traced through and counted. Every model is built inline and compared with an eager deepcopy twin."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.func import functional_call
from torch.nn.utils import parametrizations
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX, TracingError


def _state(model: nn.Module, *, objects: bool = True) -> dict[str, Any]:
    """Everything a call could leave changed: each tensor's bytes, shape, requires_grad; each
    module's training flag and its submodules; with ``objects``, the identity of each (a model
    against itself: a deepcopy twin has objects of its own)."""
    state: dict[str, Any] = {}
    for path, m in model.named_modules():
        state[f"{path}:training"] = m.training
        state[f"{path}:modules"] = [(k, id(v) if objects else type(v)) for k, v in m._modules.items()]
        for name, t in [*m._parameters.items(), *m._buffers.items()]:
            assert t is not None
            state[f"{path}.{name}"] = (id(t) if objects else None, t.detach().clone(), t.requires_grad)
    return state


def _assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        other = b[key]
        if isinstance(value, tuple):
            assert value[0] == other[0] and value[2] == other[2], key
            assert value[1].shape == other[1].shape and torch.equal(value[1], other[1]), key
        else:
            assert value == other, key


def _assert_like_twin(model: nn.Module, twin: nn.Module) -> None:
    _assert_same_state(_state(twin, objects=False), _state(model, objects=False))


def _refused(model: nn.Module, match: str, *, leaf_modules: tuple[Any, ...] = ()) -> None:
    """tracer='fx' raises TracingError matching ``match`` and leaves the model exactly as it was."""
    before = _state(model)
    grad = torch.is_grad_enabled()
    with pytest.raises(TracingError, match=match):
        TorchFLOPsByFX(model, tracer="fx", leaf_modules=leaf_modules)
    _assert_same_state(before, _state(model))
    assert torch.is_grad_enabled() == grad


class Root(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


# ----------------------------------------------------------------------------- hooks


@pytest.mark.parametrize("kind", ["pre", "post", "backward"])
def test_hooks_on_the_root_are_refused(kind: str) -> None:
    # fx traces root.forward: eager x*10 @ ones(2,2) = [[20, 20]], the graph [[2, 2]]
    model = Root()
    if kind == "pre":
        model.register_forward_pre_hook(lambda m, a: (a[0] * 10,))
    elif kind == "post":
        model.register_forward_hook(lambda m, a, out: out + 100)
    else:
        model.register_full_backward_hook(lambda m, gi, go: None)
    what = {"pre": "forward pre-hook", "post": "forward hook", "backward": "backward hook"}[kind]
    _refused(model, rf"Root has {what}\(s\) on the root module")


def test_old_style_spectral_norm_on_the_root_is_refused() -> None:
    # nn.utils.spectral_norm is a forward pre-hook (power iteration, then weight = W / sigma)
    torch.manual_seed(0)
    model = nn.utils.spectral_norm(nn.Linear(6, 6))
    _refused(model, r"Linear has forward pre-hook\(s\) on the root module \(e\.g\. nn\.utils\.spectral_norm")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) * 2


def test_hook_on_a_module_traced_through_is_refused_and_runs_when_kept_whole() -> None:
    torch.manual_seed(0)
    model = Outer()
    seen: list[tuple[int, ...]] = []
    model.block.register_forward_hook(lambda m, a, out: seen.append(tuple(out.shape)))
    # traced through, the hook would see a Proxy once at trace time and never run again
    _refused(model, r"forward hook\(s\) on 'block' \(Block\), a module torch.fx traces through")
    assert seen == []
    # kept whole (leaf_modules), the graph calls the module and its hook runs on each call
    twin = copy.deepcopy(model)
    x = torch.randn(3, 2)
    eager = twin(x)
    seen.clear()
    y = TorchFLOPsByFX(model, tracer="fx", leaf_modules=("block",)).propagate(x)
    assert torch.equal(y, eager)
    assert seen == [(3, 2)]  # once: the profiled call


def test_hook_on_a_leaf_module_runs_as_eager() -> None:
    torch.manual_seed(0)
    model = Outer()
    model.block.fc.register_forward_pre_hook(lambda m, a: (a[0] * 10,))  # nn.Linear: one graph node
    twin = copy.deepcopy(model)
    x = torch.randn(3, 2)
    y = TorchFLOPsByFX(model, tracer="fx").propagate(x)
    assert torch.equal(y, twin(x))
    _assert_like_twin(model, twin)


def test_a_global_module_hook_is_refused() -> None:
    handle = nn.modules.module.register_module_forward_hook(lambda m, a, out: None)
    try:
        _refused(Outer(), r"a global module hook is registered \(_global_forward_hooks")
    finally:
        handle.remove()
    # torch_flops' own global hooks (an eager recording's) are not the user's
    x = torch.randn(1, 2)
    model = Outer()
    assert torch.equal(TorchFLOPsByFX(model, tracer="fx").propagate(x), model(x))


# ----------------------------------------------------------------------------- the model's objects


def test_functional_call_inside_forward_is_refused() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # eager: x @ ones(2,2).T + 0 = [[2, 2]]; fx kept net as a node reading its own weights
            return functional_call(self.net, {"weight": torch.ones(2, 2), "bias": torch.zeros(2)}, (x,))

    _refused(M(), r"M's forward swaps or replaces 'net.weight' while it runs \(torch.func.functional_call")


def test_param_data_assignment_is_refused() -> None:
    class DataAssign(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(2, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.w.data = torch.full((2, 5), 2.0)  # eager: x @ w is (1, 5) of 4s; fx kept w (2, 3)
            return x @ self.w

    _refused(DataAssign(), r"DataAssign's forward assigns \.data of 'w'")


def test_param_data_assignment_through_parameters_is_refused_and_undone() -> None:
    class Rebind(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for p in self.parameters():  # real tensors: happens once, at trace time
                p.data = p.data * 2
            return self.fc(x)

    _refused(Rebind(), r"rebinds the data of 'fc.weight'")


def test_training_flag_switch_inside_forward_is_refused() -> None:
    class Toggle(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.bn.eval()
            y = self.bn(x)
            self.bn.train()
            return self.bn(y)

    _refused(Toggle(), r"Toggle's forward switches 'bn''s training flag")


def test_requires_grad_toggle_inside_forward_is_refused_and_undone() -> None:
    class Freeze(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for p in self.parameters():
                p.requires_grad_(False)
            return self.fc(x)

    _refused(Freeze(), r"sets requires_grad of 'fc.weight'")


def test_submodule_replaced_inside_forward_is_refused_and_put_back() -> None:
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = nn.Parameter(torch.randn(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.s

    class Swap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Scale()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.block = Scale()  # a fresh random one on every eager call; the graph would keep one
            return self.block(x)

    model = Swap()
    block = model.block
    _refused(model, r"Swap's forward calls a Scale module that was not one of its submodules")
    assert model.block is block

    class Drop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Scale()
            self.spare = Scale()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            del self.spare  # eager: gone after the first call; a graph would not remove it
            return self.block(x)

    model = Drop()
    _refused(model, r"Drop's forward adds, removes or replaces submodules of 'the root'")


def test_buffer_written_outside_the_traced_values_is_refused() -> None:
    class Count(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.buffers():  # real tensors: the graph would never count
                b.add_(1)
            return x * 2

    _refused(Count(), r"writes into 'calls' outside the traced values")


# ----------------------------------------------------------------------------- grad mode


def test_no_grad_block_with_an_in_place_weight_update_is_refused() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.l(x)
            with torch.no_grad():
                self.l.weight.mul_(0.5)  # eager: fine; a graph node outside no_grad: autograd's leaf error
            return y

    _refused(M(), r"M's forward changes grad mode \(torch.no_grad\(\)")


def test_no_grad_output_is_refused() -> None:
    class NoGradOut(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():  # eager output: requires_grad False; the graph's would be True
                return self.l(x)

    _refused(NoGradOut(), r"NoGradOut's forward changes grad mode")


def test_an_autocast_region_is_refused() -> None:
    class Autocast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):  # eager: a bfloat16 output; fx records no autocast
                return torch.nn.functional.linear(x, self.w)

    _refused(Autocast(), r"Autocast's forward enters or leaves torch.autocast")
    assert not torch.is_autocast_enabled("cpu")


def test_set_grad_enabled_left_off_is_refused_and_grad_mode_restored() -> None:
    class Off(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.set_grad_enabled(False)
            return x * 2

    _refused(Off(), r"Off's forward changes grad mode")
    assert torch.is_grad_enabled()


# ----------------------------------------------------------------------------- fx's own errors


def test_an_error_of_torch_fx_itself_is_a_tracing_error() -> None:
    class FuseInForward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Conv2d(2, 3, 3).eval()
            self.b = nn.BatchNorm2d(3).eval()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.utils.fusion.fuse_conv_bn_eval(self.c, self.b)(x)

    model = FuseInForward()
    model(torch.randn(1, 2, 5, 5))  # eager runs
    with pytest.raises(TracingError, match=r"could not trace FuseInForward.*NameError") as info:
        TorchFLOPsByFX(model, tracer="fx")
    assert isinstance(info.value.__cause__, NameError)  # fx's "... is not a member of this module"


def test_the_models_own_error_still_comes_out_as_itself() -> None:
    class Raises(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyError("the model's own")

    with pytest.raises(KeyError, match="the model's own"):
        TorchFLOPsByFX(Raises(), tracer="fx")


# ----------------------------------------------------------------------------- parametrizations


def test_orthogonal_parametrization_is_traced_through_and_counted() -> None:
    torch.manual_seed(0)
    model = parametrizations.orthogonal(nn.Linear(6, 6))
    twin = copy.deepcopy(model)
    x = torch.randn(3, 6)
    with FlopCounterMode(display=False) as mode:
        eager = twin(x)
    # Linear 2*3*6*6 = 216, the orthogonal map's `base @ Q` 2*6*6*6 = 432 (matrix_exp: 0 in both): 648
    assert mode.get_total_flops() == 648
    counter = TorchFLOPsByFX(model, tracer="fx")
    y = counter.propagate(x)
    assert torch.equal(y, eager)
    assert counter.profile.with_convention("flop_counter").total_flops == 648
    _assert_like_twin(model, twin)


def test_a_parametrization_fx_cannot_replay_is_kept_whole() -> None:
    # spectral_norm (parametrization) runs its power iteration under no_grad, updating _u/_v: kept
    # as one node, which runs it as eager does (Linear 2*3*6*6 + bias 3*6 = 234; the node: unsupported)
    torch.manual_seed(0)
    model = parametrizations.spectral_norm(nn.Linear(6, 6))
    twin = copy.deepcopy(model)
    x = torch.randn(3, 6)
    eager = twin(x)
    counter = TorchFLOPsByFX(model, tracer="fx")
    with pytest.warns(UserWarning, match="ParametrizationList"):
        y = counter.propagate(x)
    assert torch.equal(y, eager)
    assert counter.total_flops == 234
    _assert_like_twin(model, twin)


def test_a_write_into_a_parameter_at_trace_time_is_refused_and_said() -> None:
    class Ema(nn.Module):  # a teacher updated from a student under no_grad, through .parameters()
        def __init__(self) -> None:
            super().__init__()
            self.student, self.teacher = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for t, s in zip(self.teacher.parameters(), self.student.parameters(), strict=True):
                t.mul_(0.9).add_(s, alpha=0.1)
            return self.teacher(x)

    torch.manual_seed(0)
    model = Ema().requires_grad_(False)
    twin = copy.deepcopy(model)
    with pytest.raises(TracingError, match=r"the write into 'teacher.weight' ran once while fx traced"):
        TorchFLOPsByFX(model, tracer="fx")
    twin(torch.randn(1, 2))  # the write, as one eager call makes it
    assert torch.equal(model.teacher.weight, twin.teacher.weight)


# ----------------------------------------------------------------------------- round 11
class _Counter(nn.Module):
    def __init__(self, add_module: bool = False) -> None:
        super().__init__()
        self.l = nn.Linear(4, 4)
        self.calls = 0
        self.add = add_module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1  # a plain number: fx runs this once, at trace time
        if self.add:
            self.extra = nn.Linear(4, 4)
        return self.l(x)


@pytest.mark.parametrize(("add_module", "match"), [
    (False, r"assigns module attributes \(calls"),
    (True, r"adds, removes or replaces submodules"),
])
def test_a_plain_counter_is_refused_and_put_back(add_module: bool, match: str) -> None:
    model = _Counter(add_module)
    with pytest.raises(TracingError, match=match):
        TorchFLOPsByFX(model, tracer="fx")
    assert model.calls == 0 and not hasattr(model, "extra")  # as before the trace, whichever refusal


@pytest.mark.parametrize("error", [ValueError("bad value"), RuntimeError("mine"), IndexError("ix"),
                                   torch.OutOfMemoryError("oom")])
def test_the_forward_s_own_builtin_errors_come_out_as_themselves(error: Exception) -> None:
    class Raises(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.l(x)
            raise error

    for tracer in ("fx", "export"):
        with pytest.raises(type(error), match=str(error)) as info:
            TorchFLOPsByFX(Raises(), tracer=tracer).propagate(torch.randn(3, 4))
        assert not isinstance(info.value, TracingError)


def test_a_proxy_given_to_an_op_is_a_tracing_limit() -> None:
    class Sized(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(x.shape[0]):  # a Proxy where range wants an int: a TypeError in this frame
                x = x + 1
            return x

    with pytest.raises(TracingError, match="could not trace Sized"):
        TorchFLOPsByFX(Sized(), tracer="fx")


def test_a_call_that_cannot_bind_raises_eager_s_type_error_under_the_graph_front_ends() -> None:
    for tracer in ("fx", "export"):
        counter = TorchFLOPsByFX(nn.Sequential(nn.Linear(4, 4)), tracer=tracer)
        with pytest.raises(TypeError, match=r"^Sequential.forward\(\) missing 1 required positional argument: 'input'$"):
            counter.propagate()
        with pytest.raises(TypeError, match=r"^Sequential.forward\(\) got an unexpected keyword argument 'y'$"):
            counter.propagate(torch.randn(2, 4), y=1)


def test_constants_and_equal_numbers_written_back_are_no_refusal() -> None:
    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head_dim = 4
            self.scaling = 0.5
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.scaling = self.head_dim ** -0.5  # a new float object each call, the same value
            return self.l(x) @ torch.eye(4) * self.scaling  # eye: a constant fx keeps on the root

    torch.manual_seed(0)
    model = Attn()
    twin = copy.deepcopy(model)
    x = torch.randn(2, 4)
    counter = TorchFLOPsByFX(model, tracer="fx")
    assert torch.equal(counter.propagate(x), twin(x))
    # Linear 2x4x4 = 32 MACs -> 64 + 8 bias adds; @ eye(4): 32 MACs -> 64; * scaling: 8 -> 144
    assert counter.total_flops == 144


def test_a_missing_attribute_and_a_proxy_word_in_the_forward_s_own_message() -> None:
    class Missing(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.nonexistent(x)  # eager: AttributeError from nn.Module.__getattr__

    class Says(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("Proxy server unreachable")  # the word, not a torch.fx Proxy

    for tracer in ("fx", "export"):
        with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
            TorchFLOPsByFX(Missing(), tracer=tracer).propagate(torch.randn(2))
        with pytest.raises(ValueError, match="Proxy server unreachable"):
            TorchFLOPsByFX(Says(), tracer=tracer).propagate(torch.randn(2))


def test_a_module_name_fx_cannot_write_into_its_code_is_a_tracing_error() -> None:
    class Quoted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module('a"b', nn.Linear(4, 4))  # fx's generated code would hold getattr(self, "a"b")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return getattr(self, 'a"b')(x)

    with pytest.raises(TracingError, match="could not write the code"):
        TorchFLOPsByFX(Quoted(), tracer="fx")
    counter = TorchFLOPsByFX(Quoted())  # the default front end runs it as it is
    counter.propagate(torch.randn(2, 4))
    assert counter.total_flops == 2 * 2 * 4 * 4 + 2 * 4  # 64 MAC flops + 8 bias adds


def test_a_tensor_default_fx_cannot_write_into_its_code_is_a_tracing_error() -> None:
    class Scaled(nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor = torch.full((4,), 2.0)) -> torch.Tensor:  # noqa: B008
            return x * w

    with pytest.raises(TracingError, match=r"could not write the code of Scaled's graph: NameError"):
        TorchFLOPsByFX(Scaled(), tracer="fx")
    x = torch.randn(2, 4)
    assert torch.equal(TorchFLOPsByFX(Scaled()).propagate(x), x * 2.0)  # the default front end runs it


def test_a_random_draw_with_plain_sizes_is_refused_and_the_generator_put_back() -> None:
    # torch.randn(3, 4) takes no input: fx runs it once, at trace time, and the graph would add the
    # same draw on every call, where eager draws anew (a different program)
    class Noise(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l(x) + torch.randn(3, 4)

    model = Noise()
    before = torch.get_rng_state()
    with pytest.raises(TracingError, match=r"Noise's forward draws random numbers without the inputs"):
        TorchFLOPsByFX(model, tracer="fx")
    assert torch.equal(torch.get_rng_state(), before)


def test_a_refused_draw_from_the_model_s_own_generator_puts_it_back() -> None:
    class Seeded(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.g = torch.Generator().manual_seed(5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.randn(3, 4, generator=self.g)

    model = Seeded()
    before = model.g.get_state().clone()
    with pytest.raises(TracingError, match="draws random numbers"):
        TorchFLOPsByFX(model, tracer="fx")
    assert torch.equal(model.g.get_state(), before)


def test_a_random_draw_shaped_by_the_input_traces_and_draws_as_eager() -> None:
    # torch.randn_like(x) and dropout are graph nodes: each call draws, as eager's
    class Noise(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.dropout(x, 0.5) + torch.randn_like(x)

    x = torch.randn(3, 4)
    torch.manual_seed(1)
    eager = [Noise()(x), Noise()(x)]
    torch.manual_seed(1)
    counter = TorchFLOPsByFX(Noise(), tracer="fx")
    assert all(torch.equal(counter.propagate(x), e) for e in eager)


def test_a_forward_taking_star_args_and_star_star_kwargs_under_fx() -> None:
    """fx traces ``*rest`` and ``**kw`` as one placeholder each: the call's extra positionals go to
    the first as a tuple, its other keywords to the second as a dict, as the graph module's own
    forward takes them; ``kw.get`` on that dict is no tensor work (0 FLOPs, not unsupported)."""
    class Star(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, *rest: torch.Tensor, **kw: float) -> torch.Tensor:
            return self.fc(x) * kw.get("scale", 1.0) + torch.stack(rest).sum(0)

    model, x = Star(), torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for args, kwargs in (((x, x), {}), ((x, x, x), {"scale": 2.0})):
            counter = TorchFLOPsByFX(model, tracer="fx")
            assert torch.equal(counter.propagate(*args, **kwargs), model(*args, **kwargs))
            # linear 2*2*4*4 + 8 bias, the scale's multiply 8, the sum over the stacked rest (one per
            # element it reads: 8 per tensor), the add 8
            assert counter.total_flops == 72 + 8 + 8 * (len(args) - 1) + 8


def test_methods_of_python_containers_and_their_subclasses_count_zero_under_fx() -> None:
    from collections import OrderedDict

    class Configured(nn.Module):
        def forward(self, x: torch.Tensor, cfg: dict[str, float]) -> torch.Tensor:
            return x * cfg.get("scale", 1.0)

    x = torch.randn(2, 4)
    for cfg in ({"scale": 2.0}, OrderedDict(scale=2.0)):
        counter = TorchFLOPsByFX(Configured(), tracer="fx")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert torch.equal(counter.propagate(x, cfg), x * 2.0)
        assert counter.total_flops == 8 and not counter.unsupported  # the multiply; get: 0


def test_keyword_only_parameters_after_star_args_bind_as_eager_binds_them_under_fx() -> None:
    """fx puts a keyword-only parameter's placeholder before ``*args``'s: positions skip it."""
    class KeywordOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, *rest: torch.Tensor, k: float = 1.0, **kw: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * k + rest[0] + kw["z"]

    model, x, y = KeywordOnly(), torch.randn(2, 4), torch.randn(2, 4)
    for args, kwargs in (((x, y, y), {"z": x}), ((x, y), {"z": x}), ((x, y), {"k": 2.0, "z": x})):
        counter = TorchFLOPsByFX(model, tracer="fx")
        assert torch.equal(counter.propagate(*args, **kwargs), model(*args, **kwargs))
