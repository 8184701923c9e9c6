"""MiniMalloc's 11 challenging instances: regal's packer against the live-bytes bound, beside
greedy by size (issue 35). Prints a Markdown table.

    python -m benchmarks.bench_packing [--time-limit 15] [--dir ../shared/minimalloc]

Per instance: the live-bytes bound (the most bytes live at once), greedy by size (largest
first, each at the lowest offset that fits: TFLite's "greedy by size"), the best greedy
placement regal tries first, and `regal.packing.pack` within the time limit; wall and CPU
seconds (the machine may be shared: CPU time is what the packer itself used); every packing is
checked by `regal.packing.check` (and by a second, pairwise check here).
"""

from __future__ import annotations

import argparse
import glob
import os
import time

import numpy as np

from regal.kernels import pack as K
from regal import packing


def greedy_by_size(inst: packing.Instance) -> int:
    """Largest first (ties: longer life first), each at the lowest offset that fits."""
    order = np.lexsort((-(inst.upper - inst.lower), -inst.size)).astype(np.int64)
    stop = np.zeros(1, dtype=np.int64)
    ptr, idx = K.overlaps(inst.lower, inst.upper, stop)
    off, _, _ = K.greedy(inst.size, ptr, idx, order, False, stop)
    return packing.check(inst, off)


def pairwise_ok(inst: packing.Instance, off: np.ndarray) -> bool:
    lo, up, sz = inst.lower, inst.upper, inst.size
    t = (lo[:, None] < up[None, :]) & (lo[None, :] < up[:, None])
    a = (off[:, None] < off[None, :] + sz[None, :]) & (off[None, :] < off[:, None] + sz[:, None])
    clash = t & a
    np.fill_diagonal(clash, False)
    return not clash.any()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=15.0)
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "minimalloc"))
    args = ap.parse_args(argv)
    files = sorted(glob.glob(os.path.join(args.dir, "*.csv")))
    packing.pack(packing.read_csv(files[0]), time_limit_s=1.0)  # compile or load the kernels
    print(f"time limit {args.time_limit:g} s per instance, {os.cpu_count()} cores\n")
    print("| instance | buffers | bound | greedy by size | regal greedy | regal packer | over bound | optimal "
          "| wall s | CPU s | checked |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ex, exg, exr = [], [], []
    for f in files:
        inst = packing.read_csv(f)
        gs = greedy_by_size(inst)
        rg = packing.pack(inst, time_limit_s=0.0).packed_bytes
        t, c = time.perf_counter(), time.process_time()
        res = packing.pack(inst, time_limit_s=args.time_limit)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        ok = packing.check(inst, res.offsets) == res.packed_bytes and pairwise_ok(inst, res.offsets)
        b = res.bound_bytes
        ex.append((res.packed_bytes - b) / b * 100)
        exg.append((gs - b) / b * 100)
        exr.append((rg - b) / b * 100)
        print(f"| {os.path.basename(f).split('.')[0]} | {len(inst.ids)} | {b:,} | {gs:,} ({exg[-1]:+.1f} %) | "
              f"{rg:,} ({exr[-1]:+.1f} %) | {res.packed_bytes:,} | {ex[-1]:+.2f} % | {'yes' if res.optimal else 'no'} | "
              f"{wall:.1f} | {cpu:.1f} | {'yes' if ok else 'NO'} |", flush=True)
    print(f"| mean | | | {np.mean(exg):+.1f} % | {np.mean(exr):+.1f} % | | {np.mean(ex):+.2f} % | "
          f"{sum(e == 0 for e in ex)} of {len(ex)} at the bound | | | |")


if __name__ == "__main__":
    main()
