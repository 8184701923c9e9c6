"""Timed-model benchmark (issue 16): one timed evaluation against one peak-memory evaluation.

    python -m benchmarks.bench_timed [--repeats 7] [--devices 4] [--out benchmarks/results/timed.md]

One evaluation = decode one chromosome + simulate it (SPEC.md sections 3 and 5 for peak memory,
section 4 for time), on one thread, on random chromosomes of the shipped real graph closest to
1,000 nodes (and, for scale, the ones closest to 100 and 10,000). Each figure is the median over
--repeats runs of a batch of 200 chromosomes evaluated one by one (`decode_evaluate` /
`decode_timed`'s kernels called directly, without the Python wrappers' checks), plus the
batched parallel population evaluation on one thread. Peak and timed batches alternate, and the
ratio is the median of the per-repeat ratios (the machine may be shared). Target: <= 2.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time

import numpy as np

from benchmarks.bench_engine import real_graph_near
from regal.kernels import decode as _kernels
from regal.kernels import timed as _timed
from regal.decode import chromosome_length, evaluate_population
from regal.search import numba_threads
from regal.simulate import kernel_graph
from regal.timed import DeviceModel, evaluate_population_timed, kernel_devices, timed_chromosome_length

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _median_per_eval(fn, batch: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) / batch)
    return float(np.median(times))


def measure(graph, d: int, repeats: int, batch: int = 200) -> dict:
    n = graph.num_nodes
    rng = np.random.default_rng(0)
    peak_keys = rng.random((batch, chromosome_length(n, d)))
    timed_keys = rng.random((batch, timed_chromosome_length(n, d)))
    kg = kernel_graph(graph)
    model = DeviceModel().validate(d)
    dev = kernel_devices(model, d)
    placement = np.empty(n, dtype=np.int32)
    order = np.empty(n, dtype=np.int32)
    device_peak = np.empty(d, dtype=np.int64)
    no_trace = np.empty((0, d), dtype=np.int64)
    none_f, none_i, none_m = np.empty(0), np.empty(0, dtype=np.int32), np.empty((0, d), dtype=np.int64)
    rec = _timed.TimedRecord(device_peak, none_f, none_f, none_i, none_f, none_i, none_f, none_m)

    def peak_batch():
        for keys in peak_keys:
            _kernels.decode_simulate(kg, keys, d, placement, order, device_peak, no_trace)

    def timed_batch():
        for keys in timed_keys:
            _timed.decode_timed(keys, kg, dev, placement, rec)

    peak_batch(), timed_batch()  # compile or load from the cache
    with numba_threads(1):
        evaluate_population(graph, peak_keys[:2], d), evaluate_population_timed(graph, timed_keys[:2], d)
        single = _interleaved(peak_batch, timed_batch, batch, repeats)
        pop = _interleaved(lambda: evaluate_population(graph, peak_keys, d),
                           lambda: evaluate_population_timed(graph, timed_keys, d), batch, repeats)
    return {"graph": graph.name, "nodes": n, "d": d, "peak_us": single[0] * 1e6, "timed_us": single[1] * 1e6,
            "ratio": single[2], "pop_peak_us": pop[0] * 1e6, "pop_timed_us": pop[1] * 1e6, "pop_ratio": pop[2]}


def _interleaved(peak_fn, timed_fn, batch: int, repeats: int) -> tuple[float, float, float]:
    """Seconds per evaluation of each (medians) and the median of the per-repeat ratios: the two
    run back to back in every repeat, so a shared machine's load hits both alike."""
    peak, timed = [], []
    for _ in range(repeats):
        peak.append(_median_per_eval(peak_fn, batch, 1))
        timed.append(_median_per_eval(timed_fn, batch, 1))
    ratios = np.asarray(timed) / np.asarray(peak)
    return float(np.median(peak)), float(np.median(timed)), float(np.median(ratios))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--devices", type=int, nargs="+", default=[4])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000])
    ap.add_argument("--out", default=None, help="also write the table here (Markdown)")
    args = ap.parse_args(argv)
    rows = ["| graph | nodes | d | peak eval (us) | timed eval (us) | timed / peak | population: peak (us/eval) "
            "| population: timed (us/eval) | timed / peak |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size in args.sizes:
        g = real_graph_near(size)
        for d in args.devices:
            r = measure(g, d, args.repeats)
            rows.append(f"| {r['graph']} | {r['nodes']:,} | {d} | {r['peak_us']:.1f} | {r['timed_us']:.1f} | "
                        f"{r['ratio']:.2f}x | {r['pop_peak_us']:.1f} | {r['pop_timed_us']:.1f} | {r['pop_ratio']:.2f}x |")
            print(rows[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    text = "\n".join([
        "# Timed model: one timed evaluation against one peak-memory evaluation", "",
        f"`python -m benchmarks.bench_timed --repeats {args.repeats} --devices {' '.join(map(str, args.devices))} "
        f"--sizes {' '.join(map(str, args.sizes))}` at commit {commit} on {platform.node()} "
        f"({os.cpu_count()} cores, shared), one Numba thread, medians of {args.repeats} batches of 200 random "
        "chromosomes, default device model (100 GB/s, 5 us).", "", *rows, ""])
    if args.out:
        from regal._io import atomic_text
        with atomic_text(args.out) as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
