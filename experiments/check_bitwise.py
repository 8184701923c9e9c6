"""Check that a refactoring left the searches' results unchanged, bit for bit.

    python -m experiments.check_bitwise record OUT.json     # before the change
    python -m experiments.check_bitwise compare OUT.json    # after: every cell identical?

Runs the flagship ("regal"), plain BRKGA ("brkga"), the local-search baseline, REGAL's paper
setting with the teacher's priors ("regal-paper", NumPy priors) and the runtime flagship
(`objective="runtime"`) on a sample of graphs (six small ones of different sources), d = 1, 2,
4, seeds 0-1, budgets 1,000 and 5,000 (the runtime ones 1,000 only), on one Numba thread, and
records each cell's peak (or makespan) with a hash of its placement and order. `compare`
re-runs them and lists every cell that differs; `published` also re-runs a few cells of
experiments/results/flagship-all/cells.csv and compares their peaks with the published ones.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sys

import numpy as np

GRAPHS = [
    "tests/data/tiny.hlo",
    "data/graphs/synthetic/synthetic_s0_0000.json.gz",
    "data/graphs/synthetic_layered/layered_s0_0000_resnet.json.gz",
    "data/graphs/layers/layers_bert_4l_fwd.json.gz",
    "data/graphs/flax_hlo/flax_bert_4l_b8_fwd_pre.json.gz",
    "data/graphs/torch/torch_bart_2x2_fwd.json.gz",
]
METHODS = ("regal", "brkga", "local-search", "regal-paper")
DEVICES = (1, 2, 4)
SEEDS = (0, 1)
BUDGETS = (1000, 5000)
#: `published` re-runs the flagship's and BRKGA's seed-0 cells, d = 1, 2, 4, on this many of the
#: smallest real test graphs of experiments/results/flagship-all/cells.csv.
PUBLISHED_GRAPHS = 4


def _load(path: str):
    import regal
    if path.endswith(".hlo"):
        from regal.hlo import load_hlo
        return load_hlo(path)
    return regal.load(path)


def _digest(sol) -> str:
    h = hashlib.sha256()
    h.update(np.asarray(sol.placement, dtype=np.int64).tobytes())
    h.update(np.asarray(sol.order, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def cells():
    for path in GRAPHS:
        for method in METHODS:
            for d in DEVICES:
                for seed in SEEDS:
                    for budget in BUDGETS:
                        yield (path, method, d, seed, budget)
        for d in DEVICES:
            for seed in SEEDS:
                yield (path, "runtime", d, seed, 1000)


def run_cell(path: str, method: str, d: int, seed: int, budget: int) -> dict:
    import regal
    import regal.methods
    graph = _load(path)
    if d > graph.num_nodes:
        return {"skipped": True}
    if method == "runtime":
        sol = regal.optimize(graph, d, budget=budget, seed=seed, objective="runtime", num_threads=1)
        return {"makespan_s": sol.info["timed"]["makespan_s"], "peak_bytes": int(sol.peak_bytes),
                "digest": _digest(sol), "evaluations": int(sol.evaluations)}
    options = {"num_threads": 1} if regal.methods.get(method).takes_threads else {}
    if method == "regal-paper":
        options["policy"] = "teacher"
    sol = regal.methods.solve(method, graph, d, seed=seed, budget=budget, **options)
    return {"peak_bytes": int(sol.peak_bytes), "digest": _digest(sol), "evaluations": int(sol.evaluations)}


def _key(cell) -> str:
    return "|".join(map(str, cell))


def run_all() -> dict:
    out = {}
    for cell in cells():
        out[_key(cell)] = run_cell(*cell)
        print(_key(cell), out[_key(cell)], flush=True)
    return out


def published() -> list[str]:
    """Re-run a few published flagship and BRKGA cells (small graphs first); lines that differ."""
    import regal.dataset  # noqa: F401
    rows = list(csv.DictReader(open("experiments/results/flagship-all/cells.csv")))
    rows = [r for r in rows if r["method"] in ("regal", "brkga") and not r["refused"]
            and r["dataset"] == "real-test" and int(r["evaluations"]) == 5000]
    rows.sort(key=lambda r: (int(r["nodes"]), r["graph"], r["method"], int(r["devices"]), int(r["seed"])))
    graphs = list(dict.fromkeys(r["graph"] for r in rows))[:PUBLISHED_GRAPHS]
    rows = [r for r in rows if r["graph"] in graphs and int(r["seed"]) == 0]
    report = []
    for r in rows:
        path = os.path.join("data", "graphs", "real", r["graph"] + ".json.gz")
        got = run_cell(path, r["method"], int(r["devices"]), int(r["seed"]), 5000)["peak_bytes"]
        line = f"{r['method']} {r['graph']} d={r['devices']} seed={r['seed']}: published {r['peak_bytes']}, now {got}"
        report.append(("same  " if int(r["peak_bytes"]) == got else "DIFF  ") + line)
        print(report[-1], flush=True)
    return report


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[0] == "record":
        with open(argv[1], "w") as f:
            json.dump(run_all(), f, indent=0, sort_keys=True)
        return 0
    if argv[0] == "compare":
        before = json.load(open(argv[1]))
        now = run_all()
        diff = [k for k in before if before[k] != now.get(k)]
        for k in diff:
            print("DIFF", k, before[k], now.get(k))
        print(f"{len(before) - len(diff)} of {len(before)} cells identical")
        return 1 if diff else 0
    if argv[0] == "published":
        report = published()
        return 1 if any(line.startswith("DIFF") for line in report) else 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
