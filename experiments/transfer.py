"""Leave-one-source-out: does a learned prior help on graphs from a source it never saw? (issue 12)

    python -m experiments.transfer [--devices 2] [--seeds 0 1 2] [--workers 2] [--sources a,b,...]

For each graph source S (the corpus's `source` field: Haiku HLO, PyTorch/ONNX, Flax HLO, layer
graphs, two synthetic generators), in turn:
  1. the selection source V is the next source in the rotation; the training graphs are the
     train split of every other source (at most --train-max-nodes nodes); sources that trace the
     same architectures (torch and its layer-granularity twin) leave training together;
  2. a policy (feature set v2) imitates the structural teacher for --imitate steps (saved as the
     imitation-only policy), then REINFORCE runs for --steps steps from it, validated on V's
     valid split every --validate-every steps; the best validation checkpoint is the fold's
     policy: chosen on V, never on S;
  3. on S's test split (--test-graphs graphs spread over its families, at most
     --test-max-nodes nodes), d in --devices, seeds --seeds, 5,000 evaluations each:
     the flagship (seeding + polish) with no priors, the teacher's priors, the teacher's
     scheduling half, the imitation-only policy and the fold's policy; and REGAL's paper setting
     (priors in plain BRKGA, no seeding or polish) with none / teacher / imitation / fold policy.

Training and the runs fan out over the experiments' one back end (Dask: a local cluster of
--workers processes) and everything is cached under experiments/cache/transfer/ (policies per
fold; each finished run one file, `run_many`, the runner's cache: `experiments.runner.run_files`),
so an interrupted run resumes. Results: experiments/results/transfer/ (runs.csv, README.md with
the tables, the command and the commit).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
import time
from functools import lru_cache

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "data")
CACHE = os.path.join(ROOT, "experiments", "cache", "transfer")
RESULTS = os.path.join(ROOT, "experiments", "results", "transfer")

#: (name, setting, policy) of every evaluated variant; a policy of "@imitation" / "@trained" is
#: the fold's imitation-only / trained policy file; ":S" uses its scheduling head only (the
#: placement head at plain BRKGA's choice), the head that carried REGAL's gain in Table 3.
VARIANTS = (
    ("flagship", "flagship", "none"),
    ("flagship+teacher", "flagship", "teacher"),
    ("flagship+teacher-schedule", "flagship", "teacher-schedule"),
    ("flagship+imitation", "flagship", "@imitation"),
    ("flagship+trained", "flagship", "@trained"),
    ("flagship+trained-S", "flagship", "@trained:S"),
    ("brkga", "paper", "none"),
    ("paper+teacher", "paper", "teacher"),
    ("paper+imitation", "paper", "@imitation"),
    ("paper+trained", "paper", "@trained"),
    ("paper+trained-S", "paper", "@trained:S"),
)


def set_paths(cache: str, results: str) -> None:
    global CACHE, RESULTS
    CACHE, RESULTS = cache, results


# ------------------------------------------------------------------------------------- corpus
def corpus() -> dict[str, list[dict]]:
    """source -> [{name, path, family, split, nodes}] from data/manifest_corpus.json when it
    exists, else from the per-source manifests the repository ships."""
    def read(manifest: str, source: str | None = None) -> list[tuple[str, dict]]:
        doc = json.load(open(os.path.join(DATA, manifest)))
        root = os.path.join(DATA, doc.get("root", ""))
        split_of = {name: split for split, names in doc.get("splits", {}).items()
                    if isinstance(names, list) for name in names}
        out = []
        for name, info in doc["graphs"].items():
            path = os.path.join(root, info["path"])
            if not os.path.exists(path):
                continue
            out.append((info.get("source", source), {
                "name": name, "path": path, "family": info.get("family", name),
                "split": info.get("split") or split_of.get(name, "test"), "nodes": int(info.get("nodes", 0))}))
        return out

    items = []
    if os.path.exists(os.path.join(DATA, "manifest_corpus.json")):
        items = read("manifest_corpus.json")
    else:
        items += read("manifest.json", "haiku_hlo")
        items += read("manifest_synthetic.json", "synthetic_regal")
        items += read("manifest_synthetic_layered.json", "synthetic_layered")
        items += [("torch", g) for _, g in read("manifest_importers.json", "torch")]
    out: dict[str, list[dict]] = {}
    for source, g in items:
        out.setdefault(source, []).append(g)
    for graphs in out.values():
        _split_by_family(graphs)
    return out


def _split_by_family(graphs: list[dict]) -> None:
    """A source without train/valid/test splits gets one by family (every third family valid,
    every third test), so that every source can train, select and test."""
    if {g["split"] for g in graphs} >= {"train", "valid", "test"}:
        return
    families = sorted({g["family"] for g in graphs})
    split = {f: ("train", "valid", "test")[i % 3] for i, f in enumerate(families)}
    for g in graphs:
        g["split"] = split[g["family"]]


def spread(graphs: list[dict], k: int) -> list[dict]:
    """Up to k graphs, round-robin over families, each family's in name order."""
    by_family: dict[str, list[dict]] = {}
    for g in sorted(graphs, key=lambda g: g["name"]):
        by_family.setdefault(g["family"], []).append(g)
    queues = [list(v) for _, v in sorted(by_family.items())]
    out: list[dict] = []
    while len(out) < min(k, len(graphs)):
        for q in queues:
            if q and len(out) < k:
                out.append(q.pop(len(q) // 2))
    return out


#: Sources that trace the same architectures (layer graphs are contracted torch.export graphs):
#: leaving one out leaves out the other from training too, or the test would have seen the models.
SIBLINGS = ({"torch", "layers"},)


def _siblings(source: str) -> set[str]:
    return set().union({source}, *(group for group in SIBLINGS if source in group))


def fold_graphs(sources: dict[str, list[dict]], order: list[str], held: str, args) -> dict[str, list[dict]]:
    """Training, selection and test graphs of the fold that leaves out `held` (and its siblings).

    The selection source is the next one in the rotation that is not a sibling of `held`."""
    out = _siblings(held)
    i = order.index(held)
    select = next(order[(i + k) % len(order)] for k in range(1, len(order) + 1)
                  if order[(i + k) % len(order)] not in out)
    train = [g for s in order if s not in out | {select} for g in sources[s]
             if g["split"] == "train" and g["nodes"] <= args.train_max_nodes]
    valid = spread([g for g in sources[select] if g["split"] == "valid" and g["nodes"] <= args.train_max_nodes],
                   args.valid_graphs)
    test = spread([g for g in sources[held] if g["split"] == "test" and g["nodes"] <= args.test_max_nodes],
                  args.test_graphs)
    return {"select": select, "train": train, "valid": valid, "test": test}


# ----------------------------------------------------------------------------------- training
def train_fold(held: str, fold: dict, args, log, client=None) -> tuple[str, str]:
    """(imitation-only policy file, trained policy file) of one fold; cached."""
    from regal.policy.network import PolicyConfig
    from regal.training.reinforce import TrainConfig, train
    out = os.path.join(CACHE, held)
    cfg = PolicyConfig(features="v2")
    train_paths = [g["path"] for g in fold["train"]]
    valid_paths = [g["path"] for g in fold["valid"]]
    imitation = os.path.join(out, "imitation", "last.npz")
    trained = os.path.join(out, "reinforce", "best.npz")
    common = dict(devices=tuple(args.train_devices), samples=args.samples, budget=5000, learning_rate=args.lr,
                  entropy_coef=args.entropy, seed=0, imitation_steps=args.imitate, validate_every=args.validate_every,
                  checkpoint_every=args.validate_every, valid_seeds=2)
    if not os.path.exists(imitation):
        log(f"[{held}] imitation: {args.imitate} steps on {len(train_paths)} graphs")
        train(train_paths, [], os.path.dirname(imitation), cfg, TrainConfig(steps=0, **common), log=log)
    if not os.path.exists(os.path.join(out, "reinforce", "last.npz")):
        log(f"[{held}] REINFORCE: {args.steps} steps, selection on {fold['select']} ({len(valid_paths)} graphs)")
        train(train_paths, valid_paths, os.path.dirname(trained), cfg, TrainConfig(steps=args.steps, **common),
              client=client, log=log)
    return imitation, trained


# --------------------------------------------------------------------------------- evaluation
@lru_cache(maxsize=8)
def _policy(spec: str):
    """A policy file, or "FILE:S" for its scheduling head alone."""
    from regal.policy import Policy, load_policy
    path, _, heads = spec.partition(".npz:")
    pol = load_policy(path + ".npz" if heads else spec)
    if heads == "S":
        pol = Policy(pol.config._replace(placement=False), pol.params, pol.meta)
    return pol


def run_one(cell: dict) -> dict:
    """One search of one cell (a process-pool task): the peak and seconds."""
    import regal
    from regal.search import resolve_priors
    g = _graph(cell["path"])
    policy = cell["policy"]
    if policy.endswith(".npz") or policy.endswith(".npz:S"):
        priors = _policy(policy).priors(g, cell["devices"])
    else:
        priors = resolve_priors(g, cell["devices"], None, policy)
    on = cell["setting"] == "flagship"
    t = time.perf_counter()
    sol = regal.optimize(g, cell["devices"], budget=cell["budget"], seed=cell["seed"], policy="none", priors=priors,
                         seeding=on, polish=on, num_threads=1)
    return cell | {"peak": int(sol.peak_bytes), "seconds": round(time.perf_counter() - t, 4),
                   "bound": int(g.lower_bound(cell["devices"]))}


@lru_cache(maxsize=4)
def _graph(path: str):
    import regal
    return regal.load(path)


def _key(c: dict) -> str:
    return f"{c['held']}|{c['variant']}|{c['name']}|{c['devices']}|{c['seed']}|{c['budget']}"


def run_file(cache: str, task: dict) -> str:
    """Where the result of one `run_one` task is cached: CACHE/<graph>/<setting>-d<D>-s<S>-<hash of
    the task>.json."""
    digest = hashlib.sha1(json.dumps(task, sort_keys=True).encode()).hexdigest()[:12]
    name = os.path.basename(task["path"]).split(".")[0]
    return os.path.join(cache, name, f"{task['setting']}-d{task['devices']}-s{task['seed']}-{digest}.json")


def run_many(tasks: list[dict], cache: str, client, log=None) -> list[dict]:
    """`run_one` of every task on the Dask `client` (in this process when None), each result
    cached as one file under `cache` (`experiments.runner.run_files`): a task whose file exists
    is not run again, so an interrupted run resumes. Returns the results in the tasks' order."""
    from experiments.runner import json_job, run_files
    files = [run_file(cache, t) for t in tasks]
    # grouped by graph so a worker's graph and priors caches hit
    jobs = sorted(zip(files, tasks), key=lambda ft: (ft[1]["path"], ft[1]["devices"], ft[1]["policy"]))
    counts = run_files([(f, json_job, (run_one, f, t)) for f, t in jobs], client, progress=False)
    if log is not None:
        log(f"{counts['cached']} of {len(tasks)} runs cached, {counts['computed']} computed")
    out = []
    for f in files:
        with open(f) as fh:
            out.append(json.load(fh))
    return out


def evaluate(cells: list[dict], client, log) -> list[dict]:
    """Every evaluation cell's run, cached under CACHE/runs/ (runs of an older version's
    runs.jsonl, one JSON line per run, are taken over as files first)."""
    cache = os.path.join(CACHE, "runs")
    old = os.path.join(CACHE, "runs.jsonl")
    if os.path.exists(old):
        done = {}
        for line in open(old):
            try:
                r = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:  # a line cut off by a kill
                continue
            if r is not None:
                done[_key(r)] = r
        from regal._io import atomic_text
        for c in cells:
            path = run_file(cache, c)
            if _key(c) in done and not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with atomic_text(path) as f:
                    json.dump(done[_key(c)], f)
    return run_many(cells, cache, client, log)


# ------------------------------------------------------------------------------------- report
def _improvement(rows: list[dict], variant: str, reference: str, held: str, d: int) -> tuple[float, int, int, int]:
    """Mean % lower peak of `variant` than `reference` over (graph, seed), graphs better / worse."""
    by = {(r["name"], r["seed"]): r["peak"] for r in rows if r["variant"] == reference and r["held"] == held
          and r["devices"] == d}
    imp, per_graph = [], {}
    for r in rows:
        if r["variant"] == variant and r["held"] == held and r["devices"] == d and (r["name"], r["seed"]) in by:
            ref = by[(r["name"], r["seed"])]
            x = (ref - r["peak"]) / ref * 100
            imp.append(x)
            per_graph.setdefault(r["name"], []).append(x)
    means = [np.mean(v) for v in per_graph.values()]
    return (float(np.mean(imp)) if imp else float("nan"), sum(m > 1e-9 for m in means),
            sum(m < -1e-9 for m in means), len(means))


def report(rows: list[dict], folds: dict, args, command: str) -> str:
    from experiments.run import commit, machine
    lines = ["# Leave-one-source-out transfer of the learned prior (issue 12)", "",
             f"Command: `{command}`  ", f"Commit: {commit()}  ", f"Machine: {machine()}  ",
             f"Budget 5,000 evaluations per run; seeds {args.seeds}; test graphs per source <= {args.test_graphs} "
             f"(<= {args.test_max_nodes} nodes, spread over families); policy: feature set v2, "
             f"{args.imitate} imitation steps, then {args.steps} REINFORCE steps ({args.samples} samples, "
             f"d in {args.train_devices}), best validation checkpoint on the selection source.", "",
             "Mean % lower peak (positive = the first method is better), graphs better/worse of all.", ""]
    comparisons = [
        ("flagship+trained", "flagship", "trained priors vs no priors (flagship)"),
        ("flagship+trained", "flagship+teacher", "trained vs teacher's priors (flagship)"),
        ("flagship+trained", "flagship+imitation", "trained vs imitation-only (flagship)"),
        ("flagship+teacher", "flagship", "teacher's priors vs none (flagship)"),
        ("flagship+teacher-schedule", "flagship", "teacher's scheduling half vs none (flagship)"),
        ("flagship+imitation", "flagship", "imitation-only vs none (flagship)"),
        ("flagship+trained-S", "flagship", "trained, scheduling head only, vs none (flagship)"),
        ("paper+trained", "brkga", "trained priors vs plain BRKGA (paper setting)"),
        ("paper+trained", "paper+teacher", "trained vs teacher (paper setting)"),
        ("paper+trained", "paper+imitation", "trained vs imitation-only (paper setting)"),
        ("paper+teacher", "brkga", "teacher vs plain BRKGA (paper setting)"),
        ("paper+trained-S", "brkga", "trained, scheduling head only, vs plain BRKGA (paper setting)"),
    ]
    for d in args.devices:
        lines += [f"## d = {d}", "", "| comparison | " + " | ".join(
            f"{h} (sel. {folds[h]['select']})" for h in folds) + " |", "|---|" + "---:|" * len(folds)]
        for a, b, label in comparisons:
            cells = []
            for held in folds:
                m, better, worse, n = _improvement(rows, a, b, held, d)
                cells.append("-" if not n else f"{m:+.2f} ({better}/{worse} of {n})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Folds", "", "| left out | selection | train graphs | valid graphs | test graphs |",
              "|---|---|---:|---:|---:|"]
    for held, f in folds.items():
        lines.append(f"| {held} | {f['select']} | {len(f['train'])} | {len(f['valid'])} | {len(f['test'])} |")
    return "\n".join(lines) + "\n"


def _cells(folds: dict, policies: dict, args) -> list[dict]:
    """The evaluation cells: every fold's test graph, d, seed and variant (`VARIANTS`)."""
    cells = []
    for held, (imitation, trained) in policies.items():
        for g in folds[held]["test"]:
            for d in args.devices:
                for s in args.seeds:
                    for variant, setting, policy in VARIANTS:
                        policy = {"@imitation": imitation, "@trained": trained,
                                  "@trained:S": trained + ":S"}.get(policy, policy)
                        cells.append({"held": held, "variant": variant, "setting": setting, "policy": policy,
                                      "name": g["name"], "path": g["path"], "nodes": g["nodes"], "devices": d,
                                      "seed": s, "budget": 5000})
    return cells


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sources", default=None, help="comma-separated sources (default: every source)")
    ap.add_argument("--folds", default=None,
                    help="comma-separated left-out sources to run (default: every source); the rotation, and so "
                         "each fold's training and selection graphs, stay those of --sources")
    ap.add_argument("--devices", type=int, nargs="+", default=[2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--test-graphs", type=int, default=8)
    ap.add_argument("--test-max-nodes", type=int, default=3000)
    ap.add_argument("--valid-graphs", type=int, default=6)
    ap.add_argument("--train-max-nodes", type=int, default=2000)
    ap.add_argument("--train-devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--imitate", type=int, default=300)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--validate-every", type=int, default=20)
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--entropy", type=float, default=5e-4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--train-only", action="store_true")
    ap.add_argument("--cache", default=CACHE, help="where policies and finished runs are kept")
    ap.add_argument("--results", default=RESULTS)
    args = ap.parse_args(argv)
    set_paths(args.cache, args.results)
    os.makedirs(CACHE, exist_ok=True)
    log_path = os.path.join(CACHE, "progress.log")

    def log(msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        print(line, flush=True)
        with open(log_path, "a") as f:
            f.write(line + "\n")

    sources = corpus()
    order = sorted(sources) if args.sources is None else args.sources.split(",")
    missing = [s for s in order if s not in sources]
    if missing:
        sys.exit(f"experiments.transfer: error: unknown sources {missing}; the corpus has {sorted(sources)}")
    log("corpus: " + ", ".join(f"{s} {len(sources[s])}" for s in order))
    held_out = order if args.folds is None else args.folds.split(",")
    if any(h not in order for h in held_out):
        sys.exit(f"experiments.transfer: error: --folds {args.folds}: each must be one of {order}")
    folds = {held: fold_graphs(sources, order, held, args) for held in held_out}
    policies = {}
    from regal.parallel import dask_client
    with dask_client(workers=args.workers) as client:
        for held in held_out:
            policies[held] = train_fold(held, folds[held], args, log, client)
        if args.train_only:
            return
        rows = evaluate(_cells(folds, policies, args), client, log)
    os.makedirs(RESULTS, exist_ok=True)
    from regal._io import atomic_text
    with atomic_text(os.path.join(RESULTS, "runs.csv")) as f:
        keys = ["held", "variant", "name", "nodes", "devices", "seed", "peak", "bound", "seconds"]
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    command = "python -m experiments.transfer " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(rows, folds, args, command.strip())
    with atomic_text(os.path.join(RESULTS, "README.md")) as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
