"""CUDA-only checks: device-event times, the allocator's memory counters, eager equality and
FlopCounterMode agreement on a GPU. Skipped where no CUDA device is present."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from _flop_counts import flop_counter_per_call  # tests/_flop_counts.py
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX
from torch_flops.measure import CudaEventTimer, make_memory_probe, make_timer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MiB4 = 1024 * 1024 * 4  # a (1024, 1024) float32 tensor: 4,194,304 B, a multiple of the 512 B blocks


@pytest.fixture
def cuda() -> Iterator[torch.device]:
    device = torch.device("cuda")
    deterministic = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True  # same conv algorithm in eager and in the graph
    try:
        yield device
    finally:
        torch.backends.cudnn.deterministic = deterministic
        torch.cuda.synchronize()


class ConvLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class BigLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(1024, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_cuda_timer_and_memory_reader_chosen(cuda: torch.device) -> None:
    assert isinstance(make_timer(cuda), CudaEventTimer)
    probe = make_memory_probe(cuda, "memory_allocated")
    big = torch.empty(MiB4, dtype=torch.uint8, device=cuda)  # something allocated: a reading above 0
    # the fast reader returns what the public counters return
    assert probe.read is not None and probe.read() == torch.cuda.memory_allocated() >= MiB4
    assert probe.source == "cuda.memory_allocated"
    peak = make_memory_probe(cuda, "max_memory_allocated")
    assert peak.read is not None and peak.read() == torch.cuda.max_memory_allocated() >= MiB4
    del big


def test_event_ticks_follow_the_current_stream(cuda: torch.device) -> None:
    """Each event lands on the stream current at its tick: a model that switches streams has its
    nodes timed on the stream their kernels ran on."""
    timer = make_timer(cuda)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        before = timer.tick()
        torch.cuda._sleep(2_000_000)  # about a millisecond of GPU time (2e6 cycles at ~2 GHz), on the side stream
        after = timer.tick()
    timer.finish()
    # recorded on the side stream, the pair brackets the sleep; on the default stream, where nothing
    # ran between them, it would measure about 0
    assert timer.elapsed_ms(before, after) > 0.3


def _two_runs_with_host_pauses(timer: Any) -> tuple[float, float]:
    """Two runs of two ticks with 5 ms of host work (and nothing on the GPU) between them: the
    elapsed time of each run's pair."""
    import time

    elapsed = []
    for _ in range(2):
        first = timer.tick()
        time.sleep(0.005)
        second = timer.tick()
        timer.finish()
        elapsed.append(timer.elapsed_ms(first, second))
    return elapsed[0], elapsed[1]


def test_repeated_runs_are_queued_behind_the_hosts_launch_time(cuda: torch.device) -> None:
    """For the repeated runs of one profile, from the second run on the GPU waits while the host
    launches the run (twice the shortest host time so far), so an event pair times the GPU work between
    its ticks, not the host's pauses; a timer not set so (a generation's) never waits."""
    first, second = _two_runs_with_host_pauses(make_timer(cuda, queue_ahead=True))
    # first run: the GPU, idle, records each event when it is enqueued: the pair spans the host's 5 ms;
    # second run: a wait of ~10 ms went ahead of both events, queued before the GPU woke: back to back
    assert first >= 4.0 and second < 1.0
    first, second = _two_runs_with_host_pauses(make_timer(cuda))
    assert first >= 4.0 and second >= 4.0


def test_event_times_for_every_call_node(cuda: torch.device) -> None:
    model = ConvLinear().to(cuda).eval()
    counter = TorchFLOPsByFX(model, warmup=1, repeat=3)
    with torch.no_grad():
        counter.propagate(torch.randn(2, 3, 8, 8, device=cuda))
    calls = [r for r in counter.records if r.op.startswith("call_")]
    assert len(calls) == 4  # conv, relu, flatten, fc (the input and the output run nothing: no time)
    for r in calls:
        assert isinstance(r.time_ms, float) and r.time_ms >= 0.0, r.name
    kernels = {r.name: r.time_ms for r in counter.records if r.name in ("conv", "relu", "fc")}
    assert len(kernels) == 3 and all(t is not None and t > 0 for t in kernels.values())  # each launches a kernel
    assert counter.total_time_ms is not None and counter.total_time_ms > 0
    assert counter.profile.device.startswith("cuda")
    assert counter.profile.memory_source == "cuda.memory_allocated"


def test_memory_allocated_delta_of_a_known_output(cuda: torch.device) -> None:
    model = BigLinear().to(cuda).eval()
    x = torch.randn(1024, 1024, device=cuda)
    with torch.no_grad():
        model(x)  # cuBLAS workspace and handles allocated once, before measuring
        torch.cuda.synchronize()
        counter = TorchFLOPsByFX(model)
        counter.propagate(x)
    rec = {r.name: r for r in counter.records}
    # fc allocates its (1024, 1024) float32 output, 4 MiB; nothing is freed inside the node (x is
    # released after mem_after is read, and the caller still holds it anyway)
    assert rec["fc"].mem_delta == MiB4
    assert rec["fc"].mem_before is not None
    assert rec["fc"].mem_after == rec["fc"].mem_before + MiB4
    # the input runs nothing: no allocator reading (it was allocated before the run, by the caller)
    assert rec["x"].op == "placeholder" and rec["x"].mem_delta is None
    # Linear(1024, 1024) on (1024, 1024): macs = 1024**3; flops = 2*macs + 1024*1024 bias adds
    assert (rec["fc"].macs, rec["fc"].flops) == (1024**3, 2 * 1024**3 + 1024**2)
    assert counter.max_memory is not None and counter.max_memory >= rec["fc"].mem_after


def test_max_memory_allocated(cuda: torch.device) -> None:
    model = BigLinear().to(cuda).eval()
    x = torch.randn(1024, 1024, device=cuda)
    with torch.no_grad():
        model(x)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        counter = TorchFLOPsByFX(model, mem_func_name="max_memory_allocated")
        counter.propagate(x)
    assert counter.profile.memory_source == "cuda.max_memory_allocated"
    values = [(r.mem_before, r.mem_after) for r in counter.records if r.op.startswith("call_")]
    assert len(values) == 1  # fc
    assert all(isinstance(b, int) and isinstance(a, int) and a >= b for b, a in values)  # a peak never drops
    rec = {r.name: r for r in counter.records}
    assert rec["fc"].mem_after is not None and rec["fc"].mem_after >= base + MiB4


def test_output_equals_eager(cuda: torch.device) -> None:
    model = ConvLinear().to(cuda).eval()
    x = torch.randn(2, 3, 8, 8, device=cuda)
    with torch.no_grad():
        reference = model(x)
        out = TorchFLOPsByFX(model).propagate(x)
    assert out.device.type == "cuda"
    assert torch.equal(out, reference)


def test_macs_match_flop_counter_mode_on_cuda(cuda: torch.device) -> None:
    model = ConvLinear().to(cuda).eval()
    x = torch.randn(2, 3, 8, 8, device=cuda)
    counter = TorchFLOPsByFX(model)
    with torch.no_grad():
        counter.propagate(x)
        with FlopCounterMode(display=False) as mode:
            model(x)
    # conv 3->8, 3x3, pad 1 on (2, 3, 8, 8): 2*8*8*8 = 1024 outputs * 3*3*3 = 27648 MACs;
    # fc 512 -> 10 on (2, 512): 2*10*512 = 10240 MACs; total 37888 MACs = 75776 FLOPs for FlopCounterMode
    assert counter.total_macs == 27648 + 10240
    assert 2 * counter.total_macs == mode.get_total_flops() == 75776


def test_roofline_of_a_cuda_run_is_timed_on_its_own_device(cuda: torch.device) -> None:
    from torch_flops import hardware

    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(cuda, torch.bfloat16)
    counter = TorchFLOPsByFX(model, warmup=2, repeat=5)
    with torch.no_grad():
        counter.propagate(torch.randn(2048, 1024, device=cuda, dtype=torch.bfloat16))
    name = torch.cuda.get_device_name(cuda)
    assert counter.profile.settings["device_name"] == name
    try:
        spec = hardware.spec_for_device_name(name)
    except ValueError:  # a GPU the table does not know: the facade says so, naming the device
        with pytest.raises(ValueError, match="is not in the hardware table"):
            counter.roofline()
        return
    line = counter.roofline()  # the device it ran on, recognised by name
    assert line.hardware is spec and line.timed
    fc0 = next(r for r in line.nodes if r.name == "_0")
    # 2048 x 1024 x 4096 MACs in bf16: the measured time is at least the roofline (within timer noise)
    assert fc0.bound == "compute" and fc0.time_ms is not None and fc0.pct_of_roofline is not None
    assert fc0.pct_of_roofline < 110
    assert fc0.achieved_flops_per_s == pytest.approx(fc0.flops / (fc0.time_ms / 1e3))
    assert fc0.lost_time_ms == pytest.approx(fc0.time_ms - fc0.roofline_time_ms)


# --------------------------------------------------------------------------- generation on a GPU


# eager attention with grouped-query attention (2 KV heads for 4 query heads); sdpa without it, since
# FlopCounterMode itself refuses sdpa's K and V with fewer heads than Q (torch 2.11 on CUDA)
@pytest.mark.parametrize("attn,dtype,kv_heads", [("eager", torch.float32, 2), ("sdpa", torch.bfloat16, 4)])
def test_generate_on_cuda_steps_against_flop_counter_and_kv_formula(cuda: torch.device, attn: str,
                                                                     dtype: torch.dtype, kv_heads: int) -> None:
    """The user's own ``generate`` on the GPU: the same tokens as without the profiler, each step's
    FLOPs equal FlopCounterMode's over that step's forward on the same device (with ``sdpa`` in
    bf16, CUDA picks a fused attention kernel, counted by its own aten op), the KV cache from the
    live object, CUDA-synchronised times and ``memory_allocated`` readings."""
    from torch_flops import profile_generate

    hf = pytest.importorskip("transformers")
    config = hf.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=kv_heads, vocab_size=1000, max_position_embeddings=256,
                            attn_implementation=attn)
    torch.manual_seed(0)
    model = hf.LlamaForCausalLM(config).to(cuda, dtype).eval()
    ids = torch.randint(1, 1000, (2, 16), device=cuda, generator=torch.Generator(cuda).manual_seed(1))
    greedy = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 6, "min_new_tokens": 6,
              "do_sample": False, "pad_token_id": 0}
    plain, per_call, whole = flop_counter_per_call(model, lambda: model.generate(ids, **greedy))
    gp = profile_generate(model, ids, **greedy)
    assert torch.equal(gp.output, plain) and gp.baseline_matches is True
    assert [s.tokens_in for s in gp.steps] == [16, 1, 1, 1, 1, 1]
    counted = [p.with_convention("flop_counter").total_flops for p in gp.profiles]
    assert counted == per_call and sum(counted) == whole
    # KV cache after each step: 2 (K, V) x 2 layers x kv_heads x 64 head_dim x tokens x batch 2 x
    # bytes per element (4 in float32, 2 in bf16) = 512 x kv_heads x bytes x tokens
    size = torch.finfo(dtype).bits // 8
    assert gp.kv_cache_bytes == [512 * kv_heads * size * t for t in range(16, 22)]
    assert gp.kv_cache_matches_formula is True
    assert gp.prefill.device.startswith("cuda") and gp.prefill.memory_source == "cuda.memory_allocated"
    assert gp.ttft_ms is not None and gp.ttft_ms > 0 and gp.tpot_ms is not None and gp.tpot_ms > 0
    memory = gp.memory()
    assert memory["kv_cache"] == gp.kv_cache_bytes[-1] and memory["activations"] is not None
    # weights: the parameters, plus the rotary buffers (inv_freq, original_inv_freq: 32 floats each)
    assert gp.weights_bytes == size * sum(p.numel() for p in model.parameters()) + sum(b.nbytes for b in model.buffers())


def test_generate_on_cuda_sampling_same_tokens(cuda: torch.device) -> None:
    """Sampling from the CUDA generator: the profiled run draws what the plain run draws."""
    from torch_flops import profile_generate

    hf = pytest.importorskip("transformers")
    config = hf.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=500, n_positions=128, bos_token_id=0,
                           eos_token_id=0)
    torch.manual_seed(0)
    model = hf.GPT2LMHeadModel(config).to(cuda).eval()
    ids = torch.randint(1, 500, (2, 8), device=cuda, generator=torch.Generator(cuda).manual_seed(1))
    sampling = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 8, "min_new_tokens": 8,
                "do_sample": True, "top_k": 50, "pad_token_id": 0}
    torch.manual_seed(7)
    plain = model.generate(ids, **sampling)
    after = torch.rand(4, device=cuda)
    torch.manual_seed(7)
    gp = profile_generate(model, ids, **sampling)
    assert torch.equal(torch.rand(4, device=cuda), after)  # the baseline's rerun left the state one run leaves
    assert torch.equal(gp.output, plain) and gp.baseline_matches is True
    # GPT-2 keeps every head's K and V: 2 x 2 layers x 4 heads x 32 head_dim x batch 2 x 4 B = 4096 B per token
    assert gp.kv_cache_bytes == [4096 * t for t in range(8, 16)]


# --------------------------------------------------------------------------- training, fused attention, compiled


class _Attention(nn.Module):
    """Projections around ``F.scaled_dot_product_attention`` (causal), as a decoder block runs it."""

    def __init__(self, width: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, w))


@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"])
def test_each_sdpa_kernel_forward_and_backward_against_flop_counter(cuda: torch.device, backend: str) -> None:
    """CUDA runs sdpa as one of four kernels, each its own aten op forward and backward (CPU runs
    one of them only): each counted as FlopCounterMode counts it, the gradients those of a plain step."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model = _Attention().to(cuda, torch.bfloat16)
    x = torch.randn(2, 128, 256, device=cuda, dtype=torch.bfloat16)

    def loss(out: torch.Tensor) -> torch.Tensor:
        return out.float().pow(2).mean()

    with sdpa_kernel(getattr(SDPBackend, backend)):
        try:
            with FlopCounterMode(display=False) as forward:
                model(x)
        except RuntimeError as e:  # (a kernel this GPU, build or shape does not have)
            pytest.skip(f"{backend}: {e}")
        with FlopCounterMode(display=False) as both:
            loss(model(x)).backward()
        model.zero_grad(set_to_none=True)
        loss(model(x)).backward()
        expected = {k: p.grad.clone() for k, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        counter = TorchFLOPsByFX(model)
        counter.propagate(x, loss_fn=loss)
    # qkv 2*128 x 256 x 768 + out 2*128 x 256 x 256 = 262,144 MACs... x 256: 50,331,648 + 16,777,216 MACs;
    # attention 2 x (2 batch x 4 heads x 128 x 128 x 64) = 16,777,216 MACs (FlopCounterMode's full square,
    # causal or not): 83,886,080 MACs = 167,772,160 FLOPs; the backward twice that
    assert forward.get_total_flops() == 167_772_160
    assert 2 * counter.total_macs == forward.get_total_flops()
    assert 2 * counter.total_backward_macs == both.get_total_flops() - forward.get_total_flops()
    assert counter.profile.backward["unsupported"] == {}
    kernel = next(r for r in counter.records if "attention" in str(r.target))
    assert kernel.macs == 16_777_216 and kernel.time_ms is not None and kernel.time_ms > 0
    if backend != "FLASH_ATTENTION" and backend != "EFFICIENT_ATTENTION":  # (their backward uses atomics)
        assert all(torch.equal(p.grad, expected[k]) for k, p in model.named_parameters())
    else:
        assert all(torch.allclose(p.grad, expected[k], rtol=1e-2, atol=1e-3) for k, p in model.named_parameters())


def test_training_steps_on_cuda_against_flop_counter_and_a_plain_loop(cuda: torch.device) -> None:
    """TrainingProfiler around the user's loop on the GPU (AdamW, foreach): each step's forward and
    backward MACs as FlopCounterMode counts them around each iteration, the optimizer's work
    recorded, the parameters after two steps those of the same loop unprofiled, bit for bit."""
    import contextlib
    import copy

    from torch_flops import TrainingProfiler

    hf = pytest.importorskip("transformers")
    config = hf.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=500, max_position_embeddings=64,
                            attn_implementation="eager")
    torch.manual_seed(0)
    model = hf.LlamaForCausalLM(config).to(cuda)
    twin, counted_twin = copy.deepcopy(model), copy.deepcopy(model)
    batches = [torch.randint(0, 500, (2, 32), device=cuda, generator=torch.Generator(cuda).manual_seed(i))
               for i in range(2)]

    def loop(m: nn.Module, per_step: list[int] | None) -> None:
        optimizer = torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=True)
        for ids in batches:
            with FlopCounterMode(display=False) if per_step is not None else contextlib.nullcontext() as counted:
                m(input_ids=ids, labels=ids).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            if per_step is not None:
                per_step.append(counted.get_total_flops())

    reference: list[int] = []
    loop(counted_twin, reference)  # (FlopCounterMode's module tracker changes the gradients' last bits)
    loop(twin, None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    with TrainingProfiler(model, optimizer) as prof:
        for ids in batches:
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    assert len(prof.profiles) == 2
    # FlopCounterMode counts the matmuls (2 FLOPs a MAC) of forward and backward, not the optimizer's
    assert [2 * (p.total_macs + p.total_backward_macs) for p in prof.profiles] == reference
    assert all(p.device.startswith("cuda") and p.memory_source == "cuda.memory_allocated" for p in prof.profiles)
    # AdamW at its default weight decay: 14 FLOPs per parameter element (README's table), in the optimizer phase
    params = sum(p.numel() for p in model.parameters())
    assert [sum(r.flops or 0 for r in p.records if r.phase == "optimizer") for p in prof.profiles] == [14 * params] * 2
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_profile_compiled_on_cuda_counts_what_eager_counts(cuda: torch.device) -> None:
    """Inductor's Triton kernels on the GPU: each region counted by the aten ops it fused, in total
    what the eager profile counts, every kernel timed by CUDA events."""
    import torch_flops

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512), nn.LayerNorm(512))
    model = model.to(cuda, torch.bfloat16).eval()
    x = torch.randn(64, 512, device=cuda, dtype=torch.bfloat16)
    eager = torch_flops.profile(model, x)
    result = torch_flops.profile_compiled(model, x, warmup=1, repeat=3)
    # linear 64 x 512 x 2048 + 64 x 2048 x 512 = 134,217,728 MACs: 268,435,456 FLOPs + the biases, GELU, LayerNorm
    assert eager.total_macs == 134_217_728 == result.profile.total_macs
    assert result.profile.total_flops == eager.total_flops and not result.eliminated
    # the matmuls as cuBLAS calls (extern kernels), GELU and LayerNorm in Triton kernels, each timed
    kernels = [r for r in result.profile.records if r.op in ("kernel", "extern_kernel")]
    assert {r.op for r in kernels} == {"kernel", "extern_kernel"}
    assert all(r.time_ms is not None and r.time_ms > 0 for r in kernels)
    assert result.profile.device.startswith("cuda")


def test_dropout_and_autocast_on_cuda_leave_what_the_plain_call_leaves(cuda: torch.device) -> None:
    """Train-mode dropout draws from the CUDA generator as the plain call does (same output, same
    generator state after); under autocast bf16 the matmuls count as FlopCounterMode counts them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.Dropout(0.5), nn.Linear(256, 64)).to(cuda).train()
    x = torch.randn(32, 256, device=cuda)
    torch.cuda.manual_seed(3)
    with torch.no_grad():
        plain = model(x)
    state = torch.cuda.get_rng_state()
    torch.cuda.manual_seed(3)
    with torch.no_grad():
        out = TorchFLOPsByFX(model).propagate(x)
    assert torch.equal(out, plain) and torch.equal(torch.cuda.get_rng_state(), state)
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        with FlopCounterMode(display=False) as reference:
            expected = model(x)
        counter = TorchFLOPsByFX(model)
        out = counter.propagate(x)
    # 32 x 256 x 256 + 32 x 256 x 64 = 2,621,440 MACs, in bf16
    assert out.dtype == torch.bfloat16 and torch.equal(out, expected)
    assert 2 * counter.total_macs == reference.get_total_flops() == 5_242_880
