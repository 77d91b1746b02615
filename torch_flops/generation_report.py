"""Text, Markdown and CSV of a generation profile and of a generation sweep, made from their plain
dictionaries (:meth:`GenerationProfile.summary`, its step rows, :meth:`GenerationPrediction.as_dict`,
the sweep's points): strings only, nothing runs here."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from torch_flops.report import format_bytes, format_count, format_time_ms

__all__ = ["markdown", "prediction_text", "steps_csv", "steps_table", "summary_text", "sweep_csv", "sweep_table"]


def _rate(value: float | None, unit: str = "tokens/s") -> str:
    return "-" if value is None else f"{value:,.1f} {unit}" if value < 1000 else f"{value:,.0f} {unit}"


def _bytes(value: float | None) -> str:
    return "-" if value is None else format_bytes(round(value))


def _lines(title: str, pairs: Sequence[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in pairs) + 2
    return "\n".join([title, "=" * len(title), *(f"{k + ':':<{width}}{v}" for k, v in pairs)])


def summary_text(s: Mapping[str, Any]) -> str:
    """The figures of :meth:`GenerationProfile.summary`, one per line."""
    steps = s["steps"]
    pairs: list[tuple[str, str]] = [
        ("Model", f"{s['model']} ({format_count(s['params'])} params, {s['dtype'] or '-'}, {s['device']})"),
        ("Generation", (f"batch {s['batch_size']}, prompt {s['prompt_length'] if s['prompt_length'] is not None else '?'}"
                       f" tokens, {s['new_tokens']} new tokens per sequence ({steps} calls: 1 prefill + "
                       f"{steps - 1} decode)")),
        ("Prefill", (f"{format_count(s['prefill_flops'], 'FLOPs')} ({format_count(s['prefill_macs'], 'MACs')}); "
                    f"{format_count(s['prefill_flops_per_token'], 'FLOPs')} per prompt token")),
        ("Decode", (f"{format_count(s['decode_flops'], 'FLOPs')} in {steps - 1} step{'' if steps == 2 else 's'}; per token "
                   f"{format_count(s['decode_flops_per_token'], 'FLOPs')}, {_bytes(s['decode_bytes_per_token'])} moved")),
        ("Whole generation", f"{format_count(s['total_flops'], 'FLOPs')} ({format_count(s['total_macs'], 'MACs')})"),
    ]
    if s["timing_source"] is None:
        pairs.append(("Time", f"not measured ({s['device']})"))
    else:
        pairs += [("TTFT", format_time_ms(s["ttft_ms"])), ("TPOT", format_time_ms(s["tpot_ms"])),
                  ("Tokens/s", _rate(s["tokens_per_s"]) + " (sequences x new tokens / wall time)")]
        if s["timing_source"] == "baseline":
            same = {True: "same tokens", False: "DIFFERENT tokens", None: "tokens not compared"}[s["baseline_matches"]]
            timing = (f"an unprofiled run of the same call ({format_time_ms(s['baseline_total_ms'])}; {same}); "
                      f"the profiled run took {s['overhead']:.2f}x as long (profiler overhead)")
        else:
            timing = ("the profiled run (its times include the profiler's own; baseline=True measures an "
                      "unprofiled run)")
        pairs.append(("Timing from", timing))
    kind = s["kv_cache_kind"]
    pairs.append(("Memory", (f"weights {format_bytes(s['weights_bytes'])}, KV cache {_bytes(s['kv_cache_bytes'])}"
                            f"{f' ({kind})' if kind else ''}, peak activations {_bytes(s['activation_bytes'])}")))
    shape = s["kv_shape"]
    if s["kv_cache_bytes"] is not None:
        matches = s["kv_cache_matches_formula"]
        formula = (f"2 x {shape['layers']} layers x {shape['kv_heads']} KV heads x {shape['head_dim']} head dim x "
                   "tokens x batch x dtype bytes") if shape else "the config's formula"
        per_token = f"{_bytes(s['kv_bytes_per_token'])} per token per sequence"
        if matches is None:
            text = f"{per_token}; not checked against {formula}" if shape else f"{per_token} (no config to check it by)"
        elif matches:
            text = f"{per_token}; measured equals {formula} at every step"
        else:  # name where: a cache holding views of a wider tensor (fused QKV) differs at the prefill alone
            differs = s.get("kv_cache_differs") or []
            where = ", ".join(f"step {k} ({format_bytes(a)} held, {format_bytes(b)} by the formula)"
                              for k, a, b in differs[:3]) + (f" and {len(differs) - 3} more" if len(differs) > 3 else "")
            text = (f"{per_token}; measured DIFFERS from {formula} at {where}" if where else
                    f"{per_token}; measured DIFFERS from {formula}")
        pairs.append(("KV cache", text))
    for note in s.get("notes", ()):
        pairs.append(("Note", note))
    return _lines("torch_flops generation profile", pairs)


_STEP_COLUMNS = (("step", "step", str), ("phase", "phase", str), ("tokens_in", "tokens in", str),
                 ("context_length", "context", str), ("flops", "FLOPs", format_count), ("macs", "MACs", format_count),
                 ("bytes_read", "read", format_bytes), ("bytes_written", "written", format_bytes),
                 ("kv_cache_bytes", "KV cache", format_bytes), ("activation_bytes", "activations", format_bytes),
                 ("forward_ms", "forward", format_time_ms), ("latency_ms", "latency", format_time_ms))


def steps_table(rows: Sequence[Mapping[str, Any]], tablefmt: str = "simple") -> str:
    """One line per call of the model (``forward``: the call, wall clock, profiled; ``latency``:
    to the next call's start, sampling included)."""
    body = [[fmt(r[key]) if r[key] is not None else "-" for key, _, fmt in _STEP_COLUMNS] for r in rows]
    headers = [title for _, title, _ in _STEP_COLUMNS]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True,
                    colalign=["right", "left", *["right"] * (len(headers) - 2)])


def steps_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    return _csv(rows)


def _csv(rows: Sequence[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return buffer.getvalue()


def prediction_text(p: Mapping[str, Any]) -> str:
    """:meth:`GenerationPrediction.as_dict` as lines."""
    share = p["decode_memory_bound_share"]
    fits = p["max_batch"]
    pairs = [
        ("TTFT (prefill)", format_time_ms(p["prefill_ms"])),
        ("TPOT (decode step)", format_time_ms(p["tpot_ms"])
         + ("" if share is None else f", {100 * share:.1f}% of it in memory-bound nodes")),
        ("Decode tokens/s", _rate(p["decode_tokens_per_s"]) + f" (batch {p['batch_size']} / TPOT)"),
        ("Tokens/s", _rate(p["tokens_per_s"]) + f" (end to end: {p['new_tokens']} new tokens per sequence)"),
        ("Fits", (f"weights {format_bytes(p['weights_bytes'])} + KV cache {_bytes(p['kv_bytes_per_token'])} per token "
                 f"per sequence at context {p['context_length']}: largest batch "
                 f"{'-' if fits is None else fits} in {format_bytes(p['memory_bytes'])}")),
    ]
    return _lines(f"Predicted on {p['hardware']} (roofline of the measured graphs, a lower bound)", pairs)


def markdown(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
             prediction: Mapping[str, Any] | None = None) -> str:
    s = summary
    head = (f"**torch_flops generation profile**: {s['model']}, batch {s['batch_size']}, prompt {s['prompt_length']}, "
            f"{s['new_tokens']} new tokens; prefill {format_count(s['prefill_flops'], 'FLOPs')}, decode "
            f"{format_count(s['decode_flops_per_token'], 'FLOPs')} per token; TTFT {format_time_ms(s['ttft_ms'])}, "
            f"TPOT {format_time_ms(s['tpot_ms'])}, {_rate(s['tokens_per_s'])}; KV cache {_bytes(s['kv_cache_bytes'])}")
    parts = [head, steps_table(rows, "github")]
    if prediction is not None:
        p = prediction
        parts.append(f"**Predicted on {p['hardware']}**: TTFT {format_time_ms(p['prefill_ms'])}, TPOT "
                     f"{format_time_ms(p['tpot_ms'])}, {_rate(p['decode_tokens_per_s'])} while decoding, largest "
                     f"batch at context {p['context_length']}: {'-' if p['max_batch'] is None else p['max_batch']}")
    return "\n\n".join(parts)


_SWEEP_COLUMNS = (("batch", "batch", str), ("prompt", "prompt", str), ("generated", "generated", str),
                  ("decode_context", "decode ctx", str), ("prefill_flops", "prefill FLOPs", format_count),
                  ("decode_flops", "decode FLOPs", format_count), ("ttft_ms", "TTFT", format_time_ms),
                  ("tpot_ms", "TPOT", format_time_ms), ("decode_tokens_per_s", "decode tok/s", _rate),
                  ("tokens_per_s", "tok/s", _rate), ("decode_memory_bound_share", "mem-bound", None),
                  ("weights_bytes", "weights", format_bytes), ("kv_cache_bytes", "KV cache", format_bytes),
                  ("activation_bytes", "activations", format_bytes), ("fits", "fits", None))


def _sweep_cell(key: str, value: Any, fmt: Any) -> str:
    if value is None:
        return "-"
    if key == "decode_memory_bound_share":
        return f"{100 * value:.0f}%"
    if key == "fits":
        return "yes" if value else "NO"
    if fmt is _rate:
        return f"{value:,.0f}" if value >= 99.95 else f"{value:#.3g}"  # 3 digits, kept: 15.0, not 15
    return str(fmt(value))


def sweep_table(points: Sequence[Mapping[str, Any]], tablefmt: str = "simple") -> str:
    """One line per point of a generation sweep."""
    body = [[_sweep_cell(key, p[key], fmt) for key, _, fmt in _SWEEP_COLUMNS] for p in points]
    headers = [title for _, title, _ in _SWEEP_COLUMNS]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True,
                    colalign=["right"] * (len(headers) - 1) + ["left"])


def sweep_csv(points: Sequence[Mapping[str, Any]]) -> str:
    return _csv(points)
