"""`plot_solution`: memory over the schedule, one line per device, the peak marked (matplotlib)."""

from __future__ import annotations

import numpy as np

from regal.graph import Graph
from regal.simulate import memory_trace
from regal.solution import Solution

__all__ = ["plot_solution"]


def _mark_peaks(ax, graph, solution, sim, trace, running, scale, unit, digits) -> None:
    """A marker at the first step where each device that reaches the peak does so, and one label,
    kept inside the axes (to the left of the marker when it sits in the right half)."""
    n = graph.num_nodes
    at_peak = [k for k in range(solution.num_devices) if sim.device_peak_bytes[k] == sim.peak_bytes]
    steps = []
    for k in at_peak:
        t = int(np.argmax(trace[:, k] == sim.peak_bytes))
        ax.plot([t], [sim.peak_bytes / scale], "v", color=f"C{k}", mec="k", ms=9, zorder=5)
        steps.append((t, k))
    t, k = steps[0]
    who = ", ".join(f"device {kk} at step {tt}" for tt, kk in steps[:4]) + (" ..." if len(steps) > 4 else "")
    right_half = t > n / 2
    ax.annotate(f"peak {sim.peak_bytes / scale:,.{digits}f} {unit}: {who}\n"
                f"first at {graph.ids[solution.order[t]]}", (t, sim.peak_bytes / scale),
                textcoords="offset points", xytext=(-10 if right_half else 10, 10), fontsize=8,
                ha="right" if right_half else "left", va="bottom", annotation_clip=True)

_MIB = 1024.0 ** 2


def plot_solution(graph: Graph, solution: Solution, path: str, title: str | None = None) -> str:
    """Write a PNG: top, every device's bytes at each step of the order (SPEC.md section 3), the
    peak and the lower bound marked; bottom, which device runs each step, so one sees where the
    nodes went and when."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = solution.num_devices
    sim, trace = memory_trace(graph, solution.placement, solution.order, d)
    steps = np.arange(graph.num_nodes)
    running = solution.placement[solution.order]
    computes = ~graph.resident[solution.order]
    scale, unit = (_MIB, "MiB") if sim.peak_bytes >= _MIB else (1.0, "bytes")
    digits = 2 if scale > 1 else 0
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1]})
    for k in range(d):
        ax.step(steps, trace[:, k] / scale, where="mid", lw=1.1, color=f"C{k}",
                label=f"device {k}: peak {sim.device_peak_bytes[k] / scale:,.{digits}f} {unit}")
    _mark_peaks(ax, graph, solution, sim, trace, running, scale, unit, digits)
    lb = graph.lower_bound(d)
    ax.axhline(lb / scale, color="0.5", ls="--", lw=0.8,
               label=f"lower bound {lb / scale:,.{digits}f} {unit} (no schedule goes below it)")
    ax.set_ylabel(f"memory ({unit})")
    ax.set_ylim(0, max(sim.peak_bytes, lb) / scale * 1.22)  # room for the labels inside the axes
    ax.set_xlim(-0.5, graph.num_nodes - 0.5)
    ax.legend(fontsize=8, loc="upper left", title="at step 0: the resident tensors (weights, inputs)",
              title_fontsize=7)
    ax.set_title(title or f"{graph.name}: {solution.method}, {d} device{'s' if d > 1 else ''}")
    for k in range(d):
        sel = computes & (running == k)
        ax2.scatter(steps[sel], np.full(sel.sum(), k), s=4, color=f"C{k}", marker="|",
                    label=f"device {k}: {int((solution.placement == k).sum()):,} nodes")
    ax2.set_yticks(range(d))
    ax2.set_ylim(-0.5, d - 0.5)
    ax2.set_ylabel("device")
    ax2.set_xlabel("step of the global order")
    ax2.legend(fontsize=7, loc="upper right", ncol=min(d, 4), markerscale=3)
    fig.tight_layout()
    from regal._io import atomic_savefig
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)
    return path
