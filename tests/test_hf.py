"""Real transformers models (built from config objects, no download).

For each: on meta tensors through torch.export, no node is unsupported and ``2 * total_macs``
equals FlopCounterMode's total over the same exported graph; on CPU through the default front
end (the model as it runs), ``propagate`` returns the model's own output values and counts what
the exported graph counts; ``tracer="auto"`` on meta runs the model, or falls back to torch.export
(with one warning) when the model reads tensor values. Skipped without transformers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import fx
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import DroppedOutputWarning, TorchFLOPsByFX, TracerFallbackWarning
from torch_flops.capture import CapturedGraph

T = pytest.importorskip("transformers")
T.logging.set_verbosity_error()

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
         "vocab_size": 100}
BATCH, SEQ = 2, 8


def _ids() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(0, 100, (BATCH, SEQ), generator=g),
            "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long)}


def _grouped_mm_reference(a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    # Independent formula for FlopCounterMode, which does not know transformers' custom op:
    # tokens (M, K) each go through one expert's (K, N) matrix: 2*M*K*N FLOPs.
    return 2 * a_shape[0] * a_shape[1] * b_shape[-1]


CASES: dict[str, tuple[Callable[[], Any], Callable[[], dict[str, torch.Tensor]]]] = {
    "bert": (lambda: T.BertModel(T.BertConfig(**SMALL)), _ids),
    "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100)),
             lambda: {"input_ids": _ids()["input_ids"]}),
    "llama_gqa": (lambda: T.LlamaForCausalLM(T.LlamaConfig(**SMALL, num_key_value_heads=2)), _ids),
    "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8,
                                                           vocab_size=100)),
           lambda: {**_ids(), "decoder_input_ids": _ids()["input_ids"]}),
    "vit": (lambda: T.ViTModel(T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=64, image_size=32, patch_size=8)),
            lambda: {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(0))}),
    "mixtral_moe": (lambda: T.MixtralForCausalLM(T.MixtralConfig(**SMALL, num_key_value_heads=2, num_local_experts=4,
                                                                 num_experts_per_tok=2)), _ids),
}


def _main_output(out: Any) -> torch.Tensor:
    for name in ("logits", "last_hidden_state"):
        if hasattr(out, name):
            return getattr(out, name)
    raise AssertionError(f"unexpected output {type(out)}")


def _flop_counter_total(graph: CapturedGraph, kwargs: dict[str, torch.Tensor], plain: bool = False) -> int:
    """FlopCounterMode on the graph; unless ``plain``, with an independent formula for the MoE
    experts' custom op (which FlopCounterMode counts as 0)."""
    custom = {}
    grouped = getattr(getattr(torch.ops, "transformers", None), "grouped_mm_fallback", None)
    if grouped is not None and not plain:
        custom[grouped] = _grouped_mm_reference
    flat = graph.bind((), kwargs)
    with FlopCounterMode(display=False, custom_mapping=custom) as counter:
        fx.Interpreter(graph.graph_module).run(*flat)
    return counter.get_total_flops()


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.filterwarnings("ignore::torch_flops.DroppedOutputWarning")  # causal LMs' caches
def test_meta_profile_matches_flop_counter(name: str) -> None:
    build, inputs = CASES[name]
    with torch.device("meta"):
        model = build().eval()
    kwargs = {k: v.to("meta") for k, v in inputs().items()}
    counter = TorchFLOPsByFX(model, tracer="export")
    counter.propagate(**kwargs)
    assert counter.tracer_used == "export"
    assert counter.unsupported == {}
    assert counter.total_macs > 0
    assert 2 * counter.total_macs == _flop_counter_total(counter.capture.graphs[0], kwargs)
    # in FlopCounterMode's own convention: exactly its total, custom ops it does not know included
    flop_counter = counter.in_convention("flop_counter").total_flops
    assert flop_counter == _flop_counter_total(counter.capture.graphs[0], kwargs, plain=True)
    assert counter.total_time_ms is None  # nothing is timed on meta
    assert counter.max_memory is not None and counter.max_memory > 0


@pytest.mark.parametrize("name", list(CASES))
def test_cpu_output_equals_model_output(name: str) -> None:
    build, inputs = CASES[name]
    torch.manual_seed(0)
    model = build().eval()
    kwargs = inputs()
    with torch.no_grad():
        expected = model(**kwargs)
        counter = TorchFLOPsByFX(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TracerFallbackWarning)
            warnings.simplefilter("ignore", DroppedOutputWarning)
            got = counter.propagate(**kwargs)
    assert torch.equal(_main_output(got), _main_output(expected))
    assert counter.unsupported == {}
    assert counter.tracer_used == "eager"
    assert all(r.time_ms is not None for r in counter.records
               if r.op.startswith("call_") and r.target != "operator.getitem")
    # the same MACs as the exported graph on meta tensors (attention counted per call on both)
    with torch.device("meta"):
        meta_model = build().eval()
    exported = TorchFLOPsByFX(meta_model, tracer="export")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedOutputWarning)
        exported.propagate(**{k: v.to("meta") for k, v in kwargs.items()})
    assert counter.total_macs == exported.total_macs


@pytest.mark.filterwarnings("ignore::torch_flops.DroppedOutputWarning")
def test_auto_on_meta_runs_the_model_or_falls_back_once() -> None:
    ids = {k: v.to("meta") for k, v in _ids().items()}
    with torch.device("meta"):
        model = T.LlamaForCausalLM(T.LlamaConfig(**SMALL, num_key_value_heads=2)).eval()
    counter = TorchFLOPsByFX(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerFallbackWarning)
        counter.propagate(input_ids=ids["input_ids"])  # nothing reads a value: it runs on meta
    assert counter.tracer_used == "eager"
    macs = counter.total_macs
    # the attention mask is checked with .item(), which meta tensors cannot answer: export's graph
    with pytest.warns(TracerFallbackWarning, match="reads tensor values") as record:
        counter.propagate(**ids)
    fallbacks = [w for w in record if issubclass(w.category, TracerFallbackWarning)]
    assert len(fallbacks) == 1 and fallbacks[0].filename == __file__  # at the caller's propagate() line
    assert counter.tracer_used == "export" and counter.total_macs == macs


@pytest.mark.filterwarnings("ignore::torch_flops.DroppedOutputWarning")
def test_llama_module_attribution_and_gqa_attention() -> None:
    # Every linear of the first layer is attributed to its own nn.Linear, as fx would do.
    with torch.device("meta"):
        model = T.LlamaForCausalLM(T.LlamaConfig(**SMALL, num_key_value_heads=2)).eval()
    counter = TorchFLOPsByFX(model, tracer="export")
    counter.propagate(**{k: v.to("meta") for k, v in _ids().items()})
    by_path = {r.module_path: r for r in counter.records if r.target == "aten.linear"}
    q = by_path["model.layers.0.self_attn.q_proj"]
    k = by_path["model.layers.0.self_attn.k_proj"]
    assert q.module_type == "Linear" and k.module_type == "Linear"
    # q_proj: 2*8 tokens x 32 -> 32: 16*32*32 = 16384 MACs; k_proj to 2 KV heads x 8 = 16: 8192 MACs
    assert (q.macs, k.macs) == (16384, 8192)
    sdpa = [r for r in counter.records if r.target == "aten.scaled_dot_product_attention"]
    assert len(sdpa) == 2
    # per layer: scores = B*Hq*L*S = 2*4*8*8 = 512; MACs = 512*(8+8) = 8192 (query heads, not KV heads)
    assert all(r.macs == 8192 for r in sdpa)
    assert sdpa[0].module_path == "model.layers.0.self_attn"


def test_causal_lm_cache_is_dropped_with_a_warning() -> None:
    model = T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=100)).eval()
    ids = _ids()["input_ids"]
    with torch.no_grad():
        expected = model(input_ids=ids)  # use_cache defaults to True: returns a DynamicCache
        # the output's field: ``cache`` from transformers 5.24, ``past_key_values`` before
        name = "cache" if "cache" in expected else "past_key_values"
        counter = TorchFLOPsByFX(model, tracer="export")
        with pytest.warns(DroppedOutputWarning, match=f"'{name}'") as record:
            got = counter.propagate(input_ids=ids)
        eager = TorchFLOPsByFX(model).propagate(input_ids=ids)  # the default: the model's own output
    assert [w.filename for w in record if issubclass(w.category, DroppedOutputWarning)] == [__file__]
    assert isinstance(expected[name], T.DynamicCache)
    assert got.get(name) is None
    assert torch.equal(got.logits, expected.logits)
    assert isinstance(eager[name], T.DynamicCache) and torch.equal(eager.logits, expected.logits)


@pytest.mark.parametrize("name", [n for n in CASES if n != "mixtral_moe"])
def test_backward_matches_flop_counter_mode(name: str) -> None:
    # eager attention (matmuls FlopCounterMode counts on CPU too); its backward is its
    # forward+backward total minus its forward total. (Mixtral's experts run transformers' own
    # grouped-matmul op, which FlopCounterMode does not see in forward or backward.)
    build, inputs = CASES[name]
    model = build().eval()  # no dropout: the profiled step and the plain one compute the same
    model.set_attn_implementation("eager")  # every sub-model's attention too
    kwargs = inputs()

    def loss(out: Any) -> torch.Tensor:
        return _main_output(out).float().pow(2).mean()

    with FlopCounterMode(display=False) as forward:
        model(**kwargs)
    with FlopCounterMode(display=False) as both:
        loss(model(**kwargs)).backward()
    model.zero_grad(set_to_none=True)
    # the gradients of a plain step (FlopCounterMode's module tracker adds autograd nodes of its own)
    loss(model(**kwargs)).backward()
    expected_grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    counter = TorchFLOPsByFX(model)
    counter.propagate(**kwargs, loss_fn=loss)
    assert 2 * counter.total_backward_macs == both.get_total_flops() - forward.get_total_flops()
    assert 2 * counter.total_macs == forward.get_total_flops()
    assert counter.profile.backward["unsupported"] == {}
    # the same gradients as the plain forward + backward, bit for bit
    assert {k for k, p in model.named_parameters() if p.grad is not None} == set(expected_grads)
    for k, p in model.named_parameters():
        if k in expected_grads:
            assert torch.equal(p.grad, expected_grads[k]), k


@pytest.mark.parametrize("name", ["bert", "llama_gqa"])
@pytest.mark.filterwarnings("ignore::torch_flops.DroppedOutputWarning")
def test_backward_on_meta_with_a_mask_falls_back_to_the_exported_graph(name: str) -> None:
    # the attention mask makes transformers read values (.item()), which meta tensors lack: the
    # forward and backward run through the graph torch.export traces, with one warning
    build, inputs = CASES[name]
    with torch.device("meta"):
        model = build()
    kwargs = {k: v.to("meta") for k, v in inputs().items()}

    def loss(out: Any) -> torch.Tensor:
        return _main_output(out).float().sum()

    counter = TorchFLOPsByFX(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TracerFallbackWarning)
        counter.propagate(**kwargs, loss_fn=loss)
    assert [w.category for w in caught if w.category is TracerFallbackWarning] == [TracerFallbackWarning]
    assert counter.tracer_used == "export" and counter.profile.backward["unsupported"] == {}
    # FlopCounterMode over the same graph, forward then forward + backward
    graph = counter.capture.graphs[0]
    flat = graph.bind((), kwargs)
    with FlopCounterMode(display=False) as forward:
        fx.Interpreter(graph.graph_module).run(*flat)
    with FlopCounterMode(display=False) as both:
        out = fx.Interpreter(graph.graph_module).run(*flat)
        main = _main_output(out) if not isinstance(out, (tuple, list)) else out[0]
        main.float().sum().backward()
    assert 2 * counter.total_backward_macs == both.get_total_flops() - forward.get_total_flops()
    assert 2 * counter.total_macs == forward.get_total_flops()


def test_moe_experts_in_float32_on_meta() -> None:
    """torch._grouped_mm's meta kernel takes bfloat16 only (the CPU kernel runs float32 too): plain
    PyTorch refuses a float32 MoE on meta; the default front end gives the grouped matmul the output
    the kernel gives for the same shapes, so the model counts on meta as on CPU."""
    build, _ = CASES["mixtral_moe"]
    with torch.device("meta"):
        model = build().eval()
    ids = _ids()["input_ids"]  # (no attention mask: transformers reads a mask's values in Python)
    kwargs = {"input_ids": ids.to("meta")}
    with pytest.raises(RuntimeError, match="Expected inputs of BF16 type"), torch.no_grad():
        model(**kwargs)
    counter = TorchFLOPsByFX(model)
    out = counter.propagate(**kwargs)
    assert counter.tracer_used == "eager" and out.logits.dtype == torch.float32 and out.logits.is_meta
    grouped = [r.flops for r in counter.records if r.target == "aten._grouped_mm"]
    # 2 x 8 tokens, each through its top 2 of 4 experts: 32 rows of 32; gate_up (32 -> 2 x 64) is
    # 2 x 32 x 32 x 128 = 262144 FLOPs, down (64 -> 32) 2 x 32 x 64 x 32 = 131072; 2 layers
    assert grouped == [262144, 131072] * 2
    # FlopCounterMode over the same model on CPU, counting as on meta (math attention)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    cpu = build().eval()
    with sdpa_kernel(SDPBackend.MATH), torch.no_grad(), FlopCounterMode(display=False) as reference:
        cpu(input_ids=ids)
    assert counter.in_convention("flop_counter").total_flops == reference.get_total_flops()
