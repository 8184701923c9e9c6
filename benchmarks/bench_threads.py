"""Population decode and plain BRKGA on 1 and 2 Numba threads, with the other core idle or busy.

    python -m benchmarks.bench_threads [--repeats 7] [--layers tbb workqueue omp] [--out PATH]

Issue 36: the population's decode must never be slower on 2 threads than on 1, busy machine or
not. Each configuration (threading layer x threads x prange chunk size) runs in a fresh
process (the threading layer is chosen once per process, and OpenMP's idle workers spin after
each parallel region, which would slow the next configuration measured in the same process),
under two conditions: "as is" (whatever else the machine runs) and "+1 spinner" (one more
process spinning a core for the whole measurement). Configurations alternate within each round
so that a change of load hits all alike; every cell is the median of --repeats rounds.

Per process: `evaluate_population` of 100 random chromosomes (median of 15 calls) and
`regal.search.brkga_search`, 5,000 evaluations, seed 0 (median of 3 runs; its peak is checked
equal across every configuration). Graph: the shipped 990-node real graph, d = 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPH = os.path.join(ROOT, "data", "graphs", "real", "vit_l8_d256_b32_fwd_pre.json.gz")

WORKER = r"""
import json, sys, time
import numpy as np, numba
import regal
from regal.threads import preload_tbb
preload_tbb()  # what the command line does: TBB's library where pip put it
from regal.decode import chromosome_length, evaluate_population
from regal.search import brkga_search
graph_path, devices, threads, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
g = regal.load(graph_path)
pop = np.random.default_rng(0).random((100, chromosome_length(g.num_nodes, devices)))
numba.set_num_threads(threads)
numba.set_parallel_chunksize(chunk)
evaluate_population(g, pop, devices)
brkga_search(g, devices, budget=300, seed=0)  # every kernel loaded
decode = []
for _ in range(15):
    t = time.perf_counter(); evaluate_population(g, pop, devices); decode.append(time.perf_counter() - t)
search, peaks = [], set()
for _ in range(3):
    t = time.perf_counter(); sol = brkga_search(g, devices, budget=5000, seed=0); search.append(time.perf_counter() - t)
    peaks.add(sol.peak_bytes)
print(json.dumps({"layer": numba.threading_layer(), "decode": float(np.median(decode)),
                  "search": float(np.median(search)), "peaks": sorted(peaks)}))
"""


def run_worker(graph: str, devices: int, layer: str, threads: int, chunk: int, env_extra: dict) -> dict:
    env = {**os.environ, "NUMBA_THREADING_LAYER": layer, **env_extra}
    out = subprocess.run([sys.executable, "-c", WORKER, graph, str(devices), str(threads), str(chunk)],
                         env=env, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"worker failed ({layer}, {threads}, {chunk}): {out.stderr.strip()[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def spinners(k: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="rounds (fresh processes) per cell; median")
    ap.add_argument("--layers", nargs="+", default=["tbb", "workqueue", "omp"])
    ap.add_argument("--chunks", nargs="+", type=int, default=[0, 4], help="prange chunk sizes for 2 threads")
    ap.add_argument("--graph", default=GRAPH)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "threads.md"))
    args = ap.parse_args(argv)
    t0 = time.time()
    configs = [(layer, 1, 0) for layer in args.layers] + \
              [(layer, 2, c) for layer in args.layers for c in args.chunks]
    table = ["| condition | threading layer | threads | chunk | decode 100 (ms) | BRKGA 5K (s) | "
             "decode speed-up vs 1 thread | BRKGA speed-up vs 1 thread | load avg |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    peaks = set()
    for condition, k in (("as is", 0), ("+1 spinner", 1)):
        procs = spinners(k)
        try:
            time.sleep(0.3)
            res = {c: {"decode": [], "search": []} for c in configs}
            loads = []
            for _ in range(args.repeats):
                for c in configs:
                    r = run_worker(args.graph, args.devices, c[0], c[1], c[2], {})
                    res[c]["decode"].append(r["decode"])
                    res[c]["search"].append(r["search"])
                    peaks.update(r["peaks"])
                loads.append(os.getloadavg()[0])
        finally:
            for p in procs:
                p.kill()
                p.wait()
        for layer, threads, chunk in configs:
            m = res[(layer, threads, chunk)]
            one = res[(layer, 1, 0)]
            dec, srch = float(np.median(m["decode"])), float(np.median(m["search"]))
            # the ratio per round (same moment, same load), then its median
            sd = float(np.median(np.array(one["decode"]) / np.array(m["decode"])))
            ss = float(np.median(np.array(one["search"]) / np.array(m["search"])))
            table.append(f"| {condition} | {layer} | {threads} | {chunk} | {dec * 1e3:.2f} | {srch:.3f} | "
                         f"{sd:.2f}x | {ss:.2f}x | {np.median(loads):.1f} |")
            print(table[-1], flush=True)
    import numba
    doc = ["# Threads: 1 vs 2 Numba threads, the other core idle or busy", "",
           f"Command: `python -m benchmarks.bench_threads {' '.join(argv if argv is not None else sys.argv[1:])}`"
           .rstrip() + "  ",
           f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, numba {numba.__version__}; "
           f"wall time {time.time() - t0:.0f} s. Graph `{os.path.relpath(args.graph, ROOT)}`, d = {args.devices}.",
           "", "Each cell: median over rounds of fresh processes; a speed-up is the median of the per-round "
           "ratios (1 thread's time / this configuration's, same layer). Peaks of BRKGA 5K in every "
           f"configuration: {', '.join(f'{p:,}' for p in sorted(peaks))} (one value: thread-count invariant).", ""]
    doc += table
    if args.out:
        from regal._io import atomic_text
        with atomic_text(args.out) as f:
            f.write("\n".join(doc) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
