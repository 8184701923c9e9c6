"""Issue 47: a learned move policy for the flagship's climb, leave-one-source-out.

    python -m experiments.moves collect [--per-source 30] [--workers 2]   # no-policy runs, per-node counts
    python -m experiments.moves train [--folds ...]                      # one move head per fold, and "all"
    python -m experiments.moves evaluate [--workers 2] [--graphs 8]      # left-out test splits, tables, plots
    python -m experiments.moves headroom [--cells 60]                    # what hindsight per-node logits buy

Data (collect): the graphs `experiments.learned collect` draws from (train and valid splits of the
six corpus sources, configs/learned_answers.json; --per-source train graphs per source, a third as
many valid ones), d = 2 and 4, seeds 0 and 1: the flagship at 1,000 evaluations without a policy,
counting per node its picks and the improvements they made (`regal.moves.MoveProposals.uniform`,
the flagship's own draws bit for bit) and its peak.

Folds (train), as `experiments.learned`'s: each source in turn is left out (torch and its layer
twin together); the selection source is the next one in the rotation, never trained on. The move
head (`regal.training.moves`) sits on the fold's start-choice policy (experiments/policies/learned/
FOLD.npz: its network and start choice unchanged): imitation of the no-policy runs' improving
picks on the train split of the training sources, then REINFORCE (the flagship at 1,000 with the
head's proposals, reward: a move's improvement). Candidates: none (mix 0), imitation, and every
--every-th REINFORCE step; the one with the lowest mean peak on the selection source (its
collected cells, seeds 0 and 1, against the no-policy peaks) is the fold's policy (policies in
experiments/policies/moves/). "all" trains on every source for the median of the folds' steps
and ships as regal/policy/learned.npz (start choice + move head).

Evaluation, on the left-out source's test split (the never-trapped datasets, --graphs per source
spread over the list; the importers with "all"), d = 2 and 4, seeds 0-2: the flagship at 1,000 and
5,000 evaluations with the fold's policy and without a policy, the fold's start choice alone and
its imitation-only head at 1,000, and without a policy at the evaluations that take the policy's
1,000's median wall time (equal time). Cells cached one file each under experiments/cache/moves/;
results in experiments/results/moves/ (README.md, cells.csv, anytime_*.png).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

import numpy as np

from experiments.learned import SOURCES, TWINS, _collect_jobs, _run_jobs, _selection_source, anytime_axis, save_anytime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_POLICIES = os.path.join(ROOT, "experiments", "policies", "learned")
POLICIES = os.path.join(ROOT, "experiments", "policies", "moves")
CACHE = os.path.join(ROOT, "experiments", "cache", "moves")
OUT = os.path.join(ROOT, "experiments", "results", "moves")
TESTS = os.path.join(ROOT, "experiments", "configs", "never_trapped.json")
SHIPPED = os.path.join(ROOT, "regal", "policy", "learned.npz")
SEEDS, DEVICES, BUDGET, LONG = (0, 1, 2), (2, 4), 1000, 5000
COLLECT_SEEDS = (0, 1)


# ------------------------------------------------------------------------------------ collect
def _stats_file(job) -> str:
    _, _, path, d, seed = job
    return os.path.join(CACHE, "stats", os.path.basename(path)[:-8], f"d{d}_s{seed}.json")


def _stats_cell(job) -> dict:
    """The no-policy flagship at 1,000 on one (graph, d, seed), counting per node
    (`regal.training.data.moves_row`), its path relative to the repository."""
    from regal.training.data import moves_row
    row = moves_row(job, BUDGET)
    return {**row, "path": os.path.relpath(job[2], ROOT)}


def collect(args) -> None:
    jobs = _collect_jobs(args.per_source, COLLECT_SEEDS)
    print(f"{len(jobs)} cells", flush=True)
    _run_jobs(_stats_cell, _stats_file, jobs, args.workers)


def _collected(per_source: int) -> dict:
    """{(source, split, path, d): {seed: row}} of the collected cells."""
    out: dict = {}
    for job in _collect_jobs(per_source, COLLECT_SEEDS):
        f = _stats_file(job)
        if os.path.exists(f):
            r = json.load(open(f))
            out.setdefault((job[0], job[1], job[2], job[3]), {})[job[4]] = r
    return out


# -------------------------------------------------------------------------------------- train
def _cell(key, rows, start):
    """One (graph, d) of the training or selection data (`regal.training.moves.MoveCell`)."""
    from regal.training.moves import MoveCell
    return MoveCell(key, rows, start)


def _score(cells, start, head, mix) -> float:
    """Mean % lower peak than the no-policy flagship at 1,000 (same seeds) over the cells."""
    from regal.training.moves import score
    return score(cells, start, head, mix, BUDGET)


def train(args) -> None:
    """One move head per fold (`regal.training.moves.train_move_head`: imitation, then REINFORCE
    on the fold's start policy); candidates scored on the selection source: none, imitation and
    every --every-th step; "all" trains for the median of the folds' choices."""
    from regal.policy import load_policy
    from regal.training.moves import train_move_head, with_head
    data = _collected(args.per_source)
    os.makedirs(POLICIES, exist_ok=True)
    for fold in (args.folds or list(SOURCES) + ["all"]):
        path = os.path.join(POLICIES, f"{fold}.npz")
        if os.path.exists(path):
            print(f"{fold}: {path} exists", flush=True)
            continue
        t0 = time.time()
        start = load_policy(os.path.join(START_POLICIES, f"{fold}.npz"))
        out = TWINS.get(fold, {fold}) if fold != "all" else set()
        twin = next((t for t in sorted(out - {fold}) if os.path.exists(os.path.join(POLICIES, f"{t}.npz"))), None)
        if twin:   # torch and layers leave together: the same training cells and selection source
            for suffix in ("", "-imitation"):
                pol = load_policy(os.path.join(POLICIES, f"{twin}{suffix}.npz"))
                pol.meta = {**pol.meta, "fold": fold, "same_as": twin}
                pol.save(os.path.join(POLICIES, f"{fold}{suffix}.npz"))
            print(f"{fold}: the policy of its twin {twin}", flush=True)
            continue
        select = _selection_source(fold) if fold != "all" else None
        held = out | (TWINS.get(select, {select}) if select else set())
        tr = [_cell(k, rows, start) for k, rows in data.items() if k[1] == "train" and k[0] not in held]
        sel_keys = [k for k in data if k[0] == select]
        sel = [_cell(k, data[k], start) for k in sel_keys[::max(1, len(sel_keys) // args.select_cells)]]
        print(f"{fold}: {len(tr)} training cells, {len(sel)} selection cells ({select})", flush=True)
        log = lambda s: print(f"  {fold}: {s}", flush=True)
        steps = args.steps
        if fold == "all":
            chosen = [load_policy(os.path.join(POLICIES, f"{f}.npz")).meta["chosen"] for f in SOURCES]
            steps = int(np.median(chosen))   # -1 (none) when most folds chose no move policy
            log(f"the folds chose {chosen}: {steps} REINFORCE steps")
        record = [("none", -1, 0.0)] if sel else []   # (candidate, step, selection score)
        heads = {}

        def candidate(step, params):
            heads[step] = params
            if sel and (step == 0 or step % args.every == 0):
                record.append(("imitation" if step == 0 else "reinforce", step, _score(sel, start, params, args.mix)))
                log(f"{record[-1][0]} step {step}: {record[-1][2]:+.3f} % on {select} ({time.time() - t0:.0f} s)")
        imit, _, meta = train_move_head(start, tr, imitate=args.imitate, imitate_lr=args.imitate_lr, steps=steps,
                                        batch=args.batch, lr=args.lr, mix=args.mix, budget=BUDGET, log=log,
                                        on_step=candidate)
        chosen = max(record, key=lambda r: (r[2], -r[1]))[1] if sel else steps   # "all": the folds' median
        head = heads.get(max(chosen, 0), imit)
        mix = 0.0 if chosen < 0 else args.mix
        meta = {"issue": 47, "fold": fold, "left_out": sorted(out), "selection": select,
                "training_cells": len(tr), "selection_cells": len(sel), "imitation_steps": args.imitate,
                "imitation_curve": meta["imitation_curve"], "reinforce_steps": steps, "batch": args.batch,
                "lr": args.lr, "record": record, "chosen": chosen, "seconds": round(time.time() - t0, 1),
                "command": "python -m experiments.moves train " + " ".join(sys.argv[2:])}
        with_head(start, imit, args.mix, meta).save(os.path.join(POLICIES, f"{fold}-imitation.npz"))
        with_head(start, head, mix, meta).save(path)
        print(f"{fold}: saved {path}, chosen {chosen} ({time.time() - t0:.0f} s)", flush=True)
        if fold == "all" and args.ship:
            with_head(start, head, mix, {**meta, "shipped": True}).save(SHIPPED)
            print(f"shipped {SHIPPED}", flush=True)


# ----------------------------------------------------------------------------------- evaluate
def _test_file(job) -> str:
    fold, label, path, d, seed, variant, budget = job
    return os.path.join(CACHE, "test", variant, label, os.path.basename(path)[:-8], f"d{d}_s{seed}_b{budget}.json")


def _policy_of(fold, variant):
    from regal.policy import load_policy
    if variant == "none":
        return "none"
    if variant == "start":
        return load_policy(os.path.join(START_POLICIES, f"{fold}.npz"))
    name = f"{fold}-imitation" if variant == "imitation" else fold
    return load_policy(os.path.join(POLICIES, f"{name}.npz"))


def _test_cell(job) -> dict:
    fold, label, path, d, seed, variant, budget = job
    import regal
    g = regal.load(path)
    pol = _policy_of(fold, variant)
    t = time.perf_counter()
    sol = regal.optimize(g, d, budget=budget, seed=seed, policy=pol)
    return {"fold": fold, "dataset": label, "graph": os.path.basename(path)[:-8], "nodes": g.num_nodes, "devices": d,
            "seed": seed, "variant": variant, "budget": budget, "peak_bytes": sol.peak_bytes,
            "seconds": round(time.perf_counter() - t, 4), "history": sol.info["history"]}


LABEL_SOURCE = {"real-test": "real", "synthetic-test": "synthetic", "flax-test": "flax", "torch-test": "torch",
                "layers-test": "layers", "layered-test": "layered", "importers": "all"}


def _tests(graphs: int) -> list:
    from experiments.runner import dataset_graphs
    cfg = json.load(open(TESTS))
    out = []
    for ds in cfg["datasets"]:
        paths = dataset_graphs(ds)
        paths = paths[::max(1, len(paths) // graphs)][:graphs]
        out += [(LABEL_SOURCE[ds["label"]], ds["label"], p) for p in paths]
    return out


def evaluate(args) -> None:
    tests = _tests(args.graphs)
    base = [(fold, label, p, d, s) for fold, label, p in tests for d in DEVICES for s in SEEDS]
    jobs = [(*b, v, BUDGET) for b in base for v in ("none", "learned", "start", "imitation")]
    jobs += [(*b, v, LONG) for b in base for v in ("none", "learned")]
    rows = _run_jobs(_test_cell, _test_file, jobs, args.workers)
    # equal wall time: without a policy, at the evaluations its median 1K run needs to take the
    # policy's median 1K time, per dataset
    eq = {}
    for label in sorted({r["dataset"] for r in rows}):
        t_l = np.median([r["seconds"] for r in rows if r["dataset"] == label and r["variant"] == "learned"
                         and r["budget"] == BUDGET])
        t_n = np.median([r["seconds"] for r in rows if r["dataset"] == label and r["variant"] == "none"
                         and r["budget"] == BUDGET])
        eq[label] = int(round(BUDGET * t_l / t_n))
    jobs = [(*b, "none", max(eq[b[1]], 2)) for b in base]
    rows += [dict(r, variant="none-eq") for r in _run_jobs(_test_cell, _test_file, jobs, args.workers)]
    write_tables(rows, eq, args)
    plot_anytime(rows)


def _by(rows):
    return {(r["dataset"], r["graph"], r["devices"], r["seed"], r["variant"], r["budget"] if r["variant"] != "none-eq" else "eq"): r
            for r in rows}


def write_tables(rows, eq, args) -> None:
    from experiments.runner import commit, machine
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "cells.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k != "history"], extrasaction="ignore")
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: (r["dataset"], r["graph"], r["devices"], r["seed"], r["variant"],
                                                 r["budget"])))
    idx = _by(rows)
    keys = sorted({(r["dataset"], r["graph"], r["devices"], r["seed"]) for r in rows})

    def peak(k, v, b):
        r = idx.get((*k, v, b))
        return None if r is None else r["peak_bytes"]

    def gain(a, b):
        return 100.0 * (a - b) / a
    lines = ["# Issue 47: learned move proposals in the flagship's climb, on left-out sources", "",
             f"Command: `python -m experiments.moves evaluate --graphs {args.graphs}` at commit {commit()}, on {machine()}.", "",
             "Each row: the test split of one source (at most "
             f"{args.graphs} graphs spread over its list), with the policy of the fold that left it out (importers: the "
             "policy trained on all six sources, which no fold trains on), d = 2 and 4, seeds 0-2. Every figure is the "
             "mean % lower peak than the flagship without a policy (positive: the policy is better), same seed. "
             "*1K*: both at 1,000 evaluations; *equal time*: without a policy at the evaluations whose median wall "
             "time is the policy's 1K run's (features and inference included; per source: the column *eq. evals*); "
             "*start only*: the fold's start choice without the move head; *moves*: the fold's policy against its start "
             "choice alone (what the move head adds); *imitation*: the fold's head after imitation alone (before REINFORCE); "
             "*learned vs imitation*: the fold's chosen head against its imitation-only head (a fold that chose no move "
             "policy compares none with imitation); *5K*: both at 5,000. *reach*: share of cells whose peak at 1,000 is "
             "at most the no-policy flagship's at 5,000.", "",
             "| source | d | cells | learned vs none, 1K | equal time | start only | moves: learned vs start only | imitation | learned vs imitation | 5K | reach: none | reach: learned | eq. evals |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    groups: dict = {}
    for k in keys:
        if None in (peak(k, "none", BUDGET), peak(k, "learned", BUDGET), peak(k, "none", LONG)):
            continue
        groups.setdefault((k[0], k[2]), []).append(k)
        groups.setdefault(("all", k[2]), []).append(k)
    for (ds, d), ks in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        def mean(f):
            xs = [f(k) for k in ks]
            xs = [x for x in xs if x is not None]
            return f"{np.mean(xs):+.2f} %" if xs else "-"
        n1 = lambda k: peak(k, "none", BUDGET)
        lines.append(
            f"| {ds} | {d} | {len(ks)} | {mean(lambda k: gain(n1(k), peak(k, 'learned', BUDGET)))} | "
            f"{mean(lambda k: gain(peak(k, 'none-eq', 'eq'), peak(k, 'learned', BUDGET)) if peak(k, 'none-eq', 'eq') else None)} | "
            f"{mean(lambda k: gain(n1(k), peak(k, 'start', BUDGET)) if peak(k, 'start', BUDGET) else None)} | "
            f"{mean(lambda k: gain(peak(k, 'start', BUDGET), peak(k, 'learned', BUDGET)) if peak(k, 'start', BUDGET) else None)} | "
            f"{mean(lambda k: gain(n1(k), peak(k, 'imitation', BUDGET)) if peak(k, 'imitation', BUDGET) else None)} | "
            f"{mean(lambda k: gain(peak(k, 'imitation', BUDGET), peak(k, 'learned', BUDGET)) if peak(k, 'imitation', BUDGET) else None)} | "
            f"{mean(lambda k: gain(peak(k, 'none', LONG), peak(k, 'learned', LONG)) if peak(k, 'learned', LONG) else None)} | "
            f"{100 * np.mean([n1(k) <= peak(k, 'none', LONG) for k in ks]):.1f} % | "
            f"{100 * np.mean([peak(k, 'learned', BUDGET) <= peak(k, 'none', LONG) for k in ks]):.1f} % | "
            f"{eq.get(ds, '-')} |")
    lines += ["", "The folds (`python -m experiments.moves train`; selection: mean % vs no policy at 1K on the "
              "selection source's collected cells, seeds 0 and 1; chosen: -1 none, 0 imitation, k REINFORCE steps):", "",
              "| fold (left out) | selection | training cells | none | imitation | best REINFORCE (step) | chosen |",
              "|---|---|---:|---:|---:|---:|---:|"]
    from regal.policy import load_policy
    for fold in list(SOURCES) + ["all"]:
        f = os.path.join(POLICIES, f"{fold}.npz")
        if not os.path.exists(f):
            continue
        m = load_policy(f).meta
        rec = m.get("record") or []
        imit = next((r[2] for r in rec if r[0] == "imitation"), None)
        rl = [r for r in rec if r[0] == "reinforce"]
        best = max(rl, key=lambda r: r[2]) if rl else None
        lines.append(f"| {fold} | {m.get('selection')} | {m['training_cells']} | +0.00 % | "
                     f"{'-' if imit is None else f'{imit:+.2f} %'} | "
                     f"{'-' if best is None else f'{best[2]:+.2f} % ({best[1]})'} | {m['chosen']} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(text)
    print(text)


def plot_anytime(rows) -> list:
    """One figure per source: mean best peak over the no-policy flagship's at 5,000 (same seed)
    against evaluations, with and without the policy, at 1,000 and 5,000 (d = 2, 4)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from experiments.never_trapped import _step
    idx = _by(rows)
    files = []
    for ds in sorted({r["dataset"] for r in rows}):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, d in zip(axes, DEVICES):
            ks = sorted({(r["dataset"], r["graph"], r["devices"], r["seed"]) for r in rows
                         if r["dataset"] == ds and r["devices"] == d})
            for v, b, style in (("none", LONG, "-"), ("learned", LONG, "-"), ("none", BUDGET, "--"),
                                ("learned", BUDGET, "--")):
                grid = np.unique(np.geomspace(10, b, 60).astype(int))
                curves = []
                for k in ks:
                    r, ref = idx.get((*k, v, b)), idx.get((*k, "none", LONG))
                    if r and ref and r["history"]:
                        curves.append(_step(r["history"], 0, grid) / ref["peak_bytes"])
                if curves:
                    ax.plot(grid, np.nanmean(np.array(curves), axis=0), style,
                            label=f"{'learned' if v == 'learned' else 'no policy'} {b // 1000}K ({len(curves)} runs)")
            anytime_axis(ax, f"{ds}, d = {d}", ":", 7)
        files.append(save_anytime(fig, OUT, ds))
    print("plots:", files)
    return files


# ----------------------------------------------------------------------------------- headroom
def headroom(args) -> None:
    """How much any fixed per-node move policy can buy at 1,000 evaluations: on collected cells,
    the node logits (and group logits) of the imitation targets of the cell's own two collected
    seeds (hindsight: what the best imitation of this very graph could learn), run on two other
    seeds (2, 3) against no policy. Writes results/moves/headroom.md."""
    from experiments.runner import commit, machine
    from regal.moves import MoveProposals
    from regal.training.moves import imitation_targets
    import regal
    data = _collected(args.per_source)
    keys = sorted(data)
    rng = np.random.default_rng(0)
    keys = [keys[i] for i in sorted(rng.choice(len(keys), min(args.cells, len(keys)), replace=False))]
    variants = (("node logits, mix 0.5", 0.5, 1.0, False), ("node logits, mix 1.0", 1.0, 1.0, False),
                ("node logits x 2, mix 0.5", 0.5, 2.0, False), ("node and group logits, mix 0.5", 0.5, 1.0, True))

    class Fixed:
        def __init__(self, t, mix, scale, group):
            self.t, self.mix, self.scale, self.group = t, mix, scale, group

        def move_proposals(self, graph, devices):
            return MoveProposals(self.t[:, 0] * self.scale, self.t[:, 1] if self.group else np.zeros(len(self.t)),
                                 self.mix)
    res: dict = {}
    for i, k in enumerate(keys):
        g = regal.load(k[2])
        t, _ = imitation_targets(sum(np.asarray(r["stats"], float) for r in data[k].values()))
        for seed in (2, 3):
            none = regal.optimize(g, k[3], budget=BUDGET, seed=seed).peak_bytes
            for name, mix, scale, group in variants:
                peak = regal.optimize(g, k[3], budget=BUDGET, seed=seed, policy=Fixed(t, mix, scale, group)).peak_bytes
                res.setdefault(name, []).append(100.0 * (none - peak) / none)
        print(f"{i + 1}/{len(keys)}", flush=True)
    lines = ["# Issue 47: the room a fixed per-node move policy has at 1,000 evaluations", "",
             f"Command: `python -m experiments.moves headroom --cells {args.cells}` at commit {commit()}, on {machine()}.", "",
             f"{len(keys)} (graph, d) cells drawn (seeded) from the collected train and valid cells of the six sources "
             "(d = 2 and 4). Each runs with the imitation targets of its own two collected no-policy runs (seeds 0, 1) as "
             "its logits: hindsight on this very graph, more than a network that reads the graph can know. Run on seeds "
             "2 and 3 against the flagship without a policy (same seed), 1,000 evaluations.", "",
             "| fixed logits | runs | mean % lower peak than no policy | better / worse / same |", "|---|---:|---:|---:|"]
    for name, xs in res.items():
        xs = np.asarray(xs)
        lines.append(f"| {name} | {len(xs)} | {xs.mean():+.2f} % | {(xs > 0).sum()} / {(xs < 0).sum()} / {(xs == 0).sum()} |")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "headroom.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.moves", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--per-source", type=int, default=30)
    c.add_argument("--workers", type=int, default=2)
    t = sub.add_parser("train")
    t.add_argument("--per-source", type=int, default=30)
    t.add_argument("--folds", nargs="*", default=None)
    t.add_argument("--imitate", type=int, default=600, help="imitation steps (one training cell each)")
    t.add_argument("--imitate-lr", type=float, default=3e-3)
    t.add_argument("--steps", type=int, default=32, help="REINFORCE steps")
    t.add_argument("--batch", type=int, default=12, help="flagship runs per REINFORCE step")
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--mix", type=float, default=0.5, help="share of the climb's picks the policy makes")
    t.add_argument("--every", type=int, default=8, help="REINFORCE steps between selection scores")
    t.add_argument("--select-cells", type=int, default=32, help="(graph, d) cells of the selection source")
    t.add_argument("--ship", action="store_true", help="write the 'all' policy to regal/policy/learned.npz")
    e = sub.add_parser("evaluate")
    e.add_argument("--workers", type=int, default=2)
    e.add_argument("--graphs", type=int, default=8, help="test graphs per source, spread over its list")
    h = sub.add_parser("headroom", help="what fixed per-node logits known in hindsight buy (no training)")
    h.add_argument("--per-source", type=int, default=30)
    h.add_argument("--cells", type=int, default=60)
    args = ap.parse_args(argv)
    {"collect": collect, "train": train, "evaluate": evaluate, "headroom": headroom}[args.cmd](args)


if __name__ == "__main__":
    main()
