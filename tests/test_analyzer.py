"""Tests for ``torch_flops.analyzer.TorchFLOPsByFX``: per-node records, totals, argument checks,
inputs/outputs of every shape, user extensions, state restoration and CSV export.

Every expected number is derived by hand in the comment next to it.
"""

from __future__ import annotations

import copy
import csv
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

from torch_flops import (
    DuplicateFormulaError,
    FUNCTION_FLOPs_MAPPING,
    MODULE_FLOPs_MAPPING,
    NodeExecutionError,
    Status,
    TorchFLOPsByFX,
    UnsupportedOpWarning,
    register_function,
    register_module,
)


def scaled_square(x: torch.Tensor) -> torch.Tensor:
    """A user function fx keeps as one call_function node (wrapped below)."""
    return x * x * 3


torch.fx.wrap("scaled_square")


def doubled_plus_one(x: torch.Tensor) -> torch.Tensor:
    """A user function no one wrapped for fx: a formula registered for it keeps it whole."""
    return x * 2 + 1


def _run(model: nn.Module, *args: Any, tracer: str = "auto", **kwargs: Any) -> tuple[TorchFLOPsByFX, Any]:
    counter = TorchFLOPsByFX(model, tracer=tracer)  # type: ignore[arg-type]
    with torch.no_grad():
        out = counter.propagate(*args, **kwargs)
    return counter, out


# --------------------------------------------------------------------------- per-node records


@pytest.mark.parametrize("tracer", ["auto", "fx"])
def test_mixed_model_records_by_hand(models: Any, tracer: str) -> None:
    model = models.MixedModel().eval()
    x = torch.randn(4, 16)
    counter, out = _run(model, x, tracer=tracer)  # the model as it runs (eager), or its fx graph: the same nodes
    assert counter.tracer_used == ("eager" if tracer == "auto" else "fx")
    with torch.no_grad():
        assert torch.equal(out, model(x))

    got = [(r.name, r.op, r.target, r.module_path, r.module_type, r.status, r.output_shape, r.flops, r.macs)
           for r in counter.records]
    assert got == [
        ("x", "placeholder", "x", "", "MixedModel", Status.ZERO, (4, 16), 0, 0),
        # Linear(16, 32) on (4, 16): macs = 4*32 outputs * 16 = 2048; flops = 2*2048 + 4*32 bias = 4224
        ("fc", "call_module", "Linear", "fc", "Linear", Status.COUNTED, (4, 32), 4224, 2048),
        # relu: 1 per element, 4*32 = 128
        ("relu", "call_function", "torch.relu", "", "MixedModel", Status.COUNTED, (4, 32), 128, 0),
        # sum(-1): one add per input element, 4*32 = 128
        ("sum_1", "call_method", "Tensor.sum", "", "MixedModel", Status.COUNTED, (4,), 128, 0),
        # view: 0 by definition
        ("view", "call_method", "Tensor.view", "", "MixedModel", Status.ZERO, (4, 1), 0, 0),
        ("output", "output", "output", "", "MixedModel", Status.ZERO, (4, 1), 0, 0),
    ]
    assert [r.index for r in counter.records] == list(range(6))
    assert counter.total_flops == 4224 + 128 + 128  # 4480
    assert counter.total_macs == 2048
    assert counter.unsupported == {}
    assert counter.records[1].module_stack == ("fc",)
    assert counter.profile.total_params == 16 * 32 + 32  # 544: weight + bias


@pytest.mark.parametrize("batch", [1, 4])
def test_x_plus_equals_one_is_counted(models: Any, batch: int) -> None:
    x = torch.randn(batch, 8)
    plain, _ = _run(models.LinearPlusOne(add_one=False), x)
    plus, _ = _run(models.LinearPlusOne(add_one=True), x)
    # Linear(8, 8): macs = batch*8*8, flops = 2*macs + batch*8 bias adds
    assert plain.total_flops == 2 * batch * 64 + batch * 8  # batch 4: 512 + 32 = 544
    # x += 1 adds one FLOP per output element: batch*8 (batch 4 -> 32)
    assert plus.total_flops - plain.total_flops == batch * 8
    assert plus.total_macs == plain.total_macs == batch * 64
    added = [r for r in plus.records if r.op in ("call_function", "call_method")]  # x += 1 as it runs: add_
    assert len(added) == 1 and added[0].flops == batch * 8 and added[0].status is Status.COUNTED


def test_shared_module_counted_per_call_parameters_once() -> None:
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.fc(x))

    counter, _ = _run(Shared(), torch.randn(3, 4))
    calls = [r for r in counter.records if r.op == "call_module"]
    # Linear(4, 4) on (3, 4): macs = 3*4*4 = 48, flops = 96 + 12 bias = 108, for each of the 2 calls
    assert [(r.module_path, r.flops, r.macs) for r in calls] == [("fc", 108, 48), ("fc", 108, 48)]
    assert counter.total_flops == 216
    assert counter.profile.total_params == 4 * 4 + 4  # 20: the shared parameters once


# --------------------------------------------------------------------------- argument checks


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"repeat": 0}, ValueError, "repeat"),
        ({"repeat": 1.5}, TypeError, "repeat"),
        ({"warmup": -1}, ValueError, "warmup"),
        ({"warmup": True}, TypeError, "warmup"),
        ({"mem_func_name": "x"}, ValueError, "mem_func_name"),
        ({"ignore_ops": "relu"}, TypeError, "ignore_ops"),
        ({"ignore_ops": (nn.ReLU,)}, TypeError, "ignore_ops"),
        ({"tracer": "bogus"}, ValueError, "tracer"),
        ({"strict": "yes"}, TypeError, "strict"),
        ({"concrete_args": [("x", 1)]}, TypeError, "concrete_args"),
        ({"leaf_modules": (3,)}, TypeError, "leaf_modules"),
    ],
)
def test_bad_constructor_arguments_name_the_parameter(kwargs: dict[str, Any], error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        TorchFLOPsByFX(nn.Linear(2, 2), **kwargs)


@pytest.mark.parametrize("model", [lambda x: x, torch.zeros(2), "resnet50"])
def test_model_must_be_a_module(model: Any) -> None:
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        TorchFLOPsByFX(model)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.print_result_table(),
        lambda c: c.print_total_flops(),
        lambda c: c.print_total_time(),
        lambda c: c.print_max_memory(),
        lambda c: c.save_result_to_csv("never-written.csv"),
        lambda c: c.total_flops,
        lambda c: c.records,
    ],
)
def test_results_before_propagate_raise(call: Any, models: Any, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    counter = TorchFLOPsByFX(models.MixedModel())
    with pytest.raises(RuntimeError, match="propagate"):
        call(counter)
    assert not (tmp_path / "never-written.csv").exists()


def test_unknown_keyword_input_is_named(models: Any) -> None:
    counter = TorchFLOPsByFX(models.MixedModel())
    with pytest.raises(TypeError, match="mask"):
        counter.propagate(torch.randn(4, 16), mask=torch.ones(4, 16))


def test_too_many_and_missing_inputs(models: Any) -> None:
    counter = TorchFLOPsByFX(models.MixedModel())
    with pytest.raises(TypeError, match=r"^MixedModel.forward\(\) takes 2 positional arguments but 3 were given$"):  # eager's words
        counter.propagate(torch.randn(4, 16), torch.randn(4, 16))
    with pytest.raises(TypeError, match=r"^MixedModel.forward\(\) missing 1 required positional argument: 'x'$"):
        counter.propagate()


def test_wrong_input_shape_names_node_and_shapes() -> None:
    mlp = nn.Sequential()
    mlp.add_module("fc1", nn.Linear(8, 16))
    mlp.add_module("act", nn.ReLU())
    mlp.add_module("fc2", nn.Linear(16, 4))
    counter = TorchFLOPsByFX(mlp)
    with pytest.raises(RuntimeError, match="cannot be multiplied") as info:  # torch's own error, as itself
        counter.propagate(torch.randn(2, 9))
    assert type(info.value) is RuntimeError and not isinstance(info.value, NodeExecutionError)
    note = "\n".join(info.value.__notes__)  # the node that raised and its inputs, in a note
    assert "'fc1'" in note
    assert "(2, 9)" in note
    assert mlp.training  # state restored in finally even though the run failed


# --------------------------------------------------------------------------- inputs and outputs


def test_model_without_parameters() -> None:
    class NoParams(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * x).sum()

    x = torch.randn(4, 5)
    counter, out = _run(NoParams(), x)
    assert torch.equal(out, (x * x).sum())
    # mul: 4*5 = 20; sum: one add per input element, 20
    assert counter.total_flops == 40
    assert counter.profile.total_params == 0
    assert counter.profile.device == "cpu"


def test_integer_inputs_embedding_lookup() -> None:
    class Lookup(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.fc = nn.Linear(4, 2)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.fc(self.emb(ids + 1))

    model = Lookup().eval()
    ids = torch.randint(0, 9, (2, 3))
    counter, out = _run(model, ids)
    with torch.no_grad():
        assert torch.equal(out, model(ids))
    rec = {r.name: r for r in counter.records}
    assert rec["add"].status is Status.COUNTED and rec["add"].flops == 0  # integer index arithmetic: 0
    assert rec["emb"].status is Status.ZERO and rec["emb"].output_shape == (2, 3, 4)
    # Linear(4, 2) on (2, 3, 4): macs = 2*3*2 outputs * 4 = 48; flops = 96 + 12 bias = 108
    assert (rec["fc"].flops, rec["fc"].macs) == (108, 48)
    assert counter.total_flops == 108
    assert counter.profile.batch_size == 2


def test_dict_and_tuple_outputs() -> None:
    class Multi(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> dict[str, Any]:
            return {"logits": self.fc(x), "pair": (x.sum(), x * 2)}

    model = Multi().eval()
    x = torch.randn(5, 3)
    counter, out = _run(model, x)
    with torch.no_grad():
        ref = model(x)
    assert set(out) == {"logits", "pair"} and isinstance(out["pair"], tuple)
    assert torch.equal(out["logits"], ref["logits"])
    assert torch.equal(out["pair"][0], ref["pair"][0]) and torch.equal(out["pair"][1], ref["pair"][1])
    assert counter.records[-1].output_shape == ((5, 2), ((), (5, 3)))
    # fc: macs 5*2*3 = 30, flops 60 + 10 = 70; sum: 15; mul: 15
    assert counter.total_flops == 70 + 15 + 15


def test_keyword_inputs_and_default_arguments() -> None:
    class Masked(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
            return x * mask * scale

    model = Masked()
    x, m = torch.randn(2, 3), (torch.rand(2, 3) > 0.5).float()
    counter = TorchFLOPsByFX(model)
    assert torch.equal(counter.propagate(x, mask=m), x * m * 2.0)  # default scale used
    # two multiplies of (2, 3): 6 + 6
    assert counter.total_flops == 12
    assert torch.equal(counter.propagate(mask=m, x=x, scale=3.0), x * m * 3.0)
    assert torch.equal(counter.propagate(x, m, 0.5), x * m * 0.5)
    with pytest.raises(TypeError, match="got multiple values for argument 'x'"):
        counter.propagate(x, x=x, mask=m)


def test_existing_graph_module_as_model(models: Any) -> None:
    gm = fx.symbolic_trace(models.MixedModel())
    x = torch.randn(4, 16)
    counter, out = _run(gm, x)
    assert counter.graph_module is gm
    assert counter.tracer_used == "graph_module" and counter.profile.tracer == "graph_module"
    assert torch.equal(out, gm(x))
    assert counter.total_flops == 4480  # same graph as test_mixed_model_records_by_hand


def test_ignore_ops_function_name(models: Any) -> None:
    counter = TorchFLOPsByFX(models.MixedModel(), ignore_ops=("relu",))
    counter.propagate(torch.randn(4, 16))
    rec = {r.name: r for r in counter.records}
    assert rec["relu"].status is Status.IGNORED and rec["relu"].flops == 0 and rec["relu"].macs == 0
    assert counter.total_flops == 4480 - 128  # 4352: the relu's 128 left out
    assert counter.unsupported == {}


def test_ignore_ops_module_class_and_path() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.randn(2, 4)
    by_class = TorchFLOPsByFX(model, ignore_ops=("ReLU",))
    by_class.propagate(x)
    by_path = TorchFLOPsByFX(model, ignore_ops=("0",))
    by_path.propagate(x)
    # Linear(4, 4) on (2, 4): macs 32, flops 64 + 8 = 72; ReLU: 8
    assert by_class.total_flops == 72
    assert by_path.total_flops == 8
    assert [r.status for r in by_path.records if r.op == "call_module"] == [Status.IGNORED, Status.COUNTED]


# --------------------------------------------------------------------------- user extensions


class MyLeaf(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class WithMyLeaf(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.leaf = MyLeaf()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.leaf(x)


def _leaf_record(counter: TorchFLOPsByFX) -> Any:
    return next(r for r in counter.records if r.name == "leaf")


@pytest.mark.usefixtures("clean_tables")
def test_module_mapping_assignment_is_used_and_copied_per_counter() -> None:
    x = torch.randn(2, 3)
    before = TorchFLOPsByFX(WithMyLeaf(), leaf_modules=(MyLeaf,))  # built before the entry exists

    MODULE_FLOPs_MAPPING["MyLeaf"] = lambda module, out, *args, **kwargs: (7, 3)
    counter = TorchFLOPsByFX(WithMyLeaf(), leaf_modules=(MyLeaf,))
    MODULE_FLOPs_MAPPING["MyLeaf"] = lambda module, out, *args, **kwargs: (100, 0)  # later edit
    later = TorchFLOPsByFX(WithMyLeaf(), leaf_modules=(MyLeaf,))

    counter.propagate(x)
    rec = _leaf_record(counter)
    assert (rec.target, rec.module_type, rec.status, rec.flops, rec.macs) == ("MyLeaf", "MyLeaf", Status.COUNTED, 7, 3)
    later.propagate(x)
    assert _leaf_record(later).flops == 100
    with pytest.warns(UnsupportedOpWarning, match="MyLeaf"):
        before.propagate(x)
    assert _leaf_record(before).status is Status.UNSUPPORTED
    assert before.unsupported == {"MyLeaf": 1}


@pytest.mark.usefixtures("clean_tables")
def test_register_function_for_a_wrapped_user_function() -> None:
    class UsesWrapped(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return scaled_square(x)

    x = torch.randn(3, 5)
    with pytest.warns(UnsupportedOpWarning, match="scaled_square"):  # fx keeps the wrapped function whole
        unregistered, _ = _run(UsesWrapped(), x, tracer="fx")
    [(target, count)] = unregistered.unsupported.items()  # target: "<test module>.scaled_square"
    assert target.endswith(".scaled_square") and count == 1

    @register_function("scaled_square")
    def scaled_square_flops(out: torch.Tensor, x: torch.Tensor) -> int:
        return 2 * out.numel()  # x*x, *3: 2 per element

    counter, out = _run(UsesWrapped(), x)  # "auto" takes the fx graph for a registered function
    assert counter.tracer_used == "fx"
    assert torch.equal(out, x * x * 3)
    assert counter.total_flops == 2 * 15  # 30
    assert counter.unsupported == {}


class _Blk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


class _SubBlk(_Blk):
    """Runs _Blk's forward: counted by _Blk's formula wherever it is found."""


@pytest.mark.usefixtures("clean_tables")
@pytest.mark.parametrize("tracer", ["auto", "fx", "export"])
def test_a_module_formula_by_name_reaches_subclasses_and_is_dropped_the_same_on_every_front_end(tracer: str) -> None:
    MODULE_FLOPs_MAPPING["_Blk"] = lambda module, out, *args, **kwargs: 1000
    x = torch.randn(2, 4)
    for model in (_Blk(), _SubBlk()):  # by name, then through the subclass's base (its forward unchanged)
        counter, _ = _run(nn.Sequential(model), x, tracer=tracer)
        assert counter.total_flops == 1000, (type(model).__name__, tracer)
    # custom_formulas {cls: None}: no formula for the class, by its name neither: its ops count,
    # linear 2*2*4*4 + bias 8 + relu 8
    counter = TorchFLOPsByFX(nn.Sequential(_Blk()), tracer=tracer, custom_formulas={_Blk: None})  # type: ignore[arg-type]
    with torch.no_grad():
        counter.propagate(x)
    assert counter.total_flops == 64 + 8 + 8 and not counter.unsupported
    # a torch class dropped too (fx keeps torch.nn's classes whole by default): through its ops everywhere
    counter = TorchFLOPsByFX(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), tracer=tracer,  # type: ignore[arg-type]
                             custom_formulas={nn.Linear: None})
    with torch.no_grad():
        counter.propagate(x)
    assert counter.total_flops == 64 + 8 + 8 and not counter.unsupported


@pytest.mark.usefixtures("clean_tables")
@pytest.mark.parametrize("how", ["function", "name", "custom_formulas"])
def test_a_formula_for_an_unwrapped_user_function_keeps_it_whole(how: str) -> None:
    """fx traces through a plain function (its ``mul`` and ``add``) unless asked to keep it whole: a
    formula registered for it (by the function, by its name, or in custom_formulas) does."""
    class Uses(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return doubled_plus_one(self.fc(x))

    def formula(out: torch.Tensor, x: torch.Tensor) -> int:
        return 777

    custom = None
    if how == "function":
        FUNCTION_FLOPs_MAPPING[doubled_plus_one] = formula
    elif how == "name":
        FUNCTION_FLOPs_MAPPING["doubled_plus_one"] = formula
    else:
        custom = {doubled_plus_one: lambda module, out, x: 777}
    x = torch.randn(2, 4)
    counter = TorchFLOPsByFX(Uses(), custom_formulas=custom)
    with torch.no_grad():
        out = counter.propagate(x)
    assert counter.tracer_used == "fx"
    assert torch.equal(out, doubled_plus_one(counter.model.fc(x)))
    assert counter.total_flops == 2 * 2 * 4 * 4 + 2 * 4 + 777  # linear 64 + bias 8 + the formula's 777
    assert [r.target.rpartition(".")[2] for r in counter.records if r.op == "call_function"] == ["doubled_plus_one"]


@pytest.mark.usefixtures("clean_tables")
def test_register_duplicate_key_needs_override() -> None:
    def first(out: Any, *args: Any) -> int:
        return 1

    def second(out: Any, *args: Any) -> int:
        return 2

    register_function("foo")(first)
    register_function("foo")(first)  # the same function again is not a conflict
    with pytest.raises(DuplicateFormulaError, match="override=True"):
        register_function("foo")(second)
    assert FUNCTION_FLOPs_MAPPING["foo"] is first
    register_function("foo", override=True)(second)
    assert FUNCTION_FLOPs_MAPPING["foo"] is second
    with pytest.raises(DuplicateFormulaError, match="'relu'"):  # a built-in entry is protected the same way
        register_function("relu")(second)


class MyLinear(nn.Linear):
    pass


def test_linear_subclass_counted_via_mro() -> None:
    model = nn.Sequential(MyLinear(4, 4))
    counter = TorchFLOPsByFX(model, leaf_modules=(MyLinear,))
    counter.propagate(torch.randn(2, 4))
    rec = next(r for r in counter.records if r.op == "call_module")
    # Linear(4, 4) on (2, 4): macs = 2*4*4 = 32; flops = 64 + 8 bias = 72
    assert (rec.target, rec.module_type, rec.status, rec.flops, rec.macs) == ("MyLinear", "MyLinear",
                                                                              Status.COUNTED, 72, 32)


@pytest.mark.usefixtures("clean_tables")
def test_subclass_own_entry_wins_over_mro() -> None:
    @register_module(MyLinear)
    def my_linear_flops(module: nn.Module, out: torch.Tensor, *args: Any) -> tuple[int, int]:
        return 1, 0

    counter = TorchFLOPsByFX(nn.Sequential(MyLinear(4, 4), nn.Linear(4, 4)), leaf_modules=(MyLinear,))
    counter.propagate(torch.randn(2, 4))
    # own entry: 1; the plain Linear after it keeps the built-in formula: 72 (see above)
    assert [r.flops for r in counter.records if r.op == "call_module"] == [1, 72]


# --------------------------------------------------------------------------- model state


def test_state_restored_when_a_node_fails(models: Any, same_state: Any) -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = models.BNLinear()
    model.fc = Boom()  # BatchNorm updates its running stats, then the next node fails
    model.train()
    twin = copy.deepcopy(model)
    x = torch.randn(4, 8)
    counter = TorchFLOPsByFX(model, leaf_modules=(Boom,))
    with pytest.raises(RuntimeError, match="boom"):
        counter.propagate(x)
    with pytest.raises(RuntimeError, match="boom"):
        twin(x)
    same_state(model, twin)  # as one eager call leaves it: the statistics moved once, then it failed


def test_eval_flags_unchanged_and_no_hooks(models: Any, capture_state: Any, same_state: Any) -> None:
    model = models.BNLinear()
    model.eval()
    model.bn.train()  # a mixed model: only the BatchNorm in training mode
    twin = copy.deepcopy(model)
    x = torch.randn(4, 8)
    hooks = capture_state(model)
    counter = TorchFLOPsByFX(model, warmup=1, repeat=2)  # four calls, one of them for real
    out = counter.propagate(x)
    assert torch.equal(out, twin(x))
    same_state(model, twin)  # the running statistics moved exactly once, as in one eager call
    with pytest.raises(AssertionError, match="running_mean"):
        hooks()  # ... which is a change: they did move


# --------------------------------------------------------------------------- printing and CSV


def test_print_wrappers_return_the_data(models: Any, capsys: Any) -> None:
    counter, _ = _run(models.MixedModel(), torch.randn(4, 16), tracer="fx")
    assert counter.print_total_flops() == 4480
    assert "Total FLOPs: 4,480" in capsys.readouterr().out
    rows = counter.print_result_table(show=False)
    assert capsys.readouterr().out == ""
    assert len(rows) == len(counter.records) == 6
    assert all(len(row) == len(TorchFLOPsByFX.result_header) for row in rows)
    assert [row[0] for row in rows] == ["x", "fc", "relu", "sum_1", "view", "output"]
    counter.print_result_table()
    table = capsys.readouterr().out
    assert "Tensor.sum" in table and "torch.relu" in table
    assert counter.print_total_time(show=False) == counter.total_time_ms
    assert counter.print_max_memory(show=False) == counter.max_memory


def _read_csv(path: Any) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_save_result_to_csv_and_append(models: Any, tmp_path: Any) -> None:
    counter, _ = _run(models.MixedModel(), torch.randn(4, 16))
    path = tmp_path / "nodes.csv"
    counter.save_result_to_csv(str(path))
    rows = _read_csv(path)
    header = TorchFLOPsByFX.result_header
    assert rows[0] == header
    assert len(rows) == 1 + 6  # header + one row per node
    fc = dict(zip(header, rows[2], strict=True))
    assert (fc["node"], fc["target"], fc["status"], fc["flops"], fc["macs"]) == ("fc", "Linear", "counted",
                                                                                  "4224", "2048")

    counter.save_result_to_csv(str(path), mode="a")
    appended = _read_csv(path)
    assert len(appended) == 1 + 2 * 6  # rows appended, no second header
    assert appended.count(header) == 1
    assert appended[7:] == rows[1:]

    counter.save_result_to_csv(str(path))  # "w" again overwrites
    assert len(_read_csv(path)) == 7
    with pytest.raises(ValueError, match="mode"):
        counter.save_result_to_csv(str(path), mode="x")


# --------------------------------------------------------------------------- concrete_args, module stacks


def test_concrete_args_none_is_supported() -> None:
    """concrete_args fixes ``mask=None``; the branch on it disappears from the graph."""

    class OptionalMask(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            if mask is not None:
                x = x + mask
            return F.relu(x)

    x = torch.randn(2, 3)
    counter = TorchFLOPsByFX(OptionalMask(), concrete_args={"mask": None})
    out = counter.propagate(x)
    assert torch.equal(out, F.relu(x))
    assert not any(r.name == "add" for r in counter.records)  # the specialised branch is gone


def test_concrete_args_assert_node_is_zero_not_unsupported() -> None:
    class OptionalMask(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            if mask is not None:
                x = x + mask
            return F.relu(x)

    import warnings

    counter = TorchFLOPsByFX(OptionalMask(), concrete_args={"mask": None}, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsupportedOpWarning)
        counter.propagate(torch.randn(2, 3))
    assert counter.unsupported == {}
    assert counter.total_flops == 6  # relu of (2, 3)


def test_module_stack_consistent_between_node_kinds() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.fc(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Block(), Block()])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x)
            return x

    counter, _ = _run(Net(), torch.randn(2, 4))
    rec = {r.name: r for r in counter.records}
    assert rec["blocks_0_fc"].module_stack == ("blocks", "blocks.0", "blocks.0.fc")
    assert rec["relu"].module_path == "blocks.0" and rec["relu"].module_type == "Block"
    # "every enclosing module path, outermost first, ending with module_path"
    assert rec["relu"].module_stack == ("blocks", "blocks.0")


def test_registered_module_class_is_kept_whole_and_counted_by_its_formula(clean_tables: None) -> None:
    from torch_flops import MODULE_FLOPs_MAPPING

    class Scaler(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 3 + 1

    MODULE_FLOPs_MAPPING["Scaler"] = lambda module, out, x: 7 * out.numel()  # user's own count
    model = nn.Sequential(nn.Linear(4, 4), Scaler())
    counter = TorchFLOPsByFX(model)
    counter.propagate(torch.randn(2, 4))
    scaler = [r for r in counter.records if r.module_path == "1"]
    # one call_module node counted by the user's formula: 7 x 8 outputs, not mul + add = 16
    assert [(r.op, r.target, r.flops) for r in scaler] == [("call_module", "Scaler", 56)]


@pytest.mark.parametrize("tracer", ["auto", "fx", "export"])
def test_the_counter_keeps_no_value_of_the_model_s_once_the_caller_lets_the_output_go(tracer: str) -> None:
    # a counter kept for its tables held the last output, and in grad mode every activation autograd saved
    # for it (the first Linear's output, which the second saves): as without the profiler, both are freed
    # when the caller drops the output
    import gc
    import weakref

    made: list[weakref.ref[torch.Tensor]] = []

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden = self.a(x)
            made.append(weakref.ref(hidden))
            return self.b(hidden).relu()

    counter = TorchFLOPsByFX(Two(), tracer=tracer)
    made.clear()
    output = weakref.ref(counter.propagate(torch.randn(4, 8)))
    gc.collect()
    assert output() is None and all(m() is None for m in made)
    assert counter.total_flops > 0  # (what it measured stays)
