"""Engine benchmark (issue 3): decoder + simulator throughput, BRKGA 5K time, memory, pymoo.

    python -m benchmarks.bench_engine [--repeats 5] [--out benchmarks/results/engine.md]
    python -m benchmarks.bench_engine --profile [--baseline COMMIT] [--out benchmarks/results/decoder_profile.md]

Prints Markdown tables and writes them, with the command, commit and machine, to --out.
Every speed figure is a median over --repeats runs; every comparison is a ratio measured in this
same process (the plain-NumPy decoder and a copy of the naive twin of tests/naive.py, both in
benchmarks/numpy_decoder.py, are the references).

`--profile` (issue 36) splits one evaluation of the 990-node real graph (d = 1, 2, 4) into its
kernels, each compiled alone and timed over a batch of 200 random chromosomes on one thread (CPU
time of the process, so other processes' load counts less), counts the ready-set operations,
and with --baseline times the kernels of that commit (`regal/kernels/decode.py` and
`regal/kernels/peak_memory.py` read from git) beside today's, and BRKGA 5K on 1 and 2 threads with the
population decoded by either, in alternating rounds of this one process.

Graphs: real graphs of the shipped data set closest to 100, 1,000 and 10,000 nodes, and an
80,000-node graph traced from a deep Transformer training step (data/models.py), built once and
cached under data/cache/.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import subprocess
import sys
import time

import numpy as np

import regal
from benchmarks.numpy_decoder import decode_simulate as numpy_decode
from benchmarks.numpy_decoder import naive_decode_simulate
from regal.decode import chromosome_length, decode_evaluate, evaluate_population
from regal.flagship import warmup
from regal.simulate import kernel_graph
from regal.search import brkga_search, numba_threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def real_graph_near(target: int):
    """The shipped real graph whose node count is closest to `target`."""
    import json
    with open(os.path.join(ROOT, "data", "manifest.json")) as f:
        man = json.load(f)
    best = min(man["graphs"].items(), key=lambda kv: abs(kv[1]["nodes"] - target))
    return regal.load(os.path.join(ROOT, "data", "graphs", best[1]["path"]))


def graph_80k():
    """An ~80K-node graph: a deep Transformer train step, traced once and cached."""
    path = os.path.join(ROOT, "data", "cache", "bench_80k.json.gz")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([sys.executable, "-m", "benchmarks.big_graph", "--nodes", "80000", "-o", path],
                       check=True, cwd=ROOT)
    return regal.load(path)


def throughput_table(graphs, repeats: int) -> list[str]:
    rows = ["| graph | nodes | d | Numba 1 thread (eval/s) | Numba 2 threads (eval/s) | 2-thread speed-up "
            "| NumPy (eval/s) | Numba 1T / NumPy | naive (eval/s) | Numba 1T / naive |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for g in graphs:
        for d in (1, 2, 4):
            rng = np.random.default_rng(0)
            pop = rng.random((100, chromosome_length(g.num_nodes, d)))
            evaluate_population(g, pop[:2], d)
            rate = {}
            for th in (1, 2):
                with numba_threads(th):
                    rate[th] = 100 / median_time(lambda: evaluate_population(g, pop, d), repeats)
            k = 1 if g.num_nodes > 20_000 else (3 if g.num_nodes > 2_000 else 10)
            fits = [decode_evaluate(g, pop[i], d)[2].peak_bytes for i in range(k)]
            t_np = median_time(lambda: [numpy_decode(g, pop[i], d) for i in range(k)], max(1, repeats // 2)) / k
            assert [numpy_decode(g, pop[i], d) for i in range(k)] == fits
            if g.num_nodes <= 2_000:
                naive_peaks = []

                def run_naive():
                    for i in range(2):
                        naive_peaks.append(naive_decode_simulate(g, pop[i], d))
                t_nv = median_time(run_naive, 1) / 2
                assert naive_peaks == fits[:2]
                nv = f"{1 / t_nv:,.1f} | {rate[1] * t_nv:,.0f}x"
            else:
                nv = "- | -"
            rows.append(f"| {g.name} | {g.num_nodes:,} | {d} | {rate[1]:,.0f} | {rate[2]:,.0f} | "
                        f"{rate[2] / rate[1]:.2f}x | {1 / t_np:,.1f} | {rate[1] * t_np:,.0f}x | {nv} |")
            print(rows[-1], flush=True)
    return rows


def brkga_table(g, repeats: int) -> list[str]:
    rows = ["| graph | nodes | d | threads | BRKGA 5K median (s) | min (s) | max (s) | best peak (seed 0) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for d in (1, 2, 4):
        for th in (1, 2):
            times, peak = [], None
            for rep in range(repeats):
                t = time.perf_counter()
                sol = brkga_search(g, d, budget=5000, seed=0, num_threads=th)
                times.append(time.perf_counter() - t)
                peak = sol.peak_bytes
            rows.append(f"| {g.name} | {g.num_nodes:,} | {d} | {th} | {np.median(times):.3f} | "
                        f"{min(times):.3f} | {max(times):.3f} | {peak:,} |")
            print(rows[-1], flush=True)
    return rows


def big_graph_table(g, repeats: int) -> list[str]:
    rows = ["| graph | nodes | d | one decode + simulate, median (ms) | population-100 run, peak RSS growth (MiB) |",
            "|---|---:|---:|---:|---:|"]
    for d in (1, 2, 4):
        keys = np.random.default_rng(1).random(chromosome_length(g.num_nodes, d))
        decode_evaluate(g, keys, d)
        t = median_time(lambda: decode_evaluate(g, keys, d), max(repeats, 5))
        rss = population_rss_mib(d)
        rows.append(f"| {g.name} | {g.num_nodes:,} | {d} | {t * 1e3:.2f} | {rss:,.0f} |")
        print(rows[-1], flush=True)
    return rows


def population_rss_mib(d: int) -> float:
    """Peak RSS growth of a fresh process running 3 generations (population 100) on the 80K graph."""
    code = (
        "import resource;"
        "from benchmarks.bench_engine import graph_80k; from regal.search import brkga_search;"
        "g = graph_80k(); brkga_search(g, %d, budget=30, seed=0);"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
        "brkga_search(g, %d, budget=260, seed=0);"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)" % (d, d))
    # the first short run loads everything (graph, kernels); the growth is what a population adds
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def pymoo_table(graphs, repeats: int) -> list[str]:
    """pymoo's BRKGA driving our decoder (same population shape, same budget) against ours."""
    from pymoo.algorithms.soo.nonconvex.brkga import BRKGA
    from pymoo.core.problem import Problem
    from pymoo.optimize import minimize

    rows = ["| graph | nodes | d | regal BRKGA peak (median) | pymoo BRKGA peak (median) | regal s | pymoo s "
            "| pymoo s / regal s | regal better on |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for g in graphs:
        for d in (1, 2):
            L = chromosome_length(g.num_nodes, d)

            class Peak(Problem):
                def __init__(self):
                    super().__init__(n_var=L, n_obj=1, xl=0.0, xu=1.0)

                def _evaluate(self, x, out, *args, **kwargs):
                    out["F"] = evaluate_population(g, np.minimum(x, np.nextafter(1.0, 0.0)), d)

            ours, theirs, t_ours, t_theirs = [], [], [], []
            for seed in range(repeats):
                t = time.perf_counter()
                ours.append(brkga_search(g, d, budget=5000, seed=seed).peak_bytes)
                t_ours.append(time.perf_counter() - t)
                algo = BRKGA(n_elites=20, n_offsprings=70, n_mutants=10, bias=0.7, eliminate_duplicates=False)
                t = time.perf_counter()
                res = minimize(Peak(), algo, ("n_eval", 5000), seed=seed, verbose=False)
                t_theirs.append(time.perf_counter() - t)
                theirs.append(float(res.F[0]))
            wins = sum(a < b for a, b in zip(ours, theirs))
            ties = sum(a == b for a, b in zip(ours, theirs))
            rows.append(f"| {g.name} | {g.num_nodes:,} | {d} | {np.median(ours):,.0f} | {np.median(theirs):,.0f} | "
                        f"{np.median(t_ours):.2f} | {np.median(t_theirs):.2f} | "
                        f"{np.median(t_theirs) / np.median(t_ours):.1f}x | {wins}/{repeats} seeds ({ties} ties) |")
            print(rows[-1], flush=True)
    return rows


PROFILE_GRAPH = os.path.join("data", "graphs", "real", "vit_l8_d256_b32_fwd_pre.json.gz")


def baseline_kernels(commit: str):
    """`regal.kernels.decode` as of `commit`, with that commit's `regal.kernels.peak_memory`, as fresh,
    uncached modules (the other kernel modules are today's)."""
    mods = {}
    for name in ("_peak_memory", "_kernels"):
        src = subprocess.run(["git", "show", f"{commit}:regal/{name}.py"], capture_output=True, text=True,
                             cwd=ROOT, check=True).stdout
        src = src.replace("from regal._jit import JIT as _JIT, PARALLEL_JIT",
                          "_JIT = dict(nogil=True); PARALLEL_JIT = dict(parallel=True, nogil=True)")
        src = src.replace("from regal._jit import JIT as _JIT", "_JIT = dict(nogil=True)")
        src = src.replace("from regal.kernels.peak_memory import", "from regal_baseline_peak_memory import")
        path = os.path.join(ROOT, "data", "cache", f"regal_baseline{name}.py")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(src)
        spec = importlib.util.spec_from_file_location(f"regal_baseline{name}", path)
        mods[name] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mods[name]
        spec.loader.exec_module(mods[name])
    return mods["_kernels"], mods["_peak_memory"]


def _batch_kernels(K, P):
    """Each piece of an evaluation as its own compiled loop over a batch of chromosomes."""
    import numba

    @numba.njit
    def place(pop, n, d, placements):
        for i in range(pop.shape[0]):
            K.placement_from_keys(pop[i], n, d, placements[i])

    @numba.njit
    def order(pop, n, d, g, orders):
        for i in range(pop.shape[0]):
            prio = np.empty(n, dtype=np.float64)
            for v in range(n):
                prio[v] = pop[i, v * (d + 1) + d]
            K.priority_order(prio, n, g.pred_cnt, g.succ_ptr, g.succ_idx, g.resident, orders[i])

    @numba.njit
    def simulate(g, orders, placements, d, peaks):
        for i in range(orders.shape[0]):
            peaks[i] = P.simulate_peak(g, orders[i], placements[i], d, np.empty(d, dtype=np.int64),
                                       np.empty((0, d), dtype=np.int64))

    @numba.njit
    def traced(g, orders, placements, d, peaks):
        trace = np.empty((orders.shape[1], d), dtype=np.int64)
        for i in range(orders.shape[0]):
            peaks[i] = P.simulate_peak(g, orders[i], placements[i], d, np.empty(d, dtype=np.int64), trace)

    @numba.njit
    def whole(g, pop, d, peaks):
        n = g.num_nodes
        for i in range(pop.shape[0]):
            peaks[i] = K.decode_simulate(g, pop[i], d, np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32),
                                         np.empty(d, dtype=np.int64), np.empty((0, d), dtype=np.int64))

    return place, order, simulate, traced, whole


def ready_set_counts(g, orders) -> tuple[float, float, int]:
    """Per chromosome: ready-set pushes (= pops), resident takes; the largest ready set."""
    pushes = takes = biggest = 0
    for order in orders:
        indeg = g.pred_cnt.copy()
        size = int(((indeg == 0) & ~g.resident).sum())
        pushes += size
        for v in order:
            takes += bool(g.resident[v])
            size -= not g.resident[v]
            for w in g.succ_idx[g.succ_ptr[v]:g.succ_ptr[v + 1]]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    pushes += 1
                    size += 1
            biggest = max(biggest, size)
    return pushes / len(orders), takes / len(orders), biggest


def profile_table(baseline: str | None, repeats: int, batch: int = 200) -> list[str]:
    """One evaluation of the 990-node graph split into its kernels, us per chromosome (median of
    `repeats` rounds of process CPU time; baseline and today's alternate within each round)."""
    import regal.kernels.decode as K
    import regal.kernels.peak_memory as P
    g = regal.load(os.path.join(ROOT, PROFILE_GRAPH))
    kg = kernel_graph(g)
    n = kg.num_nodes
    sides = {"baseline": _batch_kernels(*baseline_kernels(baseline))} if baseline else {}
    sides["today"] = _batch_kernels(K, P)
    names = ["placement_from_keys", "priorities + priority_order", "simulate_peak",
             "simulate_peak with a trace (the climb's)", "decode_simulate (whole)", "evaluate_population, 1 thread"]
    rows = ["| d | kernel | " + " | ".join(f"{s} (us)" for s in sides) + (" | today / baseline |" if baseline else " |"),
            "|---:|---|" + "---:|" * (len(sides) + bool(baseline))]
    with numba_threads(1):
        for d in (1, 2, 4):
            pop = np.random.default_rng(0).random((batch, chromosome_length(n, d)))
            placements = np.empty((batch, n), np.int32)
            orders = np.empty((batch, n), np.int32)
            peaks = {s: np.empty(batch, np.int64) for s in sides}
            fitness = np.empty(batch)
            calls = {}
            for s, (place, order, simulate, traced, whole) in sides.items():
                evaluate = (K if s == "today" else sys.modules["regal_baseline_kernels"]).evaluate_population
                calls[s] = [lambda place=place: place(pop, n, d, placements),
                            lambda order=order: order(pop, n, d, kg, orders),
                            lambda simulate=simulate, s=s: simulate(kg, orders, placements, d, peaks[s]),
                            lambda traced=traced: traced(kg, orders, placements, d, np.empty(batch, np.int64)),
                            lambda whole=whole, s=s: whole(kg, pop, d, peaks[s]),
                            lambda evaluate=evaluate: evaluate(kg, pop, d, fitness)]
                for c in calls[s]:
                    c()
            if baseline:
                assert (peaks["today"] == peaks["baseline"]).all()
            times = {(s, j): [] for s in sides for j in range(len(names))}
            for _ in range(repeats):
                for j in range(len(names)):
                    for s in sides:
                        t = time.process_time()
                        calls[s][j]()
                        times[s, j].append(time.process_time() - t)
            for j, name in enumerate(names):
                us = {s: np.median(times[s, j]) / batch * 1e6 for s in sides}
                ratio = f" {us['today'] / us['baseline']:.2f}x |" if baseline else ""
                rows.append(f"| {d} | {name} | " + " | ".join(f"{us[s]:.1f}" for s in sides) + " |" + ratio)
                print(rows[-1], flush=True)
            pushes, takes, biggest = ready_set_counts(kg, orders[:50])
            rows.append(f"| {d} | ready set: {pushes:.0f} pushes and as many pops, {takes:.0f} resident "
                        f"takes per chromosome; at most {biggest} ready |" + " |" * (len(sides) - 1 + bool(baseline)))
    return rows


def brkga_baseline_table(baseline: str, repeats: int) -> list[str]:
    """BRKGA 5K (990 nodes, d = 2, seed 0) with the population decoded by the baseline's kernels
    or today's, alternating within each round: median wall and process CPU seconds."""
    import regal.kernels.decode as K
    import regal.decode
    g = regal.load(os.path.join(ROOT, PROFILE_GRAPH))
    base = sys.modules.get("regal_baseline_kernels") or baseline_kernels(baseline)[0]
    today = K.evaluate_population
    rows = ["| threads | kernels | BRKGA 5K wall, median (s) | CPU (s) | best peak |", "|---:|---|---:|---:|---:|"]
    for th in (1, 2):
        res = {}
        for _ in range(repeats):
            for name, fn in (("baseline", base.evaluate_population), ("today", today)):
                regal.decode._kernels.evaluate_population = fn
                try:
                    t, c = time.perf_counter(), time.process_time()
                    sol = brkga_search(g, 2, budget=5000, seed=0, num_threads=th)
                    wall, cpu = time.perf_counter() - t, time.process_time() - c
                finally:
                    regal.decode._kernels.evaluate_population = today
                res.setdefault(name, []).append((wall, cpu, sol.peak_bytes))
        assert len({r[2] for v in res.values() for r in v}) == 1
        for name, v in res.items():
            rows.append(f"| {th} | {name} | {np.median([r[0] for r in v]):.3f} | {np.median([r[1] for r in v]):.3f} "
                        f"| {v[0][2]:,} |")
            print(rows[-1], flush=True)
    return rows


def profile_main(args) -> None:
    t0 = time.time()
    load = os.getloadavg()
    sections = [("One evaluation of vit_l8_d256_b32_fwd_pre (990 nodes), split into its kernels", profile_table(args.baseline, args.repeats))]
    if args.baseline:
        sections.append(("BRKGA 5K, d = 2, seed 0", brkga_baseline_table(args.baseline, args.repeats)))
    write_report(args, sections, t0, extra=f"load average at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}; "
                 f"Numba threading layer {__import__('numba').config.THREADING_LAYER}.")


def write_report(args, sections, t0, extra: str = "") -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    command = " ".join(["python -m benchmarks.bench_engine"] + sys.argv[1:])
    header = ["# Decoder profile" if args.profile else "# Engine benchmark", "",
              f"Command: `{command}`  ",
              f"Commit: {commit}; machine: {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
              f"numba {__import__('numba').__version__}; wall time {time.time() - t0:.0f} s. {extra}", ""]
    body = []
    for title, rows in sections:
        body += [f"## {title}", ""] + rows + [""]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(header + body))
    print(f"wrote {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "engine.md"))
    ap.add_argument("--skip-big", action="store_true", help="leave out the 80K-node graph")
    ap.add_argument("--profile", action="store_true", help="only the decoder profile (issue 36)")
    ap.add_argument("--baseline", help="with --profile: a commit whose kernels are timed beside today's")
    args = ap.parse_args()
    if args.profile:
        if args.out == ap.get_default("out"):
            args.out = os.path.join(ROOT, "benchmarks", "results", "decoder_profile.md")
        return profile_main(args)
    t0 = time.time()
    warmup()
    small = [real_graph_near(n) for n in (100, 1_000, 10_000)]
    big = None if args.skip_big else graph_80k()
    sections = []
    print("## Decoder + simulator throughput (population of 100 random chromosomes)")
    sections.append(("Decoder + simulator throughput (population of 100 random chromosomes)",
                     throughput_table(small + ([big] if big else []), args.repeats)))
    print("## BRKGA, 5,000 evaluations")
    sections.append(("BRKGA, 5,000 evaluations (population 100, elites 20, mutants 10)",
                     brkga_table(small[1], args.repeats)))
    if big is not None:
        print("## 80K-node graph")
        sections.append(("80K-node graph: one evaluation, and memory of a population of 100",
                         big_graph_table(big, args.repeats)))
    print("## pymoo")
    sections.append(("Against pymoo's BRKGA driving the same decoder, 5,000 evaluations, seeds 0..%d"
                     % (args.repeats - 1), pymoo_table(small[:2], args.repeats)))
    write_report(args, sections, t0)


if __name__ == "__main__":
    main()
