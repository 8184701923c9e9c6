"""The runner's "runtime" kind (issue 16's runtime experiment, REGAL's paper Table 2 on our data):
the shortest makespan under a memory limit, per graph and device count, by the flagship and its
baselines.

    python -m experiments.run experiments/configs/runtime.json [--workers N]

For each graph and d, the memory limit is each `limit_factors` entry times the peak (SPEC.md
section 3) of the peak-memory flagship's solution (`regal.optimize`, the config's `peak_budget`,
seed 0), so the limit binds; `null` runs without a limit. Every method then runs on the
timed model (SPEC.md section 4, docs/timed-model.md) with the config's `device_model`, and
every number below is re-simulated from the solution files (`load_solution` re-checks the timed
values). Cells run on the runner's Dask client and are cached by `experiments.runner` (the peak
cells as method "peak-regal", the others as variants named by their limit: `d2_1.5x_s0.json`);
results go to experiments/results/<name>/: cells.csv, summary.csv and README.md. A method's
`max_nodes` skips larger graphs (CP-SAT with intervals: small graphs only); a graph file that
changed since its cells were solved runs again. When a method reports a proven lower bound
(`info["bound_s"]`: CP-SAT with intervals, without a limit), a table of every method's gap to it
follows (the runtime_cpsat config).

Per (limit, d) and method: the share of runs that end feasible; the mean % makespan reduction
over the reference (plain BRKGA on the timed chromosome, same seed), over the runs where both
are feasible; the mean % gap from the best feasible makespan any method found for that cell,
over the runs where the method is feasible; and the mean makespan ratio to HEFT where both are.
"""

from __future__ import annotations

import os
import time

import numpy as np

from experiments.runner import (ROOT, Cell, Method, commit, dataset_graphs, load_results, machine,
                                run_cells)
from regal._io import atomic_text

__all__ = ["run_config"]


def _factor_label(f) -> str:
    return "none" if f is None else f"{f:g}x"


def run_config(cfg: dict, config_path: str, client, progress: bool = True, manifest: str | None = None,
               cache_dir: str = "", results_dir: str = "") -> dict:
    """Run the runtime experiment of `cfg` on `client` (cached cells are reused) and write its
    results; returns {"rows", "summary", "pairs", "counts"}."""
    t0 = time.time()
    graphs = [(ds["label"], p) for ds in cfg["datasets"] for p in dataset_graphs(ds, manifest)]
    peaks = _peaks(cfg, graphs, client, progress, cache_dir)
    cells, cell_of = _cells(cfg, graphs, peaks)
    counts = run_cells(cells, cache_dir, client=client, progress=progress)
    label_of = {p: label for label, p in graphs}
    rows = []
    for r in load_results(cells, cache_dir):
        c = cell_of[(r["method"], r["graph"], r["devices"], r["seed"], r["variant"])]
        if r["peak_bytes"] is None:  # refused: the method cannot take this graph
            continue
        timed = r["info"]["timed"]
        rows.append({"dataset": label_of[c.graph_path], "graph": r["graph"], "nodes": r["nodes"],
                     "devices": r["devices"], "limit": r["variant"],
                     "limit_bytes": dict(c.extra)["memory_limit_bytes"], "method": r["method"], "seed": r["seed"],
                     "makespan_s": timed["makespan_s"], "timed_peak_bytes": timed["peak_bytes"],
                     "feasible": timed["feasible"], "seconds": r["seconds"], "evaluations": r["evaluations"],
                     "bound_s": r["info"].get("bound_s"), "status": r["info"].get("status", "")})
    summary = _summary(rows, [m["name"] for m in cfg["methods"]], cfg.get("reference", "brkga-runtime"),
                       _ratio_methods(cfg))
    pairs = _pairs(rows, cfg.get("pairs", []))
    _write_csv(os.path.join(results_dir, "cells.csv"), rows)
    _write_csv(os.path.join(results_dir, "summary.csv"), summary)
    if pairs:
        _write_csv(os.path.join(results_dir, "pairs.csv"), pairs)
    with atomic_text(os.path.join(results_dir, "README.md")) as f:
        f.write(_readme(cfg, config_path, rows, summary, time.time() - t0, len(graphs), pairs))
    return {"rows": rows, "summary": summary, "pairs": pairs, "counts": counts}


def _peaks(cfg: dict, graphs: list, client, progress: bool, cache_dir: str) -> dict:
    """(graph name, d) -> the peak of the peak-memory flagship's solution (`peak_budget`
    evaluations, seed 0), which the memory limits are factors of; none when no limit is asked."""
    if all(f is None for f in cfg["limit_factors"]):
        return {}
    method = Method("peak-regal", "regal", {"budget": cfg["peak_budget"]})
    cells = [Cell(method, p, d, 0) for _, p in graphs for d in cfg["devices"]]
    run_cells(cells, cache_dir, client=client, progress=progress)
    return {(r["graph"], r["devices"]): r["peak_bytes"] for r in load_results(cells, cache_dir)}


def _cells(cfg: dict, graphs: list, peaks: dict) -> tuple[list, dict]:
    """Every (method, graph, d, seed, limit) cell (a method's `max_nodes` leaves larger graphs
    out), and each cell by (method, graph, d, seed, limit label)."""
    from regal.parallel import cached_graph
    from regal.timed import check_device_model
    cells = []
    for _, path in graphs:
        num_nodes = cached_graph(path).num_nodes
        for d in cfg["devices"]:
            model = check_device_model(cfg.get("device_model"), d)
            for factor in cfg["limit_factors"]:
                for m in cfg["methods"]:
                    if num_nodes > m.get("max_nodes", num_nodes):
                        continue
                    method = Method.from_config(m)
                    cell = Cell(method, path, d, 0)
                    limit = None if factor is None else int(factor * peaks[(cell.graph_name, d)])
                    extra = (("device_model", model), ("memory_limit_bytes", limit))
                    cells += [Cell(method, path, d, seed, _factor_label(factor), extra)
                              for seed in m.get("seeds", cfg["seeds"])]
    return cells, {(c.method.name, c.graph_name, c.devices, c.seed, c.variant): c for c in cells}


def _pairs(rows: list[dict], pairs: list) -> list[dict]:
    """Per dataset, limit and d, each configured pair (a, b): mean % makespan reduction of a over b
    on the same graph and seed where both are feasible, with the graphs-and-seeds counts where a
    is shorter / longer, and where only one of them is feasible (an ablation: b is a without one part)."""
    cell = {(r["dataset"], r["graph"], r["devices"], r["limit"], r["seed"], r["method"]): r for r in rows}
    out = []
    labels = dict.fromkeys(r["dataset"] for r in rows)
    limits = dict.fromkeys(r["limit"] for r in rows)
    devices = sorted({r["devices"] for r in rows})
    for a, b in pairs:
        for label, limit, d in ((x, y, z) for x in labels for y in limits for z in devices):
            red, better, worse, only_a, only_b = [], 0, 0, 0, 0
            for (ds, graph, dd, lim, seed, m), ra in cell.items():
                if m != a or ds != label or dd != d or lim != limit:
                    continue
                rb = cell.get((ds, graph, dd, lim, seed, b))
                if rb is None:
                    continue
                if ra["feasible"] and rb["feasible"]:
                    x = (rb["makespan_s"] - ra["makespan_s"]) / rb["makespan_s"] * 100
                    red.append(x)
                    better += x > 1e-9
                    worse += x < -1e-9
                else:
                    only_a += ra["feasible"] and not rb["feasible"]
                    only_b += rb["feasible"] and not ra["feasible"]
            if red or only_a or only_b:
                out.append({"dataset": label, "limit": limit, "devices": d, "method": a, "versus": b,
                            "runs": len(red), "reduction_pct": float(np.mean(red)) if red else None,
                            "better": better, "worse": worse, "feasible_only_method": only_a,
                            "feasible_only_versus": only_b})
    return out


def _ratio_methods(cfg: dict) -> list[str]:
    """The list schedulers each method's makespan is divided by (HEFT, and memory-aware HEFT when run)."""
    return [m for m in ("heft", "heft-mem") if any(x["name"] == m for x in cfg["methods"])] or ["heft"]


def _summary(rows: list[dict], methods: list[str], reference: str, ratio_to=("heft",)) -> list[dict]:
    by_cell: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        by_cell.setdefault((r["graph"], r["devices"], r["limit"], r["seed"], r["dataset"]), {})[r["method"]] = r
    # a method run on one seed only (the deterministic list schedulers) stands in every seed's cell
    seeds_of: dict[str, set] = {}
    for r in rows:
        seeds_of.setdefault(r["method"], set()).add(r["seed"])
    for (graph, d, limit, seed, _), cell in by_cell.items():
        for r in rows:
            if (len(seeds_of[r["method"]]) == 1 and r["method"] not in cell and r["graph"] == graph
                    and r["devices"] == d and r["limit"] == limit):
                cell[r["method"]] = r
    best = {}
    for key, cell in by_cell.items():
        ok = [r["makespan_s"] for r in cell.values() if r["feasible"]]
        best[key] = min(ok) if ok else None
    out = []
    labels = dict.fromkeys(r["dataset"] for r in rows)
    limits = dict.fromkeys(r["limit"] for r in rows)
    for label, limit in ((lab, lim) for lab in labels for lim in limits):
        for d in sorted({r["devices"] for r in rows}):
            for m in methods:
                red, gap, feas, n, missed = [], [], 0, 0, 0
                vs = {x: [] for x in ratio_to}
                for key, cell in by_cell.items():
                    if key[4] != label or key[1] != d or key[2] != limit or m not in cell:
                        continue
                    r = cell[m]
                    n += 1
                    feas += r["feasible"]
                    missed += (not r["feasible"]) and best[key] is not None
                    ref = cell.get(reference)
                    if r["feasible"] and ref is not None and ref["feasible"]:
                        red.append((ref["makespan_s"] - r["makespan_s"]) / ref["makespan_s"] * 100)
                    if r["feasible"] and best[key]:
                        gap.append((r["makespan_s"] - best[key]) / best[key] * 100)
                    for x in ratio_to:
                        other = cell.get(x)
                        if r["feasible"] and other is not None and other["feasible"]:
                            vs[x].append(r["makespan_s"] / other["makespan_s"])
                out.append({"dataset": label, "limit": limit, "devices": d, "method": m, "runs": n,
                            "feasible_share": feas / n if n else None, "infeasible_where_another_fits": missed,
                            "reduction_over_reference_pct": float(np.mean(red)) if red else None,
                            "reduction_runs": len(red), "gap_from_best_pct": float(np.mean(gap)) if gap else None,
                            **{k: v for x in ratio_to for k, v in (
                                (f"makespan_over_{x}", float(np.mean(vs[x])) if vs[x] else None),
                                (f"{x}_runs", len(vs[x])))}})
    return out


def _write_csv(path: str, rows: list[dict]) -> None:
    import csv
    with atomic_text(path) as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        w.writeheader()
        w.writerows(rows)


def _bounds(rows: list[dict], methods: list[str]) -> list[str]:
    """Every method's gap to a proven lower bound on the makespan (`bound_s`: CP-SAT with
    intervals), per d, over the graphs that have one, without a memory limit only (there it is a
    bound on every schedule's makespan); nothing when no run reports one."""
    bounds = {(r["graph"], r["devices"], r["limit"]): r["bound_s"] for r in rows
              if r.get("bound_s") and r["limit"] == "none"}
    if not bounds:
        return []
    status = {(r["graph"], r["devices"]): r["status"] for r in rows if r.get("bound_s") and r["limit"] == "none"}
    lines = ["", "Gap: mean % of the makespan above the proven lower bound; 'at bound': runs within 0.01 % "
             "of it. Every schedule, CP-SAT's included, is replayed by the timed model (non-delay).", "",
             "| limit | d | method | runs | mean gap to bound % | median gap % | at bound |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for limit, d in sorted({(k[2], k[1]) for k in bounds}):
        for m in methods:
            sel = [r for r in rows if r["method"] == m and r["devices"] == d and r["limit"] == limit
                   and (r["graph"], d, limit) in bounds]
            if not sel:
                continue
            gaps = np.array([100 * (r["makespan_s"] / bounds[(r["graph"], d, limit)] - 1) for r in sel])
            lines.append(f"| {limit} | {d} | {m} | {len(sel)} | {gaps.mean():.3f} | {np.median(gaps):.3f} | "
                         f"{int((gaps <= 0.01).sum())}/{len(sel)} |")
    solved = sum(s == "OPTIMAL" for s in status.values())
    return lines + ["", f"The bound's solver proved its model optimal on {solved} of {len(status)} (graph, d) cells."]


def _fmt(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def _readme(cfg: dict, config_path: str, rows: list, summary: list, wall_s: float, num_graphs: int,
            pairs: list | None = None) -> str:
    from regal.timed import check_device_model
    model = check_device_model(cfg.get("device_model"), 1)
    ref = cfg.get("reference", "brkga-runtime")
    ratios = _ratio_methods(cfg)
    lines = [f"# {cfg['name']}", "", cfg.get("description", ""), "",
             f"Command: `python -m experiments.run {os.path.relpath(config_path, ROOT)}`  ",
             f"Commit: {commit()}  ", f"Machine: {machine()}  ",
             f"Graphs: {num_graphs}; devices {cfg['devices']}; seeds: "
             + "; ".join(f"{m['name']} {m.get('seeds', cfg['seeds'])}"
                         + (f" (graphs <= {m['max_nodes']} nodes)" if "max_nodes" in m else "") for m in cfg["methods"])
             + " (a one-seed method stands in every seed's cell); device model: "
             f"{model.describe()}; memory limits {[_factor_label(f) for f in cfg['limit_factors']]} of the "
             f"peak-memory flagship's peak ({cfg['peak_budget']:,} evaluations, seed 0); solver time over all "
             f"runs {sum(r['seconds'] for r in rows):,.0f} s (this run's wall time {wall_s:.0f} s; cells are cached).", "",
             f"Reduction: mean % makespan reduction over {ref} (same seed), over the runs where both are "
             "feasible (runs in brackets). Gap: mean % above the best feasible makespan of the cell, over the "
             "runs where the method is feasible. Ratio to a list scheduler: mean makespan / its makespan where "
             "both are feasible (runs in brackets). "
             "Missed: runs where the method ends over the limit although another method met it.", "",
             "| dataset | limit | d | method | feasible | missed | reduction over " + ref + " % | gap from best % | "
             + " | ".join(f"makespan / {x}" for x in ratios) + " |",
             "|---|---|---:|---|---:|---:|---:|---:|" + "---:|" * len(ratios)]
    for s in summary:
        if not s["runs"]:  # a method limited to small graphs, on a dataset without any
            continue
        lines.append(f"| {s['dataset']} | {s['limit']} | {s['devices']} | {s['method']} | "
                     f"{_fmt(s['feasible_share'] * 100 if s['feasible_share'] is not None else None, '.0f')} % "
                     f"of {s['runs']} | {s['infeasible_where_another_fits']} | {_fmt(s['reduction_over_reference_pct'])} ({s['reduction_runs']}) | "
                     f"{_fmt(s['gap_from_best_pct'])} | "
                     + " | ".join(f"{_fmt(s['makespan_over_' + x], '.3f')} ({s[x + '_runs']})" for x in ratios) + " |")
    if pairs:
        lines += ["", "Pairs (ablations): mean % makespan reduction of the method over the one it is compared "
                  "with, same graph and seed, where both are feasible; runs where it is shorter / longer; runs "
                  "where only one of the two is feasible.", "",
                  "| dataset | limit | d | method | versus | runs | reduction % | shorter / longer | only method "
                  "feasible / only versus |", "|---|---|---:|---|---|---:|---:|---:|---:|"]
        for p in pairs:
            lines.append(f"| {p['dataset']} | {p['limit']} | {p['devices']} | {p['method']} | {p['versus']} | "
                         f"{p['runs']} | {_fmt(p['reduction_pct'])} | {p['better']} / {p['worse']} | "
                         f"{p['feasible_only_method']} / {p['feasible_only_versus']} |")
    lines += _bounds(rows, [m["name"] for m in cfg["methods"]])
    secs = {}
    for r in rows:
        secs.setdefault(r["method"], []).append(r["seconds"])
    lines += ["", "Seconds per run (median): " + ", ".join(f"{m} {np.median(v):.2f}" for m, v in secs.items()), ""]
    return "\n".join(lines)

