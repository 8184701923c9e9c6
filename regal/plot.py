"""`plot_solution`: memory over the schedule, one line per device, the peak marked (matplotlib);
for a runtime solution (`info["timed"]`), `plot_timed_solution`: a Gantt chart per device and
link over time with the memory curves under it."""

from __future__ import annotations

import numpy as np

from regal.graph import Graph
from regal.simulate import memory_trace
from regal.solution import Solution

__all__ = ["plot_solution", "plot_timed_solution"]


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
    nodes went and when. A runtime solution gets `plot_timed_solution` instead."""
    if isinstance(solution.info.get("timed"), dict):
        return plot_timed_solution(graph, solution, path, title)
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
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(12, 6), sharex=True, layout="constrained",
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
    # the legends sit right of the axes: inside they covered the peak's label wherever it was
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              title="at step 0: the resident tensors\n(weights, inputs)", title_fontsize=7)
    ax.set_title(title or f"{graph.name}: {solution.method}, {d} device{'s' if d > 1 else ''}")
    for k in range(d):  # every node on its device's row: computed ones as ticks, resident ones as dots
        sel = computes & (running == k)
        ax2.scatter(steps[sel], np.full(sel.sum(), k), s=4, color=f"C{k}", marker="|",
                    label=f"device {k}: {int((solution.placement == k).sum()):,} nodes")
    for k in range(d):
        sel = ~computes & (running == k)
        ax2.scatter(steps[sel], np.full(sel.sum(), k), s=6, color=f"C{k}", marker="o", edgecolors="k",
                    linewidths=0.3)
    if (~computes).any():  # the legend's entry in grey: the dots take their device's colour
        ax2.scatter([], [], s=6, color="0.7", marker="o", edgecolors="k", linewidths=0.3,
                    label="resident (weights, inputs)")
    ax2.set_yticks(range(d))
    ax2.set_ylim(-0.5, d - 0.5)
    ax2.set_ylabel("device")
    ax2.set_xlabel("step of the global order")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, markerscale=2)
    from regal._io import atomic_savefig
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)
    return path


def plot_timed_solution(graph: Graph, solution: Solution, path: str, title: str | None = None) -> str:
    """Write a PNG of a runtime solution (SPEC.md section 4): top, a Gantt chart with one row per
    device (its nodes, as they run) and one per busy link (its transfers); bottom, every device's
    memory over time with the memory limit, on the same time axis."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from regal.timed import DeviceModel, resimulate

    d = solution.num_devices
    sim = resimulate(graph, solution, trace=True)
    timed = solution.info["timed"]
    scale_t, unit_t = (1e3, "ms") if sim.makespan_s >= 1e-3 else (1e6, "us")
    links = sorted({(int(solution.placement[u]), int(q)) for u, q in zip(sim.transfer_node, sim.transfer_device)})
    rows = [f"device {k}" for k in range(d)] + [f"link {p}->{q}" for p, q in links]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 2.2 + 0.35 * len(rows) + 2.5), sharex=True,
                                  gridspec_kw={"height_ratios": [max(1.0, 0.35 * len(rows)), 2.5]})
    compute = np.flatnonzero(~graph.resident)
    for k in range(d):
        on = compute[solution.placement[compute] == k]
        bars = [(sim.start_s[v] * scale_t, (sim.finish_s[v] - sim.start_s[v]) * scale_t) for v in on]
        ax.broken_barh(bars, (k - 0.4, 0.8), facecolors=f"C{k}", edgecolors="k", linewidth=0.2)
    for i, (p, q) in enumerate(links):
        sel = (solution.placement[sim.transfer_node] == p) & (sim.transfer_device == q)
        bars = list(zip(sim.transfer_start_s[sel] * scale_t,
                        (sim.transfer_finish_s[sel] - sim.transfer_start_s[sel]) * scale_t))
        ax.broken_barh(bars, (d + i - 0.4, 0.8), facecolors=f"C{q}", alpha=0.5, edgecolors="k", linewidth=0.2)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    model = DeviceModel(**timed["device_model"])
    ax.set_title(title or f"{graph.name}: {solution.method}, {d} device{'s' if d > 1 else ''}, makespan "
                 f"{sim.makespan_s * scale_t:,.3f} {unit_t} ({model.describe()})", fontsize=9)
    peak = int(sim.peak_bytes)
    limit = timed.get("memory_limit_bytes")
    top = max(peak, max(limit) if limit else 0)
    scale, unit = (_MIB, "MiB") if top >= _MIB else (1.0, "bytes")
    t = np.append(sim.trace_s, sim.trace_s[-1]) * scale_t
    for k in range(d):
        m = np.append(sim.trace_bytes[:, k], sim.trace_bytes[-1, k]) / scale
        ax2.step(t, m, where="post", lw=1.1, color=f"C{k}",
                 label=f"device {k}: peak {sim.device_peak_bytes[k] / scale:,.2f} {unit}")
    if limit:
        fits = "fits" if timed.get("feasible") else "over"
        ax2.axhline(limit[0] / scale, color="r", ls="--", lw=0.9,
                    label=f"memory limit {limit[0] / scale:,.2f} {unit} per device ({fits})")
    ax2.set_ylim(0, top / scale * 1.15 if top else 1)
    ax2.set_xlim(0, max(sim.makespan_s * scale_t, 1e-9))
    ax2.set_ylabel(f"memory ({unit})")
    ax2.set_xlabel(f"time ({unit_t})")
    ax2.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    from regal._io import atomic_savefig
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)
    return path
