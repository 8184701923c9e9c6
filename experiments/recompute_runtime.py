"""Issue 53, the runtime objective with recomputation at d = 2 (`regal.recompute_runtime`).

    .venv/bin/python -m experiments.recompute_runtime                 # every cell not cached yet, then the report
    .venv/bin/python -m experiments.recompute_runtime --seeds 0       # seed 0 only
    .venv/bin/python -m experiments.recompute_runtime --report-only   # the report from the cached cells

Graphs: the PyTorch training steps of `data/manifest_recompute.json` (sources torch-cnn and
torch-seq; op costs measured on this CPU). Per graph and seed, d = 2, 5,000 evaluations, the
default device model:

- **fastest**: the runtime search without a limit (`regal.optimize(g, 2, objective="runtime")`):
  its makespan and its peak over time P (the largest device's, SPEC.md section 4).
- **flagship**: the memory flagship at d = 2 without recomputation: its sequential peak F (the
  lowest peak the search finds without recomputation, section 3).
- **limits** M = 80 % and 90 % of P (the brief's), and 100 % and 90 % of F (limits that bind: P
  is one device's peak, and a limited search splits the step over two): the runtime search
  without recomputation under M (**plain**, which may not fit) against the same with
  `recompute_budget=1.0` (**recompute**): fits or not, makespan, extra_fraction, seconds, and
  which stage gave the answer (`info["source"]`).
- **what-if**: the memory-objective recompute search at d = 2 (`recompute_budget=1.0`): its
  sequential peak (section 3b), its peak over time as section 4 runs it, and its peak over time
  if a recomputation started no earlier than the entry before it in the sequence on its device
  (a control edge from that entry; not what SPEC.md says: what such a rule would give).

Cells are cached one file each (a `regal-solution/1` file, with the cell's wall seconds, the
load average at its start and the code it ran) under `experiments/cache/recompute-runtime/<graph>/`,
stamped with the graph file's digest; a finished cell is never run again. Searches run with one
Numba thread, one cell after another. The report goes to `experiments/results/recompute-runtime/`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from experiments.runner import ROOT, check_stamp, commit, machine

NAME = "recompute-runtime"
CACHE = os.path.join(ROOT, "experiments", "cache", NAME)
RESULTS = os.path.join(ROOT, "experiments", "results", NAME)
MANIFEST = os.path.join(ROOT, "data", "manifest_recompute.json")
SOURCES = ("torch-cnn", "torch-seq")
BUDGET = 5000
DEVICES = 2
RECOMPUTE_BUDGET = 1.0
#: (label, reference, fraction): M = fraction x the reference's peak. "fastest": the runtime search
#: without a limit (its peak over time, P); "flagship": the memory flagship at d = 2 without
#: recomputation (its sequential peak, F: the lowest peak the search finds without recomputation).
LIMITS = (("P80", "fastest", 0.8), ("P90", "fastest", 0.9), ("F100", "flagship", 1.0), ("F90", "flagship", 0.9))
COMMAND = ".venv/bin/python -m experiments.recompute_runtime"
#: Said in the report, after the tables.
NOTES = """## Reading

- Under 80 % and 90 % of P the runtime search without recomputation fits on every graph: P is the
  fastest step's peak, which runs nearly everything on one device (these steps are chains: the
  fastest step is little shorter than one device's, the line below the tables), and a limited search splits the step over
  the two devices at almost no cost in time. Recomputation has nothing to add there, and the
  recompute search gives the runtime search's answer (stage "runtime").
- Under F (the lowest sequential peak without recomputation at d = 2) neither fits: the peak over
  time of a schedule is above its sequential peak (a copy occupies its device from the transfer's
  start, right after the producer; devices run side by side). Recomputation lowers the bytes over
  the limit on some graphs (the stage says which candidate), raises them on others (a fifth of
  the runtime search's evaluations go to the recompute stages) and never makes a schedule fit.
- The what-if says why: SPEC.md section 4 lets an idle device start any ready node, and a
  recomputation is ready as soon as its inputs exist, so on a device that waits for a transfer or
  for the other device it runs early and holds its value from then on. The memory search's
  schedules, whose sequential peaks recomputation halves, keep most of their peak over time; with
  each recomputation waiting for the entry before it on its device, part of the difference goes
  (the table's last column; not all: the copies' early start stays).

## The code the cells ran

The fastest, flagship, memory and plain cells ran at 7e55df6 (seed 0) and 7bce5c1 (seeds 1-2);
those paths (`regal.runtime`, `regal.memetic`, `regal.recompute_search`) are the same in both.
The recompute cells ran at 7bce5c1 (`LIMITED_SHARE` 0.8; the seed-0 cells of 7e55df6's 0.5 were
deleted and run again). The digest after "+" is other engineers' uncommitted changes in regal/ at
the time (regal/_remat_climb.py, regal/training/, regal/torch/), which the one-device and memory
stages call through `regal.recompute_search`.

## Designs tried and not adopted (this session, seed 0, ResNet-18 and GPT-6L, 2,000 evaluations)

- The recompute climb in limit mode (`regal._remat_climb.recompute_climb`, the sequential peak)
  on the runtime schedule, its limit lowered after each round by what the timed model finds over
  the limit (6 rounds): the sequential peak fell (ResNet-18, device 0: 457 -> 329 MB) and the
  peak over time did not move (457 MB; the recomputations ran early); deleted for the timed climb.
- The fastest step (no limit) made to fit by recomputation: 54.8 MB over at 8.13 s on ResNet-18 at
  a 450 MB limit, where the limited runtime search was 7.4 MB over at 7.35 s; deleted.
- The runtime search's share `LIMITED_SHARE` 0.5 (then 0.8, adopted): at 0.5 one cell of 24 at
  80 / 90 % of P (lstm_2l_h650_s64_b64, 80 %) stayed 18.5 MB over the limit the plain search fits
  at 3,500 of 5,000 evaluations; at 0.8, 24 of 24 fit (seed 0).
"""


def graphs() -> list[tuple[str, str]]:
    """(name, path) of the torch graphs of the manifest."""
    with open(MANIFEST, encoding="utf-8") as f:
        m = json.load(f)
    root = os.path.join(os.path.dirname(MANIFEST), m["root"])
    return [(name, os.path.join(root, m["graphs"][name]["path"])) for src in SOURCES for name in m["by_source"][src]]


def code_state() -> str:
    """HEAD, and a digest of regal/'s uncommitted diff when there is one."""
    import hashlib
    import subprocess
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    diff = subprocess.run(["git", "diff", "HEAD", "--", "regal"], capture_output=True, text=True, cwd=ROOT).stdout
    return head.strip() + (f"+{hashlib.sha1(diff.encode()).hexdigest()[:8]}" if diff else "")


def cell_path(graph: str, kind: str, seed: int) -> str:
    return os.path.join(CACHE, graph, f"{kind}_s{seed}.json")


def run_cell(out: str, g, seed: int, code: str, **options) -> None:
    """One search, saved with its wall seconds, the load average at its start and the code."""
    import dataclasses
    import regal
    load = os.getloadavg()[0]
    t = time.perf_counter()
    sol = regal.optimize(g, DEVICES, budget=BUDGET, seed=seed, num_threads=1, **options)
    wall = time.perf_counter() - t
    sol = dataclasses.replace(sol, info={**sol.info, "wall_seconds": wall, "load": load, "code": code})
    os.makedirs(os.path.dirname(out), exist_ok=True)
    sol.save(out)


def in_place_peaks(g, sol) -> list[int]:
    """The peaks over time (section 4) of a solution with recomputations if each recomputation
    started no earlier than the entry before it in the sequence on its device (a control edge
    from that entry to it in the instance graph)."""
    from regal.graph import Graph
    from regal.recompute_runtime import fast_instance_graph
    from regal.timed import simulate_timed
    inst, nodes = fast_instance_graph(g, sol.order)
    place = sol.placement[nodes]
    m = inst.num_nodes
    seen = np.zeros(g.num_nodes, dtype=bool)
    last = {}
    extra = [[] for _ in range(m)]
    for i, v in enumerate(nodes.tolist()):
        if inst.resident[i]:
            continue
        k = int(place[i])
        if seen[v] and k in last:
            extra[i].append(last[k])
        seen[v] = True
        last[k] = i
    rows = [inst.ctrl_in_idx[inst.ctrl_in_ptr[i]:inst.ctrl_in_ptr[i + 1]].tolist() + extra[i] for i in range(m)]
    ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    idx = np.fromiter((u for r in rows for u in r), dtype=np.int32, count=int(ptr[-1]))
    fields = {f: getattr(inst, f) for f in ("name", "ids", "ops", "bytes", "temp_bytes", "cost", "resident", "in_ptr",
                                            "in_idx", "reuse_ptr", "reuse_idx", "output", "meta", "no_recompute")}
    g2 = Graph(ctrl_in_ptr=ptr, ctrl_in_idx=idx, **fields)
    sim = simulate_timed(g2, place, np.arange(m), sol.num_devices)
    return [int(x) for x in sim.device_peak_bytes]


def solve(names: list[str], seeds: list[int], log) -> None:
    """Every cell not cached yet: seed by seed (a first table from seed 0 early), graph by graph."""
    import regal
    code = code_state()
    for seed in seeds:
        for name, path in graphs():
            if names and name not in names:
                continue
            folder = os.path.join(CACHE, name)
            os.makedirs(folder, exist_ok=True)
            check_stamp(folder, path)
            g = regal.load(path)
            jobs = [("fastest", {"objective": "runtime"}), ("flagship", {}),
                    ("memory", {"recompute_budget": RECOMPUTE_BUDGET})]
            for kind, opts in jobs:
                out = cell_path(name, kind, seed)
                if not os.path.exists(out):
                    run_cell(out, g, seed, code, **opts)
                    log(f"{name} {kind} s{seed}")
            refs = reference_peaks(name, seed, g)
            for label, ref, frac in LIMITS:
                limit = int(refs[ref] * frac)
                for kind, opts in (("plain", {}), ("recompute", {"recompute_budget": RECOMPUTE_BUDGET})):
                    out = cell_path(name, f"{kind}_{label}", seed)
                    if not os.path.exists(out):
                        run_cell(out, g, seed, code, objective="runtime", memory_limit_bytes=limit, **opts)
                        log(f"{name} {kind} {label} s{seed}")


def reference_peaks(name: str, seed: int, g) -> dict:
    """{"fastest": P, "flagship": F} of a graph and seed (module docstring)."""
    from regal.solution import load_solution
    return {"fastest": load_solution(cell_path(name, "fastest", seed), g).info["timed"]["peak_bytes"],
            "flagship": load_solution(cell_path(name, "flagship", seed), g).peak_bytes}


def _row(path: str, g) -> dict | None:
    from regal.solution import load_solution
    if not os.path.exists(path):
        return None
    sol = load_solution(path, g)   # every figure re-simulated and checked against its claims
    t = sol.info.get("timed") or {}
    rc = sol.info.get("recompute") or {}
    return {"sol": sol, "makespan": t.get("makespan_s"), "peak": t.get("peak_bytes"), "fits": t.get("feasible"),
            "extra": float(rc.get("extra_fraction", 0.0)), "seconds": float(sol.info["wall_seconds"]),
            "load": float(sol.info.get("load", float("nan"))), "source": sol.info.get("source", ""),
            "code": sol.info.get("code", "")}


def report(seeds: list[int]) -> str:
    import regal
    lines = [f"# {NAME}: the runtime objective with recomputation at d = 2 (issue 53)", "",
             f"Command: `{COMMAND} --seeds {' '.join(map(str, seeds))}` (cells cached; this report: "
             f"`{COMMAND} --report-only --seeds {' '.join(map(str, seeds))}`).",
             f"Report written at commit {commit()} on {machine()}; the code each cell ran and the load "
             "average at its start are in the cells (summarized below).", "",
             f"d = {DEVICES}, {BUDGET:,} evaluations, one Numba thread, default device model (100 GB/s, 5 us). "
             f"P: the peak over time (SPEC.md 4, the largest device's) of the runtime search without a limit; "
             f"M: the limit. **plain**: the runtime search under M without recomputation; **recompute**: the same "
             f"with `recompute_budget={RECOMPUTE_BUDGET}` (`regal.recompute_runtime`). Makespans in seconds "
             "(op costs measured on this CPU); ratio = recompute / plain (both fit); over = bytes over M "
             "summed over devices. Seeds: " + ", ".join(map(str, seeds)) + ".", ""]
    rows, codes, loads = [], set(), []
    whatif, speedup = [], []
    for name, path in graphs():
        g = None
        for seed in seeds:
            if not os.path.exists(cell_path(name, "fastest", seed)):
                continue
            g = g or regal.load(path)
            fast = _row(cell_path(name, "fastest", seed), g)
            if seed == seeds[0]:
                speedup.append(1.0 - fast["makespan"] / float(g.cost[~g.resident].sum()))
            codes.add(fast["code"])
            loads.append(fast["load"])
            mem = _row(cell_path(name, "memory", seed), g)
            if mem is not None:
                from regal.timed import resimulate
                spec = [int(x) for x in resimulate(g, mem["sol"]).device_peak_bytes]
                whatif.append((name, seed, fast["peak"], int(mem["sol"].peak_bytes), max(spec),
                               max(in_place_peaks(g, mem["sol"])), mem["extra"]))
            refs = reference_peaks(name, seed, g) if os.path.exists(cell_path(name, "flagship", seed)) else {}
            for label, ref, frac in LIMITS:
                p = _row(cell_path(name, f"plain_{label}", seed), g)
                r = _row(cell_path(name, f"recompute_{label}", seed), g)
                if p is None or r is None or ref not in refs:
                    continue
                for x in (p, r):
                    codes.add(x["code"])
                    loads.append(x["load"])
                limit = int(refs[ref] * frac)
                rows.append({"graph": name, "seed": seed, "frac": label, "P": refs[ref], "M": limit,
                             "fast": fast["makespan"], "plain": p, "rec": r,
                             "p_over": _over(p["sol"], limit), "r_over": _over(r["sol"], limit)})
    for label, ref, frac in LIMITS:
        sel = [x for x in rows if x["frac"] == label]
        if not sel:
            continue
        what = "P (the fastest step's peak over time)" if ref == "fastest" else \
            "F (the no-recompute memory flagship's sequential peak at d = 2)"
        lines += [f"## {label}: M = {int(frac * 100)} % of {what}", "",
                  f"| graph | seed | {'P' if ref == 'fastest' else 'F'} (MB) | fastest (s) | plain: fits | plain (s) | recompute: fits | recompute (s) "
                  "| ratio | extra_fraction | stage | over plain / recompute (MB) | seconds plain / recompute |",
                  "|---|---:|---:|---:|:-:|---:|:-:|---:|---:|---:|---|---:|---:|"]
        for x in sel:
            p, r = x["plain"], x["rec"]
            ratio = f"{r['makespan'] / p['makespan']:.4f}" if p["fits"] and r["fits"] else "-"
            lines.append(f"| {x['graph']} | {x['seed']} | {x['P'] / 1e6:,.1f} | {x['fast']:.3f} | "
                         f"{'yes' if p['fits'] else 'no'} | {p['makespan']:.3f} | {'yes' if r['fits'] else 'no'} | "
                         f"{r['makespan']:.3f} | {ratio} | {r['extra']:.3f} | {r['source']} | "
                         f"{x['p_over'] / 1e6:,.1f} / {x['r_over'] / 1e6:,.1f} | {p['seconds']:.1f} / {r['seconds']:.1f} |")
        both = [x["rec"]["makespan"] / x["plain"]["makespan"] for x in sel if x["plain"]["fits"] and x["rec"]["fits"]]
        lines += ["", f"Fits: plain {sum(x['plain']['fits'] for x in sel)} of {len(sel)}, recompute "
                  f"{sum(x['rec']['fits'] for x in sel)} of {len(sel)}; recompute fits where plain does not: "
                  f"{sum(x['rec']['fits'] and not x['plain']['fits'] for x in sel)}; plain fits where recompute does "
                  f"not: {sum(x['plain']['fits'] and not x['rec']['fits'] for x in sel)}. Makespan ratio where both fit: "
                  + (f"mean {np.mean(both):.4f}, min {min(both):.4f}, max {max(both):.4f} ({len(both)} cells)."
                     if both else "none.")
                  + f" Over the limit (cells where neither fits): recompute lower in "
                  f"{sum(x['r_over'] < x['p_over'] for x in sel if not x['plain']['fits'] and not x['rec']['fits'])}, "
                  f"higher in {sum(x['r_over'] > x['p_over'] for x in sel if not x['plain']['fits'] and not x['rec']['fits'])}"
                  f" of {sum(not x['plain']['fits'] and not x['rec']['fits'] for x in sel)}. Stage of the answer: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(_count(x["rec"]["source"] for x in sel).items()))
                  + ". Seconds (median): plain "
                  f"{np.median([x['plain']['seconds'] for x in sel]):.1f}, recompute "
                  f"{np.median([x['rec']['seconds'] for x in sel]):.1f}.", ""]
    if whatif:
        lines += ["## What-if: recomputations in place", "",
                  f"The memory-objective recompute search at d = 2 (`recompute_budget={RECOMPUTE_BUDGET}`, "
                  f"{BUDGET:,} evaluations): its sequential peak (SPEC.md 3b), its peak over time as SPEC.md 4 runs "
                  "it (a device that is idle starts any ready node, so a recomputation runs as soon as its inputs "
                  "exist), and its peak over time if each recomputation waited for the entry before it in the "
                  "sequence on its device. Peaks: the largest device's, MB.", "",
                  "| graph | seed | P (fastest) | sequential | over time (SPEC 4) | over time, in place | extra_fraction "
                  "| gap closed in place |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        closed = []
        for name, seed, pk, seq, spec, inplace, extra in whatif:
            closed.append((spec - inplace) / (spec - seq) if spec > seq else 0.0)
            lines.append(f"| {name} | {seed} | {pk / 1e6:,.1f} | {seq / 1e6:,.1f} | {spec / 1e6:,.1f} | "
                         f"{inplace / 1e6:,.1f} | {extra:.3f} | {100 * closed[-1]:.0f} % |")
        lines += ["", f"Gap closed (over time minus sequential, in place): median {100 * np.median(closed):.0f} %, "
                  f"range {100 * min(closed):.0f}-{100 * max(closed):.0f} %.", ""]
    if speedup:
        lines += [f"The fastest step against the step on one device (the sum of the op costs): "
                  f"{100 * min(speedup):.1f}-{100 * max(speedup):.1f} % shorter (median "
                  f"{100 * np.median(speedup):.1f} %).", ""]
    lines += [NOTES, f"Cells ran at code {', '.join(sorted(codes))}; load average at their start: median "
              f"{np.median(loads):.1f}, max {max(loads):.1f} (2 cores, shared)." if loads else ""]
    return "\n".join(lines) + "\n"


def _count(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def _over(sol, limit: int) -> int:
    return int(sum(max(0, int(x) - limit) for x in sol.info["timed"]["device_peak_bytes"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--graphs", nargs="*", default=[])
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    os.makedirs(CACHE, exist_ok=True)
    logf = open(os.path.join(CACHE, "progress.log"), "a", encoding="utf-8")

    def log(msg: str) -> None:
        logf.write(f"{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f} {msg}\n")
        logf.flush()

    if not args.report_only:
        solve(args.graphs, args.seeds, log)
    text = report(args.seeds)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "README.md"), "w", encoding="utf-8") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
