"""The roofline as a picture: every node a point (intensity, FLOP/s), under the hardware's roofs.
Needs matplotlib (``pip install torch_flops[plot]``); nothing else in torch_flops imports it."""

from __future__ import annotations

import io
import os
from typing import Any

from torch_flops.report import check_writable, write_atomic
from torch_flops.roofline import Roofline

__all__ = ["save_roofline_plot"]

_COLOURS = {"compute": "#1f77b4", "memory": "#d62728", None: "#7f7f7f"}


def save_roofline_plot(roofline: Roofline, path: str | os.PathLike[str], color_by: str = "bound") -> Any:
    """Write a PNG of ``roofline``: the memory roof (bandwidth x intensity) and a compute roof per
    dtype the nodes use, and one point per node at its arithmetic intensity and its achieved FLOP/s
    (measured on this hardware) or attainable FLOP/s (flops / roofline time, predicted). Point area
    follows the node's time; colour its bound (``color_by="bound"``) or its top-level module
    (``color_by="module"``). Nodes without FLOPs or bytes are left out. Written atomically;
    returns the ``matplotlib.figure.Figure`` (to restyle and save again)."""
    try:
        # the object-oriented API: no pyplot, so the user's backend and figure list stay as they were
        from matplotlib import colormaps
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("save_roofline_plot needs matplotlib: pip install matplotlib (or torch_flops[plot])") from e
    if color_by not in ("bound", "module"):
        raise ValueError(f"color_by must be 'bound' or 'module', got {color_by!r}")
    check_writable(path)
    spec = roofline.hardware
    points = [r for r in roofline.nodes if r.flops > 0 and r.bytes > 0 and r.roofline_time_ms > 0]
    fig = Figure(figsize=(8, 5.5), dpi=100)
    ax = fig.add_subplot()
    intensities = [r.intensity for r in points if r.intensity] or [1.0]
    low, high = min(min(intensities) / 4, 0.01), max(max(intensities) * 4, 1e4)
    xs = [low, high]
    bandwidth = spec.memory_bandwidth
    dtypes = sorted({r.dtype for r in points if r.dtype}) or ["float32"]
    roofs = ["#2ca02c", "#9467bd", "#8c564b", "#17becf"]  # none of them a point colour
    for n, dtype in enumerate(dtypes):
        peak = spec.peak_flops(dtype)
        knee = peak / bandwidth
        ax.plot([low, knee, high], [bandwidth * low, peak, peak], linewidth=1.5, color=roofs[n % len(roofs)],
                label=f"{dtype} roof {peak / 1e12:.3g} TFLOP/s")
    ax.plot(xs, [bandwidth * x for x in xs], linestyle=":", color="black", linewidth=0.8,
            label=f"memory {bandwidth / 1e9:.4g} GB/s")
    if points:
        ys = [r.achieved_flops_per_s or r.flops / (r.roofline_time_ms / 1e3) for r in points]
        times = [r.time_ms if r.time_ms is not None else r.roofline_time_ms for r in points]
        biggest = max(times) or 1.0
        sizes = [12 + 300 * t / biggest for t in times]
        if color_by == "bound":
            colours: list[Any] = [_COLOURS.get(r.bound, _COLOURS[None]) for r in points]
            legend: list[tuple[str, Any]] = [(f"{bound}-bound node", _COLOURS[bound]) for bound in ("compute", "memory")]
        else:
            tops = sorted({r.module_path.split(".")[0] for r in points})
            palette = colormaps["tab20"]
            colours = [palette(tops.index(r.module_path.split(".")[0]) % 20) for r in points]
            legend = [(top or "(root)", palette(n % 20)) for n, top in enumerate(tops[:12])]
        for label, colour in legend:  # empty series: legend entries for the point colours
            ax.scatter([], [], s=30, color=colour, alpha=0.6, label=label)
        ax.scatter([r.intensity or 0.0 for r in points], ys, s=sizes, c=colours, alpha=0.6, edgecolors="none",
                   zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("FLOP/s " + ("achieved" if roofline.timed else "attainable (predicted)"))
    ax.set_title(f"{len(points)} nodes on {spec.name}: {roofline.total_roofline_ms:.3g} ms predicted, "
                 f"{100 * roofline.memory_bound_share:.0f}% memory-bound")
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    write_atomic(path, buffer.getvalue())
    return fig
