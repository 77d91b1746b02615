"""The torch.export front end: tracer choice, input binding, module attribution, meta runs and the
errors users see. Plain torch models only (transformers models are in test_hf.py)."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import Status, TorchFLOPsByFX, TracerFallbackWarning, TracingError, UnsupportedOpWarning, zoo


class DataDependent(nn.Module):
    """symbolic_trace cannot follow ``if`` on a tensor value; torch.export can (it specializes)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        h = torch.relu(self.fc1(x))
        if scale is not None:
            h = h * scale
        return {"out": self.fc2(h), "hidden": h}


def _fx_breaker() -> nn.Module:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            if x.shape[0] > 2:  # a Python branch on a shape: fx sees a Proxy and fails, export specializes
                return y * 2
            return y - 1

    return Branchy()


def test_auto_runs_what_fx_cannot_trace_as_it_runs() -> None:
    model = _fx_breaker().eval()
    x = torch.randn(4, 8)
    counter = TorchFLOPsByFX(model)  # tracer="auto": the model as it runs, whatever fx thinks of it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback, no warning
        out = counter.propagate(x)
    assert counter.tracer_used == "eager"
    assert torch.equal(out, model(x))
    # linear 4x8 -> 8: 4*8*8 = 256 MACs; flops = 2*256 + 32 bias = 544; then mul: 32
    linear = [r for r in counter.records if r.target == "Linear"]
    assert [(r.macs, r.flops, r.module_path, r.module_type) for r in linear] == [(256, 544, "fc", "Linear")]
    assert counter.total_flops == 544 + 32


def test_auto_with_a_function_formula_tries_fx_then_runs_eagerly() -> None:
    # a formula for a Python function is why "auto" tries fx (which keeps the call whole); when fx
    # cannot trace the model, it runs eagerly, with one warning saying the formula cannot apply
    model = _fx_breaker().eval()
    x = torch.randn(4, 8)
    counter_with = _with_function_formula(model)
    with pytest.warns(TracerFallbackWarning, match="cannot trace this model") as record:
        out = counter_with.propagate(x)
    fallbacks = [w for w in record if issubclass(w.category, TracerFallbackWarning)]
    assert len(fallbacks) == 1 and fallbacks[0].filename == __file__
    assert counter_with.tracer_used == "eager" and torch.equal(out, model(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per counter
        counter_with.propagate(x)


def _unused_function(x: torch.Tensor) -> torch.Tensor:
    return x


def _with_function_formula(model: nn.Module) -> TorchFLOPsByFX:
    from torch_flops import formulas

    saved = formulas.FORMULAS.copy()
    try:
        formulas.FORMULAS.add((_unused_function,), lambda module, out, *args: 0)
        return TorchFLOPsByFX(model)  # copies the table with the user's function formula
    finally:
        formulas.FORMULAS.restore(saved)


def test_export_kwargs_dict_output_and_optional_input() -> None:
    model = DataDependent().eval()
    x, s = torch.randn(2, 8), torch.randn(2, 16)
    counter = TorchFLOPsByFX(model, tracer="export")
    out = counter.propagate(x, scale=s)
    expected = model(x, scale=s)
    assert set(out) == {"out", "hidden"}
    assert torch.equal(out["out"], expected["out"]) and torch.equal(out["hidden"], expected["hidden"])
    # fc1: 2*8*16 = 256 MACs; fc2: 2*16*4 = 128 MACs
    assert counter.total_macs == 256 + 128
    # flops: fc1 2*256 + 32 bias, relu 32, mul 32, fc2 2*128 + 8 bias
    assert counter.total_flops == 544 + 32 + 32 + 264


def test_export_reexports_when_input_shapes_change() -> None:
    model = DataDependent().eval()
    counter = TorchFLOPsByFX(model, tracer="export")
    counter.propagate(torch.randn(2, 8))
    first = counter.graph_module
    counter.propagate(torch.randn(5, 8))
    assert counter.graph_module is not first
    # 5 rows: fc1 5*8*16 = 640, fc2 5*16*4 = 320 MACs
    assert counter.total_macs == 960


def test_export_module_paths_match_fx() -> None:
    # Both front ends attribute every matmul/conv to the same innermost module.
    with torch.device("meta"):
        model = zoo.unet().eval()
    (x,) = zoo.unet_example_inputs(device="meta")
    by_fx = TorchFLOPsByFX(model, tracer="fx")
    by_fx.propagate(x)
    by_export = TorchFLOPsByFX(model, tracer="export")
    by_export.propagate(x)

    def macs_by_module(counter: TorchFLOPsByFX) -> dict[tuple[str, str], int]:
        result: dict[tuple[str, str], int] = {}
        for r in counter.records:
            if r.macs:
                key = (r.module_path, r.module_type)
                result[key] = result.get(key, 0) + r.macs
        return result

    assert macs_by_module(by_fx) == macs_by_module(by_export)
    assert by_fx.total_flops == by_export.total_flops
    assert by_export.tracer_used == "export" and by_fx.tracer_used == "fx"


def test_export_graph_matches_flop_counter_on_meta() -> None:
    with torch.device("meta"):
        model = zoo.gpt2(n_layer=2).eval()
    (ids,) = zoo.gpt2_example_inputs(device="meta", seq_len=32)
    counter = TorchFLOPsByFX(model, tracer="export")
    counter.propagate(ids)
    with FlopCounterMode(display=False) as reference:
        model(ids)
    assert 2 * counter.total_macs == reference.get_total_flops()
    assert counter.unsupported == {}


def test_meta_skips_data_dependent_checks_the_output_does_not_need() -> None:
    class Checked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = (x > 0).sum().item()  # meta tensors cannot produce this number
            torch._check(n >= 0)
            return self.fc(x) * 2

    with torch.device("meta"):
        model = Checked()
    counter = TorchFLOPsByFX(model, tracer="export")
    out = counter.propagate(torch.empty(3, 4, device="meta"))
    assert out.shape == (3, 4) and out.device.type == "meta"
    skipped = [r for r in counter.records if r.note.startswith("not run")]
    assert any(r.target == "aten.item" for r in skipped)
    assert all(r.status is Status.SKIPPED and (r.flops, r.macs) == (0, 0) for r in skipped)
    # gt: 12 (float compare), sum of bools: 0, linear: 2*3*4*4 + 12 = 108, mul: 12
    assert counter.total_flops == 12 + 0 + 108 + 12
    assert counter.total_time_ms is None


def test_meta_never_skips_a_write_into_the_caller_s_tensor() -> None:
    # x[m] = x[m] * 3 + 1 writes into the input: real arithmetic the caller reads afterwards (48 FLOPs on
    # CPU), not a check the output can do without. On meta it needs the mask's values: refused, naming
    # the cause, as plain PyTorch refuses the call there (it was skipped, 216 FLOPs for CPU's 264)
    class Writes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            x[m] = x[m] * 3 + 1
            return y

    with torch.device("meta"):
        model = Writes()
    x, m = torch.empty(6, 4, device="meta"), torch.ones(6, 4, dtype=torch.bool, device="meta")
    with torch.no_grad(), pytest.raises(RuntimeError, match="this model cannot be profiled on meta"):
        TorchFLOPsByFX(model).propagate(x, m)


def test_meta_data_dependent_node_the_output_needs_names_the_node() -> None:
    class NeedsNonzero(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x > 0] * 2

    counter = TorchFLOPsByFX(NeedsNonzero(), tracer="export")
    with pytest.raises(Exception, match="index|nonzero"):
        counter.propagate(torch.empty(8, device="meta"))


def test_data_dependent_model_runs_as_it_runs_and_fails_as_it_fails() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:
                return x * 2
            raise ValueError("unreachable on purpose")

    counter = TorchFLOPsByFX(Branchy())
    assert torch.equal(counter.propagate(torch.ones(2)), torch.full((2,), 2.0))
    with pytest.raises(ValueError, match="unreachable on purpose") as info:
        counter.propagate(-torch.ones(2))  # eager raises here too: the same error, as itself
    assert "the model raised ValueError" in "\n".join(info.value.__notes__)
    # torch.export cannot follow the branch without the data: it says so
    with pytest.raises(TracingError, match="data-dependent"):
        TorchFLOPsByFX(Branchy(), tracer="export").propagate(-torch.ones(2))


def test_export_wrong_input_name_names_it() -> None:
    counter = TorchFLOPsByFX(DataDependent(), tracer="export")
    with pytest.raises(TypeError, match="scael"):  # what the eager call raises, before anything is traced
        counter.propagate(torch.randn(2, 8), scael=torch.randn(2, 16))


def test_export_binding_rejects_wrong_dtype_naming_the_input() -> None:
    from torch_flops.capture import capture_export

    capture = capture_export(DataDependent(), (torch.randn(2, 8),), {})
    with pytest.raises(ValueError, match="'x'.*float64"):
        capture.graphs[0].bind((torch.randn(2, 8, dtype=torch.float64),), {})


def test_tracer_export_on_a_model_fx_can_trace_gives_the_same_totals() -> None:
    torch.manual_seed(0)
    model = zoo.mobilenet_v3_large().eval()
    (x,) = zoo.mobilenet_v3_large_example_inputs(image_size=64)
    with torch.no_grad():
        a = TorchFLOPsByFX(model, tracer="fx")
        out_a = a.propagate(x)
        b = TorchFLOPsByFX(model, tracer="export")
        out_b = b.propagate(x)
    assert torch.equal(out_a, out_b)
    assert (a.total_flops, a.total_macs) == (b.total_flops, b.total_macs)


# ------------------------------------------------------------------ modules kept whole (fault round 29)
class _Block(nn.Module):
    """Linear(6, 6) then BatchNorm1d(6) (in training its num_batches_tracked.add_(1), an in-place update
    of its own buffer), scaled; a dict output, or a tensor when ``extra`` is given."""

    def __init__(self) -> None:
        super().__init__()
        self.l, self.bn = nn.Linear(6, 6), nn.BatchNorm1d(6)

    def forward(self, x: torch.Tensor, scale: float = 2.0, extra: torch.Tensor | None = None) -> Any:
        y = self.bn(self.l(x)) * scale
        return {"y": y, "pair": [y, x]} if extra is None else y + extra


class _Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), _Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.b(self.a(x), scale=3.0)
        return self.b(d["y"], scale=3.0)["pair"][0] + d["pair"][1]


def _block_formula(module: nn.Module, out: Any, *args: Any, **kwargs: Any) -> int:
    return 1000


@pytest.mark.parametrize("train", [True, False])
def test_export_keeps_a_registered_module_class_whole_as_fx_and_eager_do(train: bool) -> None:
    # a formula registered for a class keeps each of its calls one node in every front end: export
    # traced through it and counted its aten ops. Both calls of b count 1000; a 3 x 6 x 6 = 108 MACs,
    # + 18 bias adds: 234; the final add 18: 2252 in all, as the default front end counts
    x = torch.randn(3, 6)
    counts = {}
    for tracer in ("auto", "export"):
        torch.manual_seed(0)
        model, twin = _Twice().train(train), _Twice().train(train)
        twin.load_state_dict(model.state_dict())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning: nothing traced through
            counter = TorchFLOPsByFX(model, tracer=tracer, custom_formulas={_Block: _block_formula})
            out = counter.propagate(x)
        assert torch.equal(out, twin(x))
        # the module ran itself: its buffers (running statistics, num_batches_tracked) as the plain call left them
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values()))
        blocks = [(r.name, r.module_path, r.flops) for r in counter.records if r.op == "call_module" and r.target == "_Block"]
        assert blocks == [("b", "b", 1000), ("b_1", "b", 1000)]
        counts[tracer] = counter.profile.total_flops
    assert counts == {"auto": 2252, "export": 2252}


def test_export_keeps_leaf_module_paths_and_ignored_classes_whole() -> None:
    x = torch.randn(3, 6)
    counter = TorchFLOPsByFX(_Twice(), tracer="export", leaf_modules=["b"], ignore_ops=["Linear"])
    with pytest.warns(UnsupportedOpWarning, match="no FLOPs formula for _Block"):  # a leaf without a formula
        counter.propagate(x)
    assert [r.name for r in counter.records if r.target == "_Block"] == ["b", "b_1"]
    ignored = TorchFLOPsByFX(_Twice(), tracer="export", ignore_ops=["_Block"])
    ignored.propagate(x)
    assert [(r.name, r.status) for r in ignored.records if r.target == "_Block"] == \
        [("b", Status.IGNORED), ("b_1", Status.IGNORED)]


def test_export_traces_through_a_module_it_cannot_keep_whole_and_says_so() -> None:
    # called with two argument structures, torch.export keeps no call signature for it: its aten ops are
    # counted (the Linear 2 x (108 MACs + 18) = 468, BatchNorm and scale), with a warning naming it
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b = _Block().eval()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.b(x)["y"], extra=x)

    model, x = Two(), torch.randn(3, 6)
    counter = TorchFLOPsByFX(model, tracer="export", custom_formulas={_Block: _block_formula})
    with pytest.warns(UnsupportedOpWarning, match=r"traces through .*b \(_Block\): torch.export could not keep"):
        out = counter.propagate(x)
    assert torch.equal(out, model(x))
    assert not [r for r in counter.records if r.target == "_Block"]
    assert sum(r.flops for r in counter.records if r.target == "aten.linear") == 468


def test_a_wrong_input_shape_is_one_clear_error_without_torch_s_traceback_logged() -> None:
    # FakeTensor logged the refused meta kernel's whole traceback at ERROR level (torch's own handler:
    # stderr) before the error; which is the one the plain call raises (not fake tensors' wording)
    class Seen(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    seen, logger = Seen(), logging.getLogger("torch._subclasses.fake_tensor")
    logger.addHandler(seen)
    try:
        with pytest.raises(RuntimeError, match=r"^mat1 and mat2 shapes cannot be multiplied \(2x5 and 4x3\)"):
            TorchFLOPsByFX(nn.Sequential(nn.Linear(4, 3)), tracer="export").propagate(torch.randn(2, 5))
    finally:
        logger.removeHandler(seen)
    assert not [r for r in seen.records if r.levelno >= logging.ERROR]


class _Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x).relu()


def test_export_keeps_shared_and_nested_kept_modules_whole_as_auto_does() -> None:
    # one module under two names (two calls: 2 x 1000) and a kept module registered inside another but
    # called by the model itself (b, b.inner, b2: 3 x 1000, + the add of 2 x 4 = 8)
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b = _Small()
            self.c = self.b

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(self.b(x))

    class Nested(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b, self.b2 = _Small(), _Small()
            self.b.inner = _Small()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b2(self.b(x) + self.b.inner(x))

    formulas = {_Small: lambda module, out, *args, **kwargs: 1000}
    for make, total, names in ((Shared, 2000, ["b", "b_1"]), (Nested, 3008, ["b", "b_inner", "b2"])):
        for tracer in ("auto", "export"):
            torch.manual_seed(0)
            counter = TorchFLOPsByFX(make(), tracer=tracer, custom_formulas=formulas)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                counter.propagate(torch.randn(2, 4))
            assert counter.profile.total_flops == total
            assert [r.name for r in counter.records if r.target == "_Small"] == names


_HOOK_KINDS = {
    "forward pre-hook": lambda m, seen: m.register_forward_pre_hook(lambda mod, args: seen.append("pre")),
    "forward hook": lambda m, seen: m.register_forward_hook(lambda mod, args, out: seen.append(out)),
    "backward hook": lambda m, seen: m.register_full_backward_hook(lambda mod, gi, go: seen.append("bw")),
    "backward pre-hook": lambda m, seen: m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 2,)),
}


@pytest.mark.parametrize("kind", list(_HOOK_KINDS))
def test_export_refuses_the_users_module_hooks_before_tracing(kind: str) -> None:
    # torch.export ran a hook once, while tracing, on FakeTensors (a stored feature was a FakeTensor, and
    # the hook never ran on the profiled calls); a backward hook was dropped (a backward pre-hook doubling
    # the gradient: the parameters' gradients were half eager's). Refused, before anything runs
    torch.manual_seed(0)
    model, seen = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), []
    handle = _HOOK_KINDS[kind](model[2], seen)
    with pytest.raises(TracingError, match=rf"Sequential has {kind}\(s\) on '2' \(Linear\): torch\.export runs"):
        TorchFLOPsByFX(model, tracer="export").propagate(torch.randn(3, 4))
    assert seen == []
    handle.remove()
    out = TorchFLOPsByFX(model, tracer="export").propagate(torch.randn(3, 4))  # without it: profiled
    assert out.shape == (3, 2)


@pytest.mark.parametrize("tracer", ["export", "fx"])
def test_a_hook_registered_after_the_capture_is_seen_on_the_next_call(tracer: str) -> None:
    # the graph captured before it was replayed: the hook never ran and its doubling was missing from the output
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    counter = TorchFLOPsByFX(model, tracer=tracer)
    x = torch.randn(2, 8)
    counter.propagate(x)
    seen: list[int] = []
    handle = model.register_forward_hook(lambda m, a, o: (seen.append(1), o * 2)[1])
    with pytest.raises(TracingError, match="forward hook"):
        counter.propagate(x)
    assert seen == []
    handle.remove()
    assert torch.equal(counter.propagate(x), model(x))


def test_a_hook_of_torchs_own_makes_no_new_capture_and_a_users_look_alike_package_is_the_users(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # FlopCounterMode's module tracker registers global hooks each time it is entered: fx re-captured and then
    # refused them, export re-traced on every call (FlopCounterMode counting twice); and a user's package named
    # torch_flops_ext passed for torch_flops' own (its hook skipped, the output wrong)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(2, 8)
    for tracer in ("fx", "export"):
        counter = TorchFLOPsByFX(model, tracer=tracer)
        counter.propagate(x)
        for _ in range(2):
            with FlopCounterMode(display=False) as mode:
                assert torch.equal(counter.propagate(x), model(x))
            assert mode.get_total_flops() == 2 * 2 * (2 * 8 * 16 + 2 * 16 * 4)  # the profiled call and model(x)
    (tmp_path / "torch_flops_ext.py").write_text("def double(module, args, out):\n    return out * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import torch_flops_ext  # type: ignore[import-not-found]

    for tracer in ("fx", "export"):
        counter = TorchFLOPsByFX(model, tracer=tracer)
        counter.propagate(x)
        handle = model.register_forward_hook(torch_flops_ext.double)
        try:
            with pytest.raises(TracingError, match="forward hook"):
                counter.propagate(x)
        finally:
            handle.remove()


def test_export_refuses_transformers_debugging_hooks_the_user_attaches() -> None:
    debug_utils = pytest.importorskip("transformers.debug_utils")
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    debug = debug_utils.DebugUnderflowOverflow(model)
    with pytest.raises(TracingError, match=r"forward hook\(s\) on the root"):
        TorchFLOPsByFX(model, tracer="export").propagate(torch.randn(2, 8))
    assert debug.total_calls == 0  # (it ran on fake tensors, once, and failed to format them)


def test_export_takes_torchs_and_transformers_own_hooks_as_theirs() -> None:
    # FlopCounterMode's module tracker registers global module hooks; transformers leaves its output-capturing
    # hooks on the decoder layers after a call with output_hidden_states=True: neither is the user's
    model = nn.Sequential(nn.Linear(8, 8))
    with FlopCounterMode(display=False):
        out = TorchFLOPsByFX(model, tracer="export").propagate(torch.randn(2, 8))
    assert out.shape == (2, 8)
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    llama = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1)).eval()
    ids = torch.randint(0, 64, (1, 6))
    llama(ids, output_hidden_states=True)
    if not any(m._forward_hooks for m in llama.modules()):
        pytest.skip("this transformers leaves no hooks behind")
    with torch.no_grad():
        assert torch.equal(TorchFLOPsByFX(llama, tracer="export").propagate(ids).logits, llama(ids).logits)


def test_export_refuses_a_global_module_hook_and_the_meta_fallback_warns() -> None:
    seen: list[str] = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: seen.append(type(m).__name__))
    try:
        with pytest.raises(TracingError, match=r"a global module hook \(_global_forward_hooks\)"):
            TorchFLOPsByFX(nn.Linear(4, 2), tracer="export").propagate(torch.randn(3, 4))
        assert seen == []
    finally:
        handle.remove()
    # (where the graph is wanted for its counts alone, the meta fallback, it is a warning: nothing runs)
    from torch_flops.capture import capture_export

    model = nn.Linear(4, 2)
    model.register_forward_hook(lambda m, a, o: None)
    with pytest.warns(TracerFallbackWarning, match=r"forward hook\(s\) on the root \(Linear\)"):
        capture_export(model, (torch.randn(3, 4),), {}, counts_only=True)


def test_export_runs_an_autocast_region_of_the_forward_in_line_as_eager_does() -> None:
    # torch.export wraps the region in a wrap_with_autocast higher-order op: it was one unsupported node
    # (the Linear inside missing). In line between autocast's enter and exit, it runs in bfloat16 as
    # eager: l1 2*2*8*16 = 512 + 32 bias adds = 544, relu 32, l2 2*2*16*4 = 256 + 8 = 264: 840
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = torch.relu(self.l1(x))
            return self.l2(h.float())

    torch.manual_seed(0)
    model, x = M(), torch.randn(2, 8)
    counter = TorchFLOPsByFX(model, tracer="export")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = counter.propagate(x)
    assert torch.equal(out, model(x)) and not torch.is_autocast_enabled("cpu")
    assert counter.profile.total_flops == 840
    assert [r.dtype for r in counter.records if r.target == "aten.linear"] == ["bfloat16", "float32"]


def test_export_makes_a_tensor_in_the_dtype_the_forward_made_it_in() -> None:
    # the forward switches torch's default dtype around a factory call: torch.export's node names no
    # dtype, and the graph made it float32 (the default of the call that runs it): the output was float32
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.set_default_dtype(torch.float64)
            try:
                return x + torch.arange(4.0)
            finally:
                torch.set_default_dtype(torch.float32)

    x = torch.randn(2, 4)
    out = TorchFLOPsByFX(M(), tracer="export").propagate(x)
    assert out.dtype == torch.float64 and torch.equal(out, M()(x))


def test_export_refuses_forward_mode_ad_it_would_count_the_primal_of() -> None:
    # jvp's tangent work happens inside the ops on dual tensors: the graph counted 48 of FlopCounterMode's 144
    from torch.func import jvp

    class JV(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(3, 4)

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> Any:
            return jvp(lambda i: self.l(i).relu(), (x,), (t,))

    with pytest.raises(TracingError, match=r"forward-mode AD .*tracer='auto'"):
        TorchFLOPsByFX(JV(), tracer="export").propagate(torch.randn(2, 3), torch.randn(2, 3))


def test_export_names_a_strided_nested_input_in_its_error() -> None:
    # the message read the input's shape, which a strided nested tensor has not: torch's internal error instead
    nested = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)])
    with pytest.raises(TracingError, match=r"could not trace Linear with inputs \(nested float32\)"):
        TorchFLOPsByFX(nn.Linear(4, 2), tracer="export").propagate(nested)


def test_meta_fallback_with_a_loss_says_the_loss_is_not_recorded() -> None:
    class Checked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch._check((x > 0).sum().item() >= 0)  # meta tensors cannot produce this number
            return self.fc(x)

    with torch.device("meta"):
        model = Checked()
    counter = TorchFLOPsByFX(model)
    with pytest.warns(TracerFallbackWarning, match=r"loss_fn's own ops are not recorded there: the loss phase is "
                                                   r"missing"):
        counter.propagate(torch.empty(3, 4, device="meta"), loss_fn=lambda out: out.pow(2).mean())
    assert {r.phase for r in counter.records} == {"forward"}
