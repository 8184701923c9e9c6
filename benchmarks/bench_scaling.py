"""Large graphs (issue 36): what each step before the search costs per node, and whether
`regal optimize --time-limit T` writes its plan within T (+10 %), with its peak memory.

    python -m benchmarks.bench_scaling GRAPH [GRAPH ...] [--time-limit 20] [--steps/--no-steps]

GRAPH: graph files (e.g. from `python -m benchmarks.big_graph --nodes 300000 -o /tmp/big.json.gz`;
building 300K nodes takes minutes, so build once and keep the file).

- steps (in this process, after loading the kernels): loading (JSON parse + validation), the
  lower bound, METIS, each compiler order, the greedy schedule, one decode + simulation; seconds
  and microseconds per node, so that a step that is not linear stands out.
- the command (a fresh process): `regal optimize GRAPH -d 2 -n BUDGET --time-limit T -o OUT
  --json`; the time from the process's start until OUT is written (the plan), over the limit
  in %, and the peak RSS until then (VmHWM, read every 50 ms; the process is ended once the plan
  is written: the report after it, the XLA-style allocation, is quadratic and not part of the
  plan). Prints a Markdown table per part; the machine's load is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def steps(path: str, devices: int) -> list[tuple[str, float]]:
    """(step, seconds) of the steps before a search, each timed once in this process."""
    import numpy as np
    import regal.commands._common
    from regal import heuristics
    from regal.decode import chromosome_length, evaluate_population
    from regal.flagship import warmup
    from regal.load import load_graph
    from regal.structure import metis_placement
    regal.commands._common.start_numba()
    warmup(devices)
    out = []

    def timed(name, fn):
        t = time.perf_counter()
        value = fn()
        out.append((name, time.perf_counter() - t))
        return value

    g = timed("load: JSON parse + validation", lambda: load_graph(path))
    timed("lower bound (Graph.lower_bound)", lambda: g.lower_bound(devices))
    timed("METIS placement", lambda: metis_placement(g, devices, 0))
    for name in heuristics._COMPILER_ORDERS:
        timed(f"order {name}", lambda: heuristics._compiler_order(g, name))
    timed("greedy schedule", lambda: heuristics.greedy_schedule(g, devices))
    timed("packed seeds (all)", lambda: list(heuristics.packed_solutions(g, devices, 0)))
    keys = np.random.default_rng(0).random((1, chromosome_length(g.num_nodes, devices)))
    timed("one decode + simulation", lambda: evaluate_population(g, keys, devices))
    return g.num_nodes, out


def command(path: str, devices: int, budget: int, time_limit_s: float, population: int | None = None) -> dict:
    """Time to the plan written, peak RSS until then, and the solution's own summary."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        cmd = [sys.executable, "-m", "regal.cli", "optimize", path, "-d", str(devices), "-n", str(budget),
               "--time-limit", str(time_limit_s), "-o", out, "--json"]
        if population is not None:
            cmd += ["--population", str(population)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp)
        hwm = 0
        written = None
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            hwm = max(hwm, int(line.split()[1]) * 1024)
            except OSError:
                pass
            if os.path.exists(out):
                written = time.perf_counter() - t0
                break
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if written is None and os.path.exists(out):
            written = time.perf_counter() - t0
        if written is None:
            raise SystemExit(f"no plan written: {proc.stderr.read().decode()[-800:]}")
        with open(out) as f:
            doc = json.load(f)
        return {"plan_s": written, "rss": hwm, "seconds": doc["seconds"], "peak": doc["peak_bytes"],
                "stopped": doc.get("info", {}).get("stopped"), "evaluations": doc["evaluations"],
                "start": (doc.get("info", {}).get("seeding") or ["-"])[0]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--devices", "-d", type=int, default=2)
    ap.add_argument("--budget", "-n", type=int, default=2000)
    ap.add_argument("--time-limit", type=float, nargs="+", default=[20.0])
    ap.add_argument("--population", type=int, default=None,
                    help="BRKGA population (default the command's, 100, which the flagship shrinks to fit: 33 at 1M nodes, d = 2)")
    ap.add_argument("--steps", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--command", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args(argv)
    sizes = {}
    if args.steps:
        print("| graph | nodes | step | seconds | us per node |\n|---|---:|---|---:|---:|")
        for path in args.graphs:
            n, rows = steps(path, args.devices)
            sizes[path] = n
            for name, sec in rows:
                print(f"| {os.path.basename(path)} | {n:,} | {name} | {sec:.2f} | {sec / n * 1e6:.2f} |", flush=True)
        print(f"\nload average {os.getloadavg()[0]:.2f}\n")
    if args.command:
        print("| graph | time limit (s) | plan written after (s) | over the limit | peak RSS until then | "
              "RSS per node | solution `seconds` | evaluations | stopped | load avg |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
        for path in args.graphs:
            n = sizes.get(path)
            for limit in args.time_limit:
                r = command(path, args.devices, args.budget, limit, args.population)
                per = "-" if n is None else f"{r['rss'] / n / 1024:.1f} KiB"
                print(f"| {os.path.basename(path)} | {limit:g} | {r['plan_s']:.1f} | "
                      f"{(r['plan_s'] / limit - 1) * 100:+.0f} % | {r['rss'] / 2**30:.2f} GiB | {per} | "
                      f"{r['seconds']:.1f} | {r['evaluations']:,} | {r['stopped']} | {os.getloadavg()[0]:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
