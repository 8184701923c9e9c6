"""Issue 56, step 1: the room a per-node prior has where evaluations are scarce, measured in hindsight.

    python -m experiments.headroom_scarce graphs                 # the large graphs (A), built once into the cache
    python -m experiments.headroom_scarce large [--time-limit 15 --long 120]   # A: long runs, then the arms
    python -m experiments.headroom_scarce recompute [--budgets 1000 5000]      # B: long runs, then the arms
    python -m experiments.headroom_scarce report                 # README.md and cells.csv from the cache

Two places short of evaluations (issue 56):

A. **Graphs of 100K nodes under a time limit.** Real training steps at that size: a Transformer LM
   traced here at 141 layers (`benchmarks.big_graph`, 99,871 nodes) and two real graphs of other
   sources repeated side by side to 100,000 nodes (`benchmarks.big_graph.tile_graph`: ResNet-152's
   HLO, `data/graphs/real`; DenseNet-121's PyTorch training step, `data/graphs/torch`). A long run
   (the flagship, no policy, `--long` seconds, seed 100) gives the best schedule in hindsight; from
   it, per-node Beta priors (`regal.priors.Priors`) centred on its keys (`regal.decode.encode`: the
   device's affinity 0.75, the others 0.25, the priority by position; the priority's mean on
   60 levels (`experiments.headroom_paper.LEVELS`), since every distinct Beta is a 65,537-point quantile table) at concentrations
   CONCENTRATIONS; a noisy copy (each position moved by N(0, 0.05), a tenth of the devices
   flipped: a prior that is right in the large, wrong in the small); and the structural teacher's
   priors (`policy="teacher"`, no hindsight). Each arm runs the flagship (`regal.optimize`) for
   `--time-limit` seconds on seeds 0-2 against no policy on the same seeds. The flagship draws half
   its mutants and initial members from the priors and climbs from their mean's schedule when it
   is the best start. The quantile tables are computed before the clock (`prepare_tables`, as
   `regal optimize` does); the teacher's priors are computed inside it, as a policy's would be.

B. **The recompute decisions** (SPEC.md 3b, 5b): `regal.recompute_search.optimize_recompute` at
   recompute_budget 0.1 on the recompute benchmark (`data/manifest_recompute.json`). A long run
   (20,000 evaluations, seed 100) gives the schedule and the nodes it recomputes; the arms give
   stage 3's BRKGA (`joint_priors`) per-node Beta priors: on the recompute keys alone (chosen:
   mean 0.75, else 0.25) at two concentrations, or on every key (and the flagship of stage 1 the
   same priors on placement and order); and two priors without hindsight on this graph: a rule
   (cost per byte: the cheapest third of the recomputable nodes mean 0.75, the dearest 0.25) and a
   table learned from the long runs of the *other* sources (P(recomputed | cost-per-byte decile,
   matmul/conv or not); whole sources held out). Seeds 0-2 at 1,000 and 5,000 evaluations.

Cells are cached one JSON each under experiments/cache/headroom-scarce/ (resumable: a finished
cell is never run again); searches run with one Numba thread, one after another.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import sys
import time

import numpy as np

from experiments.headroom_paper import beta_priors, schedule_means
from experiments.runner import ROOT, commit, machine

NAME = "headroom-scarce"
CACHE = os.path.join(ROOT, "experiments", "cache", NAME)
RESULTS = os.path.join(ROOT, "experiments", "results", NAME)
MANIFEST = os.path.join(ROOT, "data", "manifest_recompute.json")
CONCENTRATIONS = (5.0, 50.0)  # alpha + beta of the hindsight priors
NOISE_CONCENTRATION = 20.0
SEEDS = (0, 1, 2)
LONG_SEED = 100
RECOMPUTE_BUDGET = 0.1
LONG_EVALUATIONS = 20_000
LARGE = {  # name -> (source, how it is made)
    "transformer_lm_141l_100k": ("jax-hlo transformer (traced)", ("trace", 100_000)),
    "resnet152_hlo_x6_100k": ("hlo cnn (real/, tiled)", ("tile", "data/graphs/real/resnet152_b1_train_pre.json.gz")),
    "densenet121_torch_x27_100k": ("pytorch (torch/, tiled)", ("tile", "data/graphs/torch/torch_densenet121_train.json.gz")),
}
LARGE_NODES = 100_000


# ============================================================================== cells
def _write_json(path: str, doc) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _log(msg: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f} {msg}"
    print(line, flush=True)
    with open(os.path.join(CACHE, "progress.log"), "a") as f:
        f.write(line + "\n")


def _code() -> str:
    return commit()


# ============================================================================== priors
def large_priors(arm: str, best: dict, devices: int):
    """The Priors of arm `arm` of place A from the long run's `best` (placement, order)."""
    kind, _, conc = arm.partition("-c")
    if kind == "hindsight":
        means = schedule_means(best["placement"], best["order"], devices)
    elif kind == "noisy":
        means = schedule_means(best["placement"], best["order"], devices, noise=0.05, flip=0.1,
                               rng=np.random.default_rng(7))
    else:
        raise ValueError(arm)
    uniform = np.zeros_like(means, dtype=bool)
    if devices == 1:
        uniform[:, 0] = True   # one device: the affinity decides nothing
    return beta_priors(means.reshape(-1), float(conc), uniform.reshape(-1))


# ============================================================================== A: large graphs
def large_path(name: str) -> str:
    return os.path.join(CACHE, "graphs", name + ".json.gz")


def build_graphs() -> None:
    """The large graphs of place A, into the cache (a traced one takes about 80 s and 2 GB)."""
    from benchmarks.big_graph import tile_graph, transformer_train_graph
    from data._files import save_graph
    for name, (_, (how, arg)) in LARGE.items():
        out = large_path(name)
        if os.path.exists(out):
            continue
        t0 = time.perf_counter()
        if how == "tile":
            g = tile_graph(os.path.join(ROOT, arg), LARGE_NODES)
        else:
            g = transformer_train_graph(141, name=name)   # 705 nodes a layer: 99,871 nodes
        os.makedirs(os.path.dirname(out), exist_ok=True)
        save_graph(g, out)
        _log(f"graph {name}: {g.num_nodes:,} nodes in {time.perf_counter() - t0:.0f} s")


def _large_cell(name: str, g, d: int, arm: str, seed: int, time_limit: float, best: dict | None) -> dict:
    import regal
    from regal.priors import prepare_tables
    kwargs = {"policy": None}
    if arm == "teacher":
        kwargs = {"policy": "teacher"}
    elif arm != "none":
        priors = large_priors(arm, best, d)
        prepare_tables([(a, b) for a, b, _ in priors.groups])   # constants of the arm, before the clock
        kwargs = {"policy": None, "priors": priors}
    t0 = time.perf_counter()
    sol = regal.optimize(g, d, budget=10**9, seed=seed, time_limit_s=time_limit, num_threads=1, **kwargs)
    wall = time.perf_counter() - t0
    climbs = sol.info.get("climbs", [])
    return {"place": "large", "graph": name, "source": LARGE[name][0], "nodes": g.num_nodes, "devices": d,
            "arm": arm, "seed": seed, "time_limit_s": time_limit, "peak_bytes": int(sol.peak_bytes),
            "evaluations": int(sol.evaluations), "generations": int(sol.info.get("generations", 0)),
            "seconds": round(wall, 3), "first_start": climbs[0]["start"] if climbs else "",
            "history": [[int(e), float(p), float(t)] for e, p, t in sol.info.get("history", [])],
            "load1": round(os.getloadavg()[0], 2), "code": _code()}


def run_large(args) -> None:
    import regal
    from regal.graph import load
    regal.warmup()
    arms = ["none"] + [f"hindsight-c{c:g}" for c in CONCENTRATIONS] + [f"noisy-c{NOISE_CONCENTRATION:g}", "teacher"]
    for name in LARGE:
        g = load(large_path(name))
        for d in args.devices:
            bpath = os.path.join(CACHE, "large", name, f"long_d{d}.npz")
            if not os.path.exists(bpath):
                t0 = time.perf_counter()
                sol = regal.optimize(g, d, budget=10**9, seed=LONG_SEED, policy=None, time_limit_s=args.long,
                                     num_threads=1)
                os.makedirs(os.path.dirname(bpath), exist_ok=True)
                np.savez(bpath + ".tmp.npz", placement=sol.placement, order=sol.order, peak=sol.peak_bytes,
                         evaluations=sol.evaluations, seconds=time.perf_counter() - t0)
                os.replace(bpath + ".tmp.npz", bpath)
                _log(f"long {name} d={d}: peak {sol.peak_bytes:,} evals {sol.evaluations}")
            z = np.load(bpath)
            best = {"placement": z["placement"], "order": z["order"]}
            for arm in arms:   # seeds inner: an arm's quantile tables are computed once
                for seed in args.seeds:
                    out = os.path.join(CACHE, "large", name, f"{arm}_d{d}_s{seed}_t{args.time_limit:g}.json")
                    if os.path.exists(out):
                        continue
                    cell = _large_cell(name, g, d, arm, seed, args.time_limit, best)
                    cell.update(long_peak_bytes=int(z["peak"]), long_seconds=float(z["seconds"]))
                    _write_json(out, cell)
                    _log(f"large {name} d={d} s={seed} {arm}: {cell['peak_bytes']:,} ({cell['evaluations']} evals, "
                         f"{cell['seconds']:.1f} s, start {cell['first_start']})")


def run_ceiling(args) -> None:
    """A longer run (seed LONG_SEED + 1, `--long` seconds) on the graphs and d given: does the room
    the long run left (its peak above the lower bound) close with more time?"""
    import regal
    from regal.graph import load
    for name in args.graphs or list(LARGE):
        g = load(large_path(name))
        for d in args.devices:
            out = os.path.join(CACHE, "large", name, f"ceiling_d{d}_t{args.long:g}.json")
            if os.path.exists(out):
                continue
            sol = regal.optimize(g, d, budget=10**9, seed=LONG_SEED + 1, policy=None, time_limit_s=args.long,
                                 num_threads=1)
            _write_json(out, {"graph": name, "devices": d, "time_limit_s": args.long, "peak_bytes": int(sol.peak_bytes),
                              "evaluations": int(sol.evaluations), "load1": round(os.getloadavg()[0], 2)})
            _log(f"ceiling {name} d={d} {args.long:g} s: {sol.peak_bytes:,} ({sol.evaluations} evals)")


# ============================================================================== B: recompute decisions
def _manifest() -> dict:
    with open(MANIFEST) as f:
        return json.load(f)


def recompute_graph(man: dict, name: str):
    from regal.graph import load
    return load(os.path.join(os.path.dirname(MANIFEST), man["root"], man["graphs"][name]["path"]))


_MATMUL = ("mm", "dot", "conv", "matmul", "einsum", "linear")


def node_features(g) -> tuple[np.ndarray, np.ndarray]:
    """(bucket int[n], recomputable bool[n]): each node's cost-per-byte decile among the
    recomputable nodes of its graph, + 10 for a matmul / convolution (what a GNN sees of an op)."""
    from regal.recompute import op_costs
    cost, _ = op_costs(g)
    ok = ~np.asarray(g.no_recompute, dtype=bool)
    per_byte = cost / (np.asarray(g.bytes, dtype=np.float64) + 1.0)
    bucket = np.zeros(g.num_nodes, dtype=np.int64)
    if ok.any():
        ranks = np.argsort(np.argsort(per_byte[ok], kind="stable"), kind="stable")
        bucket[ok] = np.minimum(ranks * 10 // max(int(ok.sum()), 1), 9)
    mat = np.array([any(k in (op or "").lower() for k in _MATMUL) for op in g.ops], dtype=bool)
    return bucket + 10 * mat, ok


def _joint_keys(problem, best: dict) -> np.ndarray:
    return problem.encode(best["placement"], best["order"], best["chosen"]).reshape(problem.graph.num_nodes, -1)


def recompute_priors(arm: str, g, d: int, best: dict, table: np.ndarray | None):
    """(joint_priors over n (d + 2) keys, stage-1 priors over n (d + 1) or None) of arm `arm`."""
    n = g.num_nodes
    uniform = np.ones((n, d + 2), dtype=bool)
    means = np.full((n, d + 2), 0.5)
    kind, _, conc = arm.partition("-c")
    conc = float(conc or 4.0)
    stage1 = None
    if kind in ("hind_rc", "hind_all"):
        from regal.recompute_search import RecomputeProblem
        keys = _joint_keys(RecomputeProblem(g, d, np.zeros(n), 0.0, -1), best)
        means[:, d + 1] = keys[:, d + 1]
        uniform[:, d + 1] = False
        if kind == "hind_all":
            sched = schedule_means(best["placement"], best["order"], d)
            means[:, :d + 1] = sched
            uniform[:, :d + 1] = False
            if d == 1:
                uniform[:, 0] = True
            stage1 = beta_priors(sched.reshape(-1), conc, uniform[:, :d + 1].reshape(-1))
    elif kind in ("rule", "table"):
        bucket, ok = node_features(g)
        if kind == "rule":   # the cheapest third per byte: recompute; the dearest third: keep
            decile = bucket % 10
            m = np.where(decile < 3, 0.75, np.where(decile >= 7, 0.25, 0.5))
        else:
            p = table[bucket]
            m = 0.25 + 0.5 * p / max(float(table.max()), 1e-12)
            m = np.round(m * 20) / 20
        means[:, d + 1] = np.where(ok, m, 0.5)
        uniform[:, d + 1] = ~ok
    else:
        raise ValueError(arm)
    return beta_priors(means.reshape(-1), conc, uniform.reshape(-1)), stage1


def learned_table(man: dict, hold_out: str, devices) -> np.ndarray:
    """float64[20]: P(recomputed in the long run | bucket), over the graphs of every source but `hold_out`."""
    hits, counts = np.zeros(20), np.zeros(20)
    for name, meta in man["graphs"].items():
        if meta["source"] == hold_out:
            continue
        g = recompute_graph(man, name)
        bucket, ok = node_features(g)
        for d in devices:
            path = os.path.join(CACHE, "recompute", name, f"long_d{d}.npz")
            if not os.path.exists(path):
                continue
            chosen = np.load(path)["chosen"]
            np.add.at(counts, bucket[ok], 1)
            np.add.at(hits, bucket[ok], chosen[ok].astype(float))
    return hits / np.maximum(counts, 1)


def _long_recompute(g, d: int) -> dict:
    from regal.recompute_search import optimize_recompute
    t0 = time.perf_counter()
    sol = optimize_recompute(g, d, LONG_EVALUATIONS, LONG_SEED, RECOMPUTE_BUDGET, policy=None, num_threads=1)
    seq = np.asarray(sol.order)
    _, first = np.unique(seq, return_index=True)
    order = seq[np.sort(first)]
    counts = np.bincount(seq, minlength=g.num_nodes)
    return {"placement": np.asarray(sol.placement), "order": order, "chosen": counts > 1, "peak": sol.peak_bytes,
            "seconds": time.perf_counter() - t0}


def run_recompute(args) -> None:
    import regal
    regal.warmup()
    man = _manifest()
    names = [n for n in man["graphs"] if not args.graphs or n in args.graphs]
    for name in names:   # the long runs first: the learned table reads every source's
        g = recompute_graph(man, name)
        for d in args.devices:
            path = os.path.join(CACHE, "recompute", name, f"long_d{d}.npz")
            if not os.path.exists(path):
                b = _long_recompute(g, d)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                np.savez(path + ".tmp.npz", **b)
                os.replace(path + ".tmp.npz", path)
                _log(f"long recompute {name} d={d}: peak {b['peak']:,}, {int(b['chosen'].sum())} recomputed")
    tables, args.arms = {}, args.arms or ["none", "hind_rc-c10", "hind_all-c10", "rule-c4", "table-c4"]
    for budget in args.budgets:
        for arm in args.arms:   # arm outer: an arm's quantile tables are computed once, not evicted by another's
            for name in names:
                g = recompute_graph(man, name)
                source = man["graphs"][name]["source"]
                if source not in tables:
                    tables[source] = learned_table(man, source, args.devices)
                for d in args.devices:
                    for seed in args.seeds:
                        out = os.path.join(CACHE, "recompute", name, f"{arm}_d{d}_s{seed}_b{budget}.json")
                        if not os.path.exists(out):
                            _write_json(out, _recompute_cell(g, name, man, d, arm, seed, budget, tables[source]))
            _log(f"recompute b={budget} {arm} done")


def _recompute_cell(g, name: str, man: dict, d: int, arm: str, seed: int, budget: int, table) -> dict:
    from regal.priors import prepare_tables
    from regal.recompute_search import optimize_recompute
    z = np.load(os.path.join(CACHE, "recompute", name, f"long_d{d}.npz"))
    best = {k: z[k] for k in ("placement", "order", "chosen")}
    kwargs = {"policy": None}
    if arm != "none":
        joint, stage1 = recompute_priors(arm, g, d, best, table)
        pairs = {(a, b) for a, b, _ in joint.groups}
        pairs |= {(a, b) for a, b, _ in (stage1.groups if stage1 is not None else [])}
        prepare_tables(sorted(pairs))   # the arm's constants, before the clock
        kwargs.update(joint_priors=joint, priors=stage1)
    t0 = time.perf_counter()
    sol = optimize_recompute(g, d, budget, seed, RECOMPUTE_BUDGET, num_threads=1, **kwargs)
    wall = time.perf_counter() - t0
    return {"place": "recompute", "graph": name, "source": man["graphs"][name]["source"],
            "split": man["graphs"][name]["split"], "nodes": g.num_nodes, "devices": d, "arm": arm,
            "seed": seed, "budget": budget, "peak_bytes": int(sol.peak_bytes),
            "extra_fraction": float(sol.info["recompute"]["extra_fraction"]),
            "evaluations": int(sol.evaluations), "seconds": round(wall, 4),
            "flagship_peak_bytes": int(sol.info["flagship_peak_bytes"]),
            "long_peak_bytes": int(z["peak"]), "load1": round(os.getloadavg()[0], 2), "code": _code()}


# ============================================================================== report
def _cells(place: str) -> list[dict]:
    out = []
    for p in sorted(glob.glob(os.path.join(CACHE, place, "*", "*.json"))):
        if os.path.basename(p).startswith("ceiling_"):   # the longer runs: `_ceiling_table`
            continue
        with open(p) as f:
            out.append(json.load(f))
    return out


def _gain(base: float, x: float) -> float:
    return (base - x) / base * 100.0


def _paired(cells: list[dict], key: tuple) -> dict:
    """{(group..., arm): [per-graph median % lower peak than none over seeds]} and seconds ratios."""
    by = {}
    for c in cells:
        by[tuple(c[k] for k in key) + (c["arm"], c["seed"])] = c
    gains, secs, evals = {}, {}, {}
    for k, c in by.items():
        if c["arm"] == "none":
            continue
        base = by.get(k[:-2] + ("none", k[-1]))
        if base is None:
            continue
        g = k[:-1]
        gains.setdefault(g, []).append(_gain(base["peak_bytes"], c["peak_bytes"]))
        secs.setdefault(g, []).append(c["seconds"] / max(base["seconds"], 1e-9))
        evals.setdefault(g, []).append(c["evaluations"] / max(base["evaluations"], 1))
    return gains, secs, evals


def _best_at(history: list, evaluations: int) -> float | None:
    """The best peak of an anytime curve ([evaluations, peak, seconds] at each new best) within `evaluations`."""
    peaks = [p for e, p, _ in history if e <= evaluations]
    return min(peaks) if peaks else None


def _equal_evaluations(cells: list[dict]) -> dict:
    """{(graph, d, T, arm): [% lower than none at the evaluations both reached, per seed]} (cells with a history)."""
    by = {(c["graph"], c["devices"], c["time_limit_s"], c["arm"], c["seed"]): c for c in cells if "history" in c}
    out = {}
    for (graph, d, t, arm, seed), c in by.items():
        base = by.get((graph, d, t, "none", seed))
        if arm == "none" or base is None:
            continue
        e = min(c["evaluations"], base["evaluations"])
        a, b = _best_at(c["history"], e), _best_at(base["history"], e)
        if a is not None and b is not None:
            out.setdefault((graph, d, t, arm), []).append(_gain(b, a))
    return out


def _lower_bounds(keys) -> dict:
    """{(graph, d): SPEC.md 7's lower bound}, cached beside the graphs (the bound no schedule goes below)."""
    from regal.graph import load
    path = os.path.join(CACHE, "graphs", "lower_bounds.json")
    known = json.load(open(path)) if os.path.exists(path) else {}
    for graph, d in keys:
        if f"{graph}/{d}" not in known:
            known[f"{graph}/{d}"] = int(load(large_path(graph)).lower_bound(d))
    _write_json(path, known)
    return {(k.rsplit("/", 1)[0], int(k.rsplit("/", 1)[1])): v for k, v in known.items()}


def _large_table(cells: list[dict]) -> list[str]:
    gains, secs, evals = _paired(cells, ("graph", "devices", "time_limit_s"))
    equal = _equal_evaluations(cells)
    base = {}
    for c in cells:
        if c["arm"] == "none":
            base.setdefault((c["graph"], c["devices"], c["time_limit_s"]), []).append(c)
    rows = ["| source | graph | d | T (s) | arm | seeds | median % lower peak than no policy | min | max | "
            "evaluations (arm / none, median) | at equal evaluations (median, seeds) | "
            "no policy: evaluations, % above the long run, % above the lower bound |",
            "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    bounds = _lower_bounds(sorted({(c["graph"], c["devices"]) for c in cells}))
    for (graph, d, t, arm), v in sorted(gains.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][3])):
        b = base[(graph, d, t)]
        long = b[0]["long_peak_bytes"]
        above = np.median([(c["peak_bytes"] - long) / long * 100 for c in b])
        over_lb = np.median([(c["peak_bytes"] - bounds[(graph, d)]) / c["peak_bytes"] * 100 for c in b])
        rows.append(f"| {LARGE.get(graph, ('?',))[0]} | {graph} | {d} | {t:g} | {arm} | {len(v)} | {np.median(v):+.2f} % | "
                    f"{min(v):+.2f} % | {max(v):+.2f} % | {np.median(evals[(graph, d, t, arm)]):.2f} | {_fmt_equal(equal, (graph, d, t, arm))} | "
                    f"{int(np.median([c['evaluations'] for c in b])):,}, {above:+.2f} %, {over_lb:.2f} % |")
    return rows


def _ceiling_table(cells: list[dict]) -> list[str]:
    """The longer runs (`ceiling`): their peak against the long run's and the no-policy runs' median."""
    rows = []
    for p in sorted(glob.glob(os.path.join(CACHE, "large", "*", "ceiling_*.json"))):
        c = json.load(open(p))
        base = [x for x in cells if x["graph"] == c["graph"] and x["devices"] == c["devices"] and x["arm"] == "none"]
        if not base:
            continue
        none = float(np.median([x["peak_bytes"] for x in base]))
        long = base[0]["long_peak_bytes"]
        rows.append(f"| {c['graph']} | {c['devices']} | {c['time_limit_s']:g} | {c['evaluations']:,} | "
                    f"{_gain(none, c['peak_bytes']):+.2f} % | {_gain(long, c['peak_bytes']):+.2f} % | {c['load1']:.1f} |")
    if not rows:
        return []
    return ["", "A longer run (seed 101) where the lower bound leaves room the long run did not take:", "",
            "| graph | d | seconds | evaluations | % lower than no policy at 15 s (median) | % lower than the long run | "
            "load |", "|---|---:|---:|---:|---:|---:|---:|"] + rows


def _fmt_equal(equal: dict, key: tuple) -> str:
    v = equal.get(key)
    return "-" if not v else f"{np.median(v):+.2f} % ({len(v)})"


def _recompute_tables(cells: list[dict]) -> list[str]:
    gains, secs, _ = _paired(cells, ("graph", "devices", "budget"))
    src = {c["graph"]: c["source"] for c in cells}
    per = {}
    for (graph, d, budget, arm), v in gains.items():
        per.setdefault((src[graph], d, budget, arm), []).append((float(np.median(v)), float(np.median(secs[(graph, d, budget, arm)]))))
    rows = ["| source | d | budget | arm | graphs | mean over graphs of the median % lower peak than no policy | "
            "worst graph | best graph | wall time (arm / none, median) |",
            "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for k in sorted(per, key=lambda k: (k[2], k[1], k[0], k[3])):
        v = per[k]
        g = [x for x, _ in v]
        rows.append(f"| {k[0]} | {k[1]} | {k[2]:,} | {k[3]} | {len(v)} | {np.mean(g):+.2f} % | {min(g):+.2f} % | "
                    f"{max(g):+.2f} % | {np.median([s for _, s in v]):.2f} |")
    allrows = ["", "All sources together:", "",
               "| d | budget | arm | graphs | mean % lower | worst graph | best graph |", "|---:|---:|---|---:|---:|---:|---:|"]
    tot = {}
    for (s, d, budget, arm), v in per.items():
        tot.setdefault((d, budget, arm), []).extend(x for x, _ in v)
    for k in sorted(tot, key=lambda k: (k[1], k[0], k[2])):
        v = tot[k]
        allrows.append(f"| {k[0]} | {k[1]:,} | {k[2]} | {len(v)} | {np.mean(v):+.2f} % | {min(v):+.2f} % | {max(v):+.2f} % |")
    return rows + allrows


def _run_paper(args) -> None:
    from experiments.headroom_paper import ARMS, run_paper
    args.arms = args.arms or list(ARMS)
    run_paper(args, CACHE, _write_json, _log, _code)


def report(args) -> None:
    from experiments.headroom_paper import paper_tables
    large, rec, paper = _cells("large"), _cells("recompute"), _cells("paper")
    os.makedirs(RESULTS, exist_ok=True)
    keys = sorted({k for c in large + rec + paper for k in c})
    with open(os.path.join(RESULTS, "cells.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for c in large + rec + paper:
            w.writerow(c)
    loads = [c["load1"] for c in large + rec + paper]
    doc = ["# headroom-scarce: the room a per-node prior has where evaluations are scarce (issue 56, step 1)", "",
           "Commands: `.venv/bin/python -m experiments.headroom_scarce graphs`, then `... large --time-limit 15 "
           "--long 120` (and `--devices 4`), `... ceiling --graphs densenet121_torch_x27_100k --devices 1 --long 420`, "
           "`... recompute` (and `--devices 4 --budgets 1000`, `--budgets 5000`), `... recompute --arms hind_rc-c3 "
           "hind_rc-c50`, `... paper --devices 2 4` (and `--arms hpflip10-c20 hpflip30-c20`), `... report` (resumable; cells cached under experiments/cache/headroom-scarce/).  ",
           f"Machine: {machine()}, shared with other jobs: load average (1 min) at the cells' ends median "
           f"{np.median(loads) if loads else 0:.1f}, range {min(loads, default=0):.1f}-{max(loads, default=0):.1f}. "
           f"Code: the cells ran at {len({c['code'] for c in large + rec + paper})} code states (HEAD moved under the run as "
           "other sessions committed, +dirty: their uncommitted work; the hook this issue added to regal is commit "
           f"d31e652; each cell's state is in cells.csv). Report written {time.strftime('%Y-%m-%d %H:%M')}.", ""]
    doc += open(os.path.join(RESULTS, "notes.md")).read().splitlines() if os.path.exists(
        os.path.join(RESULTS, "notes.md")) else []
    doc += ["", "## A. Graphs of 100K nodes under a time limit", "",
            "% lower peak = (no policy - arm) / no policy, same seed; median over seeds 0-2 (min, max over the "
            "seeds). The last column: the no-policy runs' median % above the long run whose schedule the hindsight "
            "priors are made from (what these priors could at most gain), and above SPEC.md 7's lower bound, "
            "(peak - LB) / peak (what any prior could at most gain). At equal evaluations: the best peak of "
            "each run's anytime curve within the evaluations both runs reached (cells run after the history was "
            "recorded; '-': none, or no curve point that early).", ""]
    doc += _large_table(large)
    doc += _ceiling_table(large)
    doc += ["", "## B. The recompute decisions (recompute_budget 0.1)", "",
            "Per graph the median over seeds 0-2 of % lower peak than the recompute search without priors (same "
            "seed and budget); per source the mean over its graphs. Equal evaluations; wall time as the ratio of "
            "the arm's seconds to no policy's, same seed (the hindsight and table priors cost no inference).", ""]
    doc += _recompute_tables(rec) + paper_tables(paper)
    with open(os.path.join(RESULTS, "README.md"), "w") as f:
        f.write("\n".join(doc) + "\n")
    print("\n".join(doc))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["graphs", "large", "ceiling", "recompute", "paper", "report"])
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--time-limit", type=float, default=15.0)
    ap.add_argument("--long", type=float, default=120.0, help="seconds of the long run (A)")
    ap.add_argument("--budgets", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--arms", nargs="+", default=None, help="default: every arm of the stage")
    ap.add_argument("--graphs-per-source", type=int, default=4, help="paper: test graphs per source")
    ap.add_argument("--graphs", nargs="*", default=None)
    args = ap.parse_args(argv)
    os.makedirs(CACHE, exist_ok=True)
    {"graphs": lambda a: build_graphs(), "large": run_large, "ceiling": run_ceiling, "recompute": run_recompute,
     "paper": _run_paper, "report": report}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
