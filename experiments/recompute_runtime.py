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
  sequential peak (section 3b), its peak over time and makespan as section 4 runs it now (a
  recomputation waits until every entry before it on its device has started), and under the
  rule before (a recomputation ready as soon as its inputs exist: the instance graph alone).
- **before**: the recompute cells as they were under the rule before (figures kept in
  `experiments/results/recompute-runtime/before_gate.json`, read from the cells before they were
  run again), beside the cells now.

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

- **SPEC.md section 4 changed** (commit 539eb80, issue 53): a recomputation is ready only once every
  entry before it in `order` on its device has started. Before, it was ready as soon as its inputs
  existed, a device that waited (for a transfer, for the other device) ran it early and held its
  value, and recomputation made **0 of the 72** F-limit cells fit. Now **43 of 72** fit (31 of 36
  at F, 12 of 36 at 90 % of F); every F-cell's recompute answer was run again, the other cells are
  as they were (without recomputations section 4 is unchanged: `python -m
  experiments.check_bitwise compare` 324 of 324 cells identical).
- The price where it fits: a makespan 0.7 % (F) and 3.4 % (90 % of F) above the plain search's
  schedule (which is over the limit), 5.6 % and 4.8 % above the fastest step's (medians; the
  table above), with extra_fraction 0.000-0.146.
- Under 80 % and 90 % of P the runtime search without recomputation fits on every graph (P is
  the fastest step's peak, which runs nearly everything on one device; a limited search splits the
  step over the two devices at almost no cost), the recompute stages do not run, and those cells
  are unchanged.
- **What still does not fit, measured.** The LSTM (3 of 3 seeds at both F limits): recomputation
  does not lower even its sequential peak below F there (the memory search with recomputation ends
  at 580-592 MB, above F's 540-546 MB), and the timed climb finds nothing (extra_fraction <= 0.002).
  The others (ResNet-34, DenseNet-121, VGG-16, both GPTs, BERT, BART at 90 % of F; ResNet-34 seed
  1 and DenseNet-121 seed 2 at F) end 7.8-112.7 MB over, 1.2-7.4x less than the plain search
  (except ResNet-34 seed 1 at F: the runtime search's own answer, on 80 % of the evaluations, 7.8
  MB over against the plain search's 6.1). What stays is the gap between a schedule's peak over
  time and its sequential peak that has nothing to do with recomputation. The no-recompute flagship's own schedules (sequential peak F) peak over
  time 10 % above F on DenseNet-121, 17-24 % on ResNet-34, 18-49 % on the GPTs and BERT, 36-57 % on
  BART (1-100 % over the 12 graphs): a copy occupies its device from the transfer's start, and a
  device runs ahead of its sequence while the other works. A limit at 90 % of F asks recomputation
  to take that gap and 10 % more.
- The what-if (the memory search's schedules, chosen for their sequential peak): the rule closes a
  median 66 % (1-94 %) of the gap between their peak over time and their sequential peak, at a
  median 9.7 % longer makespan.

## The rule chosen, by measurement (this session, before the rule was committed)

Which entries a recomputation waits for. On the 36 memory-search schedules above (the what-if),
the gap between the peak over time and the sequential peak closed (median, range) and the makespan
against no rule (median, max):

| a recomputation waits until ... has started | gap closed | makespan |
|---|---:|---:|
| every entry before it in `order` on its device (adopted) | 66 % (1-94 %) | 1.097, 1.229 |
| the entry just before it in `order` on its device (issue 53's proposal) | 40 % (-3-93 %) | 1.044, 1.174 |
| the entry just before it in `order`, any device ("finished") | 2 % (-2-37 %) | 1.023, 1.098 |
| both of the two before | 45 % (-1-93 %) | 1.071, 1.201 |

"The entry just before it on its device" may itself have run early, out of `order` (EfficientNet-B0:
765 MB either way; every entry: 398-407 MB). In the runtime search (seed 0, the 24 F-limit cells,
this script's settings, a switch in `regal.timed` since deleted): both rules fit the same 15 cells;
in the 9 that do not fit, "every entry" is lower over the limit in 3 (BERT 99.0 -> 65.4 MB,
DenseNet-121 73.0 -> 48.8, VGG-16 107.4 -> 62.9) and equal in 6; makespans where both fit: median
ratio 1.0000 (0.957-1.002). On one device "has started" and "has finished" are the same rule for an
entry of the same device (it runs one node at a time), so the rule is control edges
(`regal.timed.instance_schedule`, docs/timed-model.md item 4b).

## The code the cells ran

The fastest, flagship, memory and plain cells ran at 7e55df6 (seed 0) and 7bce5c1 (seeds 1-2);
those paths (`regal.runtime`, `regal.memetic`, `regal.recompute_search`) are the same in both.
The recompute cells at P ran at 7bce5c1 (`LIMITED_SHARE` 0.8); the recompute cells at F at
539eb80 (the rule), after the cells of 7bce5c1 under the rule before were kept in before_gate.json
and deleted. The digest after "+" is other engineers' uncommitted changes in regal/ at the time
(at 539eb80: regal/_remat_climb.py and regal/recompute_search.py, the memory search being changed,
which the one-device and memory stages call through `regal.recompute_search`).

## Designs tried and not adopted (seed 0, ResNet-18 and GPT-6L, 2,000 evaluations; before the rule)

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


def old_rule(g, sol):
    """The TimedSimulation of a solution with recomputations under section 4 before the gate
    (its instance graph alone: a recomputation ready as soon as its inputs exist)."""
    from regal.recompute import instance_graph
    from regal.timed import simulate_timed
    inst, nodes = instance_graph(g, sol.order, checked=True)
    return simulate_timed(inst, sol.placement[nodes], np.arange(inst.num_nodes), sol.num_devices)


def before() -> dict:
    """The recompute cells' figures under the rule before (module docstring), by "graph/kind"."""
    path = os.path.join(RESULTS, "before_gate.json")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


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
    old_cells = before()
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
                now, old = resimulate(g, mem["sol"]), old_rule(g, mem["sol"])
                whatif.append((name, seed, fast["peak"], int(mem["sol"].peak_bytes), old.peak_bytes, now.peak_bytes,
                               old.makespan_s, now.makespan_s, mem["extra"]))
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
                             "old": old_cells.get(f"{name}/recompute_{label}_s{seed}"),
                             "p_over": _over(p["sol"], limit), "r_over": _over(r["sol"], limit)})
    summary: list = []
    for label, ref, frac in LIMITS:
        sel = [x for x in rows if x["frac"] == label]
        if not sel:
            continue
        what = "P (the fastest step's peak over time)" if ref == "fastest" else \
            "F (the no-recompute memory flagship's sequential peak at d = 2)"
        lines += [f"## {label}: M = {int(frac * 100)} % of {what}", "",
                  f"| graph | seed | {'P' if ref == 'fastest' else 'F'} (MB) | fastest (s) | plain: fits | plain (s) | recompute: fits | recompute (s) "
                  "| ratio | extra_fraction | stage | over plain / recompute (MB) | seconds plain / recompute "
                  "| before: fits, s, over (MB), seconds |",
                  "|---|---:|---:|---:|:-:|---:|:-:|---:|---:|---:|---|---:|---:|---|"]
        for x in sel:
            p, r = x["plain"], x["rec"]
            ratio = f"{r['makespan'] / p['makespan']:.4f}" if p["fits"] and r["fits"] else "-"
            lines.append(f"| {x['graph']} | {x['seed']} | {x['P'] / 1e6:,.1f} | {x['fast']:.3f} | "
                         f"{'yes' if p['fits'] else 'no'} | {p['makespan']:.3f} | {'yes' if r['fits'] else 'no'} | "
                         f"{r['makespan']:.3f} | {ratio} | {r['extra']:.3f} | {r['source']} | "
                         f"{x['p_over'] / 1e6:,.1f} / {x['r_over'] / 1e6:,.1f} | {p['seconds']:.1f} / {r['seconds']:.1f} | "
                         f"{_before(x['old'], x['M'])} |")
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
                  f"{np.median([x['rec']['seconds'] for x in sel]):.1f}."
                  + _before_summary([x for x in sel if x["old"] is not None]), ""]
        summary.append((label, len(sel), sum(x["plain"]["fits"] for x in sel),
                        sum(x["old"]["feasible"] for x in sel if x["old"] is not None),
                        sum(x["rec"]["fits"] for x in sel),
                        [x["rec"]["makespan"] / x["plain"]["makespan"] for x in sel if x["rec"]["fits"]],
                        [x["rec"]["makespan"] / x["fast"] for x in sel if x["rec"]["fits"]],
                        [x["rec"]["seconds"] for x in sel], [x["old"]["wall_seconds"] for x in sel if x["old"]]))
    if summary:
        head = ["## Before and after: SPEC.md section 4's recomputation rule", "",
                "Cells (graph, limit, seed) that fit, by limit: the runtime search without recomputation "
                "(plain), the recompute search under the rule before (a recomputation ready as soon as its "
                "inputs exist) and now (it waits until every entry before it on its device has started); where "
                "the recompute search fits now, its makespan against the plain search's (which fits at P, "
                "is over the limit at F) and against the fastest step's (no limit), median and max; median "
                "seconds of a recompute cell before / now (separate runs, the load beside them in the cells).", "",
                "| limit | cells | plain fits | recompute fits, before | recompute fits, now | makespan / plain's "
                "| makespan / fastest | seconds before / now |", "|---|---:|---:|---:|---:|---|---|---|"]
        for label, cells, pf, ob, nf, both, fast, sec, osec in summary:
            ratio = f"{np.median(both):.4f}, {max(both):.4f}" if both else "-"
            fr = f"{np.median(fast):.4f}, {max(fast):.4f}" if fast else "-"
            head.append(f"| {label} | {cells} | {pf} | {ob} | {nf} | {ratio} | {fr} | "
                        f"{np.median(osec) if osec else float('nan'):.1f} / {np.median(sec):.1f} |")
        at = lines.index(next(x for x in lines if x.startswith("## ")))
        again = [x for x in rows if x["old"] is not None and x["frac"].startswith("F")]   # the cells run again
        new_load = [x["rec"]["load"] for x in again]
        old_load = [x["old"]["load"] for x in again if x["old"].get("load") is not None]
        head += ["", f"Load average at the start of an F cell's recompute run (median, 2 cores shared): before "
                 f"{np.median(old_load):.1f}, now {np.median(new_load):.1f}."]
        lines[at:at] = head + [""]
    if whatif:
        lines += ["## What-if: the memory search's schedules under the rule before and now", "",
                  f"The memory-objective recompute search at d = 2 (`recompute_budget={RECOMPUTE_BUDGET}`, "
                  f"{BUDGET:,} evaluations, chosen for its sequential peak): its sequential peak (SPEC.md 3b), "
                  "and its peak over time and makespan under section 4's rule before (a recomputation ready as "
                  "soon as its inputs exist) and now (in its place on its device). Peaks: the largest device's, MB.", "",
                  "| graph | seed | P (fastest) | sequential | over time, before | over time, now | makespan before / "
                  "now (s) | extra_fraction | gap closed |",
                  "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
        closed, slower = [], []
        for name, seed, pk, seq, old, now, old_ms, now_ms, extra in whatif:
            closed.append((old - now) / (old - seq) if old > seq else 0.0)
            slower.append(now_ms / old_ms)
            lines.append(f"| {name} | {seed} | {pk / 1e6:,.1f} | {seq / 1e6:,.1f} | {old / 1e6:,.1f} | "
                         f"{now / 1e6:,.1f} | {old_ms:.3f} / {now_ms:.3f} | {extra:.3f} | {100 * closed[-1]:.0f} % |")
        lines += ["", f"Gap closed (over time minus sequential, by the rule): median {100 * np.median(closed):.0f} %, "
                  f"range {100 * min(closed):.0f}-{100 * max(closed):.0f} %; makespan now / before: median "
                  f"{np.median(slower):.4f}, max {max(slower):.4f}.", ""]
    if speedup:
        lines += [f"The fastest step against the step on one device (the sum of the op costs): "
                  f"{100 * min(speedup):.1f}-{100 * max(speedup):.1f} % shorter (median "
                  f"{100 * np.median(speedup):.1f} %).", ""]
    lines += [NOTES, f"Cells ran at code {', '.join(sorted(codes))}; load average at their start: median "
              f"{np.median(loads):.1f}, max {max(loads):.1f} (2 cores, shared)." if loads else ""]
    return "\n".join(lines) + "\n"


def _before(old, limit: int) -> str:
    """A recompute cell under the rule before: fits, makespan, bytes over, seconds."""
    if old is None:
        return "-"
    over = sum(max(0, int(x) - limit) for x in old["device_peak_bytes"])
    return (f"{'yes' if old['feasible'] else 'no'}, {old['makespan_s']:.3f}, {over / 1e6:,.1f}, "
            f"{old['wall_seconds']:.1f}")


def _before_summary(sel) -> str:
    if not sel:
        return ""
    return (f" Before (the rule before): recompute fits {sum(x['old']['feasible'] for x in sel)} of {len(sel)}, "
            f"seconds (median) {np.median([x['old']['wall_seconds'] for x in sel]):.1f}.")


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
