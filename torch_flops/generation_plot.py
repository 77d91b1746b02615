"""A generation sweep as a picture (:meth:`GenerationSweep.save_plot`): decode throughput against
batch size per context, memory per point (weights, KV cache, activations stacked) against the
part's memory, and time per output token against context per batch size. Needs matplotlib
(``pip install torch_flops[plot]``); made from the sweep's plain rows."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from typing import Any

from torch_flops.report import check_writable, write_atomic

__all__ = ["save_sweep_plot"]

_GIB = 1024**3


def save_sweep_plot(points: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], title: str = "") -> Any:
    """Write the three panels as one PNG, atomically; returns the ``matplotlib.figure.Figure``."""
    try:
        from matplotlib.figure import Figure  # the object-oriented API: no pyplot, the user's backend untouched
    except ImportError as e:
        raise ImportError("save_sweep_plot needs matplotlib: pip install matplotlib (or torch_flops[plot])") from e
    if not points:
        raise ValueError("a sweep plot needs at least one point")
    check_writable(path)
    fig = Figure(figsize=(15, 4.8), dpi=100)
    throughput, memory, per_token = fig.subplots(1, 3)

    # decode tokens/s against batch, one line per (prompt, generated)
    contexts = sorted({(p["prompt"], p["generated"]) for p in points})
    for prompt, generated in contexts:
        row = sorted((p for p in points if (p["prompt"], p["generated"]) == (prompt, generated)),
                     key=lambda p: p["batch"])
        throughput.plot([p["batch"] for p in row], [p["decode_tokens_per_s"] or 0 for p in row], marker="o",
                        label=f"prompt {prompt} + {generated}")
    throughput.set_xscale("log", base=2)
    throughput.set_yscale("log")
    throughput.set_xlabel("batch size")
    throughput.set_ylabel("decode tokens/s (batch / TPOT)")
    throughput.set_title("throughput vs batch")
    throughput.legend(fontsize=7)

    # memory per point, stacked
    labels = [f"b{p['batch']} p{p['prompt']}+{p['generated']}" for p in points]
    xs = list(range(len(points)))
    weights = [p["weights_bytes"] / _GIB for p in points]
    kv = [(p["kv_cache_bytes"] or 0) / _GIB for p in points]
    act = [(p["activation_bytes"] or 0) / _GIB for p in points]
    memory.bar(xs, weights, label="weights", color="#1f77b4")
    memory.bar(xs, kv, bottom=weights, label="KV cache", color="#ff7f0e")
    memory.bar(xs, act, bottom=[w + k for w, k in zip(weights, kv)], label="activations (peak)", color="#2ca02c")
    capacity = points[0]["memory_bytes"] / _GIB
    memory.axhline(capacity, color="black", linestyle="--", linewidth=1, label=f"memory {capacity:.0f} GiB")
    memory.set_xticks(xs)
    memory.set_xticklabels(labels, rotation=70, fontsize=6)
    memory.set_ylabel("GiB")
    memory.set_title("memory per point")
    memory.legend(fontsize=7)

    # TPOT against the decode context, one line per batch
    for batch in sorted({p["batch"] for p in points}):
        row = sorted((p for p in points if p["batch"] == batch), key=lambda p: p["decode_context"])
        per_token.plot([p["decode_context"] for p in row], [p["tpot_ms"] for p in row], marker="o",
                       label=f"batch {batch}")
    per_token.set_xscale("log", base=2)
    per_token.set_xlabel("context (tokens)")
    per_token.set_ylabel("time per output token (ms)")
    per_token.set_title("TPOT vs context")
    per_token.legend(fontsize=7)

    if title:
        fig.suptitle(f"{title} (roofline, lower bounds)")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    write_atomic(path, buffer.getvalue())
    return fig
