"""Issue 56: the room a per-node prior has in REGAL's paper setting, in hindsight (stage `paper` of
`experiments.headroom_scarce`), and the hindsight priors both stages make.

    python -m experiments.headroom_scarce paper [--devices 2 4 --graphs-per-source 4 --arms ...]

REGAL's paper setting (`regal solve regal-paper`): plain BRKGA (regal.search's defaults), every mutant
and the first population drawn from per-node Beta priors, no seeding, no polish, 5,000 evaluations
(`regal.optimize(..., seeding=False, polish=False)`, as experiments/paper_default.py runs it). Graphs:
the test split of each of the six sources of `experiments.transfer.corpus` (<= 3,000 nodes, spread
over families, `--graphs-per-source` of them), the sources the shipped `default` policy never saw the
test graphs of. For each (graph, d), a long run (the flagship without a policy, LONG_EVALUATIONS
evaluations, seed 100) gives the best schedule in hindsight; the arms, on seeds 0-2:
  none          plain BRKGA (uniform mutants): the reference;
  default       the shipped `default` policy's priors (`regal solve regal-paper`; inference in the clock);
  teacher       the structural teacher's priors (`regal.policy.teacher`: no learning, no hindsight);
  hind-cC       Beta priors centred on the long run's keys (`regal.decode.encode`: the device's affinity
                0.75, the others 0.25; the priority by position, on LEVELS levels), concentration C;
  hplace-cC     the same on the placement (affinity) keys only, the priorities uniform;
  hsched-cC     the same on the priority (scheduling) keys only, the affinities uniform;
  hact          each key's Beta the one of REGAL's 7 actions (`regal.policy.BETA_ACTIONS`) whose mean is
                nearest the long run's key (the most concentrated of equal means): the best a policy of
                REGAL's action set could choose in hindsight; hact_sched: on the priorities only (the
                shipped `default` policy's head), the affinities uniform;
  hpflipP-cC    hplace-cC with P % of the nodes' devices redrawn uniformly (a placement prior that is
                partly wrong: how right a learned one must be). Not in the default arms (--arms).
Hindsight's quantile tables are computed before the clock (`prepare_tables`), as `regal optimize`
does for a policy. Cells are cached one JSON each under experiments/cache/headroom-scarce/paper/.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

LEVELS = 60    # distinct means of a priority key (regal.priors caches 64 quantile tables)
MAX_NODES = 3000
LONG_EVALUATIONS = 20_000
LONG_SEED = 100
BUDGET = 5000
ARMS = ("none", "default", "teacher", "hind-c5", "hind-c20", "hind-c100", "hplace-c20", "hsched-c20", "hact",
        "hact_sched")


# ============================================================================== priors (also headroom_scarce's)
def level_keys(keys: np.ndarray, levels: int = LEVELS) -> np.ndarray:
    """Keys in [0, 1) moved to the centre of their level of `levels` (few distinct Betas)."""
    return (np.minimum(np.floor(keys * levels), levels - 1) + 0.5) / levels


def beta_priors(means: np.ndarray, concentration: float, uniform: np.ndarray | None = None):
    """Priors with Beta(m c, (1 - m) c) per gene (`uniform`: genes left at Beta(1, 1))."""
    from regal.priors import Priors
    a, b = means * concentration, (1.0 - means) * concentration
    if uniform is not None:
        a, b = np.where(uniform, 1.0, a), np.where(uniform, 1.0, b)
    return Priors(a, b)


def schedule_means(placement, order, devices: int, *, noise: float = 0.0, flip: float = 0.0, rng=None) -> np.ndarray:
    """float64[n, d + 1]: the keys of a schedule (`regal.decode.encode`), the priorities on levels;
    with noise, each priority moved by N(0, noise) and a share `flip` of the placements redrawn."""
    from regal.decode import encode
    n = len(placement)
    placement = np.asarray(placement).copy()
    if flip and devices > 1:
        moved = rng.random(n) < flip
        placement[moved] = rng.integers(0, devices, size=int(moved.sum()))
    keys = encode(placement, order, devices).reshape(n, devices + 1)
    prio = keys[:, devices]
    if noise:
        prio = np.clip(prio + rng.normal(0.0, noise, n), 0.0, 1.0 - 1e-9)
    keys[:, devices] = level_keys(prio)
    return keys


def paper_graphs(per_source: int) -> list[dict]:
    """The test graphs of each source (`experiments.transfer.corpus`), <= MAX_NODES nodes, spread over families."""
    from experiments.transfer import corpus, spread
    out = []
    for source, graphs in sorted(corpus().items()):
        test = [g for g in graphs if g["split"] == "test" and g["nodes"] <= MAX_NODES]
        out += [g | {"source": source} for g in spread(test, per_source)]
    return out


def hindsight_priors(arm: str, best: dict, devices: int):
    """The Priors of a hindsight arm (hind / hplace / hsched at concentration C) from the long run's `best`."""
    kind, _, conc = arm.partition("-c")
    flip = int(kind[len("hpflip"):]) / 100.0 if kind.startswith("hpflip") else 0.0
    means = schedule_means(best["placement"], best["order"], devices, flip=flip, rng=np.random.default_rng(7))
    kind = "hplace" if flip else kind
    if kind in ("hact", "hact_sched"):
        return action_priors(means, devices, scheduling_only=kind == "hact_sched")
    uniform = np.zeros_like(means, dtype=bool)
    if kind == "hplace":
        uniform[:, devices] = True
    elif kind == "hsched":
        uniform[:, :devices] = True
    elif kind != "hind":
        raise ValueError(f"unknown hindsight arm {arm!r}")
    if devices == 1:
        uniform[:, 0] = True   # one device: the affinity decides nothing
    return beta_priors(means.reshape(-1), float(conc), uniform.reshape(-1))


def action_priors(means: np.ndarray, devices: int, scheduling_only: bool):
    """Priors of the REGAL actions (`BETA_ACTIONS`) nearest `means` float64[n, d + 1] per gene (by the Beta's
    mean; of equal means the most concentrated); the affinities uniform at d = 1 or with `scheduling_only`."""
    from regal.policy import BETA_ACTIONS
    from regal.priors import Priors
    table = np.asarray(BETA_ACTIONS)
    mean, conc = table[:, 0] / table.sum(1), table.sum(1)
    dist = np.abs(means[..., None] - mean)
    pick = np.lexsort((np.broadcast_to(-conc, dist.shape), dist), axis=-1)[..., 0]
    ab = table[pick]
    if scheduling_only or devices == 1:
        ab[:, :devices] = 1.0
    return Priors(ab[..., 0].reshape(-1), ab[..., 1].reshape(-1))


def _dir(cache: str, g: dict) -> str:
    return os.path.join(cache, "paper", g["name"].replace("/", "__"))


def _long(cache: str, g: dict, graph, d: int) -> dict:
    """The long run of (graph, d), cached as an npz: placement, order, peak, evaluations, seconds."""
    import regal
    path = os.path.join(_dir(cache, g), f"long_d{d}.npz")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        sol = regal.optimize(graph, d, budget=LONG_EVALUATIONS, seed=LONG_SEED, policy=None, num_threads=1)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.savez(path + ".tmp.npz", placement=sol.placement, order=sol.order, peak=sol.peak_bytes,
                 evaluations=sol.evaluations, seconds=time.perf_counter() - t0)
        os.replace(path + ".tmp.npz", path)
    z = np.load(path)
    return {k: z[k] for k in ("placement", "order", "peak", "seconds")}


def paper_cell(g: dict, graph, d: int, arm: str, seed: int, best: dict, code: str) -> dict:
    """One run of the paper setting: arm `arm` on (graph, d, seed) at BUDGET evaluations."""
    import regal
    from regal.priors import prepare_tables
    kwargs = {"policy": "none"}
    if arm in ("default", "teacher"):
        kwargs = {"policy": arm}
    elif arm != "none":
        priors = hindsight_priors(arm, best, d)
        prepare_tables([(a, b) for a, b, _ in priors.groups])   # the arm's constants, before the clock
        kwargs = {"policy": "none", "priors": priors}
    t0 = time.perf_counter()
    sol = regal.optimize(graph, d, budget=BUDGET, seed=seed, seeding=False, polish=False, num_threads=1, **kwargs)
    wall = time.perf_counter() - t0
    return {"place": "paper", "graph": g["name"], "source": g["source"], "nodes": graph.num_nodes, "devices": d,
            "arm": arm, "seed": seed, "budget": BUDGET, "peak_bytes": int(sol.peak_bytes),
            "evaluations": int(sol.evaluations), "seconds": round(wall, 4), "long_peak_bytes": int(best["peak"]),
            "load1": round(os.getloadavg()[0], 2), "code": code}


def run_paper(args, cache: str, write_json, log, code) -> None:
    """Stage `paper`: the long runs, then every arm (arm outer: its quantile tables stay cached)."""
    import regal
    regal.warmup(seeding=False, polish=False)
    graphs = paper_graphs(args.graphs_per_source)
    loaded = {}
    for g in graphs:
        loaded[g["name"]] = graph = regal.load(g["path"])
        for d in args.devices:
            if not os.path.exists(os.path.join(_dir(cache, g), f"long_d{d}.npz")):
                b = _long(cache, g, graph, d)
                log(f"paper long {g['name']} d={d}: peak {int(b['peak']):,} in {float(b['seconds']):.1f} s")
    for arm in args.arms:
        for g in graphs:
            for d in args.devices:
                best = _long(cache, g, loaded[g["name"]], d)
                for seed in args.seeds:
                    out = os.path.join(_dir(cache, g), f"{arm}_d{d}_s{seed}.json")
                    if not os.path.exists(out):
                        write_json(out, paper_cell(g, loaded[g["name"]], d, arm, seed, best, code()))
        log(f"paper {arm} done")


# ============================================================================== report
def _per_graph(cells: list[dict], ref: str) -> dict:
    """{(source, d, arm): {graph: mean over seeds of % lower peak than arm `ref`, same seed}}."""
    by = {(c["graph"], c["devices"], c["arm"], c["seed"]): c for c in cells}
    out: dict = {}
    for (graph, d, arm, seed), c in by.items():
        base = by.get((graph, d, ref, seed))
        if arm == ref or base is None:
            continue
        gain = (base["peak_bytes"] - c["peak_bytes"]) / base["peak_bytes"] * 100.0
        out.setdefault((c["source"], d, arm), {}).setdefault(graph, []).append(gain)
    return {k: {g: float(np.mean(v)) for g, v in per.items()} for k, per in out.items()}


def _long_gain(cells: list[dict]) -> dict:
    """{(source, d): {graph: % lower peak of the long run than plain BRKGA (mean over seeds)}}."""
    out: dict = {}
    for c in cells:
        if c["arm"] == "none":
            out.setdefault((c["source"], c["devices"]), {}).setdefault(c["graph"], []).append(
                (c["peak_bytes"] - c["long_peak_bytes"]) / c["peak_bytes"] * 100.0)
    return {k: {g: float(np.mean(v)) for g, v in per.items()} for k, per in out.items()}


def _fmt(per: dict | None) -> str:
    if not per:
        return "-"
    v = list(per.values())
    return f"{np.mean(v):+.2f} / {min(v):+.2f}"


def paper_tables(cells: list[dict]) -> list[str]:
    """Per d: each arm's mean over a source's graphs / worst graph of % lower peak than plain BRKGA
    (then than the `default` policy), every source, all sources together; seconds as arm / none."""
    if not cells:
        return []
    sources = sorted({c["source"] for c in cells})
    arms = [a for a in ARMS if any(c["arm"] == a for c in cells)]
    arms += sorted({c["arm"] for c in cells} - set(arms))
    secs = {}
    by = {(c["graph"], c["devices"], c["arm"], c["seed"]): c for c in cells}
    for (graph, d, arm, seed), c in by.items():
        base = by.get((graph, d, "none", seed))
        if base is not None and arm != "none":
            secs.setdefault((d, arm), []).append(c["seconds"] / max(base["seconds"], 1e-9))
    rows = ["", "## C. REGAL's paper setting (`regal solve regal-paper`: priors in plain BRKGA, 5,000 evaluations)", "",
            "Per graph the mean over seeds 0-2 of % lower peak than the reference on the same seed (positive = "
            "better); per source the mean over its graphs / the worst graph. Equal evaluations (5,000); wall time as "
            "the median ratio of the arm's seconds to plain BRKGA's, same seed (the hindsight priors' quantile "
            "tables before the clock; the policy's inference inside it). The first row: the long run whose keys the "
            "hindsight priors are centred on (what they could at most give back)."]
    for ref, label in (("none", "plain BRKGA"), ("default", "the shipped `default` policy")):
        per = _per_graph(cells, ref)
        longs = _long_gain(cells)
        for d in sorted({c["devices"] for c in cells}):
            rows += ["", f"d = {d}, % lower peak than {label} (mean over the source's graphs of the mean over "
                     "seeds / worst graph):", "",
                     "| arm | " + " | ".join(f"{s} ({len({c['graph'] for c in cells if c['source'] == s})})"
                                         for s in sources) + " | all graphs | worst source | wall time (arm / none) |",
                     "|---|" + "---:|" * (len(sources) + 3)]
            if ref == "none":
                allg = {g: v for s in sources for g, v in longs.get((s, d), {}).items()}
                rows.append("| the long run itself (flagship, 20,000 evaluations) | " + " | ".join(
                    _fmt(longs.get((s, d))) for s in sources) + f" | {_fmt(allg)} | "
                    f"{min(np.mean(list(longs[(s, d)].values())) for s in sources if (s, d) in longs):+.2f} | - |")
            for arm in arms:
                if arm == ref or (ref == "default" and arm == "none"):
                    continue
                cellw = [per.get((s, d, arm)) for s in sources]
                allg = {g: v for p in cellw if p for g, v in p.items()}
                worst = min((np.mean(list(p.values())) for p in cellw if p), default=float("nan"))
                s_ratio = np.median(secs.get((d, arm), [np.nan]))
                rows.append(f"| {arm} | " + " | ".join(_fmt(p) for p in cellw) + f" | {_fmt(allg)} | {worst:+.2f} | "
                            f"{s_ratio:.2f} |")
    return rows


def summary(cells: list[dict]) -> dict:
    """{(d, arm): (mean over all graphs, worst source mean, worst graph)} against plain BRKGA (for notes and tests)."""
    per = _per_graph(cells, "none")
    out = {}
    for (s, d, arm), p in per.items():
        out.setdefault((d, arm), []).append(p)
    return {k: (float(np.mean([v for p in ps for v in p.values()])),
                float(min(np.mean(list(p.values())) for p in ps)),
                float(min(v for p in ps for v in p.values()))) for k, ps in out.items()}


def dump(cells: list[dict], path: str) -> None:
    with open(path, "w") as f:
        json.dump({f"{d}/{arm}": v for (d, arm), v in sorted(summary(cells).items())}, f, indent=1)
