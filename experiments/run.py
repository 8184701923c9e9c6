"""The one experiment runner: run an experiment from its config file and write its tables and plots.

    python -m experiments.run experiments/configs/table1.json [--workers 2] [--scheduler tcp://HOST:PORT]
                              [--out DIR] [--cache DIR] [--shard I/N]

Every table of experiments/results/ is a config of this runner (experiments/results/INDEX.md lists
them). A config's "kind" says what its table is: "table" (the default: methods against a
reference, below), "runtime" (the runtime objective under memory limits, `experiments.runtime`)
or "tune" (a grid of values of one `regal.FlagshipConfig` field against local search,
`experiments.tune`). Cells fan out over Dask: a local cluster of --workers processes by
default, or the existing cluster at --scheduler; nothing else changes. Finished cells are cached
(`experiments.runner`: one file per cell) under experiments/cache/<cache>/ (the config's "cache",
default its name; --cache DIR), so an interrupted run resumes where it stopped. Results go to
experiments/results/<name>/ (--out DIR: to DIR instead, the shipped results untouched): cells.csv,
per_graph.csv, summary.csv, README.md (the table, with the exact command, the commit and the
machine), and the plots the config asks for.

Config keys: name; kind; cache; description; datasets: [{label, split, synthetic (bool), max_nodes, spread
(k graphs round-robin over model families), limit (the first k)}]; devices; seeds;
reference (method name, default "brkga"); methods: [{name, solver, options, seeds}];
long_reference (a long plain-BRKGA run, for "evaluations to match"); plots: any of
"sample_efficiency", "scaling"; exclude_from_best (methods whose peaks do not define the best).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from experiments import report, runtime, tune
from experiments.runner import (ROOT, Method, cells_for, commit, dataset_graphs, load_results,  # noqa: F401
                                machine, run_cells)
from regal._io import atomic_text


def run(config_path: str, scheduler: str | None = None, workers: int | None = None, progress: bool = True,
        manifest: str | None = None, cache_dir: str | None = None, results_dir: str | None = None) -> dict:
    """Run the experiment of `config_path` (cached cells are reused) and write its results.

    One Dask client (a local cluster of `workers`, or `scheduler`) runs every cell of every kind.
    Returns the kind's results; a "table": {"counts", "summary", "rows", "per_graph", "table"}.
    """
    with open(config_path) as f:
        cfg = json.load(f)
    kind = cfg.get("kind", "table")
    if kind not in KINDS:
        raise ValueError(f"{config_path}: kind {kind!r} is not one of {sorted(KINDS)}")
    cache_dir = cache_dir or os.path.join(ROOT, "experiments", "cache", cfg.get("cache", cfg["name"]))
    results_dir = results_dir or os.path.join(ROOT, "experiments", "results", cfg["name"])
    os.makedirs(results_dir, exist_ok=True)
    from regal.parallel import dask_client
    with dask_client(scheduler, workers) as client:
        return KINDS[kind](cfg, config_path, client, progress=progress, manifest=manifest, cache_dir=cache_dir,
                           results_dir=results_dir)


def run_table(cfg: dict, config_path: str, client, progress: bool = True, manifest: str | None = None,
              cache_dir: str = "", results_dir: str = "") -> dict:
    """The "table" kind: every method on every graph, d and seed against the reference."""
    methods = [Method.from_config(m) for m in cfg["methods"]]
    reference = cfg.get("reference", "brkga")
    cells, label_of = _cells(cfg, methods, manifest)
    t0 = time.time()
    counts = run_cells(cells, cache_dir, client=client, progress=progress)
    rows = _labelled_rows(cells, cache_dir, label_of)
    method_names = [m.name for m in methods]
    graph_rows = report.per_graph(rows, reference, exclude_from_best=cfg.get("exclude_from_best", ()))
    summary = report.summary_table(graph_rows, rows, method_names)
    report.write_csv(os.path.join(results_dir, "cells.csv"), rows)
    report.write_csv(os.path.join(results_dir, "per_graph.csv"), graph_rows)
    report.write_csv(os.path.join(results_dir, "summary.csv"), summary)
    table = report.markdown(summary, reference)
    extra = _plots(cfg, rows, results_dir, method_names, reference) + _match_section(cfg, rows, results_dir)
    focus = cfg.get("match_method")
    if focus:
        extra.append(_focus_tables(focus, reference, summary, graph_rows))
    doc = _readme(cfg, config_path, counts, rows, table, summary, extra, time.time() - t0)
    with atomic_text(os.path.join(results_dir, "README.md")) as f:
        f.write(doc)
    return {"counts": counts, "summary": summary, "rows": rows, "per_graph": graph_rows, "table": table}


def run_shard(config_path: str, i: int, n: int, cache_dir: str | None = None) -> dict:
    """Cells i, i + n, i + 2n, ... of a table config, solved in this process into its cache."""
    with open(config_path) as f:
        cfg = json.load(f)
    if cfg.get("kind", "table") != "table":
        raise ValueError(f"{config_path}: --shard runs table configs only")
    cache_dir = cache_dir or os.path.join(ROOT, "experiments", "cache", cfg.get("cache", cfg["name"]))
    cells, _ = _cells(cfg, [Method.from_config(m) for m in cfg["methods"]], None)
    # every shard does the cheap cells first, so that one cut short leaves the large budgets undone
    cells.sort(key=lambda c: (c.method.options.get("budget") or 0, c.method.name, c.graph_path, c.devices, c.seed))
    return run_cells(cells[i::n], cache_dir, client=None, progress=False)


KINDS = {"table": run_table, "runtime": runtime.run_config, "tune": tune.run_config}


def _cells(cfg: dict, methods: list, manifest: str | None) -> tuple[list, dict]:
    """Every cell of the experiment, and the data set label of each graph path."""
    label_of, cells = {}, []
    for ds in cfg["datasets"]:
        paths = dataset_graphs(ds, manifest)
        for p in paths:
            label_of[p] = ds["label"]
        cells += cells_for(methods, paths, cfg["devices"], cfg["seeds"])
    return cells, label_of


def _labelled_rows(cells: list, cache_dir: str, label_of: dict) -> list[dict]:
    """The cached result of every cell, each with its data set label."""
    rows = load_results(cells, cache_dir)
    path_of = {c.graph_name: c.graph_path for c in cells}
    for r in rows:
        r["dataset"] = label_of[path_of[r["graph"]]]
    return rows


def _plots(cfg: dict, rows: list, results_dir: str, method_names: list, reference: str) -> list[str]:
    """The plots the config asks for, written to `results_dir`; a Markdown image link for each."""
    name = cfg["name"]
    extra = []
    plots = cfg.get("plots", [])
    if "sample_efficiency" in plots:
        curve_methods = cfg.get("sample_efficiency_methods", [reference, "regal"])
        for ds in dict.fromkeys(d["label"] for d in cfg["datasets"]):
            for d in cfg["devices"]:
                sub = [r for r in rows if r["devices"] == d and r["dataset"] == ds]
                if not sub:
                    continue
                fname = f"sample_efficiency_{ds}_d{d}.png"
                report.plot_sample_efficiency(sub, os.path.join(results_dir, fname), curve_methods, reference,
                                              title=f"{name}: {ds}, d={d}")
                extra.append(f"![sample efficiency {ds} d={d}]({fname})")
                if "anytime" in plots:
                    fname = f"anytime_{ds}_d{d}.png"
                    report.plot_sample_efficiency(sub, os.path.join(results_dir, fname), curve_methods, reference,
                                                  axis="seconds", title=f"{name}: {ds}, d={d}, against seconds")
                    extra.append(f"![anytime {ds} d={d}]({fname})")
    if "scaling" in plots:
        out = os.path.join(results_dir, "scaling.png")
        report.plot_scaling(rows, out, method_names, title=name)
        extra.append("![scaling](scaling.png)")
    return extra


def _match_section(cfg: dict, rows: list, results_dir: str) -> list[str]:
    """Evaluations the long plain-BRKGA run needs to match `match_method` (evaluations_to_match.csv),
    as one Markdown section; nothing without a `long_reference`."""
    import numpy as np
    long_ref = cfg.get("long_reference")
    if not long_ref:
        return []
    match = report.evaluations_to_match(rows, cfg.get("match_method", "regal"), long_ref)
    report.write_csv(os.path.join(results_dir, "evaluations_to_match.csv"), match)
    if not match:
        return []
    budget = max(m["budget"] for m in match)
    method = cfg.get("match_method", "regal")
    lines = [f"Evaluations plain BRKGA ({long_ref}, same seed) needs to match {method}'s 5,000-evaluation "
             f"peak: median over runs (a run that never matches within {budget:,} counts as infinite).", "",
             "| dataset | d | runs | median evaluations | runs matched |", "|---|---:|---:|---:|---:|"]
    for ds, d in sorted({(m["dataset"], m["devices"]) for m in match}):
        sub = [m["evaluations"] for m in match if m["dataset"] == ds and m["devices"] == d]
        med = float(np.median([np.inf if v is None else v for v in sub]))
        lines.append(f"| {ds} | {d} | {len(sub)} | "
                     f"{'more than %s' % f'{budget:,}' if np.isinf(med) else f'{med:,.0f}'} | "
                     f"{sum(v is not None for v in sub)}/{len(sub)} |")
    return ["\n".join(lines)]


def _readme(cfg: dict, config_path: str, counts: dict, rows: list, table: str, summary: list,
            extra: list[str], wall_s: float) -> str:
    """README.md of the results: how they were made (command, commit, machine), then the tables."""
    argv = " ".join(["python -m experiments.run"] + sys.argv[1:]) if sys.argv[0].endswith("run.py") else \
        f"python -m experiments.run {os.path.relpath(config_path, ROOT)}"
    doc = [f"# {cfg['name']}", "",
           f"Command: `{argv}`  ",
           f"Commit: {commit()}  ",
           f"Machine: {machine()}  ",
           f"Cells: {counts['cells']} ({counts['computed']} computed in this run, {counts['cached']} cached); "
           f"wall time {wall_s:.0f} s (solver seconds over all cells: "
           f"{sum(r.get('seconds') or 0 for r in rows):,.0f}); seeds {cfg['seeds']}; devices {cfg['devices']}.", "",
           table, "", "Seconds per graph (one run of one seed; wall time of the solver inside its worker):", "",
           report.seconds_markdown(summary), ""] + [e + "\n" for e in extra]
    return "\n".join(doc)


def _focus_tables(method: str, reference: str, summary, graph_rows) -> str:
    """One method against the reference: per (dataset, devices) mean, median, win rate; then per graph."""
    import numpy as np
    lines = [f"## {method} against {reference}, per graph", "",
             "| dataset | d | graphs | mean % improvement | median | win rate (runs) | graphs better / worse |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    rows = [r for r in graph_rows if r["method"] == method]
    for r in summary:
        if r["method"] != method:
            continue
        g = [x for x in rows if x["dataset"] == r["dataset"] and x["devices"] == r["devices"]]
        imp = [x["improvement_pct"] for x in g]
        lines.append(f"| {r['dataset']} | {r['devices']} | {len(g)} | {np.mean(imp):+.2f} | {np.median(imp):+.2f} | "
                     f"{100 * r['win_rate']:.0f}% | {sum(i > 0 for i in imp)} / {sum(i < 0 for i in imp)} |")
    lines += ["", "<details><summary>every graph</summary>", "",
              "| dataset | graph | d | % improvement (mean over seeds) | win rate |", "|---|---|---:|---:|---:|"]
    for x in sorted(rows, key=lambda x: (x["dataset"], x["devices"], x["graph"])):
        lines.append(f"| {x['dataset']} | {x['graph']} | {x['devices']} | {x['improvement_pct']:+.2f} | "
                     f"{100 * x['win_rate']:.0f}% |")
    lines += ["", "</details>"]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--scheduler", default=None, help="tcp://HOST:PORT of an existing Dask scheduler")
    ap.add_argument("--workers", type=int, default=None, help="local Dask worker processes (default: cores)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--out", metavar="DIR", default=None,
                    help="write the results to DIR (default: experiments/results/<name>/, the shipped ones)")
    ap.add_argument("--cache", metavar="DIR", default=None,
                    help="the cells' cache (default: experiments/cache/<cache or name>/)")
    ap.add_argument("--shard", metavar="I/N", default=None,
                    help="a table's cells i, i + N, ... only, in this process (no Dask, no tables): N such "
                         "processes fill the cache on a machine without Dask; a run without --shard then "
                         "writes the tables from it")
    args = ap.parse_args(argv)
    if args.shard:
        i, n = (int(x) for x in args.shard.split("/"))
        print(run_shard(args.config, i, n, cache_dir=args.cache))
        return
    out = run(args.config, args.scheduler, args.workers, progress=not args.no_progress, cache_dir=args.cache,
              results_dir=args.out)
    print(out["table"])


if __name__ == "__main__":
    main()
