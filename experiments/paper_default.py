"""A `default` policy for REGAL's paper setting that does not lose to plain BRKGA on unseen sources (issue 47).

    python -m experiments.paper_default --workers 0 --tag d124 --train-devices 1 2 4 --gates 0 2 \
        --tempers 0.25 0.5 --importers --report README          # experiments/results/paper-default/README.md
    python -m experiments.paper_default --workers 0 --gates 0 1 2 2.4 2.6 2.8 3 4 --report gates-d12
    python -m experiments.paper_default --workers 0 --final --tag d124 --train-devices 1 2 4 --gates 0 2 \
        --ship-gate 0                                           # the shipped regal/policy/default.npz

Target (issue 47): in REGAL's paper setting (priors in plain BRKGA, every mutant from the priors,
5,000 evaluations), the shipped `default` policy no worse than plain BRKGA by more than 0.5 % mean
on any left-out source, d = 2 and 4, seeds 0-2.

The recipes measured: a GNN of feature set v2 (source-invariant) with the scheduling head only
(placement at plain BRKGA's choice), trained by --imitate steps of imitation of the structural
teacher's scheduling half alone at d in --train-devices (no REINFORCE:
experiments/results/transfer/README.md, it never improved on imitation on a left-out source);
then tempered toward plain BRKGA one of two ways:
  - a per-node confidence gate (--gates): a node keeps the policy's Beta only when its logit beats
    plain BRKGA's action (Beta(1, 1)) by more than the gate, else it stays uniform. The gate lives
    in the policy file itself (added to the bias of action 0 of the scheduling head,
    `head_scheduling/b[0]`), so a gated file needs no code; a large gate is plain BRKGA bit for bit;
  - Betas pulled toward 1 (--tempers t: alpha' = 1 + t (alpha - 1), the same for beta; t = 0 is
    uniform), applied to the priors here (a policy file cannot carry it).

Leave-one-source-out, with the folds of `experiments.transfer` (same rotation and siblings): for
each left-out source S,
  1. the policy imitates on the train split of every source but S (and its siblings) and the
     fold's selection source V (<= --train-max-nodes nodes);
  2. a variant (gate or tempering, or "off": plain BRKGA) is chosen on valid-split graphs it
     never trained on, by two rules fixed before any test was run:
       "pool": the valid splits of every source but S and its siblings (V included; the others'
               families are held out of their training splits): the variant of the highest mean
               among those whose every (source, d) mean is >= --floor; "off" if none is;
       "sel":  the same on V's valid split alone (the transfer experiment's protocol);
  3. on S's test split (--test-graphs graphs spread over its families, <= --test-max-nodes
     nodes), d in --devices, seeds --seeds, 5,000 evaluations: plain BRKGA, every variant, the
     teacher's scheduling half (no network, no training) and the old shipped `default` (v1, both
     heads, experiments/policies/default-v1.npz; trained on every source, so a reference only).
--importers also tests the torch fold's policy on the importers' 12 graphs (ONNX, torch.export).

Each run is cached as one file under experiments/cache/paper_default/runs/ (the path of
`experiments.transfer.run_file`), each fold's policy as a file under experiments/cache/paper_default/TAG/,
so an interrupted run resumes. Writes experiments/results/paper-default/REPORT.md (default README.md),
runs[-TAG].csv and choices[-TAG].json. `--final` trains the recipe on the train split of all six
sources, reports the variants on all six valid splits and writes the policy of rule "pool"'s
choice, or of --ship-gate, to --ship (default: experiments/cache/paper_default/TAG/all/chosen.npz)
with a provenance JSON beside it. The rules chose "off" everywhere (README.md): the shipped
recipe (gate 0, d = 1, 2, 4) was chosen by reading the test table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

import numpy as np

from experiments.transfer import ROOT, _siblings, corpus, fold_graphs, spread

CACHE = os.path.join(ROOT, "experiments", "cache", "paper_default")
RESULTS = os.path.join(ROOT, "experiments", "results", "paper-default")
OLD_DEFAULT = os.path.join(ROOT, "experiments", "policies", "default-v1.npz")
OFF = "off"


def _gate_name(g) -> str:
    return OFF if g == OFF else f"gate{float(g):g}"


# ----------------------------------------------------------------------------------- policies
def imitation_policy(out: str, train_paths: list[str], args, log) -> str:
    """The recipe's network before its gate: v2 features, scheduling head only, --imitate steps of
    imitation of the teacher's scheduling half on `train_paths`; cached as out/imitation.npz."""
    path = os.path.join(out, "imitation.npz")
    if os.path.exists(path):
        return path
    from regal.policy import Policy, init_policy
    from regal.policy.policy_config import PolicyConfig
    from regal.training.config import TrainConfig
    from regal.training.learner import imitate
    cfg = PolicyConfig(features="v2", placement=False, scheduling=True, elite=False)
    pol = init_policy(cfg, seed=0)
    t = time.time()
    log(f"imitation: {args.imitate} steps on {len(train_paths)} graphs, d in {args.train_devices}")
    tc = TrainConfig()  # the imitation settings of `regal train` (lr, label smoothing)
    params = imitate(pol, train_paths, tuple(args.train_devices), args.imitate, tc.imitation_lr,
                     tc.imitation_smoothing, 0, log)
    params = {m: {k: np.asarray(v) for k, v in d.items()} for m, d in params.items()}
    os.makedirs(out, exist_ok=True)
    Policy(cfg, params, {"recipe": "imitation of the teacher's scheduling half, v2 features, scheduling head",
                         "imitation_steps": args.imitate, "train_devices": list(args.train_devices),
                         "train_graphs": [os.path.basename(p) for p in train_paths],
                         "seconds": round(time.time() - t, 1)}).save(path)
    return path


def gated_policy(base: str, gate) -> str:
    """`base` with its scheduling head's action-0 bias raised by `gate` (a per-node confidence
    gate: a node leaves Beta(1, 1) only where another action's logit leads by more); cached."""
    path = base[:-len(".npz")] + f"-{_gate_name(gate)}.npz"
    if float(gate) == 0.0:
        return base
    if not os.path.exists(path):
        from regal.policy import Policy, load_policy
        pol = load_policy(base)
        params = {m: {k: np.array(v) for k, v in d.items()} for m, d in pol.params.items()}
        params["head_scheduling"]["b"][0] += np.float32(gate)
        Policy(pol.config, params, pol.meta | {"gate": float(gate)}).save(path)
    return path


def variant_policies(base: str, args) -> dict[str, str]:
    """Variant name -> policy of every gate (--gates) and every tempering (--tempers) of `base`."""
    out = {_gate_name(g): gated_policy(base, g) for g in args.gates}
    out.update({f"temper{t:g}": f"{base}@t{t:g}" for t in args.tempers})
    return out


def kept_share(policy_path: str, graphs: list[dict], devices: list[int]) -> float:
    """Mean share of nodes whose scheduling gene is not Beta(1, 1) under the policy."""
    from experiments.transfer import _graph
    from regal.policy import load_policy
    pol = load_policy(policy_path)
    shares = [float(np.mean(pol.actions(_graph(g["path"]), d).scheduling != 0)) for g in graphs for d in devices]
    return float(np.mean(shares)) if shares else float("nan")


# --------------------------------------------------------------------------------- evaluation
def cells(graphs: list[dict], policies: dict[str, str], devices, seeds) -> list[dict]:
    """Paper-setting runs of every graph x d x seed x variant (variant name -> policy)."""
    return [{"variant": v, "setting": "paper", "policy": p, "name": g["name"], "source": g["source"],
             "path": g["path"], "nodes": g["nodes"], "devices": d, "seed": s, "budget": 5000}
            for g in graphs for d in devices for s in seeds for v, p in policies.items()]


def tempered(priors, t: float):
    """`priors` with every Beta pulled toward Beta(1, 1): alpha' = 1 + t (alpha - 1), the same for
    beta (t = 1: as they are; t = 0: uniform, plain BRKGA's draw)."""
    from regal.priors import Priors
    return Priors(1.0 + t * (priors.alpha - 1.0), 1.0 + t * (priors.beta - 1.0), priors.elite_inheritance)


def run_one(cell: dict) -> dict:
    """`experiments.transfer.run_one`, and a policy "FILE.npz@tT": FILE's priors tempered by T."""
    from experiments import transfer
    if "@t" not in cell["policy"]:
        return transfer.run_one(cell)
    import regal
    path, _, t = cell["policy"].rpartition("@t")
    g = transfer._graph(cell["path"])
    priors = tempered(transfer._policy(path).priors(g, cell["devices"]), float(t))
    start = time.perf_counter()
    sol = regal.optimize(g, cell["devices"], budget=cell["budget"], seed=cell["seed"], policy="none", priors=priors,
                         seeding=False, polish=False, num_threads=1)
    return cell | {"peak": int(sol.peak_bytes), "seconds": round(time.perf_counter() - start, 4),
                   "bound": int(g.lower_bound(cell["devices"]))}


def runs(tasks: list[dict], client, log) -> list[dict]:
    """The runs of `tasks`, each cached as a file (`experiments.transfer.run_file`); the task's
    identity (what is hashed) leaves the variant name out, so plain BRKGA's runs of a graph are
    shared by every fold."""
    from experiments.runner import json_job, run_files
    from experiments.transfer import run_file
    bare = [{k: t[k] for k in ("setting", "policy", "path", "devices", "seed", "budget")} for t in tasks]
    cache = os.path.join(CACHE, "runs")
    files = [run_file(cache, b) for b in bare]
    jobs = sorted(zip(files, bare), key=lambda fb: (fb[1]["path"], fb[1]["devices"], fb[1]["policy"]))
    counts = run_files([(f, json_job, (run_one, f, b)) for f, b in jobs], client, progress=False)
    log(f"{counts['cached']} of {len(tasks)} runs cached, {counts['computed']} computed")
    out = []
    for t, f in zip(tasks, files):
        with open(f) as fh:
            r = json.load(fh)
        out.append(t | {"peak": r["peak"], "seconds": r["seconds"]})
    return out


def improvement(rows: list[dict], variant: str, where=lambda r: True) -> tuple[float, int, int, int]:
    """Mean % lower peak of `variant` than plain BRKGA on the same (graph, d, seed) over rows
    matching `where`; graphs better / worse (mean over their d and seeds) and graphs in all."""
    ref = {(r["path"], r["devices"], r["seed"]): r["peak"] for r in rows if r["variant"] == "brkga" and where(r)}
    if variant == OFF:
        variant = "brkga"
    imp, per = [], {}
    for r in rows:
        k = (r["path"], r["devices"], r["seed"])
        if r["variant"] == variant and where(r) and k in ref:
            x = (ref[k] - r["peak"]) / ref[k] * 100
            imp.append(x)
            per.setdefault(r["path"], []).append(x)
    means = [np.mean(v) for v in per.values()]
    return (float(np.mean(imp)) if imp else float("nan"), sum(m > 1e-9 for m in means),
            sum(m < -1e-9 for m in means), len(means))


def standard_error(rows: list[dict], variant: str, where=lambda r: True) -> float:
    """The standard error of `improvement`'s mean (over runs: graph x d x seed)."""
    ref = {(r["path"], r["devices"], r["seed"]): r["peak"] for r in rows if r["variant"] == "brkga" and where(r)}
    x = [(ref[k] - r["peak"]) / ref[k] * 100 for r in rows if r["variant"] == variant and where(r)
         for k in [(r["path"], r["devices"], r["seed"])] if k in ref]
    return float(np.std(x, ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def choose_gate(rows: list[dict], names, sources: list[str], devices, floor: float) -> tuple[str, dict]:
    """The gate (variant name) of the highest mean over `sources` among those whose every
    (source, d) mean is >= floor; OFF when none is. Also each gate's (mean, worst)."""
    table = {}
    for v in names:
        cellwise = [improvement(rows, v, lambda r, s=s, d=d: r["source"] == s and r["devices"] == d)[0]
                    for s in sources for d in devices]
        table[v] = (float(np.mean(cellwise)), float(min(cellwise)))
    ok = [v for v in table if table[v][1] >= floor]
    return (max(ok, key=lambda v: table[v][0]) if ok else OFF), table


def selection_graphs(sources: dict, names: list[str], k: int, max_nodes: int) -> list[dict]:
    return [g | {"source": s} for s in names for g in spread(
        [g for g in sources[s] if g["split"] == "valid" and g["nodes"] <= max_nodes], k)]


# ------------------------------------------------------------------------------------- report
def report(folds: dict, test_rows: list[dict], choices: dict, args, command: str) -> str:
    from experiments.runner import commit, machine
    gates = [_gate_name(g) for g in args.gates]
    tempers = [f"temper{t:g}" for t in args.tempers]
    lines = ["# REGAL's paper setting: a `default` policy no worse than plain BRKGA on unseen sources (issue 47)", "",
             f"Command: `{command}`  ", f"Commit: {commit()}  ", f"Machine: {machine()}  ",
             f"Paper setting (priors in plain BRKGA, every mutant from the priors, no seeding or polish), 5,000 "
             f"evaluations; seeds {args.seeds}; d in {args.devices}; test graphs per left-out source <= "
             f"{args.test_graphs} (<= {args.test_max_nodes} nodes, spread over families). Recipe: feature set v2, "
             f"scheduling head only, {args.imitate} steps of imitation of the teacher's scheduling half "
             f"(d in {args.train_devices}), then the confidence gate (a node keeps a non-uniform Beta only where "
             f"its logit leads plain BRKGA's action by more than the gate). Gate chosen per fold from "
             f"{gates + tempers} and off on valid graphs the fold's policy never trained on ({args.select_graphs} per "
             f"source, seeds {args.select_seeds}, floor {args.floor:+.2f} % per source and d): rule `pool` = every "
             f"source but the left-out one, rule `sel` = the fold's selection source only.", "",
             "Mean % lower peak than plain BRKGA on the same seed (positive = better), "
             "± its standard error over the runs (graph x seed), graphs better/worse of all. Target: >= -0.50 in "
             "every cell. `importers`: the 12 graphs of data/manifest_importers.json (ONNX and torch.export, a tracer "
             "no policy saw), tested with the torch fold's policy (trained without torch and layers).", ""]
    variants = [("variant chosen by rule `pool`", "@pool"), ("variant chosen by rule `sel`", "@sel")]
    variants += [(f"gate {g[len('gate'):]}" if g != "gate0" else "gate 0 (imitation policy, no gate)", g) for g in gates]
    variants += [(f"priors tempered, t = {v[len('temper'):]} (Beta(1 + t (a - 1), 1 + t (b - 1)))", v) for v in tempers]
    variants += [("teacher's scheduling half (no network)", "teacher-schedule"),
                 ("old default (v1, both heads; saw every source: reference only)", "default-v1")]
    for d in args.devices:
        lines += [f"## d = {d}", "", "| variant | " + " | ".join(
            f"{h} (sel. {folds[h]['select']})" for h in folds) + " | worst |", "|---|" + "---:|" * (len(folds) + 1)]
        for label, v in variants:
            row, worst = [], np.inf
            for h in folds:
                name = choices[h][v[1:]] if v.startswith("@") else v
                m, b, w, n = improvement(test_rows, name, lambda r, h=h, d=d: r["held"] == h and r["devices"] == d)
                if not n and name == OFF:  # plain BRKGA itself
                    m, b, w, n = improvement(test_rows, "brkga", lambda r, h=h, d=d: r["held"] == h and r["devices"] == d)
                worst = min(worst, m) if n else worst
                tag = f" [{name}]" if v.startswith("@") else ""
                se = standard_error(test_rows, "brkga" if name == OFF else name,
                                    lambda r, h=h, d=d: r["held"] == h and r["devices"] == d)
                row.append("-" if not n else f"{m:+.2f} ±{se:.2f} ({b}/{w} of {n}){tag}")
            lines.append(f"| {label} | " + " | ".join(row) + f" | {worst:+.2f} |")
        lines.append("")
    lines += ["## Gate selection (valid graphs, mean % / worst (source, d) mean % vs plain BRKGA)", "",
              "| left out | rule | " + " | ".join(gates + tempers) + " | chosen |",
              "|---|---|" + "---:|" * (len(gates) + len(tempers) + 1)]
    for h in folds:
        for rule in ("pool", "sel"):
            t = choices[h][rule + "_table"]
            lines.append(f"| {h} | {rule} ({', '.join(choices[h][rule + '_sources'])}) | " + " | ".join(
                f"{t[g][0]:+.2f} / {t[g][1]:+.2f}" for g in gates + tempers) + f" | {choices[h][rule]} |")
    lines += ["", "## Share of nodes whose scheduling Beta is not uniform (left-out source's test graphs, d in "
              f"{args.devices})", "", "| left out | " + " | ".join(gates) + " |", "|---|" + "---:|" * len(gates)]
    for h in folds:
        lines.append(f"| {h} | " + " | ".join(f"{choices[h]['kept'][g]:.2f}" for g in gates) + " |")
    lines += ["", "## Folds", "", "| left out | selection | train graphs | pool sources | test graphs |",
              "|---|---|---:|---|---:|"]
    for h, f in folds.items():
        lines.append(f"| {h} | {f['select']} | {len(f['train'])} | {', '.join(choices[h]['pool_sources'])} | "
                     f"{len(f['test'])} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------- main
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folds", default=None, help="comma-separated left-out sources (default: every source)")
    ap.add_argument("--devices", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--gates", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0, 4.0])
    ap.add_argument("--tempers", type=float, nargs="*", default=[],
                    help="also the policy's priors tempered toward uniform: Beta(1 + t (a - 1), 1 + t (b - 1))")
    ap.add_argument("--floor", type=float, default=-0.25)
    ap.add_argument("--select-graphs", type=int, default=4)
    ap.add_argument("--select-seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--test-graphs", type=int, default=6)
    ap.add_argument("--test-max-nodes", type=int, default=3000)
    ap.add_argument("--valid-graphs", type=int, default=6)
    ap.add_argument("--train-max-nodes", type=int, default=2000)
    ap.add_argument("--train-devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--imitate", type=int, default=300)
    ap.add_argument("--workers", type=int, default=1, help="Dask workers for the runs (0: in this process)")
    ap.add_argument("--tag", default="", help="a recipe variant's name: its policies under CACHE/TAG/, its "
                    "table in RESULTS/TAG.md (default: CACHE/, RESULTS/README.md)")
    ap.add_argument("--report", default=None, help="the results table's name: RESULTS/REPORT.md (default: TAG or README)")
    ap.add_argument("--importers", action="store_true",
                    help="also test the torch fold's policy on the importers' 12 graphs (ONNX and torch.export)")
    ap.add_argument("--final", action="store_true", help="train the recipe on every source and choose its gate")
    ap.add_argument("--ship", default=None, help="with --final: where the chosen policy goes")
    ap.add_argument("--ship-gate", type=float, default=None,
                    help="with --final: ship this gate (one of --gates) instead of the one rule `pool` chooses")
    args = ap.parse_args(argv)
    os.makedirs(CACHE, exist_ok=True)
    command = "python -m experiments.paper_default " + " ".join(argv if argv is not None else sys.argv[1:])

    def log(msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        print(line, flush=True)
        with open(os.path.join(CACHE, "progress.log"), "a") as f:
            f.write(line + "\n")

    sources = corpus()
    order = sorted(sources)
    from contextlib import nullcontext
    from regal.parallel import dask_client
    with (dask_client(workers=args.workers) if args.workers else nullcontext(None)) as client:
        if args.final:
            return final(sources, order, args, client, log, command.strip())
        held_out = order if args.folds is None else args.folds.split(",")
        folds = {h: fold_graphs(sources, order, h, args) for h in held_out}
        test_rows, choices = [], {}
        for h in held_out:
            f = folds[h]
            base = imitation_policy(os.path.join(CACHE, args.tag, h), [g["path"] for g in f["train"]], args, log)
            pols = variant_policies(base, args)
            pool = [s for s in order if s not in _siblings(h)]
            sel_rows = runs(cells(selection_graphs(sources, pool, args.select_graphs, args.test_max_nodes),
                                  {"brkga": "none", **pols}, args.devices, args.select_seeds), client, log)
            choice = {"pool_sources": pool, "sel_sources": [f["select"]]}
            for rule in ("pool", "sel"):
                choice[rule], choice[rule + "_table"] = choose_gate(sel_rows, list(pols), choice[rule + "_sources"],
                                                                    args.devices, args.floor)
            test = [g | {"source": h} for g in f["test"]]
            choice["kept"] = {v: kept_share(p, test, args.devices) for v, p in pols.items() if "@t" not in p}
            choices[h] = choice
            log(f"[{h}] gate: pool -> {choice['pool']}, sel -> {choice['sel']}")
            rows = runs(cells(test, {"brkga": "none", **pols, "teacher-schedule": "teacher-schedule",
                                     "default-v1": OLD_DEFAULT}, args.devices, args.seeds), client, log)
            test_rows += [r | {"held": h} for r in rows]
            for d in args.devices:
                log(f"[{h}] d={d}: " + ", ".join(
                    f"{v} {improvement(rows, v, lambda r, d=d: r['devices'] == d)[0]:+.2f}"
                    for v in [*pols, "teacher-schedule", "default-v1"]))
        if args.importers and "torch" in folds:  # graphs of a tracer no policy saw, with the torch fold's policy
            doc = json.load(open(os.path.join(ROOT, "data", "manifest_importers.json")))
            root = os.path.join(ROOT, "data", doc.get("root", ""))
            test = [{"name": n, "path": os.path.join(root, info["path"]), "family": info.get("family", n),
                     "nodes": int(info.get("nodes", 0)), "source": "importers"} for n, info in sorted(doc["graphs"].items())
                    if os.path.exists(os.path.join(root, info["path"]))]
            base = os.path.join(CACHE, args.tag, "torch", "imitation.npz")
            pols = variant_policies(base, args)
            rows = runs(cells(test, {"brkga": "none", **pols, "teacher-schedule": "teacher-schedule",
                                     "default-v1": OLD_DEFAULT}, args.devices, args.seeds), client, log)
            test_rows += [r | {"held": "importers"} for r in rows]
            folds["importers"] = folds["torch"] | {"select": "flax_hlo; torch fold's policy", "test": test}
            choices["importers"] = choices["torch"] | {"kept": {v: kept_share(p, test, args.devices)
                                                                 for v, p in pols.items() if "@t" not in p}}
    os.makedirs(RESULTS, exist_ok=True)
    from regal._io import atomic_text
    stem = args.report or args.tag or "README"
    with atomic_text(os.path.join(RESULTS, "runs.csv" if not args.tag else f"runs-{args.tag}.csv")) as fh:
        keys = ["held", "variant", "name", "nodes", "devices", "seed", "peak", "seconds"]
        w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(test_rows)
    with atomic_text(os.path.join(RESULTS, "choices.json" if not args.tag else f"choices-{args.tag}.json")) as fh:
        json.dump(choices, fh, indent=1)
    text = report(folds, test_rows, choices, args, command.strip())
    with atomic_text(os.path.join(RESULTS, stem + ".md")) as fh:
        fh.write(text)
    print(text)


def final(sources: dict, order: list[str], args, client, log, command: str) -> None:
    """The recipe on every source: imitation on all train splits, the gate by rule "pool" on all
    valid splits; the chosen policy (and a provenance JSON) written to --ship."""
    from experiments.runner import commit
    train = [g["path"] for s in order for g in sources[s] if g["split"] == "train" and g["nodes"] <= args.train_max_nodes]
    out = os.path.join(CACHE, args.tag, "all")
    base = imitation_policy(out, train, args, log)
    pols = {_gate_name(g): gated_policy(base, g) for g in args.gates}  # (a tempering needs code to ship)
    rows = runs(cells(selection_graphs(sources, order, args.select_graphs, args.test_max_nodes),
                      {"brkga": "none", **pols}, args.devices, args.select_seeds), client, log)
    by_rule, table = choose_gate(rows, list(pols), order, args.devices, args.floor)
    chosen = by_rule if args.ship_gate is None else _gate_name(args.ship_gate)
    log(f"[all] gate by rule pool: {by_rule}; shipped: {chosen}; "
        + ", ".join(f"{g} {m:+.2f}/{w:+.2f}" for g, (m, w) in table.items()))
    if chosen == OFF:
        sys.exit("experiments.paper_default: no gate passes the floor on every source: nothing to ship")
    ship = args.ship or os.path.join(out, "chosen.npz")
    from regal.policy import Policy, load_policy
    pol = load_policy(pols[chosen])
    gate = float(chosen[len("gate"):])
    meta = {"recipe": "experiments/paper_default.py (issue 47)", "gate": gate, "command": command,
            "commit": commit(), "imitation_steps": args.imitate, "train_devices": list(args.train_devices),
            "train_graphs": len(train)}
    Policy(pol.config, pol.params, meta).save(ship)
    per_source = {s: {d: round(improvement(rows, chosen, lambda r, s=s, d=d: r["source"] == s and r["devices"] == d)[0], 3)
                      for d in args.devices} for s in order}
    doc = {"file": os.path.basename(ship), "command": command, "commit": commit(), "gate": gate,
           "gate_by_rule_pool": by_rule,
           "selection": {g: {"mean": round(m, 3), "worst": round(w, 3)} for g, (m, w) in table.items()},
           "chosen_per_source_valid": per_source, "train_graphs": len(train)}
    with open(ship[:-len(".npz")] + ".selection.json", "w") as fh:
        json.dump(doc, fh, indent=1)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
