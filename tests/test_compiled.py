"""torch.compile'd models profiled region by region (torch_flops.compiled).

Each model is compiled once per module (module-scoped fixtures; a compile takes a few seconds on
CPU): a small MLP with a fused elementwise chain, a conv block, a transformers GPT-2 tiny config
(SDPA attention, the library's default), a model with a deliberate graph break and a training step.
Expected numbers are derived by hand in the comments, or come from torch_flops' eager profile of
the same model (an independent path: eager modules and our formulas, no Inductor involved).
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Any

import pytest
import torch
from torch import nn

import torch_flops
from torch_flops import compiled as C
from torch_flops.records import Status
from torch_flops.roofline import roofline


def _config() -> dict[str, Any]:
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    return {"provenance": inductor_config.trace.provenance_tracking_level,
            "kernel_profile": inductor_config.cpp.enable_kernel_profile,
            "fx_graph_cache": inductor_config.fx_graph_cache,
            "autograd_cache": functorch_config.enable_autograd_cache}


_CONFIG_BEFORE = _config()  # before any profile of this file ran


pytestmark = pytest.mark.usefixtures("inductor_on_cpu")  # conftest: skips without Inductor on CPU


class ScaleShiftReLU(nn.Module):
    """relu(x * 2 + 1): three elementwise ops Inductor fuses into one kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2.0 + 1.0)


class Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = ScaleShiftReLU()
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))



def _kernels(result: C.CompiledProfile, phase: str = "forward") -> list[Any]:
    return [r for r in result.profile.records if r.op in ("kernel", "extern_kernel") and r.phase == phase]


@pytest.fixture(scope="module")
def chain() -> tuple[nn.Module, torch.Tensor, C.CompiledComparison]:
    torch.manual_seed(0)
    model, x = Chain(), torch.randn(4, 16)
    return model, x, torch_flops.compare_compiled(model, x, warmup=0, repeat=2)


@pytest.fixture(scope="module")
def conv() -> tuple[nn.Module, torch.Tensor, C.CompiledProfile]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).eval()
    x = torch.randn(2, 3, 8, 8)
    return model, x, C.profile_compiled(model, x, warmup=0, repeat=2)


@pytest.fixture(scope="module")
def gpt2() -> tuple[nn.Module, torch.Tensor, C.CompiledProfile]:
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)).eval()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, 64, (2, 8))
    return model, ids, C.profile_compiled(model, ids, warmup=0, repeat=2)


@pytest.fixture(scope="module")
def breaks(models: Any) -> tuple[nn.Module, torch.Tensor, C.CompiledProfile]:
    torch.manual_seed(0)
    model, x = models.Breaks(), torch.randn(2, 8)
    return model, x, C.profile_compiled(model, x, warmup=0, repeat=2)


# ------------------------------------------------------------------ FLOPs: the regions add up to eager


def test_chain_regions_sum_to_eager_and_hand_counts(chain: Any) -> None:
    _, _, cmp = chain
    kernels = {r.module_path: r for r in _kernels(cmp.result)}
    # fc1: addmm (4, 16) x (16, 32) + bias: 2*4*16*32 + 4*32 = 4224; fc2: 2*4*32*8 + 4*8 = 2080
    assert (kernels["fc1"].target, kernels["fc1"].flops, kernels["fc1"].macs) == ("aten.addmm", 4224, 2048)
    assert (kernels["fc2"].target, kernels["fc2"].flops) == ("aten.addmm", 2080)
    # act: mul, add, relu over 4*32 = 128 elements, 1 FLOP each, fused in one generated kernel
    assert kernels["act"].op == "kernel" and kernels["act"].flops == 3 * 128
    assert cmp.compiled.total_flops == cmp.eager.total_flops == 4224 + 384 + 2080
    assert cmp.unaccounted_flops == 0 and cmp.result.eliminated == ()


def test_conv_and_gpt2_regions_sum_to_eager(conv: Any, gpt2: Any) -> None:
    for model, x, result in (conv, gpt2):
        eager = torch_flops.profile(model, x)
        assert result.profile.total_flops == eager.total_flops > 0
        assert result.eliminated == ()
        assert all(r.status is Status.COUNTED for r in _kernels(result))


def test_fused_chain_bytes_before_and_after_fusion(chain: Any) -> None:
    _, _, cmp = chain
    act = cmp.row("act")
    # eager, op by op: mul, add, relu each read a (4, 32) float32 tensor (512 B) and write one: 3 * 1024 B
    assert act.eager_bytes == 3 * (512 + 512)
    # fused: the kernel reads fc1's output once (512 B) and writes relu's once (512 B); the two
    # intermediates never reach memory
    fused = next(r for r in _kernels(cmp.result) if r.module_path == "act")
    assert (fused.bytes_read, fused.bytes_written) == (512, 512)
    assert act.compiled_bytes == 1024 and act.bytes_saved == 2048
    region = next(r for r in cmp.result.regions if r.name == fused.name)
    assert region.unfused_bytes == 3072 and sorted(region.ops) == ["aten.add", "aten.mul", "aten.relu"]


# ------------------------------------------------------------------ attribution


def test_chain_kernel_launches_and_attribution(chain: Any) -> None:
    _, _, cmp = chain
    assert [r.module_path for r in _kernels(cmp.result)] == ["fc1", "act", "fc2"]
    # eager launches addmm, mul, add, relu, addmm = 5 kernels (+ the t() views, which launch none);
    # the compiled program 3
    whole = cmp.row("")
    assert (cmp.row("act").eager_launches, cmp.row("act").compiled_launches) == (3, 1)
    assert (whole.eager_launches, whole.compiled_launches) == (5, 3)
    assert "_orig_mod" not in "".join(r.module_path for r in cmp.compiled.records)


def test_conv_fused_block_goes_to_common_ancestor(conv: Any) -> None:
    _, _, result = conv
    kernels = _kernels(result)
    by_target = {r.target: r for r in kernels}
    # the convolution stays an ATen kernel, attributed to module "0": 2*8*8*8 = 1024 outputs of
    # 3*3*3 = 27 MACs each: 2*27648 FLOPs + 1024 bias adds = 56320
    conv2d = by_target["aten.convolution"]
    assert (conv2d.module_path, conv2d.flops, conv2d.macs) == ("0", 56320, 27648)
    assert by_target["aten.addmm"].module_path == "5"
    # BatchNorm + ReLU + MaxPool fused: modules 1, 2, 3 -> their common ancestor, the root (never spread)
    fused = [r for r in kernels if r.op == "kernel" and r.flops]
    assert [r.module_path for r in fused] == [""]
    region = next(g for g in result.regions if g.name == fused[0].name)
    assert set(region.modules) == {"1", "2", "3"}


def test_gpt2_regions_attributed_to_its_modules(gpt2: Any) -> None:
    _, _, result = gpt2
    extern = {(r.target, r.module_path) for r in _kernels(result) if r.op == "extern_kernel"}
    # transformers' Conv1D is torch.addmm; the tied lm_head a bias-free linear (mm); SDPA on CPU
    assert {("aten.addmm", "transformer.h.0.attn.c_attn"), ("aten.addmm", "transformer.h.0.attn.c_proj"),
            ("aten.addmm", "transformer.h.0.mlp.c_fc"), ("aten.addmm", "transformer.h.0.mlp.c_proj"),
            ("aten.mm", "lm_head"),
            ("aten._scaled_dot_product_flash_attention_for_cpu", "transformer.h.0.attn")} <= extern
    # the GELU (tanh form, python ops in NewGELUActivation) is one fused kernel inside mlp.act
    assert any(r.op == "kernel" and r.module_path == "transformer.h.0.mlp.act" and r.flops for r in _kernels(result))
    # Inductor inlines the embedding sum into each consumer: computed again there, as recompute_flops
    assert sum(r.recompute_flops or 0 for r in _kernels(result)) > 0
    assert all(r.module_path in result.profile.module_types for r in result.profile.records)


# ------------------------------------------------------------------ graph breaks, Dynamo's counters


def test_graph_break_reported_with_reason_and_place(breaks: Any) -> None:
    model, x, result = breaks
    assert len(result.frames) == 2 and len(result.graph_breaks) == 1
    brk = result.graph_breaks[0]
    source = inspect.getsourcefile(type(model))  # the model's own file (conftest.py)
    assert "item()" in brk.reason and brk.where.endswith("in forward") and f"{source}:" in brk.where
    # the code between the frames (.item()) ran eagerly: a timed record of its own
    assert any(r.op == "eager" and r.target == "aten.item" for r in result.profile.records)
    assert result.profile.total_flops == torch_flops.profile(model, x).total_flops


def test_profiler_causes_no_graph_break(breaks: Any, models: Any) -> None:
    """Dynamo's counters for the profiled compile equal a plain compile's (backend "eager": the
    same frames and breaks, without Inductor's time)."""
    _, x, result = breaks
    before = C.DynamoStats.now()
    with torch.no_grad():
        torch.compile(models.Breaks(), backend="eager")(x)
    plain = C.DynamoStats.now() - before
    assert (result.dynamo.frames_total, result.dynamo.frames_ok, result.dynamo.unique_graphs) == \
        (plain.frames_total, plain.frames_ok, plain.unique_graphs) == (2, 2, 2)
    assert result.dynamo.graph_breaks == plain.graph_breaks and plain.total_graph_breaks == 1
    assert result.recompiles == 0


def test_compile_time_not_in_region_times(chain: Any, gpt2: Any) -> None:
    for result in (chain[2].result, gpt2[2]):
        assert result.compile_s > 0.1  # Dynamo + AOTAutograd + Inductor + a C++ compiler: seconds
        times = [r.time_ms for r in result.profile.records if r.time_ms is not None]
        assert times and max(times) * 1e-3 < result.compile_s / 10
        # the records cover one profiled call: kernels + eager ops + the call's overhead
        assert sum(times) <= 2 * result.profiled_call_ms


# ------------------------------------------------------------------ the backward


def test_training_step_backward_regions() -> None:
    torch.manual_seed(0)
    model, x = Chain(), torch.randn(4, 16)
    result = C.profile_compiled(model, x, loss_fn=lambda out: out.sum(), warmup=0, repeat=2)
    backward = _kernels(result, "backward")
    mm = sorted((r.module_path, r.flops) for r in backward if r.target == "aten.mm")
    # fc2: grad input (4, 8) x (8, 32) and grad weight (8, 4) x (4, 32): 2*4*8*32 = 2048 each;
    # fc1: grad weight only (x needs no grad): 2*16*4*32 = 4096
    assert mm == [("fc1", 4096), ("fc2", 2048), ("fc2", 2048)]
    fused = [r for r in backward if r.op == "kernel"]
    # fc1's bias grad: a sum over the batch, 4*32 = 128 adds, alone in its kernel
    assert ("fc1", 128) in {(r.module_path, r.flops) for r in fused}
    # relu's backward (le + where: 2*128), the mul's (128) and fc2's bias grad (4*8 = 32) fused:
    # modules act and fc2 -> the root
    assert ("", 2 * 128 + 128 + 32) in {(r.module_path, r.flops) for r in fused}
    # forward as eager (6688, test above) + the backward kernels' own count
    assert sum(r.flops for r in _kernels(result)) == 6688
    assert sum(r.flops for r in backward) == 2048 * 2 + 4096 + 128 + 416
    # one step's gradients, as one eager step would leave them
    eager = Chain()
    eager.load_state_dict(model.state_dict())
    eager(x).sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_nothing_left_installed(chain: Any) -> None:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    assert _config() == _CONFIG_BEFORE
    assert not _get_current_dispatch_mode_stack() and not nn.modules.module._has_any_global_hook()


# ------------------------------------------------------------------ the comparison and its views


def test_comparison_table(chain: Any) -> None:
    _, _, cmp = chain
    assert [r.path for r in cmp.rows] == ["", "fc1", "act", "fc2"]
    text = cmp.text()
    assert "saved by fusion" in text and "ScaleShiftReLU" in text and "compile" in text
    assert cmp.eager is not cmp.compiled and cmp.eager.tracer != "inductor" and cmp.compiled.tracer == "inductor"
    assert all(r.eager_flops == r.compiled_flops for r in cmp.rows)  # nothing fused across modules here
    assert cmp.row("act").speedup is None or cmp.row("act").speedup > 0


def test_roofline_of_compiled_regions(chain: Any) -> None:
    _, _, cmp = chain
    roof = roofline(cmp.compiled, "a100-sxm-80gb")
    act = next(r for r in roof.nodes if r.module_path == "act" and r.flops)
    assert act.bytes == 1024 and act.bound == "memory"


def test_views_and_json_of_a_compiled_profile(chain: Any) -> None:
    _, _, cmp = chain
    profile = cmp.compiled
    again = torch_flops.Profile.from_json(torch_flops.report.profile_to_json(profile))
    assert again.total_flops == profile.total_flops and again.settings["compiled"]["frames"][0]["compile_id"]
    assert "act" in torch_flops.report.model_profile_text(profile)


def test_compile_warmup_for_a_session() -> None:
    """What a session does with a compiled model: count on the original, warm the compiled one up
    (compile outside any timing), leaving the model as it was."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))  # training mode: forward updates running stats
    compiled = torch.compile(model, backend="eager")  # Dynamo only: cheap
    stats = model[1].running_mean.clone()
    first = C.compile_warmup(compiled, (torch.randn(3, 4),), {}, calls=2)
    assert first > 0 and torch.equal(model[1].running_mean, stats)
    with torch.nn.modules.module.register_module_forward_hook(lambda *a: None), \
            pytest.raises(RuntimeError, match="global module hook"):
        C.compile_warmup(compiled, (torch.randn(3, 4),), {})


def test_already_compiled_model_is_profiled_with_its_options() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 4), nn.ReLU()), torch.randn(2, 8)
    compiled = torch.compile(model, dynamic=False)
    original, again = C.split_compiled(compiled)
    assert original is model and again is compiled and C.is_compiled(compiled)
    assert C._compile_kwargs_of(compiled)["dynamic"] is False
    with pytest.raises(ValueError, match="backend"):
        C.profile_compiled(model, x, compile_kwargs={"backend": "eager"})
    with pytest.raises(ValueError, match="unknown key"):
        C.profile_compiled(model, x, compile_kwargs={"modes": "max-autotune"})
    with pytest.raises(TypeError, match="nn.Module"):
        C.profile_compiled(lambda t: t, x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="compile_kwargs must be a dict"):
        C.profile_compiled(model, x, compile_kwargs=[("dynamic", False)])  # type: ignore[arg-type]
    with torch.no_grad(), pytest.raises(ValueError, match="no_grad"):  # before anything compiles
        C.profile_compiled(model, x, loss_fn=lambda out: out.sum())


def test_a_chain_of_batched_products_counts_both_kernels() -> None:
    # (a @ b) @ c on 3-D tensors: two extern bmm kernels; Inductor's provenance names the first after
    # the expand the second reads: it is the bmm that view comes from. Each: 2 * 2 batches x 8 x 16 x 8
    # = 4096 FLOPs; the first reads a and b (2 x 2*8*16 x 4 B = 2 KiB), writes 2*8*8 x 4 B = 512 B
    class Chain(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            return (a @ b) @ c

    torch.manual_seed(0)
    a, b, c = torch.randn(2, 8, 16), torch.randn(2, 16, 8), torch.randn(2, 8, 16)
    result = C.profile_compiled(Chain(), a, b, c, repeat=1, warmup=0)
    kernels = [r for r in result.profile.records if r.target == "aten.bmm"]
    assert [r.flops for r in kernels] == [4096, 4096] and not result.eliminated
    assert (kernels[0].bytes_read, kernels[0].bytes_written) == (2048, 512)


def test_a_tensor_given_twice_stays_one_tensor_in_the_extra_calls_and_compare_keeps_one_call() -> None:
    """``model(x, x)``: the untimed and extra calls get one copy given twice, as the real call (two
    copies made Dynamo compile another graph, and the real call then recompiled inside the profile,
    doubling its FLOPs); compare_compiled's eager side is an extra call, undone: the model's state is
    that of the one compiled call, as profile_compiled leaves it."""
    from torch_flops import compare_compiled
    from torch_flops.state import copy_inputs

    x = torch.randn(2, 8)
    copied_args, copied_kwargs = copy_inputs(((x, x), {"labels": x}))
    assert copied_args[0] is copied_args[1] is copied_kwargs["labels"] and copied_args[0] is not x

    class Counted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return self.fc(u) * v

    torch.manual_seed(0)
    model = Counted()
    result = torch_flops.profile_compiled(model, x, x)
    # linear 2*2*8*8 + 16 bias, the product 16, the count's += 1: 289, once (no recompile, no region twice)
    assert result.total_flops == 289 and not result.dynamo.recompile_reasons
    assert model.calls.item() == 1
    compare_compiled(model, x, x)
    assert model.calls.item() == 2  # one more call: the compiled one's


@pytest.mark.parametrize(("compile_kwargs", "error"), [({"bogus": 1}, ValueError), ({"backend": "eager"}, ValueError),
                                                   ("max-autotune", TypeError), ({"mode": "fastest"}, RuntimeError),
                                                   ({"dynamic": "yes"}, TypeError), ({"options": 3}, TypeError),
                                                   ({"fullgraph": 1}, TypeError)])
def test_compare_compiled_refuses_bad_compile_kwargs_before_the_model_runs(compile_kwargs: Any,
                                                                           error: type[Exception]) -> None:
    # they were checked by profile_compiled, after the eager side had run the model 13 times
    calls: list[int] = []
    model = nn.Linear(8, 4)
    model.register_forward_hook(lambda m, a, o: calls.append(1))
    for profiler in (torch_flops.compare_compiled, torch_flops.profile_compiled):
        with pytest.raises(error) as raised:
            profiler(model, torch.randn(2, 8), compile_kwargs=compile_kwargs)
        assert "compile_kwargs" in str(raised.value) + "".join(getattr(raised.value, "__notes__", []))
    assert calls == []


def test_a_custom_autograd_functions_forward_op_under_a_backward_is_computed_not_eliminated() -> None:
    """With a backward, the post-grad graph names the Function's mul after another node than the pre-grad
    graph: the count was left over and listed as eliminated (16 FLOPs), though the fused kernel computes it."""

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            return 2 * x * g

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Square.apply(self.a(x)).sum(-1)

    torch.manual_seed(0)
    result = torch_flops.profile_compiled(M(), torch.randn(2, 8), repeat=1, loss_fn=lambda out: out.sum())
    forward = [r for r in result.profile.records if r.phase == "forward" and r.op != "overhead"]
    # addmm 2x8x8 = 128 MACs: 256 + 16 bias = 272; the square 16 and the sum 16 in one fused kernel
    assert sum(r.flops or 0 for r in forward) == 272 + 16 + 16 and result.eliminated == ()


def test_a_matmul_inductor_fuses_with_its_bias_add_and_dead_code_beside_a_custom_function() -> None:
    """x @ w + b becomes one addmm named after the add: its mm was listed as eliminated (512 FLOPs) and the
    kernel given the add's 32 only; a custom Function's mm beside a dead mm of the same shape was listed too."""

    class Affine(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w, self.b = nn.Parameter(torch.randn(8, 8)), nn.Parameter(torch.randn(8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.w + self.b

    torch.manual_seed(0)
    result = torch_flops.profile_compiled(Affine(), torch.randn(4, 8), repeat=1)
    # 4 x 8 x 8 = 256 MACs: 512 + the bias's 32 adds = 544, in the one addmm
    assert [r.flops for r in result.profile.records if r.op == "extern_kernel"] == [544] and result.eliminated == ()

    class MatMul(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(a, b)
            return a @ b

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a, b = ctx.saved_tensors
            return g @ b.t(), a.t() @ g

    class Dead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w, self.v = nn.Parameter(torch.randn(8, 8)), nn.Parameter(torch.randn(8, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            unused = x @ self.v  # noqa: F841  (dead code: Inductor drops it)
            return MatMul.apply(x, self.w).relu()

    result = torch_flops.profile_compiled(Dead(), torch.randn(4, 8), repeat=1, loss_fn=lambda out: out.sum())
    assert [(e.node, e.op, e.flops) for e in result.eliminated] == [("unused", "aten.mm", 512)]

    class TwoLayers(nn.Module):  # (two addmm of the same size: each surplus fits either mm; both were eliminated)
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.b1 = nn.Parameter(torch.randn(8, 16)), nn.Parameter(torch.randn(16))
            self.w2, self.b2 = nn.Parameter(torch.randn(16, 8)), nn.Parameter(torch.randn(8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2

    model, x = TwoLayers(), torch.randn(6, 8)
    result = torch_flops.profile_compiled(model, x, repeat=1)
    # 6x8x16 = 768 MACs: 1536 + 96 bias adds; relu 96; 6x16x8 = 768 MACs: 1536 + 48: 3312, as eager counts
    assert result.profile.total_flops == torch_flops.profile(model, x).total_flops == 3312
    assert result.eliminated == ()


def test_an_op_without_a_formula_inside_a_fused_kernel_is_named_and_warned_about() -> None:
    """Inductor fuses ``i0e`` (no formula) with an add: the kernel counts the add and names the rest."""
    from torch_flops import UnsupportedOpWarning

    class Bessel(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.special.i0e(x) + x

    x = torch.randn(2, 8)
    with pytest.warns(UnsupportedOpWarning, match=r"ran inside the compiled kernels of Bessel: aten.special_i0e") as w:
        result = torch_flops.profile_compiled(Bessel(), x)
    assert any(item.filename == __file__ for item in w)
    [kernel] = [r for r in result.profile.records if r.op == "kernel"]
    assert kernel.flops == 16 and "no formula for aten.special_i0e" in kernel.note  # the add: 2*8


def test_batch_norm_and_dropout_kernels_are_fully_counted_without_a_warning() -> None:
    """Training-mode BatchNorm and Dropout run prims (a device, Inductor's seeds) and ops without a
    formula of their own inside their kernels: no work, no note, no warning; totals as eager's."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5)), torch.randn(4, 8)
    eager = torch_flops.profile(copy.deepcopy(model), x).total_flops
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch_flops.UnsupportedOpWarning)
        result = torch_flops.profile_compiled(model, x)
    assert result.total_flops == eager
    assert not [r.note for r in result.profile.records if "no formula" in (r.note or "")]
