"""The runner's "tune" kind: one of the flagship's settings tried on valid splits against local search.

    python -m experiments.run experiments/configs/tune/NAME.json [--workers N]

(`experiments.tune_flagship`'s command line writes such a config and runs it.) A tune config (`"kind": "tune"`) names a grid: `"set": {FIELD: [V1, V2, ...]}` for a field of
`regal.FlagshipConfig` or of its climb (`"fix": {OTHER: V}` holds others), `"graphs"` (specs
`MANIFEST:SPLIT:LIMIT`: a corpus manifest's split is `SOURCE:SPLIT`, LIMIT graphs evenly spaced
over the split, 0 for all), `"min_nodes"` (only the larger graphs), devices, seeds and `"budget"`
(5,000). For each value the flagship (`regal.optimize(..., config=FlagshipConfig().replace(FIELD=V))`)
runs on every graph, device count and seed, beside the local-search baseline on the same seeds,
as cells of the one runner (Dask, cached; the tune configs share the cache "flagship-tuning", so
the local-search cells and a value run before are not run again). The table gives, per source (the
graph file's folder) and d, the mean % lower peak than local search and on how many graphs the
flagship's mean over seeds is no worse; each value after the first is also compared with the first
run by run (paired: same graph, d and seed), with a 95 % bootstrap interval, so that a difference of
means within the seeds' noise reads as such. Writes experiments/results/<name>/README.md and the raw
peaks (peaks.json) beside it.

The 34 tuning runs made before the runner had this kind are in experiments/results/flagship-tuning/
(experiments/results/INDEX.md).
"""

from __future__ import annotations

import json
import os
import statistics
import time

import numpy as np

from experiments.runner import (ROOT, Method, cells_for, commit, flagship_config, load_results, machine,
                                run_cells)
from regal._io import atomic_text

__all__ = ["run_config", "graph_paths", "table"]

#: The cache every tune config shares unless it names another (local-search cells run once).
CACHE = "flagship-tuning"


def graph_paths(spec: str) -> list[str]:
    """The graph files of MANIFEST:SPLIT:LIMIT (LIMIT evenly spaced, 0: all; MANIFEST relative
    to the repository)."""
    from regal.dataset import split_paths
    manifest, *split, limit = spec.split(":")
    paths = split_paths(":".join(split), os.path.join(ROOT, manifest))
    if int(limit) and len(paths) > int(limit):
        paths = [paths[i] for i in np.linspace(0, len(paths) - 1, int(limit)).round().astype(int)]
    return paths


def run_config(cfg: dict, config_path: str, client, progress: bool = True, manifest: str | None = None,
               cache_dir: str = "", results_dir: str = "") -> dict:
    """Run the grid of `cfg` on `client` (cached cells are reused) and write its table; returns
    {"peaks", "table", "counts"}, peaks keyed (path, d, seed, FIELD, value; None: local search)."""
    (name, values), = cfg["set"].items()
    values = [float(v) for v in values]
    fixed = tuple(cfg.get("fix", {}).items())
    flagship_config([*fixed, (name, values[0])])  # KeyError for a field FlagshipConfig lacks
    t0 = time.time()
    paths = [p for spec in cfg["graphs"] for p in graph_paths(spec)]
    if cfg.get("min_nodes"):
        from regal.parallel import cached_graph
        paths = [p for p in paths if cached_graph(p).num_nodes >= cfg["min_nodes"]]
    budget = cfg.get("budget", 5000)
    methods = {None: Method("local-search", "local-search", {"budget": budget})}
    for v in values:
        methods[v] = Method(f"{name}={v:g}", "regal", {"budget": budget, "config": dict(fixed) | {name: v}})
    cells = cells_for(list(methods.values()), paths, cfg["devices"], cfg["seeds"])
    counts = run_cells(cells, cache_dir, client=client, progress=progress)
    value_of = {m.name: v for v, m in methods.items()}
    path_of = {c.graph_name: c.graph_path for c in cells}
    peaks = {(path_of[r["graph"]], r["devices"], r["seed"], name, value_of[r["method"]]): r["peak_bytes"]
             for r in load_results(cells, cache_dir)}
    lines = table(paths, cfg["devices"], cfg["seeds"], name, values, peaks)
    command = f"python -m experiments.run {os.path.relpath(config_path, ROOT)}"
    with atomic_text(os.path.join(results_dir, "README.md")) as f:
        f.write(f"# {cfg['name']}\n\n{cfg.get('description', '')}\n\nCommand: `{command}`  \nCommit: {commit()}  \n"
                f"Machine: {machine()}  \n{len(paths)} graphs, {budget:,} evaluations, seeds "
                f"{', '.join(map(str, cfg['seeds']))}" + (f", {', '.join(f'{k}={v}' for k, v in fixed)} fixed"
                                                          if fixed else "")
                + f"; {counts['computed']} of {counts['cells']} cells computed in this run, wall time "
                  f"{time.time() - t0:.0f} s.\n\n" + "\n".join(lines) + "\n")
    with atomic_text(os.path.join(results_dir, "peaks.json")) as f:
        json.dump({_key(k): v for k, v in sorted(peaks.items(), key=lambda kv: _key(kv[0]))}, f, indent=0)
    return {"peaks": peaks, "table": lines, "counts": counts}


def _key(cell: tuple) -> str:
    """A cell (path, d, seed, NAME, value) as the raw peaks file names it: PATH|D|SEED|NAME|VALUE,
    PATH relative to the repository."""
    return "|".join([os.path.relpath(os.path.normpath(cell[0]), ROOT), *map(str, cell[1:])])


def table(paths, devices, seeds, name, values, peaks) -> list[str]:
    sources = sorted({os.path.basename(os.path.dirname(p)) for p in paths})
    lines = [f"| d | {name} | " + " | ".join(f"{s}: % vs local search (graphs no worse)" for s in sources)
             + f" | all | paired vs {values[0]}: mean (95 % CI), runs better / worse |",
             "|---:|---:|" + "---:|" * (len(sources) + 2)]
    for d in devices:
        for value in values:
            per: dict = {s: [] for s in sources}
            for p in paths:
                ls = statistics.mean(peaks[(p, d, s, name, None)] for s in seeds)
                fl = statistics.mean(peaks[(p, d, s, name, value)] for s in seeds)
                per[os.path.basename(os.path.dirname(p))].append(100 * (ls - fl) / ls)
            cells = [f"{statistics.mean(x):+.2f} ({sum(y >= -1e-9 for y in x)}/{len(x)})" for x in per.values()]
            everything = [y for x in per.values() for y in x]
            lines.append(f"| {d} | {value} | " + " | ".join(cells) + f" | {statistics.mean(everything):+.2f} | "
                         + (_paired(paths, d, seeds, name, values[0], value, peaks) if value != values[0] else "-")
                         + " |")
    return lines


def _paired(paths, d, seeds, name, base, value, peaks) -> str:
    """The mean over (graph, seed) runs of the % of local search's peak by which `value` is below
    `base`, its 95 % bootstrap interval (2,000 resamples of the runs, seed 0), and the runs where
    it is lower / higher: whether a difference of means is more than the seeds' noise."""
    diffs = np.array([100 * (peaks[(p, d, s, name, base)] - peaks[(p, d, s, name, value)])
                      / peaks[(p, d, s, name, None)] for p in paths for s in seeds])
    rng = np.random.default_rng(0)
    boots = [rng.choice(diffs, diffs.size).mean() for _ in range(2000)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return f"{diffs.mean():+.2f} ({lo:+.2f}, {hi:+.2f}), {(diffs > 0).sum()} / {(diffs < 0).sum()}"
