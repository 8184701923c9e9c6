"""From cell rows to REGAL's tables and figures (SPEC.md section 6 definitions).

improvement over the reference on a graph: mean over seed pairs of (peak_ref - peak) / peak_ref,
    the reference (BRKGA 5K) and the method run on the same seeds; a method with one seed (a
    deterministic one) is compared with every reference seed.
gap from best on a graph: mean over the method's seeds of (peak - best) / best, where best is the
    lowest peak any method found on that graph and device count, long runs included.
A table row averages these over the graphs a method covered; `graphs` says how many (a method
may refuse a graph: `exact` on a wide one, `xla` without XLA's schedule).
"""

from __future__ import annotations

import csv
from collections import defaultdict

import numpy as np

from regal._io import atomic_savefig, atomic_text

__all__ = ["per_graph", "summary_table", "markdown", "write_csv", "plot_sample_efficiency",
           "reference_evaluations", "plot_scaling", "evaluations_to_match"]


def _index(rows):
    peaks = defaultdict(dict)  # (dataset, graph, d) -> method -> {seed: peak}
    for r in rows:
        if r.get("peak_bytes") is not None:
            peaks[(r["dataset"], r["graph"], r["devices"])].setdefault(r["method"], {})[r["seed"]] = r["peak_bytes"]
    return peaks


def per_graph(rows, reference: str = "brkga", exclude_from_best=()) -> list[dict]:
    """One row per (dataset, graph, devices, method): improvement and gap in percent."""
    out = []
    for (ds, graph, d), by_method in sorted(_index(rows).items()):
        if reference not in by_method:
            continue
        ref = by_method[reference]
        best = min(p for m, s in by_method.items() if m not in exclude_from_best for p in s.values())
        for m, seeds in by_method.items():
            if len(seeds) == 1:
                (p,) = seeds.values()
                pairs = [(ref[s], p) for s in ref]
            else:
                pairs = [(ref[s], seeds[s]) for s in seeds if s in ref]
            if not pairs:
                continue
            imp = float(np.mean([(a - b) / a for a, b in pairs])) * 100
            gap = float(np.mean([(p - best) / best for p in seeds.values()])) * 100
            wins = float(np.mean([b < a for a, b in pairs]))
            out.append({"dataset": ds, "graph": graph, "devices": d, "method": m,
                        "improvement_pct": imp, "gap_pct": gap, "win_rate": wins,
                        "mean_peak_bytes": float(np.mean(list(seeds.values()))), "best_bytes": best})
    return out


def summary_table(graph_rows, rows, methods: list[str]) -> list[dict]:
    """Mean improvement and gap per (dataset, devices, method), with coverage and seconds."""
    secs = defaultdict(list)
    for r in rows:
        if r.get("seconds") is not None:
            secs[(r["dataset"], r["devices"], r["method"])].append(r["seconds"])
    groups = defaultdict(list)
    for r in graph_rows:
        groups[(r["dataset"], r["devices"], r["method"])].append(r)
    total = defaultdict(set)
    for r in graph_rows:
        total[(r["dataset"], r["devices"])].add(r["graph"])
    out = []
    for (ds, d) in sorted(total):
        for m in methods:
            g = groups.get((ds, d, m), [])
            if not g:
                continue
            out.append({"dataset": ds, "devices": d, "method": m, "graphs": len(g),
                        "of_graphs": len(total[(ds, d)]),
                        "improvement_pct": float(np.mean([x["improvement_pct"] for x in g])),
                        "gap_pct": float(np.mean([x["gap_pct"] for x in g])),
                        "win_rate": float(np.mean([x["win_rate"] for x in g])),
                        "median_seconds": float(np.median(secs[(ds, d, m)])) if secs[(ds, d, m)] else float("nan")})
    return out


def markdown(summary, reference: str = "brkga") -> str:
    """Table 1 layout: one row per method, a column pair per (dataset, devices)."""
    cols = sorted({(r["dataset"], r["devices"]) for r in summary})
    methods = list(dict.fromkeys(r["method"] for r in summary))
    cell = {(r["dataset"], r["devices"], r["method"]): r for r in summary}
    head = "| method | " + " | ".join(f"{ds} d={d}: % improv. over {reference} / % gap from best" for ds, d in cols) + " |"
    lines = [head, "|---|" + "---:|" * len(cols)]
    for m in methods:
        vals = []
        for ds, d in cols:
            r = cell.get((ds, d, m))
            if r is None:
                vals.append("-")
                continue
            cov = "" if r["graphs"] == r["of_graphs"] else f" ({r['graphs']}/{r['of_graphs']} graphs)"
            vals.append(f"{r['improvement_pct']:+.2f} / {r['gap_pct']:.2f}{cov}")
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def seconds_markdown(summary) -> str:
    """Median seconds per graph (one run), one row per method, a column per (dataset, devices)."""
    cols = sorted({(r["dataset"], r["devices"]) for r in summary})
    methods = list(dict.fromkeys(r["method"] for r in summary))
    cell = {(r["dataset"], r["devices"], r["method"]): r for r in summary}
    lines = ["| method | " + " | ".join(f"{ds} d={d}: median s per graph" for ds, d in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for m in methods:
        vals = [f"{cell[(ds, d, m)]['median_seconds']:.3g}" if (ds, d, m) in cell else "-" for ds, d in cols]
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def write_csv(path: str, rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r if k != "info"))
    with atomic_text(path) as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _curve(history, grid, column: int = 0):
    """Best peak at each grid point (evaluations, column 0, or seconds, column 2) from an
    improvement history of [evaluations, best peak, seconds] entries."""
    ev = np.array([h[column] for h in history], dtype=float)
    pk = np.array([h[1] for h in history], dtype=float)
    idx = np.searchsorted(ev, grid, side="right") - 1
    return np.where(idx >= 0, pk[np.maximum(idx, 0)], np.nan)


def reference_evaluations(rows, reference: str) -> int | None:
    """The evaluations the reference's final peak was found within: the median of its rows'
    `evaluations` (a run's own count, not the config's budget: a run may be given another budget
    or end early); None when no reference row records one."""
    spent = [r["evaluations"] for r in rows if r["method"] == reference and r.get("evaluations")]
    return int(round(float(np.median(spent)))) if spent else None


def plot_sample_efficiency(rows, path: str, methods: list[str], reference: str = "brkga",
                           title: str = "", axis: str = "evaluations") -> str:
    """Best peak against evaluations spent (or seconds, `axis="seconds"`: anytime), relative to
    the reference's final peak on the same seed. Seconds come from histories that record them.
    The axis label and the dotted line name the evaluations the reference actually ran
    (`reference_evaluations`)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    column = 2 if axis == "seconds" else 0
    spent = reference_evaluations(rows, reference)
    ref_final = {(r["dataset"], r["graph"], r["devices"], r["seed"]): r["peak_bytes"]
                 for r in rows if r["method"] == reference and r.get("peak_bytes")}

    def histories(m):
        for r in rows:
            h = r.get("info", {}).get("history")
            key = (r["dataset"], r["graph"], r["devices"], r["seed"])
            if r["method"] == m and h and len(h[0]) > column and key in ref_final:
                yield r, h, key

    if axis == "seconds":
        ends = [h[-1][2] for m in methods for _, h, _ in histories(m)] + [r["seconds"] for r in rows
                                                                         if r["method"] in methods and r.get("seconds")]
        grid = np.geomspace(1e-3, max(ends + [1e-2]), 80)
    else:
        longest = max([r.get("evaluations", 0) or 0 for r in rows if r["method"] in methods] + [spent or 0, 100])
        grid = np.unique(np.geomspace(100, longest, 80).astype(int))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, m in enumerate(methods):
        curves, last = [], 0.0
        for r, h, key in histories(m):
            curves.append(_curve(h, grid, column) / ref_final[key])
            last = max(last, r["seconds"] if axis == "seconds" else r["evaluations"])
        if not curves:
            continue
        with np.errstate(all="ignore"):
            mean = np.nanmean(np.array(curves), axis=0)
        upto = grid <= last
        ax.plot(grid[upto], (mean[upto] - 1) * 100, color=f"C{i}", label=f"{m} ({len(curves)} runs)")
    ax.axhline(0, color="k", lw=0.5)
    if axis != "seconds" and spent:
        ax.axvline(spent, color="0.6", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("seconds (one run, one core)" if axis == "seconds" else "evaluations")
    ax.set_ylabel(f"best peak vs {reference} at {spent:,} evaluations (%)" if spent
                  else f"best peak vs {reference}'s final (%)")
    ax.set_title(title or ("anytime" if axis == "seconds" else "sample efficiency"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)
    return path


def evaluations_to_match(rows, method: str, long_reference: str) -> list[dict]:
    """Per (graph, devices, seed): evaluations the long plain-BRKGA run needs to reach `method`'s peak."""
    target = {(r["dataset"], r["graph"], r["devices"], r["seed"]): r["peak_bytes"]
              for r in rows if r["method"] == method and r.get("peak_bytes")}
    out = []
    for r in rows:
        key = (r["dataset"], r["graph"], r["devices"], r["seed"])
        if r["method"] != long_reference or key not in target or not r.get("info", {}).get("history"):
            continue
        reached = [h[0] for h in r["info"]["history"] if h[1] <= target[key]]
        out.append({"dataset": key[0], "graph": key[1], "devices": key[2], "seed": key[3],
                    "evaluations": reached[0] if reached else None, "budget": r["evaluations"]})
    return out


def _log_ticks(axis, most: int = 8) -> None:
    """A log axis labelled at no more than `most` major ticks and never at the minor ones
    (matplotlib's default labels minor ticks on an axis spanning about a decade, and they
    overlap): decades, or 1-2-5 (then 1-2-3-5-7, then every digit) when fewer than two decades
    fall inside the view."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter
    lo, hi = sorted(axis.get_view_interval())
    lo = max(lo, 1e-300)
    for subs in ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0, 7.0), tuple(float(k) for k in range(1, 10))):
        ticks = [m * 10.0 ** e for e in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
                 for m in subs if lo <= m * 10.0 ** e <= hi]
        if len(ticks) >= 2:
            break
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=most))
    # every major tick labelled (the default formatter drops some of them on a short axis)
    axis.set_major_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(np.inf, np.inf)))
    axis.set_minor_locator(LogLocator(base=10, subs=np.arange(2, 10), numticks=12))
    axis.set_minor_formatter(NullFormatter())


def plot_scaling(rows, path: str, methods: list[str], title: str = "") -> str:
    """Seconds per graph against node count, one series per method (log-log)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8.0, 4.2))
    for i, m in enumerate(methods):
        pts = sorted((r["nodes"], r["seconds"]) for r in rows
                     if r["method"] == m and r.get("seconds") is not None and r.get("nodes"))
        if not pts:
            continue
        x, y = np.array(pts, dtype=float).T
        ax.scatter(x, np.maximum(y, 1e-4), s=8, alpha=0.45, color=f"C{i % 10}",
                   marker="os^vD<>p*h"[i // 10])
        bins = np.unique(np.geomspace(x.min(), x.max() + 1, 8).astype(int))
        mid, med = [], []
        for lo, hi in zip(bins[:-1], bins[1:]):
            sel = (x >= lo) & (x < hi)
            if sel.any():
                mid.append(np.sqrt(lo * hi))
                med.append(np.median(y[sel]))
        ax.plot(mid, np.maximum(med, 1e-4), color=f"C{i % 10}", linestyle=("-", "--", ":")[i // 10 % 3],
                label=m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _log_ticks(ax.xaxis)
    _log_ticks(ax.yaxis)
    ax.set_xlabel("nodes")
    ax.set_ylabel("seconds per graph (one run)")
    ax.set_title(title or "scaling")
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)
    return path
