"""Issue 33's tables and anytime plots: is the flagship ever worse than plain BRKGA or local search
at the same budget?

    python -m experiments.never_trapped experiments/configs/never_trapped.json   # after experiments.run of it

Reads the cells of a "table" config of `experiments.run` from its cache (run the config first)
whose methods are named `METHOD-BUDGET` (e.g. `regal-1k`, `brkga-5k`, `local-search-20k`, budget
in its options) and writes to the config's results folder:

- `trapped.md`: per source (the config's dataset labels), d and budget, for each flagship method
  (solver "regal"): the share of cells (graph, seed) where it is no worse than plain BRKGA, than
  local search, and than both, at the same budget and seed; the same over graphs with the peaks
  averaged over seeds; its mean % lower peak than local search and than BRKGA; its mean %
  above its own result at 5,000 evaluations (the largest budget when there is no 5K).
- the same table over the transformer training steps of every source (`TRANSFORMER_TRAIN`),
  issue 33's trapped shape;
- how often each method is no worse than itself with another seed (the noise floor of a
  "no worse than" share);
- the room local search leaves at 5K: its mean % above SPEC.md section 7's lower bound, the
  cells where it is within 1 % of the bound (no method can be 1 % better there), and each
  flagship's mean % below local search on the other cells;
- where the flagship's 1K answer falls short of its 5K one: the cells whose best 5K climb
  started from another kind of start (packed / plain) than the best 1K climb, against the cells
  where the 5K climb went further from the same kind (or from the population), with the sum of
  the 1K answers' % above 5K in each;
- `anytime_SOURCE_dD.png`: the best peak (relative to the best any method found on the graph)
  against evaluations and against seconds, the mean over the source's graphs and seeds, from
  the histories of the runs at the largest budget; and the final peak against the budget.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re

import numpy as np

from experiments.run import _cells
from experiments.runner import ROOT, Method
from regal._io import atomic_text


def _budget_of(method: Method) -> int | None:
    return method.options.get("budget")


def _family(method: Method) -> str:
    """`regal-ar2-5k` -> `regal-ar2`: the method without its budget suffix."""
    name = method.name
    return name.rsplit("-", 1)[0] if name.rsplit("-", 1)[-1].rstrip("k").isdigit() else name


#: Issue 33's trapped shape: operator-level transformer training steps (large weights and
#: optimizer state), gathered across sources into one more group.
TRANSFORMER_TRAIN = re.compile(r"(vit|bert|gpt|t5|bart|llama|transformer|distilbert).*train")


def load(config_path: str, cache_dir: str | None = None) -> tuple[dict, list[dict]]:
    """The config and one record per cached cell: source, graph, d, seed, family, solver, budget,
    peak, seconds and the run's history ([evaluations, best peak, seconds]). Each cell's file is
    read with `regal.solution.load_solution`: its peak is SPEC.md section 3 applied to its
    placement and order (a file that claims another is an error)."""
    from regal.parallel import cached_graph
    from regal.solution import load_solution
    with open(config_path) as f:
        cfg = json.load(f)
    cache_dir = cache_dir or os.path.join(ROOT, "experiments", "cache", cfg.get("cache", cfg["name"]))
    methods = [Method.from_config(m) for m in cfg["methods"]]
    cells, label_of = _cells(cfg, methods, None)
    out = []
    bounds = {}
    for c in cells:
        path = c.path(cache_dir)
        if not os.path.exists(path):
            continue
        graph = cached_graph(c.graph_path)
        sol = load_solution(path, graph)
        if (c.graph_path, c.devices) not in bounds:
            bounds[(c.graph_path, c.devices)] = float(graph.lower_bound(c.devices))
        climbs = sol.info.get("climbs") or []
        out.append({"source": label_of[c.graph_path], "graph": c.graph_name, "d": c.devices, "seed": c.seed,
                    "family": _family(c.method), "solver": c.method.solver, "budget": _budget_of(c.method),
                    "peak": float(sol.peak_bytes), "seconds": sol.seconds,
                    "history": sol.info.get("history") or [], "bound": bounds[(c.graph_path, c.devices)],
                    "best_kind": min(climbs, key=lambda x: x["best_peak_bytes"])["kind"] if climbs else None})
    return cfg, out


def _pct_lower(x: float, ref: float) -> float:
    return 100.0 * (ref - x) / ref


def tables(records: list[dict]) -> tuple[str, list[dict]]:
    """The Markdown table of the module docstring and its rows."""
    peak = {(r["source"], r["graph"], r["d"], r["seed"], r["family"], r["budget"]): r["peak"] for r in records}
    solver = {r["family"]: r["solver"] for r in records}
    flagships = sorted(f for f, s in solver.items() if s == "regal")
    brkga = next((f for f, s in solver.items() if s == "brkga"), None)
    ls = next((f for f, s in solver.items() if s == "local-search"), None)
    budgets = sorted({r["budget"] for r in records if r["budget"]})
    top = 5000 if 5000 in budgets else budgets[-1]   # issue 33: 1K against its own 5K
    rows = []
    groups = sorted({(r["source"], r["d"]) for r in records})
    for source, d in groups:
        graphs = sorted({r["graph"] for r in records if r["source"] == source and r["d"] == d})
        seeds = sorted({r["seed"] for r in records if r["source"] == source and r["d"] == d})
        for b in budgets:
            for fam in flagships:
                cells = [(g, s) for g in graphs for s in seeds if (source, g, d, s, fam, b) in peak]
                if not cells:
                    continue
                f = {c: peak[(source, c[0], d, c[1], fam, b)] for c in cells}
                bk = {c: peak.get((source, c[0], d, c[1], brkga, b)) for c in cells}
                lk = {c: peak.get((source, c[0], d, c[1], ls, b)) for c in cells}
                own_top = {c: peak.get((source, c[0], d, c[1], fam, top)) for c in cells}
                ok_b = [f[c] <= bk[c] for c in cells if bk[c] is not None]
                ok_l = [f[c] <= lk[c] for c in cells if lk[c] is not None]
                ok_both = [f[c] <= min(bk[c], lk[c]) for c in cells if bk[c] is not None and lk[c] is not None]

                def graph_mean(table, g):
                    vals = [table[(g, s)] for s in seeds if (g, s) in table and table[(g, s)] is not None]
                    return np.mean(vals) if len(vals) == len(seeds) else None
                gm = [(graph_mean(f, g), graph_mean(bk, g), graph_mean(lk, g)) for g in graphs]
                gm = [t for t in gm if None not in t]
                rows.append({
                    "source": source, "d": d, "budget": b, "method": fam, "cells": len(cells), "graphs": len(gm),
                    "no_worse_brkga": 100.0 * np.mean(ok_b) if ok_b else float("nan"),
                    "no_worse_ls": 100.0 * np.mean(ok_l) if ok_l else float("nan"),
                    "no_worse_both": 100.0 * np.mean(ok_both) if ok_both else float("nan"),
                    "graphs_no_worse_both": 100.0 * np.mean([x <= min(y, z) for x, y, z in gm]) if gm else float("nan"),
                    "vs_ls": np.mean([_pct_lower(f[c], lk[c]) for c in cells if lk[c]]) if ok_l else float("nan"),
                    "vs_brkga": np.mean([_pct_lower(f[c], bk[c]) for c in cells if bk[c]]) if ok_b else float("nan"),
                    "above_own_top": np.mean([100.0 * (f[c] / own_top[c] - 1) for c in cells if own_top[c]]),
                })
    head = ("| source | d | budget | method | cells | no worse than BRKGA % | no worse than LS % | "
            "no worse than both % | graphs no worse than both % (seed means) | % lower than LS | "
            f"% lower than BRKGA | % above own {top // 1000}K |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['source']} | {r['d']} | {r['budget']:,} | {r['method']} | {r['cells']} | {r['no_worse_brkga']:.1f} | "
        f"{r['no_worse_ls']:.1f} | {r['no_worse_both']:.1f} | {r['graphs_no_worse_both']:.1f} | {r['vs_ls']:+.2f} | "
        f"{r['vs_brkga']:+.2f} | {r['above_own_top']:+.2f} |\n" for r in rows)
    return head + body, rows


def noise_floor(records: list[dict]) -> str:
    """How often a method is no worse than itself with another seed (every ordered pair of seeds
    of every graph and d, per budget): the share a "no worse than" comparison gets from noise."""
    runs = collections.defaultdict(dict)
    for r in records:
        runs[(r["family"], r["source"], r["graph"], r["d"], r["budget"])][r["seed"]] = r["peak"]
    rows = collections.defaultdict(list)
    for (fam, _, _, _, b), by_seed in runs.items():
        rows[(fam, b)] += [by_seed[a] <= by_seed[c] for a in by_seed for c in by_seed if a != c]
    out = "| method | budget | pairs | no worse than itself with another seed % |\n|---|---|---|---|\n"
    return out + "".join(f"| {fam} | {b:,} | {len(v)} | {100.0 * np.mean(v):.1f} |\n"
                         for (fam, b), v in sorted(rows.items()) if v)


def room_to_bound(records: list[dict], budget: int = 5000) -> str:
    """Per source and d at `budget`: local search's mean % above the lower bound (SPEC.md section
    7), the cells where it is within 1 % of it, and each flagship's mean % below local search on
    the cells with more room."""
    ls = {(r["source"], r["graph"], r["d"], r["seed"]): r for r in records
          if r["solver"] == "local-search" and r["budget"] == budget}
    flagships = sorted({r["family"] for r in records if r["solver"] == "regal" and r["budget"] == budget})
    if not ls or not flagships:
        return ""
    flag = {(r["family"], r["source"], r["graph"], r["d"], r["seed"]): r["peak"] for r in records
            if r["solver"] == "regal" and r["budget"] == budget}
    out = (f"| source | d | cells | local search {budget // 1000}K: % above the bound | cells within 1 % of it | "
           + " | ".join(f"{f}: % below local search, other cells" for f in flagships) + " |\n|---|---|---|---|---|"
           + "---|" * len(flagships) + "\n")
    for source, d in sorted({(k[0], k[2]) for k in ls}):
        keys = [k for k in ls if k[0] == source and k[2] == d]
        room = {k: 100.0 * (ls[k]["peak"] - ls[k]["bound"]) / ls[k]["peak"] for k in keys}
        tight = [k for k in keys if room[k] < 1.0]
        gains = []
        for f in flagships:
            vals = [_pct_lower(flag[(f, *k)], ls[k]["peak"]) for k in keys if room[k] >= 1.0 and (f, *k) in flag]
            gains.append(f"{np.mean(vals):+.2f}" if vals else "-")
        out += (f"| {source} | {d} | {len(keys)} | {np.mean(list(room.values())):.2f} | {len(tight)} | "
                + " | ".join(gains) + " |\n")
    return out


def short_of_top(records: list[dict], short: int = 1000, top: int = 5000) -> str:
    """Per flagship, source and d: the cells whose best climb at `top` started from another kind
    of start than the best at `short`, and the others, with the sum of the short answers' %
    above the top ones in each."""
    runs = {(r["family"], r["source"], r["graph"], r["d"], r["seed"], r["budget"]): r for r in records
            if r["solver"] == "regal" and r["best_kind"]}
    rows = collections.defaultdict(lambda: [0, 0.0, 0, 0.0])
    for (fam, source, g, d, s, b), r in runs.items():
        t = runs.get((fam, source, g, d, s, top))
        if b != short or t is None:
            continue
        gap = 100.0 * (r["peak"] / t["peak"] - 1)
        other = t["best_kind"] != r["best_kind"] and t["best_kind"] != "population"
        row = rows[(fam, source, d)]
        row[0 if other else 2] += 1
        row[1 if other else 3] += gap
    if not rows:
        return ""
    out = (f"| method | source | d | cells: {top // 1000}K's best climb from another kind of start | their % above "
           f"{top // 1000}K, summed | cells: from the same kind (or the population) | their % above "
           f"{top // 1000}K, summed |\n|---|---|---|---|---|---|---|\n")
    return out + "".join(f"| {fam} | {source} | {d} | {a} | {b:.1f} | {c} | {e:.1f} |\n"
                         for (fam, source, d), (a, b, c, e) in sorted(rows.items()))


def anytime_plots(records: list[dict], results_dir: str) -> list[str]:
    """One figure per (source, d): best peak / best known against evaluations and seconds (the
    runs at the largest budget), and final peak / best known against the budget."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    best = collections.defaultdict(lambda: float("inf"))
    for r in records:
        key = (r["source"], r["graph"], r["d"])
        best[key] = min(best[key], r["peak"])
    budgets = sorted({r["budget"] for r in records if r["budget"]})
    top = budgets[-1]
    families = sorted({r["family"] for r in records})
    files = []
    for source, d in sorted({(r["source"], r["d"]) for r in records}):
        fig, axes = plt.subplots(1, 3, figsize=(15, 4))
        for fam in families:
            runs = [r for r in records if r["source"] == source and r["d"] == d and r["family"] == fam
                    and r["budget"] == top and r["history"]]
            if runs:
                grid = np.unique(np.geomspace(10, top, 60).astype(int))
                curves = np.array([_step(r["history"], 0, grid) / best[(source, r["graph"], d)] for r in runs])
                axes[0].plot(grid, np.nanmean(curves, axis=0), label=fam)
                tmax = max(r["seconds"] for r in runs)
                tgrid = np.geomspace(1e-3, max(tmax, 2e-3), 60)
                tcurves = np.array([_step(r["history"], 2, tgrid) / best[(source, r["graph"], d)] for r in runs])
                # only where nine runs in ten have an answer: before that the mean is of the fast ones
                shown = np.mean(~np.isnan(tcurves), axis=0) >= 0.9
                axes[1].plot(tgrid[shown], np.nanmean(tcurves[:, shown], axis=0), label=fam)
            finals = []
            for b in budgets:
                vals = [r["peak"] / best[(source, r["graph"], d)] for r in records
                        if r["source"] == source and r["d"] == d and r["family"] == fam and r["budget"] == b]
                finals.append(np.mean(vals) if vals else np.nan)
            axes[2].plot(budgets, finals, marker="o", label=fam)
        for ax, xlabel in zip(axes, ["evaluations (one run at the largest budget)", "seconds (same runs)",
                                     "budget (one run per budget)"]):
            ax.set_xscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("peak / best known (mean)")
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{source}, d = {d}")
        fig.tight_layout()
        name = f"anytime_{source}_d{d}.png"
        fig.savefig(os.path.join(results_dir, name), dpi=80)
        plt.close(fig)
        files.append(name)
    return files


def _step(history: list, column: int, grid: np.ndarray) -> np.ndarray:
    """The best peak reached at each grid point (evaluations or seconds); NaN before the first."""
    xs = np.array([h[column] for h in history], dtype=float)
    ys = np.array([h[1] for h in history], dtype=float)
    idx = np.searchsorted(xs, grid, side="right") - 1
    return np.where(idx >= 0, ys[np.clip(idx, 0, None)], np.nan)


def _section(title: str, table: str) -> str:
    return f"{title}\n\n{table}\n" if table else ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--out", default=None, help="results folder (default: the config's)")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    cfg, records = load(args.config, args.cache)
    results_dir = args.out or os.path.join(ROOT, "experiments", "results", cfg["name"])
    os.makedirs(results_dir, exist_ok=True)
    table, _ = tables(records)
    # a graph in two datasets counts once; d = 2 and 4 in one row (a cell: graph, d, seed)
    every = [dict(r, source="all", d="2, 4", graph=f"{r['graph']}@d{r['d']}") for r in records]
    shaped = [dict(r, source="transformer-train") for r in records if TRANSFORMER_TRAIN.search(r["graph"])]
    shaped_table = tables(shaped)[0] if shaped else ""
    plots = [] if args.no_plots else anytime_plots(records, results_dir)
    doc = (f"# Never trapped: {cfg['name']}\n\n{cfg.get('description', '')}\n\n"
           f"Command: `python -m experiments.run {os.path.relpath(args.config, ROOT)}` then "
           f"`python -m experiments.never_trapped {os.path.relpath(args.config, ROOT)}`; {len(records)} cells.\n\n"
           + table + "\n" + "Every source together (each graph once, its cells at d = 2 and 4 in one row):\n\n"
           + tables(every)[0] + "\n" + (f"Transformer training steps of every source ({len({r['graph'] for r in shaped})} graphs "
                                f"whose names match `{TRANSFORMER_TRAIN.pattern}`), the shape issue 33 names:\n\n"
                                + shaped_table + "\n" if shaped else "")
           + "Each method against itself with another seed (the share a \"no worse than\" comparison "
             "gets from the seeds' noise alone):\n\n" + noise_floor(records) + "\n"
           + _section("The room local search leaves at 5K (SPEC.md section 7's lower bound: within 1 % of it, "
                      "no schedule is 1 % better):", room_to_bound(records))
           + _section("Where the 1K answer falls short of the 5K one: the 5K run's best climb from another kind "
                      "of start, or the same kind climbed further:", short_of_top(records))
           + "".join(f"![{p}]({p})\n" for p in plots))
    with atomic_text(os.path.join(results_dir, "trapped.md")) as f:
        f.write(doc)
    print(table)


if __name__ == "__main__":
    main()
