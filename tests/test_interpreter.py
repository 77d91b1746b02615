"""Tests for ``torch_flops.interpreter``: the three outcomes per node (counted / zero / unsupported,
plus ignored), warnings and strict mode, failing formulas, node errors and readable targets."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

from torch_flops import (
    NodeExecutionError,
    Status,
    TorchFLOPsByFX,
    UnsupportedOpError,
    UnsupportedOpWarning,
    register_module,
)
from torch_flops.plan import readable_target


def _records(counter: TorchFLOPsByFX) -> dict[str, Any]:
    return {r.name: r for r in counter.records}


# --------------------------------------------------------------------------- unsupported nodes


def test_leaf_without_formula_is_unsupported_warned_and_excluded(models: Any) -> None:
    model = models.WithUntraceable().eval()
    x = torch.randn(2, 8)
    counter = TorchFLOPsByFX(model, leaf_modules=(models.DataDependent,))
    with pytest.warns(UnsupportedOpWarning, match=r"DataDependent \(1 node\(s\): gate"):
        out = counter.propagate(x)
    with torch.no_grad():
        assert torch.equal(out, model(x))  # an unsupported node still runs
    rec = _records(counter)
    gate = rec["gate"]
    assert (gate.op, gate.target, gate.module_path, gate.status, gate.flops, gate.macs) == (
        "call_module", "DataDependent", "gate", Status.UNSUPPORTED, None, None)
    assert "DataDependent" in gate.note
    assert gate.output_shape == (2, 8) and gate.time_ms is not None  # measured all the same
    # only the two Linears count: fc1 Linear(8, 8) on (2, 8): macs 2*8*8 = 128, flops 256 + 16 = 272;
    # fc2 Linear(8, 4): macs 2*4*8 = 64, flops 128 + 8 = 136
    assert counter.total_flops == 272 + 136
    assert counter.total_macs == 128 + 64
    assert counter.unsupported == {"DataDependent": 1}


def test_strict_raises_naming_the_node(models: Any) -> None:
    model = models.WithUntraceable()
    leaf = models.CountingLeaf()
    model.fc2 = nn.Sequential(leaf)  # to see that strict fails before anything runs
    counter = TorchFLOPsByFX(model, leaf_modules=("gate", models.CountingLeaf), strict=True)
    with pytest.raises(UnsupportedOpError, match=r"'gate' \(DataDependent\)") as info:
        counter.propagate(torch.randn(2, 8))
    assert "'fc2_0' (CountingLeaf)" in str(info.value)
    assert leaf.calls == 0


def test_one_warning_per_target(models: Any) -> None:
    class TwoGates(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = models.DataDependent()
            self.b = models.DataDependent()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    counter = TorchFLOPsByFX(TwoGates(), leaf_modules=(models.DataDependent,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counter.propagate(torch.randn(2, 8))
    ours = [w for w in caught if issubclass(w.category, UnsupportedOpWarning)]
    assert len(ours) == 1
    assert "2 node(s): a, b" in str(ours[0].message)
    assert counter.unsupported == {"DataDependent": 2}


def test_unsupported_warning_can_be_silenced(models: Any) -> None:
    assert issubclass(UnsupportedOpWarning, UserWarning)
    counter = TorchFLOPsByFX(models.WithUntraceable(), leaf_modules=("gate",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", UnsupportedOpWarning)
        counter.propagate(torch.randn(2, 8))
    assert not [w for w in caught if issubclass(w.category, UnsupportedOpWarning)]
    assert counter.unsupported == {"DataDependent": 1}


@pytest.mark.usefixtures("clean_tables")
def test_failing_formula_is_unsupported_with_its_error(models: Any) -> None:
    @register_module(models.CountingLeaf)
    def broken(module: nn.Module, out: torch.Tensor, *args: Any) -> int:
        raise ValueError("formula cannot cope")

    x = torch.randn(2, 8)
    counter = TorchFLOPsByFX(models.CountingModel(), leaf_modules=(models.CountingLeaf,))
    with pytest.warns(UnsupportedOpWarning, match="formula cannot cope"):
        counter.propagate(x)
    leaf = _records(counter)["leaf"]
    assert leaf.status is Status.UNSUPPORTED and leaf.flops is None
    assert "ValueError: formula cannot cope" in leaf.note
    # fc: Linear(8, 8) on (2, 8): 272 (see above); the broken leaf is excluded
    assert counter.total_flops == 272

    strict = TorchFLOPsByFX(models.CountingModel(), leaf_modules=(models.CountingLeaf,), strict=True)
    with pytest.raises(UnsupportedOpError, match="'leaf'") as info:
        strict.propagate(x)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.usefixtures("clean_tables")
def test_formula_returning_a_plain_int_means_no_macs(models: Any) -> None:
    @register_module(models.CountingLeaf)
    def doubled(module: nn.Module, out: torch.Tensor, x: torch.Tensor) -> int:
        return out.numel()  # x * 2: one multiply per element

    counter = TorchFLOPsByFX(models.CountingModel(), leaf_modules=(models.CountingLeaf,))
    counter.propagate(torch.randn(2, 8))
    leaf = _records(counter)["leaf"]
    assert (leaf.status, leaf.flops, leaf.macs) == (Status.COUNTED, 16, 0)  # 2*8 elements


# --------------------------------------------------------------------------- node errors


def test_node_error_names_node_module_and_inputs() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(8, 16)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.fc1(x) + y

    counter = TorchFLOPsByFX(Net(), tracer="fx")
    with pytest.raises(RuntimeError, match="must match") as info:
        counter.propagate(torch.randn(2, 8), torch.randn(3, 16))  # fc1 runs; the add fails
    assert type(info.value) is RuntimeError and not isinstance(info.value, NodeExecutionError)  # torch's own
    message = "\n".join(info.value.__notes__)  # the node, its module and inputs in a note
    assert "'add'" in message and "operator.add" in message
    assert "(2, 16) float32 on cpu" in message and "(3, 16) float32 on cpu" in message
    assert "call_function[target=operator.add]" in message  # n.format_node()
    # the default front end: the call that raised, with its inputs, the model's own exception
    eager = TorchFLOPsByFX(Net())
    with pytest.raises(RuntimeError, match="must match") as info:
        eager.propagate(torch.randn(2, 8), torch.randn(3, 16))
    message = "\n".join(info.value.__notes__)
    assert "'add' (Tensor.add)" in message
    assert "(2, 16) float32 on cpu" in message and "(3, 16) float32 on cpu" in message


# --------------------------------------------------------------------------- readable targets


def test_readable_targets() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(2, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.relu(self.conv(x))
            z = torch.cat([y, x], dim=1)
            return (z + 1).flatten(1)

    gm = fx.symbolic_trace(Net())
    targets = {n.name: readable_target(n, gm) for n in gm.graph.nodes}
    assert targets == {"x": "x", "conv": "Conv1d", "relu": "F.relu", "cat": "torch.cat", "add": "operator.add",
                       "flatten": "Tensor.flatten", "output": "output"}
    counter = TorchFLOPsByFX(Net(), tracer="fx")
    counter.propagate(torch.randn(3, 2, 5))
    assert {r.name: r.target for r in counter.records} == targets
    # run as it is (the default): the same nodes; `z + 1` is Tensor.add, as torch calls it
    eager = TorchFLOPsByFX(Net())
    eager.propagate(torch.randn(3, 2, 5))
    assert {r.name: r.target for r in eager.records} == {**targets, "add": "Tensor.add"}
    rec = _records(counter)
    assert rec["cat"].status is Status.ZERO and rec["flatten"].status is Status.ZERO
    # relu and + 1 on (3, 2, 5): 30 each; Conv1d(2, 2, 1) on (3, 2, 5): macs = 30 outputs * 2 = 60,
    # flops = 120 + 30 bias = 150
    assert (rec["relu"].flops, rec["add"].flops, rec["conv"].flops, rec["conv"].macs) == (30, 60, 150, 60)


def test_getitem_is_zero_by_definition() -> None:
    class Split(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = x.chunk(2, dim=-1)
            return a * b

    counter = TorchFLOPsByFX(Split())
    counter.propagate(torch.randn(2, 6))
    rec = _records(counter)
    getitems = [r for r in counter.records if r.op == "call_function" and r.target == "operator.getitem"]
    assert len(getitems) == 2 and all(r.status is Status.ZERO for r in getitems)
    assert rec["chunk"].output_shape == ((2, 3), (2, 3))
    assert rec["mul"].flops == 6  # (2, 3) products


# --------------------------------------------------------------------------- runs and measurements


def _runner(model: nn.Module, graph: int = 0) -> Any:
    from torch_flops import FORMULAS
    from torch_flops.capture import CaptureOptions, capture_fx
    from torch_flops.interpreter import GraphRunner
    from torch_flops.plan import make_plan

    return GraphRunner(make_plan(capture_fx(model, CaptureOptions()).graphs[0], FORMULAS), graph=graph)


def _run_once(runner: Any, x: torch.Tensor) -> tuple[Any, Any]:
    from torch_flops.measure import NullTimer, make_memory_probe
    from torch_flops.runloop import run_repeated
    from torch_flops.state import ExtraRuns

    runner.prepare(timer=NullTimer(), memory=make_memory_probe(x.device, "memory_allocated"), strict=False,
                   timed=True)
    return run_repeated(runner, [x], warmup=0, repeat=1, device=x.device, extra_runs=lambda: ExtraRuns(()))


def test_profile_of_graphs_run_in_sequence(models: Any) -> None:
    """The data model holds several graphs, one of them run twice in a forward (as graph fragments
    between graph breaks will be): records concatenate in execution order, with their graph."""
    from torch_flops import Profile
    from torch_flops.measuring import Measurements

    model = models.MixedModel()
    first, second = _runner(model, graph=0), _runner(nn.Sequential(nn.ReLU()), graph=1)
    x = torch.randn(4, 16)
    out, a = _run_once(first, x)
    _, b = _run_once(second, out)
    _, c = _run_once(second, out)
    measured = Measurements.of([*a.runs, *b.runs, *c.runs], torch.device("cpu"), "live_tensors")
    p = Profile.from_measurements(measured, tracer="fx", module_types={"": "MixedModel", "0": "ReLU"},
                                  module_params={}, batch_size=4, settings={})
    # MixedModel: 6 nodes, 4480 FLOPs (test_analyzer); the ReLU graph (x, 0, output) twice: 3 nodes and
    # 4 elements each
    assert len(p.records) == 6 + 3 + 3
    assert [r.index for r in p.records] == list(range(12))
    assert [r.graph for r in p.records] == [0] * 6 + [1] * 6
    assert p.total_flops == 4480 + 4 + 4
    assert [r.name for r in p.records[6:]] == ["input_1", "_0", "output"] * 2
    assert p.by_module()["0"].nodes == 2 and p.by_module()["0"].flops == 8
    assert all(r.phase == "forward" for r in p.records)


def test_records_carry_the_compute_dtype() -> None:
    class Lookup(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)

        def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.emb(ids).double(), ids.argmax(-1)

    counter = TorchFLOPsByFX(Lookup())
    counter.propagate(torch.randint(0, 9, (2, 3)))
    # the dtype a node computes in: the embedding looks up float32 rows by int64 ids; the cast reads
    # float32; argmax compares the int64 ids; a placeholder and the output: their values'
    assert {r.name: r.dtype for r in counter.records} == {
        "ids": "int64", "emb": "float32", "double": "float32", "argmax": "int64", "output": "float64"}


# --------------------------------------------------------------------------- bytes moved (the roofline's)


class _Moves(nn.Module):
    """One node of each way of moving memory; float32 (4 bytes), x: (3, 4), ids: (2, 3) int64."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 5)
        self.emb = nn.Embedding(10, 4)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.fc(x)
        r = torch.relu(y)
        t = r.t()
        c = t.contiguous()
        same = c.contiguous()
        sq = r * r
        sq.add_(1)
        a, b = y.chunk(2, dim=0)
        cat = torch.cat([a, b], dim=0)
        e = self.emb(ids)
        return same, sq, cat, e


def test_bytes_read_and_written_by_hand() -> None:
    counter = TorchFLOPsByFX(_Moves())
    counter.propagate(torch.randn(3, 4), torch.randint(0, 10, (2, 3)))
    moved = {r.name: (r.bytes_read, r.bytes_written) for r in counter.records}
    assert moved == {
        "x": (0, 0), "ids": (0, 0), "output": (0, 0),  # inputs and the output move nothing
        # Linear(4, 5) on (3, 4): reads x 12*4 = 48, its weight 20*4 = 80 and bias 5*4 = 20; writes 15*4 = 60
        "fc": (48 + 80 + 20, 60),
        "relu": (60, 60),  # reads its input, writes its output
        "t": (0, 0),  # a view
        "contiguous": (60, 60),  # a transposed tensor is copied: read and written
        "contiguous_1": (0, 0),  # already contiguous: the same tensor, nothing moves
        "mul": (60, 60),  # r * r reads r once
        "add_": (60, 60),  # in place: reads and writes the same 60 bytes
        "chunk": (0, 0), "getitem": (0, 0), "getitem_1": (0, 0),  # views
        "cat": (60, 60),  # two halves of 24 + 36 read, 60 written
        # Embedding(10, 4) on (2, 3) ids: a gather reads the 6 rows it writes (6*4*4 = 96) and the
        # ids (6*8 = 48), not the 160-byte table
        "emb": (96 + 48, 96),
    }
    m = counter.profile.by_module()
    assert (m["fc"].bytes_read, m["fc"].bytes_written) == (148, 60)
    assert m[""].bytes_written == sum(w for _, w in moved.values())
    assert counter.profile.by_operator()["Linear"].bytes_read == 148


class _Writes(nn.Module):
    """In-place updates, overwrites and creation; x, y: (3, 4) float32 = 48 bytes each."""

    def __init__(self, assign: bool = False) -> None:
        super().__init__()
        self.assign = assign  # b[i] = ... (torch.export only: fx proxies refuse item assignment)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x * 2
        a.add_(y)
        a.unsqueeze_(0)
        b = torch.zeros_like(x)
        b.copy_(y)
        b.fill_(1.0)
        if self.assign:
            b[0] = y[1]
            b[1] = 3.0
        n = b.new_ones(2, 2)
        return a, b, n


def test_bytes_of_in_place_updates_overwrites_and_creation_by_hand() -> None:
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    # each op as the fx graph names it (Tensor methods) and as torch.export does (aten overloads)
    for tracer, assign in (("fx", False), ("export", True)):
        counter = TorchFLOPsByFX(_Writes(assign), tracer=tracer)  # type: ignore[arg-type]
        out = counter.propagate(x, y)
        assert all(torch.equal(o, r) for o, r in zip(out, _Writes(assign)(x, y)))
        moved = {r.name: (r.bytes_read, r.bytes_written) for r in counter.records}
        assert {k: moved[k] for k in ("mul", "add_", "unsqueeze_", "zeros_like", "copy_", "fill_", "new_ones")} == {
            "mul": (48, 48),
            "add_": (48 + 48, 48),  # in place: reads a and y, writes a
            "unsqueeze_": (0, 0),  # metadata only
            "zeros_like": (0, 48),  # reads only x's shape, writes 48 bytes of zeros
            "copy_": (48, 48),  # reads y, overwrites b without reading it
            "fill_": (0, 48),  # a Python number: reads nothing, writes b
            "new_ones": (0, 16),  # (2, 2) float32 written
        }
    # b[0] = y[1] is select (a view, 0) + copy_ of the 4-float row: 16 read, 16 written; b[1] = 3.0
    # fills a row from a lifted 0-d float32 tensor: 4 read, 16 written
    assert (moved["select"], moved["select_1"], moved["copy__1"], moved["fill__1"]) == (
        (0, 0), (0, 0), (16, 16), (4, 16))
    assert moved["lift_fresh_copy"] == (4, 4)


class _Subtle(nn.Module):
    """Nodes whose bytes are easy to get wrong; x: (8, 16) float32 = 512 bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.1)
        self.act = nn.ReLU(inplace=True)
        self.emb = nn.Embedding(10, 4)

    def forward(self, x: torch.Tensor, cache: torch.Tensor, pos: torch.Tensor, k: torch.Tensor,
                ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = self.drop(x)
        b = self.act(x * 2)
        b += x
        cache.index_copy_(1, pos, k)
        c = x + torch.ones(1, 16, device=x.device).expand(8, 16)
        e = F.embedding(ids, self.emb.weight)
        return a, b, c, e


def test_bytes_of_aliases_scatters_and_broadcasts_by_hand() -> None:
    x, pos, k, ids = torch.randn(8, 16), torch.tensor([3]), torch.randn(4, 1, 16), torch.tensor([[1, 2]])
    for tracer in ("fx", "export"):
        counter = TorchFLOPsByFX(_Subtle().eval(), tracer=tracer)  # type: ignore[arg-type]
        counter.propagate(x, torch.zeros(4, 1000, 16), pos, k, ids)
        by_target = {r.target.rpartition(".")[2]: (r.bytes_read, r.bytes_written) for r in counter.records}
        by_name = {r.name: (r.bytes_read, r.bytes_written) for r in counter.records}
        assert by_target["Dropout" if tracer == "fx" else "dropout"] == (0, 0)  # eval: returns x itself
        assert by_target["ReLU" if tracer == "fx" else "relu_"] == (512, 512)  # in place: reads and writes b
        assert by_name["add" if tracer == "fx" else "add_"] == (1024, 512)  # b += x reads b and x
        # the KV-cache write: reads pos (8 bytes) and k (4*16*4 = 256), writes k's 256 bytes of the
        # 256,000-byte cache
        assert by_target["index_copy_"] == (8 + 256, 256)
        # x + a (1, 16) row expanded to (8, 16): reads x 512 and the row's 64 bytes, not 512
        assert by_name["add_1" if tracer == "fx" else "add"] == (512 + 64, 512)
        # F.embedding(ids, weight): gathers 2 rows of 16 bytes, reads the 16 bytes of ids; float32
        (embedding,) = [r for r in counter.records if r.target.endswith("embedding")]
        assert (embedding.bytes_read, embedding.bytes_written, embedding.dtype) == (32 + 16, 32, "float32")


def test_dtype_of_a_matmul_under_autocast_is_the_narrow_one() -> None:
    counter = TorchFLOPsByFX(nn.Linear(16, 16))
    with torch.autocast("cpu", torch.bfloat16):
        counter.propagate(torch.randn(8, 16))
    (linear,) = [r for r in counter.records if r.name == "linear"]  # a root Linear traces to F.linear
    assert linear.dtype == "bfloat16"  # float32 inputs, run in bf16: priced at the bf16 peak


def test_bytes_on_meta_and_through_export_match() -> None:
    x, ids = torch.randn(3, 4), torch.randint(0, 10, (2, 3))
    results = []
    for device, tracer in (("cpu", "fx"), ("meta", "fx"), ("cpu", "export")):
        counter = TorchFLOPsByFX(_Moves().to(device), tracer=tracer)  # type: ignore[arg-type]
        counter.propagate(x.to(device), ids.to(device))
        results.append((counter.profile.by_module()[""].bytes_read, counter.profile.by_module()[""].bytes_written))
    # fx reads the Linear's parameters as the module's; export reads them as get_attr nodes (which move
    # nothing themselves) feeding aten.linear: the same bytes either way, on any device
    assert results[0] == results[1] == results[2]
