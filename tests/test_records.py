"""Tests for ``torch_flops.records``: the roll-ups (by module, by operator, top-k) agree with the
records they are made from, and a profile survives its JSON document."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from torch_flops import Profile, Status, TorchFLOPsByFX, zoo
from torch_flops.records import SCHEMA_NAME, SCHEMA_VERSION


# ---------------------------------------------------------------------- by_module
def test_by_module_hand_profile(hand_profile: Any) -> None:
    p = hand_profile()
    m = p.by_module()
    assert list(m) == ["", "encoder", "encoder.0", "encoder.1", "head", "unused"]  # the model's order
    root = m[""]
    # 840 + 40 + 40 + 168 + 168 = 1256 FLOPs; 400 + 80 + 80 = 560 MACs; the unsupported node adds nothing
    assert (root.flops, root.macs, root.nodes, root.unsupported) == (1256, 560, 8, 1)
    assert (root.flops, root.macs) == (p.total_flops, p.total_macs)
    assert root.time_ms == pytest.approx(4.865) and root.time_ms == p.total_time_ms
    assert root.params == 137 == p.total_params  # 110 + 22 + 5
    assert (m["encoder"].flops, m["encoder"].macs, m["encoder"].nodes) == (880, 400, 2)
    assert m["encoder"].time_ms == pytest.approx(2.5)
    assert (m["encoder"].params, m["encoder"].own_params) == (110, 0)
    # head is called twice: both calls count, its 22 parameters once
    assert (m["head"].flops, m["head"].macs, m["head"].nodes, m["head"].params) == (336, 160, 2, 22)
    # never ran: still there with its parameters
    assert (m["unused"].flops, m["unused"].nodes, m["unused"].time_ms, m["unused"].params) == (0, 0, None, 5)
    assert [x.depth for x in m.values()] == [0, 1, 2, 2, 1, 1]
    assert m["encoder.0"].flops_per_s == pytest.approx(840 / 2e-3)
    assert m["unused"].flops_per_s is None


def test_by_module_untimed_keeps_none(hand_profile: Any) -> None:
    m = hand_profile(timed=False).by_module()
    assert all(x.time_ms is None for x in m.values())
    assert m[""].flops_per_s is None
    assert m[""].flops == 1256


def test_children_sum_to_at_most_parent(hand_profile: Any) -> None:
    m = hand_profile().by_module()
    assert m["encoder.0"].flops + m["encoder.1"].flops == m["encoder"].flops
    children = m["encoder"].flops + m["head"].flops + m["unused"].flops
    assert children == 1216 < m[""].flops  # the root-level add is the root's own


def test_module_chain_fills_missing_containers(rec: Any) -> None:
    # fx lists the modules that were called; a ModuleList is iterated, not called
    r = rec(0, "n", "call_function", "F.softmax", "h.0.attn", "Attn", 1, 0, None, stack=("h.0", "h.0.attn"))
    assert r.module_chain == ("h", "h.0", "h.0.attn")
    assert rec(0, "n", "call_function", "f", "", "M", 0, 0, None).module_chain == ()
    # a shared module called from another keeps its caller first
    r = rec(0, "n", "call_function", "f", "shared", "S", 0, 0, None, stack=("block", "shared"))
    assert r.module_chain == ("block", "shared")


def test_paths_only_in_records_are_listed(rec: Any) -> None:
    r = rec(0, "n", "call_function", "torch.mul", "extra.inner", "Inner", 6, 0, 1.0)
    m = Profile(records=(r,), module_types={"": "M"}).by_module()
    assert list(m) == ["", "extra", "extra.inner"]
    assert m["extra.inner"].module_type == "Inner" and m["extra"].flops == 6 and m[""].flops == 6


# ---------------------------------------------------------------------- by_operator
def test_by_operator_hand_profile(hand_profile: Any) -> None:
    p = hand_profile()
    ops = p.by_operator()
    # most FLOPs first; ties keep first-run order
    assert list(ops) == ["Linear", "ReLU", "operator.add", "placeholder", "torch.mystery", "output"]
    lin = ops["Linear"]
    assert (lin.flops, lin.macs, lin.calls, lin.time_ms) == (840 + 168 + 168, 560, 3, 4.0)
    assert (ops["torch.mystery"].calls, ops["torch.mystery"].unsupported, ops["torch.mystery"].flops) == (1, 1, 0)
    assert sum(o.flops for o in ops.values()) == p.total_flops
    assert sum(o.macs for o in ops.values()) == p.total_macs
    assert sum(o.calls for o in ops.values()) == len(p.records)
    assert sum(o.time_ms for o in ops.values()) == pytest.approx(p.total_time_ms)


# ---------------------------------------------------------------------- top_modules
def test_top_modules_known_answers(hand_profile: Any) -> None:
    p = hand_profile()

    def names(modules: list[Any]) -> list[str]:
        return [m.path for m in modules]

    assert names(p.top_modules(2, depth=1, by="flops")) == ["encoder", "head"]  # 880 > 336 > 0
    assert names(p.top_modules(3, depth=1, by="params")) == ["encoder", "head", "unused"]  # 110, 22, 5
    assert names(p.top_modules(3, depth=1, by="time")) == ["encoder", "head", "unused"]  # 2.5, 2.0, untimed
    assert names(p.top_modules(3, depth=1, by="macs")) == ["encoder", "head", "unused"]  # 400, 160, 0
    # -1: the innermost modules (no submodules): encoder.0, encoder.1, head, unused
    assert names(p.top_modules(3, by="flops")) == ["encoder.0", "head", "encoder.1"]  # 840, 336, 40
    assert names(p.top_modules(2, by="time")) == ["encoder.0", "head"]  # 2.0 == 2.0: model order
    assert names(p.top_modules(10, depth=2)) == ["encoder.0", "encoder.1"]
    assert names(p.top_modules(3, depth=0)) == [""]
    assert p.top_modules(3, depth=7) == []
    assert p.top_modules(0) == []


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"k": -1}, ValueError, "k must be"), ({"k": 1.5}, TypeError, "k must be"),
    ({"depth": -2}, ValueError, "depth must be"), ({"by": "latency"}, ValueError, "by must be one of"),
])
def test_top_modules_rejects_bad_arguments(kwargs: dict[str, Any], error: type[Exception], match: str,
                                           hand_profile: Any) -> None:
    # a value of the wrong type is a TypeError, a value out of range a ValueError (torch_flops._validate)
    with pytest.raises(error, match=match):
        hand_profile().top_modules(**kwargs)


def test_top_modules_on_a_model() -> None:
    # Linear(16, 64) -> Linear(64, 32) -> Linear(32, 4) on a batch of 2
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.Linear(32, 4))
    counter = TorchFLOPsByFX(model)
    counter.propagate(torch.randn(2, 16))
    top = counter.profile.top_modules(2, depth=1, by="macs")
    # MACs: 2*16*64 = 2048, 2*64*32 = 4096, 2*32*4 = 256
    assert [(m.path, m.macs) for m in top] == [("2", 4096), ("0", 2048)]
    top = counter.profile.top_modules(3, depth=1, by="params")
    # params: 16*64+64 = 1088, 64*32+32 = 2080, 32*4+4 = 132
    assert [(m.path, m.params) for m in top] == [("2", 2080), ("0", 1088), ("3", 132)]


# ---------------------------------------------------------------------- real models
class SharedNet(nn.Module):
    """A block called twice and an output layer tied to the input layer's weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.out = nn.Linear(8, 8, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        x = self.block(self.block(x))
        return self.out(x) + x


def _check_invariants(p: Profile, model: nn.Module) -> None:
    m = p.by_module()
    assert m[""].flops == p.total_flops and m[""].macs == p.total_macs and m[""].nodes == len(p.records)
    assert m[""].params == sum(q.numel() for q in model.parameters())
    for path, stats in m.items():
        children = [c for c in m.values() if c.path and c.path.rpartition(".")[0] == path]
        assert sum(c.flops for c in children) <= stats.flops, path
        assert sum(c.macs for c in children) <= stats.macs, path
        assert sum(c.params for c in children) <= stats.params, path


def test_shared_module_counted_per_call_params_once() -> None:
    model = SharedNet()
    counter = TorchFLOPsByFX(model)
    counter.propagate(torch.randn(2, 8))
    p = counter.profile
    m = p.by_module()
    # Linear 8->8 on (2, 8): 2*8*8 = 128 MACs, 2*128 + 16 = 272 FLOPs; ReLU 16 FLOPs; two calls
    assert (m["block"].nodes, m["block"].flops, m["block"].macs) == (4, 2 * (272 + 16), 2 * 128)
    assert m["block"].params == 72  # 8*8 + 8, once
    assert m["out"].params == 0  # its weight is embed's
    assert m[""].params == 144  # embed 72 + block.0 72
    _check_invariants(p, model)


def test_roll_ups_on_zoo_models() -> None:
    entry = zoo.get("unet")
    model = entry.build().eval()
    counter = TorchFLOPsByFX(model)
    with torch.no_grad():
        counter.propagate(*entry.example_inputs(image_size=16))
    _check_invariants(counter.profile, model)

    with torch.device("meta"):
        gpt = zoo.gpt2(n_layer=2, n_embd=32, n_head=4, vocab_size=100)
    counter = TorchFLOPsByFX(gpt)
    counter.propagate(*zoo.gpt2_example_inputs(device="meta", seq_len=8, vocab_size=100))
    p = counter.profile
    _check_invariants(p, gpt)  # tied lm_head: parameters once
    m = p.by_module()
    # "h" is a ModuleList fx never calls: its blocks still roll up into it
    assert m["h"].flops == m["h.0"].flops + m["h.1"].flops > 0
    assert m["h.0"].flops > m["h.0.attn"].flops + m["h.0.mlp"].flops  # + layer norms and residual adds
    assert m[""].time_ms is None


# ---------------------------------------------------------------------- property: random records
_PATHS = ["", "a", "a.b", "a.b.c", "a.d", "e", "e.f"]


@st.composite
def profiles(draw: st.DrawFn) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """Random records (as ``rec`` arguments) and parameter counts over a small module tree."""
    n = draw(st.integers(0, 25))
    records = []
    for i in range(n):
        path = draw(st.sampled_from(_PATHS))
        parts = path.split(".") if path else []
        full = [".".join(parts[: j + 1]) for j in range(len(parts))]
        stack = tuple(p for p in full if p == path or draw(st.booleans()))  # fx may leave containers out
        unsupported = draw(st.booleans()) and draw(st.booleans())
        macs = None if unsupported else draw(st.integers(0, 10**6))
        flops = None if unsupported else 2 * macs + draw(st.integers(0, 10**6))  # type: ignore[operator]
        time_ms = draw(st.one_of(st.none(), st.floats(0, 100, allow_nan=False)))
        records.append((i, f"n{i}", "call_function", draw(st.sampled_from(["f", "g", "h"])), path, "T",
                        flops, macs, time_ms, Status.UNSUPPORTED if unsupported else Status.COUNTED, stack))
    return records, {p: draw(st.integers(0, 1000)) for p in _PATHS}


@settings(max_examples=60, deadline=None)
@given(drawn=profiles())
def test_roll_ups_agree_with_records(drawn: tuple[list[tuple[Any, ...]], dict[str, int]], rec: Any) -> None:
    records, params = drawn
    p = Profile(records=tuple(rec(*r) for r in records), module_types=dict.fromkeys(_PATHS, "T"),
                module_params=params)
    m = p.by_module()
    root = m[""]
    assert (root.flops, root.macs, root.nodes) == (p.total_flops, p.total_macs, len(p.records))
    assert root.params == p.total_params
    assert (root.time_ms is None) == (p.total_time_ms is None)
    if root.time_ms is not None:
        assert root.time_ms == pytest.approx(p.total_time_ms)
    for path, stats in m.items():
        children = [c for c in m.values() if c.path and c.path.rpartition(".")[0] == path]
        assert sum(c.flops for c in children) <= stats.flops
        assert sum(c.nodes for c in children) <= stats.nodes
        assert sum(c.params for c in children) <= stats.params
        assert stats.flops >= 2 * stats.macs
    ops = p.by_operator()
    assert sum(o.flops for o in ops.values()) == p.total_flops
    assert sum(o.calls for o in ops.values()) == len(p.records)
    assert sum(o.unsupported for o in ops.values()) == root.unsupported
    assert Profile.from_dict(json.loads(json.dumps(p.to_dict()))).records == p.records


# ---------------------------------------------------------------------- serialization
def test_to_dict_round_trip_hand_profile(hand_profile: Any) -> None:
    p = hand_profile()
    doc = p.to_dict()
    assert (doc["schema"], doc["version"]) == (SCHEMA_NAME, SCHEMA_VERSION) == ("torch_flops.profile", 5)
    assert set(doc) == {"schema", "version", "settings", "summary", "records", "modules"}
    assert doc["summary"]["flops"] == 1256 and doc["summary"]["unsupported"] == {"torch.mystery": 1}
    assert doc["modules"]["head"] == {"module_type": "Linear", "depth": 1, "params": 22, "own_params": 22,
                                      "flops": 336, "macs": 160, "time_ms": 2.0, "nodes": 2, "unsupported": 0,
                                      "bytes_read": 0, "bytes_written": 0, "backward_flops": None,
                                      "backward_macs": None, "backward_time_ms": None, "optimizer_flops": None,
                                      "optimizer_time_ms": None, "comm_bytes": 0, "comm_time_ms": None,
                                      "backward_comm_bytes": 0}
    back = Profile.from_dict(json.loads(json.dumps(doc)))
    assert back.records == p.records
    assert back.records[7].output_shape == ((4, 2), None)
    assert back == p
    assert back.by_module() == p.by_module()


def test_from_json_accepts_text_path_and_object(tmp_path: Any, hand_profile: Any) -> None:
    p = hand_profile()
    text = json.dumps(p.to_dict())
    path = tmp_path / "p.json"
    path.write_text(text)
    for source in (text, str(path), path, json.loads(text)):
        assert Profile.from_json(source) == p


def test_a_version_2_document_loads_without_bytes(hand_profile: Any) -> None:
    doc = hand_profile().to_dict()
    doc["version"] = 2
    for r in doc["records"]:  # version 2 had no bytes
        del r["bytes_read"], r["bytes_written"]
    for m in doc["modules"].values():
        del m["bytes_read"], m["bytes_written"]
    back = Profile.from_dict(doc)
    assert all(r.bytes_read is None and r.bytes_written is None for r in back.records)
    assert back.by_module()["head"].bytes_read == 0 and back.total_flops == 1256


def test_from_dict_refuses_other_documents(hand_profile: Any) -> None:
    doc = hand_profile().to_dict()
    with pytest.raises(ValueError, match="not a torch_flops profile"):
        Profile.from_dict({**doc, "schema": "something.else"})
    with pytest.raises(ValueError, match="unsupported torch_flops profile version 6"):
        Profile.from_dict({**doc, "version": 6})
    # readers ignore unknown keys
    doc["records"][0]["future_field"] = 1
    assert Profile.from_dict({**doc, "extra": True}).records == hand_profile().records


def test_a_profile_pickles_and_deep_copies() -> None:
    """A Profile (with a backward, and one converted with its source) survives pickle and deepcopy: its
    read-only mappings become plain dicts on the way and read-only again after (a DataLoader worker
    returning a profile pickled it)."""
    import copy
    import pickle
    from types import MappingProxyType

    counter = TorchFLOPsByFX(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    counter.propagate(torch.randn(2, 4), loss_fn=lambda out: out.sum())
    profile = counter.profile
    for loaded in (pickle.loads(pickle.dumps(profile)), copy.deepcopy(profile)):
        assert loaded.records == profile.records and loaded == profile
        assert (loaded.total_flops, loaded.total_backward_flops) == (profile.total_flops, profile.total_backward_flops)
        assert isinstance(loaded.settings, MappingProxyType) and isinstance(loaded.backward, MappingProxyType)
    converted = pickle.loads(pickle.dumps(profile.with_convention("flop_counter")))
    assert converted.convention == "flop_counter" and converted.source == profile
