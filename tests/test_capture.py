"""Tests for ``torch_flops.capture``: TracingError messages, leaf modules (by class and by path),
concrete_args, GraphModules passed through, and matching propagate's inputs to placeholders."""

from __future__ import annotations

import operator
import warnings
from typing import Any

import pytest
import torch
from torch import fx, nn

from torch_flops import Status, TorchFLOPsByFX, TracingError
from torch_flops.capture import ModelIndex, bind_inputs, split_leaf_modules, trace_fx


def test_untraceable_model_names_cause_and_remedies(models: Any) -> None:
    with pytest.raises(TracingError) as info:
        TorchFLOPsByFX(models.DataDependent(), tracer="fx")
    message = str(info.value)
    assert "DataDependent" in message
    assert "control flow" in message  # fx's own reason, kept
    assert "leaf_modules" in message and "concrete_args" in message
    assert isinstance(info.value.__cause__, Exception)


def test_untraceable_submodule_is_located(models: Any) -> None:
    with pytest.raises(TracingError, match=r"inside module 'gate' \(DataDependent\)"):
        trace_fx(models.WithUntraceable())


@pytest.mark.parametrize("leaf", ["class", "path"])
def test_leaf_modules_make_the_model_traceable(models: Any, leaf: str) -> None:
    leaves = (models.DataDependent,) if leaf == "class" else ("gate",)
    gm = trace_fx(models.WithUntraceable(), leaf_modules=leaves)
    nodes = [(n.op, str(n.target)) for n in gm.graph.nodes]
    # the whole untraceable submodule is one call_module node; nothing of its inside is traced
    assert nodes == [("placeholder", "x"), ("call_module", "fc1"), ("call_module", "gate"),
                     ("call_module", "fc2"), ("output", "output")]


def test_leaf_path_only_affects_that_module(models: Any) -> None:
    class Double(nn.Module):  # (a CountingLeaf traced through would be refused: fx runs its count once)
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = models.CountingLeaf()
            self.b = Double()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    gm = trace_fx(Two(), leaf_modules=("a",))
    ops = [(n.op, str(n.target)) for n in gm.graph.nodes]
    # a stays whole; b is traced through (its x * 2 becomes an operator.mul node)
    assert ops[1] == ("call_module", "a")
    assert ("call_function", "<built-in function mul>") in ops
    assert ("call_module", "b") not in ops


def test_split_leaf_modules_rejects_other_entries() -> None:
    assert split_leaf_modules((nn.ReLU, "a.b")) == ((nn.ReLU,), frozenset({"a.b"}))
    with pytest.raises(TypeError, match="leaf_modules"):
        split_leaf_modules((nn.ReLU(),))  # type: ignore[arg-type]  # an instance, not a class
    with pytest.raises(TypeError, match="leaf_modules"):
        split_leaf_modules((int,))


def test_a_leaf_path_that_names_no_module_is_warned_about() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TorchFLOPsByFX(model, leaf_modules=["1", "1.0", nn.Linear])  # real paths: no warning
    with pytest.warns(UserWarning, match=r"leaf_modules \['1\.1', 'no\.such'\] name no module of Sequential") as w:
        TorchFLOPsByFX(model, leaf_modules=["no.such", "1", "1.1"])
    assert w[0].filename == __file__

    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = self.a  # one module, two names: named_modules() lists "a" only

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(x)

    with pytest.warns(UserWarning, match=r"leaf_modules path 'b' is a second name of module 'a'"):
        TorchFLOPsByFX(Shared(), leaf_modules=["b"])


def test_graph_module_is_returned_unchanged(models: Any) -> None:
    gm = fx.symbolic_trace(models.MixedModel())
    assert trace_fx(gm) is gm


def test_auto_tracer_runs_the_model_and_records_its_graph(models: Any) -> None:
    counter = TorchFLOPsByFX(models.MixedModel())  # tracer="auto": nothing is traced ahead of the run
    assert counter.tracer_used is None and counter.graph_module is None
    counter.propagate(torch.randn(4, 16))
    assert counter.profile.tracer == counter.tracer_used == "eager"
    gm = counter.graph_module  # the graph of what ran
    assert isinstance(gm, fx.GraphModule)
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_module", "call_function", "call_method",
                                              "call_method", "output"]
    assert gm.get_submodule("fc") is counter.model.fc  # the model's own module, not a copy


def test_fx_tracer_captures_at_construction(models: Any) -> None:
    counter = TorchFLOPsByFX(models.MixedModel(), tracer="fx")
    assert counter.tracer_used == "fx"
    assert isinstance(counter.graph_module, fx.GraphModule)
    counter.propagate(torch.randn(4, 16))
    assert counter.profile.tracer == "fx"


def test_tracing_leaves_the_model_alone(models: Any, capture_state: Any) -> None:
    model = models.WithUntraceable()
    check = capture_state(model)
    counter = TorchFLOPsByFX(model, leaf_modules=("gate",), tracer="fx")
    assert counter.graph_module is not None and counter.graph_module is not model
    # the GraphModule calls the user's own submodules (no copies): parameters are the same objects
    assert counter.graph_module.get_submodule("fc1") is model.fc1
    check()


class Flagged(nn.Module):
    def forward(self, x: torch.Tensor, double: bool = False) -> torch.Tensor:
        if double:
            return x * 2
        return torch.relu(x)


def test_concrete_args_fix_a_python_flag() -> None:
    with pytest.raises(TracingError):  # a Proxy cannot be used as a Python bool
        TorchFLOPsByFX(Flagged(), tracer="fx")
    counter = TorchFLOPsByFX(Flagged(), tracer="fx", concrete_args={"double": True})
    assert counter.graph_module is not None
    assert not any("relu" in str(n.target) for n in counter.graph_module.graph.nodes)  # branch fixed
    x = torch.randn(3, 4)
    assert torch.equal(counter.propagate(x, True), x * 2)  # the value passed again, by position
    rec = [r for r in counter.records if r.status is Status.COUNTED and r.flops]
    assert [(r.target, r.flops) for r in rec] == [("operator.mul", 12)]  # 3*4 products


def test_a_concrete_arg_left_out_runs_as_eager_runs_it() -> None:
    """Left out, an argument takes its default in eager: the graph fixed to that value runs (the
    value need not be passed again); fixed to another, the call is refused (eager's call would run
    the other branch), before anything runs."""
    x = torch.randn(3, 4)
    same = TorchFLOPsByFX(Flagged(), tracer="fx", concrete_args={"double": False})
    assert torch.equal(same.propagate(x), torch.relu(x))
    counter = TorchFLOPsByFX(Flagged(), tracer="fx", concrete_args={"double": True})
    assert torch.equal(counter.propagate(x, double=True), x * 2)
    with pytest.raises(TracingError, match=r"input 'double' was fixed to True by concrete_args .* leaves it out, "
                                           r"which the model runs with its default False"):
        counter.propagate(x)


def test_concrete_args_none_given_a_tensor_and_a_typo_are_refused_clearly() -> None:
    class Masked(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            return x if mask is None else x * mask

    x = torch.randn(3, 2)
    counter = TorchFLOPsByFX(Masked(), tracer="fx", concrete_args={"mask": None})
    with pytest.raises(TracingError, match=r"input 'mask' was fixed to None by concrete_args .* gives tensor"):
        counter.propagate(x, torch.ones(3, 2))  # (fx's own check raised a bare AssertionError in the graph)
    with pytest.raises(ValueError, match=r"concrete_args names 'maks', which is no argument of Masked.forward "
                                         r"\(x, mask\)"):
        TorchFLOPsByFX(Masked(), tracer="fx", concrete_args={"maks": None})


@pytest.mark.parametrize("how", ["position", "keyword"])
def test_another_value_for_a_concrete_arg_is_refused_before_running(how: str) -> None:
    # the graph holds double=True's branch: double=False would run it all the same (fx's own check raised a
    # bare AssertionError from inside the graph)
    counter = TorchFLOPsByFX(Flagged(), tracer="fx", concrete_args={"double": True})
    x = torch.randn(3, 4)
    with pytest.raises(TracingError, match=r"input 'double' was fixed to True by concrete_args .* gives False"):
        counter.propagate(x, False) if how == "position" else counter.propagate(x, double=False)
    assert torch.equal(counter.propagate(x, 1), x * 2)  # (1 == True: the same value)


class Masked(nn.Module):
    """``forward(x, mask=None)``: fx traces ``mask`` as an input, so its graph has the masked branch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, unused: Any = None) -> torch.Tensor:
        y = self.linear(x)
        if mask is not None:
            y = y + mask
        return y


@pytest.mark.parametrize("call", ["omitted", "positional_none", "keyword_none"])
def test_fx_traces_again_for_an_optional_argument_left_out(call: str) -> None:
    # Linear(4, 4) on (1, 2, 4): 2 x 4 x 4 = 32 MACs, 2 x 32 + 8 bias adds = 72 FLOPs; the mask add 8 more
    model = Masked()
    counter = TorchFLOPsByFX(model, tracer="fx")
    x, mask = torch.randn(1, 2, 4), torch.randn(1, 2, 4)
    args: tuple[Any, ...] = {"omitted": (x,), "positional_none": (x, None), "keyword_none": (x,)}[call]
    kwargs = {"mask": None} if call == "keyword_none" else {}
    assert torch.equal(counter.propagate(*args, **kwargs), model(x))  # fx's own graph would add None: TypeError
    assert (counter.total_flops, counter.tracer_used) == (72, "fx")
    assert counter.graph_module is not None
    assert not any(n.target is operator.add for n in counter.graph_module.graph.nodes)
    assert torch.equal(counter.propagate(x, mask), model(x, mask))  # the graph traced with mask as an input
    assert (counter.total_flops, counter.tracer_used) == (80, "fx")
    assert counter.graph_module is not None
    assert any(n.target is operator.add for n in counter.graph_module.graph.nodes)
    counter.propagate(x)
    assert counter.total_flops == 72
    with pytest.warns(UserWarning, match="the fx graph does not use 'unused'"):  # no node reads it
        counter.propagate(x, unused=torch.ones(1))


# --------------------------------------------------------------------------- bind_inputs


def _gm_with_inputs() -> fx.GraphModule:
    class Net(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
            return (x + y) * scale

    return fx.symbolic_trace(Net())


def test_bind_inputs_positional_keyword_default() -> None:
    gm = _gm_with_inputs()
    x, y = torch.ones(1), torch.zeros(1)
    assert bind_inputs(gm, (x, y), {}) == [x, y, 2.0]  # default from the graph
    assert bind_inputs(gm, (x,), {"y": y, "scale": 5.0}) == [x, y, 5.0]
    assert bind_inputs(gm, (), {"scale": 1.0, "y": y, "x": x}) == [x, y, 1.0]  # placeholder order


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((1, 2, 3, 4), {}, "takes 3 input"),
        ((1,), {"x": 1, "y": 2}, "'x' given both"),
        ((1,), {}, "missing input 'y'"),
        ((1, 2), {"z": 3}, r"unexpected keyword input\(s\) \['z'\]"),
    ],
)
def test_bind_inputs_errors_name_the_input(args: tuple[Any, ...], kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        bind_inputs(_gm_with_inputs(), args, kwargs)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_trace_fx_gives_exactly_fx_symbolic_trace_graph(name: str) -> None:
    # Our tracer finds parameter paths by a dict lookup instead of fx's scan of named_parameters();
    # the graph must be identical, shared (tied) parameters included (gpt2's head is wte.weight).
    from torch_flops import zoo
    from torch_flops.capture import trace_fx

    build = {"llama": lambda: zoo.llama(num_layers=2), "gpt2": lambda: zoo.gpt2(n_layer=2, n_embd=64, n_head=4)}
    with torch.device("meta"):
        model = build[name]()
    ours = trace_fx(model)
    reference = torch.fx.symbolic_trace(model)
    assert str(ours.graph) == str(reference.graph)
    assert ours.code == reference.code


# --------------------------------------------------------------------------- what a capture hands on


def test_nothing_is_stored_on_the_graph_modules(models: Any) -> None:
    from torch_flops.capture import CaptureOptions, capture_export, capture_fx

    model = models.MixedModel()
    ours = capture_fx(model, CaptureOptions()).graph_module
    assert set(vars(ours)) == set(vars(fx.symbolic_trace(model)))  # the attributes fx itself sets
    x = torch.randn(4, 16)
    exported = capture_export(model, (x,), {})
    program = torch.export.export(model, (x,), strict=False).module()
    assert not [k for k in vars(exported.graph_module) if "torch_flops" in k]
    assert set(vars(exported.graph_module)) <= set(vars(program)) | {"model"}
    # what the graph needs to bind inputs lives in the capture: names from the model's forward
    with pytest.raises(TypeError, match=r"unexpected keyword input\(s\) \['y'\]"):
        exported.graphs[0].bind((x,), {"y": x})
    with pytest.raises(TypeError, match=r"exported with 1 positional input\(s\) \(x\) but 2 were given"):
        exported.graphs[0].bind((x, x), {})
    assert exported.graphs[0].bind((x,), {})[0] is x


def test_capture_locations_are_clean_paths(models: Any) -> None:
    from torch_flops.capture import CaptureOptions, capture_export, capture_fx

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([models.MixedModel(), models.MixedModel()])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.blocks[1](self.blocks[0](x).expand(4, 16))

    x = torch.randn(4, 16)
    for capture in (capture_fx(Outer(), CaptureOptions()), capture_export(Outer(), (x,), {})):
        located = {(loc.path, loc.module_type, loc.chain) for loc in capture.graphs[0].locations.values()}
        # the export wrapper's own attribute never shows; the iterated ModuleList is in every chain
        assert ("blocks.1.fc", "Linear", ("blocks", "blocks.1", "blocks.1.fc")) in located, capture.front_end
        assert ("blocks.0", "MixedModel", ("blocks", "blocks.0")) in located, capture.front_end
        assert not any(path.startswith("model") for path, _, _ in located)


def test_lazy_modules_need_one_forward_first() -> None:
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    for tracer in ("fx", "export"):
        with pytest.raises(ValueError, match=r"'0' \(LazyLinear\) is a lazy module .* run the model once"):
            TorchFLOPsByFX(model, tracer=tracer).propagate(torch.randn(2, 3))  # type: ignore[arg-type]
    model(torch.randn(2, 3))  # initialised: now a Linear(3, 4)
    counter = TorchFLOPsByFX(model)
    counter.propagate(torch.randn(2, 3))
    # Linear(3, 4) on (2, 3): 24 MACs, 48 + 8 bias = 56 FLOPs; ReLU 8; parameters 12 + 4
    assert (counter.total_macs, counter.total_flops, counter.profile.total_params) == (24, 64, 16)


class CountsItsCalls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count += 1  # under fx: self.count = <Proxy add>, an assignment no graph replays
        self.last = x  # the same for a plain attribute
        return self.lin(x) * self.count


def test_fx_refuses_a_forward_that_assigns_attributes_and_leaves_them_alone() -> None:
    model = CountsItsCalls()
    count = model.count
    with pytest.raises(TracingError, match=r"assigns module attributes \((count, last|last, count)"):
        TorchFLOPsByFX(model, tracer="fx")
    assert model.count is count and float(count) == 0.0  # the buffer object and value, as they were
    assert "last" not in model.__dict__
    x = torch.randn(2, 4)
    assert torch.equal(model(x), model.lin(x) * 1.0)  # the model runs eagerly as before: count is 1 now
    counter = TorchFLOPsByFX(model)  # the default front end runs it as it is
    counter.propagate(x)
    assert float(model.count) == 2.0


class _CheckpointMismatch(Exception):
    def __init__(self, code: int) -> None:
        super().__init__("checkpoint mismatch")
        self.code = code


class _RaisesItsOwn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise _CheckpointMismatch(3)


@pytest.mark.parametrize("tracer", ["fx", "export"])
def test_the_forwards_own_exception_while_traced_comes_out_as_itself(tracer: str) -> None:
    with pytest.raises(_CheckpointMismatch) as caught:
        TorchFLOPsByFX(_RaisesItsOwn(), tracer=tracer).propagate(torch.randn(2, 4))
    assert caught.value.code == 3
    assert any(f"torch.{tracer}" in note and "traced it" in note for note in caught.value.__notes__)


def test_a_tracing_limit_is_still_a_tracing_error() -> None:
    class Branches(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if x.sum() > 0 else -x  # a traced value as a Python bool

    with pytest.raises(TracingError, match="could not trace Branches"):
        TorchFLOPsByFX(Branches(), tracer="fx")


class WritesIntoItsOwnTensor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty(4, 4)  # made without the inputs: fx runs this once and keeps y as a constant
        torch.mm(x, self.w, out=y)  # the graph writes into that constant ...
        return y * 1  # ... but this product was computed at trace time: a stale output every call


class AddsIntoItsOwnTensor(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(4)
        total.add_(x.sum(0))  # every call would add into the one constant
        return total


@pytest.mark.parametrize("model", [WritesIntoItsOwnTensor(), AddsIntoItsOwnTensor()])
def test_fx_refuses_a_forward_that_writes_into_a_folded_constant(model: nn.Module) -> None:
    with pytest.raises(TracingError, match="writes into a tensor it made without the inputs"):
        TorchFLOPsByFX(model, tracer="fx")
    x = torch.randn(4, 4)
    with torch.no_grad():
        assert torch.equal(TorchFLOPsByFX(model).propagate(x), model(x))  # the default front end: as it runs


class _AppendsToItsHistory(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("history", torch.zeros(1, 4))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history = torch.cat([self.history, x])  # rebinds the buffer
        self.calls += 1
        return self.history.sum(0)


def test_export_refuses_a_forward_that_rebinds_its_state() -> None:
    model = _AppendsToItsHistory()
    with pytest.raises(TracingError, match=r"assigns module state \((history, calls|calls, history)"):
        TorchFLOPsByFX(model, tracer="export").propagate(torch.ones(2, 4))
    assert model.history.shape == (1, 4) and model.calls == 0  # torch.export traced it without changing it


class _Refuses(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != 8:
            raise ValueError("model says no")
        return x


def test_export_lets_the_forwards_own_builtin_error_out_as_itself() -> None:
    with pytest.raises(ValueError, match="model says no") as caught:
        TorchFLOPsByFX(_Refuses(), tracer="export").propagate(torch.ones(2, 4))
    assert type(caught.value) is ValueError
    assert any("torch.export traced it" in note for note in caught.value.__notes__)


def test_a_dropped_torch_class_fx_cannot_trace_through_is_kept_whole() -> None:
    """custom_formulas {nn.BatchNorm2d: None}: fx cannot trace BatchNorm's forward (it branches on its
    flags), so it stays one node (without a formula: unsupported, warned about), the rest counted as
    FlopCounterMode counts it (the convolution; it has no formula for the batch norm either)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)), torch.randn(2, 3, 8, 8)
    with torch.no_grad(), FlopCounterMode(display=False) as reference:
        model(x)
    counter = TorchFLOPsByFX(model, tracer="fx", custom_formulas={nn.BatchNorm2d: None})
    with torch.no_grad(), pytest.warns(UserWarning, match="BatchNorm2d"):
        counter.propagate(x)
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops()
    assert counter.unsupported == {"BatchNorm2d": 1}
    # with the convolution dropped too: it is traced through still (counted), only the batch norm kept whole
    both = TorchFLOPsByFX(model, tracer="fx", custom_formulas={nn.BatchNorm2d: None, nn.Conv2d: None})
    with torch.no_grad(), pytest.warns(UserWarning, match="BatchNorm2d"):
        both.propagate(x)
    assert both.profile.with_convention("flop_counter").total_flops == reference.get_total_flops()
    assert both.unsupported == {"BatchNorm2d": 1}


def test_a_parameter_also_registered_as_a_parents_buffer_is_counted_as_a_parameter() -> None:
    # met first as the parent's buffer, the child's bias went uncounted: 16 parameters of 20, 64 B of 80
    class Aliased(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Linear(4, 4)
            self._buffers["alias"] = self.c.bias

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(x)

    index = ModelIndex(Aliased())
    # Linear(4, 4): 16 weights + 4 biases, all in c
    assert (index.params[""], index.params["c"], sum(t.numel() for t in index.parameters)) == (0, 20, 20)
