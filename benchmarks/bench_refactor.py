"""A refactor's speed: the flagship (or one kernel a refactor changed) before (a git revision) and
after (this tree, or `--new` another revision), in alternating processes, as
docs/engine-speed.md's issue-49 section measures it.

    python -m benchmarks.bench_refactor --old df34816 --devices 1 2 4 --rounds 7
    python -m benchmarks.bench_refactor --old d31e652 --new acda099 --what greedy lpmf allocation

The old revision is unpacked with `git archive` into a temporary folder and put first on
PYTHONPATH for its processes (its Numba cache starts cold: its first process compiles). Each
process loads the graph, runs the measured call once to warm up, then `--repeats` times, and
reports the median CPU time of those runs; a round runs old and new once each, alternating which
goes first. `--what`: `flagship` (`regal.optimize`, `--budget` evaluations, one Numba thread,
seed 0), `greedy` (`heuristics.greedy_schedule`, the greedy's kernel), `lpmf` (Inductor's LPMF
order) or `allocation` (SPEC 3a's buffer assignment of the greedy's schedule); each through the
public API, so any revision runs it. Prints, per measured call and device count, the medians
over rounds and their ratio (after / before) and the median of the rounds' paired ratios.

    python -m benchmarks.bench_refactor --old 1c56604 --in-process --rounds 41
    python -m benchmarks.bench_refactor --old 78f441b --in-process --kernels greedy --devices 1 2 4 --rounds 41

`--in-process` times the kernels a refactor rewrote, old and new interleaved in one process (no
process-to-process spread): the old revision's kernel module (`git show REV:PATH`) is loaded
beside this tree's under another name, and each round calls old and new once each on the same
inputs, alternating which goes first; it prints the median time of each and the median of the
rounds' ratios. Kernels: the greedy (`greedy_schedule`), Inductor's LPMF (`lpmf_order`) and the
allocation's assignment pass (`assign`, `_assign` before), on `--kernel-graph`; `--kernels`
picks some of them (then each of `--devices` is timed; else the last).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

GRAPH = "data/graphs/real/vit_l8_d256_b32_fwd_pre.json.gz"

CHILD = r"""
import sys, time, statistics
import numba
import regal
from regal import heuristics
numba.set_num_threads(1)
g = regal.load(sys.argv[1])
what, d, budget, repeats = sys.argv[5], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if what == "allocation":
    from regal.allocation import allocation
    placement, order = heuristics.greedy_schedule(g, d)
calls = {"flagship": lambda: regal.optimize(g, devices=d, budget=budget, seed=0),
         "greedy": lambda: heuristics.greedy_schedule(g, d),
         "lpmf": lambda: heuristics.lpmf_order(g),
         "allocation": lambda: allocation(g, placement, order, d)}
call = calls[what]
call()
times = []
for _ in range(repeats):
    t = time.process_time()
    call()
    times.append(time.process_time() - t)
print(statistics.median(times))
"""

WHAT = ("flagship", "greedy", "lpmf", "allocation")


def _run(tree: str, what: str, d: int, budget: int, repeats: int) -> float:
    env = {**os.environ, "PYTHONPATH": tree, "NUMBA_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.join(tree, GRAPH), str(d), str(budget), str(repeats),
                          what], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


KERNEL_GRAPH = "data/graphs/real/vit_l8_d256_b8_train_opt.json.gz"
#: (label, kernel module, old name of the kernel, new name): the kernels `--in-process` times.
KERNELS = (("greedy", "regal/kernels/greedy.py", "greedy_schedule", "greedy_schedule"),
           ("lpmf", "regal/kernels/orders.py", "lpmf_order", "lpmf_order"),
           ("allocation", "regal/kernels/alloc.py", "_assign", "assign"))


#: Renames between the old kernel sources and this tree's structs, applied to the old source so
#: that it runs on this tree's arguments (issue 57: `ClimbParams.policy_mix` is `mix`).
REWRITES = (("p.policy_mix", "p.mix"),)


def _old_module(repo: str, rev: str, path: str, into: str):
    import importlib.util
    src = subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], capture_output=True, text=True,
                         check=True).stdout
    for a, b in REWRITES:
        src = src.replace(a, b)
    name = "old_" + os.path.basename(path)[:-3]
    file = os.path.join(into, name + ".py")
    with open(file, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(name, file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kernel_calls(graph_path: str, d: int):
    """label -> (args of the new kernel, args of the old one): fresh output arrays per call."""
    import numpy as np
    import regal
    import regal.allocation as allocation
    from regal import heuristics
    from regal.simulate import kernel_graph
    g = regal.load(graph_path)
    kg, n = kernel_graph(g), g.num_nodes
    placement, order = heuristics.greedy_schedule(g, d)
    recorded = []
    real = allocation._assign
    allocation._assign = lambda *a: recorded.append(a) or real(*a)
    try:
        allocation.allocation(g, placement, order, d)
    finally:
        allocation._assign = real
    return {"greedy": lambda: (kg, d, heuristics.GREEDY_WINDOW, np.empty(n, np.int32), np.empty(n, np.int32), np.zeros(2, np.int64)),
            "lpmf": lambda: (kg, np.empty(n, np.int32)),
            "allocation": lambda: recorded[0]}, n


def in_process(repo: str, rev: str, rounds: int, graph_path: str, d: int, kernels=None) -> None:
    import time
    calls, n = _kernel_calls(graph_path, d)
    print(f"old {rev}, new {repo}; in one process, {rounds} rounds, {graph_path} ({n:,} nodes), d = {d}; "
          f"load {os.getloadavg()[0]:.1f}")
    print("| kernel | before (ms) | after (ms) | after / before (medians) | median of the rounds' ratios |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, path, old_name, new_name in KERNELS:
            if kernels and label not in kernels:
                continue
            import importlib
            new = getattr(importlib.import_module(path[:-3].replace("/", ".")), new_name)
            old_mod = _old_module(repo, rev, path, tmp)
            old = getattr(old_mod, old_name, None) or getattr(old_mod, new_name)
            args = calls[label]
            old(*args()), new(*args())   # compiled (or loaded) before the clock
            before, after = [], []
            for r in range(rounds):
                pair = [(old, before), (new, after)]
                for fn, got in (pair if r % 2 == 0 else pair[::-1]):
                    a = args()
                    t = time.process_time()
                    for _ in range(5):
                        fn(*a)
                    got.append((time.process_time() - t) / 5)
            b, a = statistics.median(before), statistics.median(after)
            ratio = statistics.median(x / y for x, y in zip(after, before))
            print(f"| {label} | {b * 1e3:.3f} | {a * 1e3:.3f} | {a / b:.3f} | {ratio:.3f} |", flush=True)
        if not kernels or "flagship" in kernels:
            _flagship_in_process(repo, rev, rounds, graph_path, d, tmp)
    print(f"load at the end {os.getloadavg()[0]:.1f}")


def _flagship_in_process(repo: str, rev: str, rounds: int, graph_path: str, d: int, tmp: str) -> None:
    """The flagship (5,000 evaluations, one thread, seed 0) with the old climb kernel
    (regal/kernels/climb.py of `rev`) and with this tree's, swapped in `regal.climb` between runs;
    the two must give the same peak."""
    import time
    import numba
    import regal
    import regal.climb as climb
    numba.set_num_threads(1)
    g = regal.load(graph_path)
    new = climb._climb_kernel
    old = _old_module(repo, rev, "regal/kernels/climb.py", tmp)
    peaks, before, after = {}, [], []
    for mod in (old, new):   # compiled before the clock
        climb._climb_kernel = mod
        peaks[mod is new] = regal.optimize(g, devices=d, budget=5000, seed=0).peak_bytes
    for r in range(rounds):
        pair = [(old, before), (new, after)]
        for mod, got in (pair if r % 2 == 0 else pair[::-1]):
            climb._climb_kernel = mod
            t = time.process_time()
            regal.optimize(g, devices=d, budget=5000, seed=0)
            got.append(time.process_time() - t)
    climb._climb_kernel = new
    b, a = statistics.median(before), statistics.median(after)
    ratio = statistics.median(x / y for x, y in zip(after, before))
    same = "same peak" if peaks[True] == peaks[False] else f"PEAKS DIFFER {peaks}"
    print(f"| flagship, the climb kernel swapped ({same}) | {b * 1e3:.1f} | {a * 1e3:.1f} | {a / b:.3f} | "
          f"{ratio:.3f} |", flush=True)


def _unpack(repo: str, rev: str, into: str) -> None:
    archive = subprocess.run(["git", "-C", repo, "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_refactor", description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="git revision before the refactor")
    p.add_argument("--new", default=None, help="git revision after it (default: this working tree)")
    p.add_argument("--what", nargs="+", choices=WHAT, default=["flagship"], help="what to time")
    p.add_argument("--in-process", action="store_true", help="the rewritten kernels, old and new in one process")
    p.add_argument("--kernel-graph", default=KERNEL_GRAPH, help="--in-process: the graph")
    p.add_argument("--kernels", nargs="+", choices=[k[0] for k in KERNELS] + ["flagship"], default=None,
                   help="--in-process: only these (default: every kernel and the flagship)")
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=int, default=5000)
    args = p.parse_args(argv)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.in_process:
        for d in args.devices if args.kernels else args.devices[-1:]:
            in_process(repo, args.old, args.rounds, os.path.join(repo, args.kernel_graph), d, args.kernels)
        return 0
    with tempfile.TemporaryDirectory() as old, tempfile.TemporaryDirectory() as other:
        _unpack(repo, args.old, old)
        new = repo
        if args.new:
            _unpack(repo, args.new, other)
            new = other
        print(f"old {args.old}, new {args.new or repo}; {', '.join(args.what)} (flagship: {args.budget:,} "
              f"evaluations), one thread; {args.rounds} rounds of a median of {args.repeats}; load "
              f"{os.getloadavg()[0]:.1f}")
        print("| what | d | before (s) | after (s) | after / before (medians) | paired (median of rounds) |")
        print("|---|---:|---:|---:|---:|---:|")
        for what in args.what:
            for d in args.devices:
                before, after = [], []
                for r in range(args.rounds):
                    pair = [(old, before), (new, after)]
                    for tree, got in (pair if r % 2 == 0 else pair[::-1]):
                        got.append(_run(tree, what, d, args.budget, args.repeats))
                b, a = statistics.median(before), statistics.median(after)
                paired = statistics.median(x / y for x, y in zip(after, before))
                print(f"| {what} | {d} | {b:.4f} | {a:.4f} | {a / b:.3f} | {paired:.3f} |", flush=True)
        print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
