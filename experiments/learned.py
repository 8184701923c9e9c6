"""Issue 34: the learned start choice, trained leave-one-source-out, at 1,000 evaluations on held-out sources.

    python -m experiments.learned collect [--per-source 30] [--workers 2]  # each start's outcome
    python -m experiments.learned train [--epochs 20]                      # one policy per fold, and "all"
    python -m experiments.learned evaluate [--workers 2]                   # test splits, tables
    python -m experiments.learned margin                                   # a departure margin (not adopted)

Data (collect; every cell also in results/learned/starts.json.gz, which train reads): on the train and valid splits of the six corpus sources (the graphs of
configs/learned_answers.json, --per-source train graphs spread over each source's list, a third
as many valid ones), d = 2 and 4, seed 0: the flagship at 1,000 evaluations climbing from each of
its starts in turn (`regal.training.data.start_row`), and the starts' names and climb scores.

Folds (train): each source in turn is left out (torch and layers trace the same architectures, so
they leave together); the start-choice head (`PolicyConfig(start=True)`, every Beta head off,
feature set v2) is trained on the train cells of the sources it neither leaves out nor selects on
(`regal.training.start`: the exact policy gradient of the expected relative peak) and its
epoch chosen on every cell of a selection source it never trains on (the next source in SOURCES,
as experiments.transfer rotates; `--select valid`: on the valid cells of its training sources,
the first rule tried, not adopted). "all" trains on every source for the median of the folds'
epochs; it ships as regal/policy/learned.npz. Each fold also records the lookup-table rule its
training cells give (start names ranked by mean relative cost per device count): what the
graph network must beat.

Evaluation, on the test split of the left-out source (the never-trapped datasets), d = 2 and 4,
seeds 0-2: the flagship at 1,000 evaluations with the fold's policy and with the fold's lookup
table, against the no-prior flagship at 1,000 and 5,000 (read from the never-trapped cache, the
same seeds). The importers' graphs (an outside source no fold trains on) run with "all". Cells
are cached one file each under experiments/cache/learned/. Results: experiments/results/learned/
(README.md: tables, command, commit; cells.csv).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from functools import lru_cache

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = os.path.join(ROOT, "experiments", "policies", "learned")
CACHE = os.path.join(ROOT, "experiments", "cache", "learned")
OUT = os.path.join(ROOT, "experiments", "results", "learned")
ANSWERS = os.path.join(ROOT, "experiments", "configs", "learned_answers.json")
TESTS = os.path.join(ROOT, "experiments", "configs", "never_trapped.json")
#: Every collected cell, shipped (train reads it): written by collect from its cache
STARTS = os.path.join(OUT, "starts.json.gz")
SOURCES = ("real", "synthetic", "flax", "torch", "layers", "layered")
TWINS = {"torch": {"torch", "layers"}, "layers": {"torch", "layers"}}
SEEDS, DEVICES, BUDGET = (0, 1, 2), (2, 4), 1000


def _collect_file(job) -> str:
    """The cache file of one collect cell (source, split, path, d, seed)."""
    _, _, path, d, seed = job
    return os.path.join(CACHE, "starts", os.path.basename(path)[:-8], f"d{d}_s{seed}.json")


def _collect_cell(job) -> dict:
    """The flagship at BUDGET climbing from each of its starts in turn, on one (graph, d, seed)
    (`regal.training.data.start_row`), its path relative to the repository."""
    from regal.training.data import start_row
    row = start_row(job, BUDGET)
    return {**row, "path": os.path.relpath(job[2], ROOT)}


def _collect_jobs(per_source: int, seeds=(0,)) -> list:
    """The cells (source, split, path, d, seed) of `regal.training.data.corpus_jobs`: the graphs
    of configs/learned_answers.json (the library's CORPUS holds the same list), its device counts."""
    from regal.training.data import corpus_jobs
    return corpus_jobs(per_source, seeds, json.load(open(ANSWERS))["devices"])


def collect(args) -> None:
    jobs = _collect_jobs(args.per_source, args.seeds)
    print(f"{len(jobs)} cells", flush=True)
    _run_jobs(_collect_cell, _collect_file, jobs, args.workers)
    import glob
    import gzip
    rows = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(CACHE, "starts", "*", "*.json")))]
    os.makedirs(OUT, exist_ok=True)
    with gzip.GzipFile(STARTS, "wb", mtime=0) as f:   # every cell collected so far, all seeds
        f.write(json.dumps(rows).encode())
    print(f"{STARTS}: {len(rows)} cells", flush=True)


def _cells(split: str | None = None) -> list:
    """Every collected (graph, devices), as (source, split, StartCell), the seeds' outcomes
    together (`regal.training.start.start_cells`)."""
    import gzip
    from regal.training.start import start_cells
    with gzip.open(STARTS, "rt") as f:
        rows = json.load(f)
    return start_cells([r for r in rows if split is None or r["split"] == split], ROOT)


def _config():
    from regal.training.start import start_config
    return start_config()


def _preference(cells) -> dict:
    """{devices: start names by their mean relative cost over `cells`}: the lookup-table rule the
    learned head is compared with."""
    cost: dict = {}
    for c in cells:
        for name, x in zip(c.names, c.costs):
            cost.setdefault((c.devices, name), []).append(x)
    out: dict = {}
    for (d, name), xs in cost.items():
        out.setdefault(d, []).append((float(np.mean(xs)), name))
    return {d: [name for _, name in sorted(v)] for d, v in out.items()}


def _table_cost(ranking: dict, cells) -> float:
    """Mean relative cost (in %) of the lookup-table rule on `cells`: the first start of the
    device count's ranking that the cell has (else the lowest score)."""
    out = []
    for c in cells:
        k = next((c.names.index(n) for n in ranking.get(c.devices, []) if n in c.names), c.default())
        out.append(c.costs[k])
    return 100 * float(np.mean(out))


class _Recorder:
    """Wraps a policy's start choice, keeping what it chose and what the flagship would have."""

    def __init__(self, policy):
        self.policy, self.chosen, self.default = policy, None, None

    def choose_start(self, graph, devices, names, scores) -> int:
        k = self.policy.choose_start(graph, devices, names, scores)
        self.chosen, self.default = names[k], names[min(range(len(scores)), key=lambda i: tuple(scores[i]))]
        return k


def _selection_source(fold: str) -> str:
    """The source a fold chooses its epoch on: the next one in SOURCES that is neither the left-out
    source nor its twin (experiments.transfer's rotation): a source the fold never trains on."""
    out = TWINS.get(fold, {fold})
    i = SOURCES.index(fold)
    return next(s for s in SOURCES[i + 1:] + SOURCES[:i] if s not in out)


def train(args) -> None:
    """One policy per fold: trained on the train cells of the sources it neither leaves out nor
    selects on, its epoch chosen on every cell of the selection source (`_selection_source`; with
    --select valid: on the valid cells of its training sources, the first rule tried). "all"
    trains on every source's train cells for the median of the folds' chosen epochs (0: the
    untrained head)."""
    from regal.policy import init_policy, load_policy
    from regal.training.start import choice_cost, train_start_choice
    cells = _cells()
    os.makedirs(POLICIES, exist_ok=True)
    for fold in (args.folds or list(SOURCES) + ["all"]):
        path = os.path.join(POLICIES, f"{fold}.npz")
        if os.path.exists(path):
            print(f"{fold}: {path} exists", flush=True)
            continue
        out = TWINS.get(fold, {fold}) if fold != "all" else set()
        if fold == "all" or args.select == "valid":
            select, held = None, out
        else:
            select = _selection_source(fold)
            held = out | TWINS.get(select, {select})
        tr = [c for s, sp, c in cells if sp == "train" and s not in held]
        va = ([c for s, sp, c in cells if s == select] if select else
              [c for s, sp, c in cells if sp == "valid" and s not in held])
        t0 = time.time()
        pol = init_policy(_config(), seed=0)
        table = _preference(tr)
        epochs = args.epochs
        if fold == "all" and args.select == "source":
            chosen = [load_policy(os.path.join(POLICIES, f"{f}.npz")).meta["chosen_epoch"] for f in SOURCES]
            epochs = int(np.median(chosen))
            print(f"all: the folds chose epochs {chosen}: {epochs}", flush=True)
        print(f"{fold}: {len(tr)} training cells, {len(va)} selection cells ({select or 'valid splits'})", flush=True)
        if epochs > 0 and not (fold == "all" and args.select == "source"):
            curve = train_start_choice(pol, tr, epochs=epochs, lr=args.lr, entropy=args.entropy, valid=va,
                                       log=lambda s: print(f"  {fold}: {s}", flush=True))
        elif epochs > 0:   # "all": a fixed number of epochs, no selection
            curve = train_start_choice(pol, tr, epochs=epochs, lr=args.lr, entropy=args.entropy,
                                       log=lambda s: print(f"  {fold}: {s}", flush=True))
        else:
            curve = []
        v, base = choice_cost(pol, va)
        best = min(curve, key=lambda r: r["valid_cost"]) if curve and "valid_cost" in curve[0] else \
            {"epoch": epochs, "valid_cost": v, "valid_default_cost": base}
        pol.meta = {"trained": True, "issue": 34, "fold": fold, "left_out": sorted(out),
                    "selection": select or "valid splits of the training sources",
                    "training_cells": len(tr), "selection_cells": len(va), "epochs": epochs, "lr": args.lr,
                    "entropy": args.entropy, "chosen_epoch": best["epoch"], "valid_cost": v,
                    "valid_default_cost": base, "curve": curve,
                    "table": table, "table_valid_cost": _table_cost(table, va),
                    "seconds": round(time.time() - t0, 1),
                    "command": "python -m experiments.learned train " + " ".join(sys.argv[2:])}
        pol.save(path)
        print(f"{fold}: saved {path}, epoch {best['epoch']} ({time.time() - t0:.0f} s)", flush=True)


def _run_jobs(fn, file_of, jobs: list, workers: int) -> list:
    """Each job's row, `fn(job)`, through the one runner (`experiments.runner.run_files`, on a
    local Dask cluster of `workers` processes): a job whose file `file_of(job)` exists is not run."""
    from experiments.runner import json_job, run_files
    from regal.parallel import dask_client
    todo = [(file_of(job), json_job, (fn, file_of(job), job)) for job in jobs]
    if any(not os.path.exists(out) for out, _, _ in todo):
        with dask_client(workers=workers) as client:
            run_files(todo, client)
    return [json.load(open(out)) for out, _, _ in todo]


def _test_file(job) -> str:
    """The cache file of one test cell (fold, dataset label, path, d, seed, policy)."""
    fold, label, path, d, seed, policy = job
    return os.path.join(CACHE, "test", f"{policy}-{fold}", label, os.path.basename(path)[:-8], f"d{d}_s{seed}.json")


def _cell(job) -> dict:
    fold, label, path, d, seed, policy = job
    import regal
    from regal.policy import load_policy
    g = regal.load(path)
    pol = _Recorder(load_policy(os.path.join(POLICIES, f"{fold}.npz")))
    t = time.perf_counter()
    sol = regal.optimize(g, d, budget=BUDGET, seed=seed, policy=pol)
    return {"fold": fold, "dataset": label, "graph": os.path.basename(path)[:-8], "nodes": g.num_nodes, "devices": d,
            "seed": seed, "policy": policy, "peak_bytes": sol.peak_bytes, "seconds": round(time.perf_counter() - t, 4),
            "climb_start": (sol.info["climbs"] or [{}])[0].get("start"), "chosen": pol.chosen,
            "default_start": pol.default, "history": sol.info["history"]}


def _reference_doc(path: str, d: int, seed: int, budget: str) -> dict | None:
    """The never-trapped cache's no-prior flagship cell (budget "1k" or "5k"), or None."""
    from experiments.runner import Cell, Method
    cfg = _tests_config()
    m = next(x for x in cfg["methods"] if x["name"] == f"regal-{budget}")
    f = Cell(Method.from_config(m), path, d, seed).path(os.path.join(ROOT, "experiments", "cache", cfg["name"]))
    return json.load(open(f)) if os.path.exists(f) else None


@lru_cache(maxsize=1)
def _tests_config() -> dict:
    return json.load(open(TESTS))


def plot_anytime(rows: list, none_history: dict) -> list:
    """One figure per source: the mean best peak over the no-prior flagship's peak at 5,000
    (same seed) against evaluations, with the learned start choice and without (d = 2, 4)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from experiments.never_trapped import _step
    grid = np.unique(np.geomspace(10, BUDGET, 50).astype(int))
    files = []
    for ds in sorted({r["dataset"] for r in rows}):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, d in zip(axes, DEVICES):
            cells = [r for r in rows if r["dataset"] == ds and r["devices"] == d and r["none_5k"]]
            for label, hist in (("no policy", lambda r: none_history.get((r["dataset"], r["graph"], d, r["seed"]))),
                                ("learned", lambda r: r["history"])):
                curves = [_step(hist(r), 0, grid) / r["none_5k"] for r in cells if hist(r)]
                if curves:
                    ax.plot(grid, np.nanmean(np.array(curves), axis=0), label=f"{label} ({len(curves)} runs)")
            anytime_axis(ax, f"{ds}, d = {d}", "--", 8)
        files.append(save_anytime(fig, OUT, ds))
    return files


def anytime_axis(ax, title: str, ref_style: str = "--", legend_size: int = 8) -> None:
    """An anytime plot's axis: log evaluations, best peak over the no-policy flagship's at 5K (a
    line at 1), the title and the legend."""
    ax.axhline(1.0, color="gray", lw=0.8, ls=ref_style)
    ax.set_xscale("log")
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best peak / no-policy flagship at 5K")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=legend_size)


def save_anytime(fig, out: str, dataset: str) -> str:
    """Write an anytime figure as OUT/anytime_DATASET.png; returns the file's name."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    name = f"anytime_{dataset}.png"
    fig.savefig(os.path.join(out, name), dpi=80)
    plt.close(fig)
    return name


def evaluate(args) -> None:
    from experiments.runner import dataset_graphs
    cfg = _tests_config()
    label_source = {"real-test": "real", "synthetic-test": "synthetic", "flax-test": "flax", "torch-test": "torch",
                    "layers-test": "layers", "layered-test": "layered", "importers": "all"}
    jobs = []
    for ds in cfg["datasets"]:
        fold = "all" if args.policy == "all" else label_source[ds["label"]]
        for path in dataset_graphs(ds):
            for d in DEVICES:
                for seed in SEEDS:
                    for policy in ("learned",):
                        jobs.append((fold, ds["label"], path, d, seed, policy))
    rows = _run_jobs(_cell, _test_file, jobs, args.workers)
    paths = {(ds["label"], os.path.basename(p)[:-8]): p for ds in cfg["datasets"] for p in dataset_graphs(ds)}
    none_history = {}
    for r in rows:
        p = paths[(r["dataset"], r["graph"])]
        one, five = (_reference_doc(p, r["devices"], r["seed"], b) for b in ("1k", "5k"))
        r["none_1k"] = int(one["peak_bytes"]) if one else None
        r["none_5k"] = int(five["peak_bytes"]) if five else None
        if one:
            none_history[(r["dataset"], r["graph"], r["devices"], r["seed"])] = one["info"].get("history")
    write_tables(rows, args.policy)
    if args.policy == "fold":
        os.makedirs(OUT, exist_ok=True)
        print("plots:", plot_anytime(rows, none_history))


def write_tables(rows: list, which: str = "fold") -> None:
    from experiments.runner import commit, machine
    os.makedirs(OUT, exist_ok=True)
    rows = sorted(rows, key=lambda r: (r["dataset"], r["graph"], r["devices"], r["seed"], r["policy"]))
    suffix = "" if which == "fold" else "_all"
    with open(os.path.join(OUT, f"cells{suffix}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k != "history"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    held = ("the policy of the fold that left it out (importers: the policy trained on all six sources; no fold "
            "trains on them)") if which == "fold" else \
        "the policy trained on all six sources (the shipped `learned`: test graphs it never saw, of sources it saw)"
    lines = [f"# Issue 34: the learned start choice at 1,000 evaluations{' on left-out sources' if which == 'fold' else ', sources seen in training'}", "",
             f"Command: `python -m experiments.learned evaluate{' --policy all' if which == 'all' else ''}` at commit {commit()}, on {machine()}.", "",
             f"Each row: the test split of one source, with {held}, d = 2 and 4, seeds 0-2. *reach*: share "
             "of cells whose peak at 1,000 evaluations is at most the no-prior flagship's at 5,000 (same seed; "
             "target >= 80 %). *vs none*: mean % lower peak than the no-prior flagship at 1,000 (same seed; "
             "target: never below -0.5 % on any source). *better / worse / same*: runs against no policy; "
             "*climbs from another start*: runs where the head overrode the flagship's own choice.", "",
             "| source | d | cells | reach: none | reach: learned | vs none | learned better / worse / same | climbs from another start |",
             "|---|---|---|---|---|---|---|---|"]
    groups = {}
    for r in rows:
        if r["none_1k"] is None or r["none_5k"] is None:
            continue
        groups.setdefault((r["dataset"], r["devices"]), []).append(r)
        groups.setdefault(("all", r["devices"]), []).append(r)
    for (ds, d), cells in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        reach_none = 100 * np.mean([r["none_1k"] <= r["none_5k"] for r in cells])
        reach = 100 * np.mean([r["peak_bytes"] <= r["none_5k"] for r in cells])
        gain = np.mean([100.0 * (r["none_1k"] - r["peak_bytes"]) / r["none_1k"] for r in cells])
        better = sum(r["peak_bytes"] < r["none_1k"] for r in cells)
        worse = sum(r["peak_bytes"] > r["none_1k"] for r in cells)
        other = sum(r["chosen"] is not None and r["chosen"] != r["default_start"] for r in cells)
        lines.append(f"| {ds} | {d} | {len(cells)} | {reach_none:.1f} % | {reach:.1f} % | {gain:+.2f} % | "
                     f"{better} / {worse} / {len(cells) - better - worse} | {other} |")
    if which == "fold":
        from regal.policy import load_policy
        lines += ["", "The data and the folds: `python -m experiments.learned collect --per-source 30 --seeds 0`, the "
                  "same with `--seeds 1` (starts.json.gz: every cell), then `python -m experiments.learned train "
                  "--epochs 30` (experiments/policies/learned/FOLD.npz; `all` ships as regal/policy/learned.npz). "
                  "Each fold trains on the sources it neither leaves out nor selects on and chooses its epoch on the "
                  "selection source (never trained on); `all` trains on every source for the median of the folds' "
                  "epochs. Costs: mean % above the best start's outcome at 1K (mean of seeds 0, 1) on the selection "
                  "cells (`all`: every valid cell) of the flagship's own choice, of the lookup table (start names by "
                  "their mean cost on the training cells) and of the head at its chosen epoch (0: untrained, the "
                  "flagship's own choice).", "",
                  "| fold (left out) | selection | training cells | selection cells | chosen epoch | own choice | table | learned |",
                  "|---|---|---|---|---|---|---|---|"]
        for fold in list(SOURCES) + ["all"]:
            f = os.path.join(POLICIES, f"{fold}.npz")
            if os.path.exists(f):
                m = load_policy(f).meta
                lines.append(f"| {fold} | {m.get('selection')} | {m['training_cells']} | {m.get('selection_cells')} | "
                             f"{m['chosen_epoch']} | {m['valid_default_cost']:.2f} % | {m['table_valid_cost']:.2f} % | "
                             f"{m['valid_cost']:.2f} % |")
    with open(os.path.join(OUT, "README.md" if which == "fold" else "seen_sources.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


#: The margins `margin` tries (logit units of the start head; inf: never depart from the default)
MARGINS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, float("inf"))


def margin(args) -> None:
    """A margin before departing from the default start (tried, not adopted): each fold's policy
    departs only when its top start's score beats the default start's by m; the mean % above the
    best start at 1K on the fold's selection source (the adopted protocol) for each m. Offline,
    on the collected cells (starts.json.gz); writes results/learned/margin.md."""
    from experiments.runner import commit
    from regal.policy import load_policy
    from regal.training.start import load
    cells = _cells()
    lines = ["# A departure margin for the start choice (issue 34; not adopted)", "",
             "Command: `python -m experiments.learned margin`  ",
             f"Commit: {commit()}; offline, on experiments/results/learned/starts.json.gz with the fold policies.", "",
             "Each fold's mean % above the best start at 1,000 evaluations on its selection source's cells, "
             "departing from the lowest-scored start only when the head's top score beats it by m:", "",
             "| fold | selection source | cells | " + " | ".join(f"m = {m:g}" for m in MARGINS) + " |",
             "|---|---|---:|" + "---:|" * len(MARGINS)]
    for fold in SOURCES:
        pol = load_policy(os.path.join(POLICIES, f"{fold}.npz"))
        select = _selection_source(fold)
        costs = []
        for _, _, c in [x for x in cells if x[0] == select]:
            out = pol.start_scores(load(c.path), c.devices, c.names, c.scores)
            d, b = c.default(), int(np.argmax(out))
            costs.append([c.costs[b if out[b] - out[d] > m else d] for m in MARGINS])
        mean = 100 * np.asarray(costs).mean(axis=0)
        lines.append(f"| {fold} | {select} | {len(costs)} | " + " | ".join(f"{x:.3f}" for x in mean) + " |")
        print(lines[-1], flush=True)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "margin.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.learned", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--per-source", type=int, default=30, help="train graphs per source (valid: a third)")
    c.add_argument("--workers", type=int, default=2)
    c.add_argument("--seeds", type=int, nargs="+", default=[0])
    t = sub.add_parser("train")
    t.add_argument("--epochs", type=int, default=20)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--entropy", type=float, default=0.01)
    t.add_argument("--select", choices=["source", "valid"], default="source",
                   help="choose each fold's epoch on a held-out source (default) or on its training sources' valid splits")
    t.add_argument("--folds", nargs="*", default=None)
    t.add_argument("--policies", default=None, help="where the folds' policies go (default experiments/policies/learned)")
    e = sub.add_parser("evaluate")
    e.add_argument("--workers", type=int, default=2)
    e.add_argument("--policy", choices=["fold", "all"], default="fold",
                   help="fold: each source with the policy that left it out (held out); all: every source "
                        "with the policy trained on all six (their test graphs unseen, their sources seen)")
    sub.add_parser("margin", help="a departure margin chosen on the selection sources (tried, not adopted)")
    args = ap.parse_args(argv)
    global POLICIES
    POLICIES = getattr(args, "policies", None) or POLICIES
    {"collect": collect, "train": train, "evaluate": evaluate, "margin": margin}[args.cmd](args)


if __name__ == "__main__":
    main()
