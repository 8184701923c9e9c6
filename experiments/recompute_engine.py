"""Issue 53's benchmark: the search with recomputation on training steps traced here, by source.

    .venv/bin/python -m experiments.recompute_engine                 # every cell not cached yet, then the report
    .venv/bin/python -m experiments.recompute_engine --report-only   # the report from the cached cells
    .venv/bin/python -m experiments.recompute_engine --stage first   # only seed 0 at d = 1 (the first table)
    .venv/bin/python -m experiments.recompute_engine --rerun recompute --rerun runtime   # those cells again
                                                                     # where the code they ran differs

Graphs: `data/manifest_recompute.json` (`python -m data.recompute_steps`): training steps of four
sources; the recompute search's settings (`regal.recompute_search.RecomputeConfig`) are tuned on
`torch-cnn`, every other source is held out. Per graph, d = 1 and 2, seeds 0-2:

- **memory**: the no-recompute flagship (`regal.optimize(g, d, budget=5000, seed=s)`) and the
  recompute search (the same with `recompute_budget=0.1`): peak, % lower, extra_fraction, seconds.
- **traced**: the torch graphs' own node order (PyTorch's traced order, when topological) on one
  device: its peak P (SPEC.md section 3, with the graph's `reuse` fields).
- **limits** (torch graphs, d = 1): M = 80 % and 90 % of P. regal's runtime objective
  (`objective="runtime", memory_limit_bytes=M, recompute_budget=1.0`, 5,000 evaluations, seeds
  0-2) against Moccasin (`regal.methods.solve("moccasin", g, 1, memory_limit_bytes=M,
  time_limit_s=T)`, seed 0) with T = 10 x regal's seconds at seed 0 (at least 60 s).
- **baselines** (d = 1): `checkpoint-sqrt` and `recompute-pointwise` over the traced order (peak,
  extra_fraction), when registered.

Cells are cached one file each (a `regal-solution/1` file, or `{"refused": ...}`) under
`experiments/cache/recompute-engine/<graph>/`, stamped with the graph file's digest
(`experiments.runner.check_stamp`: a rebuilt graph's cells are dropped and run again); a
finished cell is never run again, so the run resumes where it stopped. Every reported peak is
re-simulated from the cached solution (`regal.solution.load_solution`). Searches run with one
Numba thread, cells one after another (the machine has 2 cores). Progress goes to
`experiments/cache/recompute-engine/progress.log`; the report (README.md, cells.csv) to
`experiments/results/recompute-engine/`, rewritten after every graph of a stage.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
import time

import numpy as np

from experiments.runner import ROOT, check_stamp, commit, machine

NAME = "recompute-engine"
CACHE = os.path.join(ROOT, "experiments", "cache", NAME)
RESULTS = os.path.join(ROOT, "experiments", "results", NAME)
MANIFEST = os.path.join(ROOT, "data", "manifest_recompute.json")
BUDGET = 5000
RECOMPUTE_BUDGET = 0.1
LIMITS = (0.8, 0.9)
SEEDS = (0, 1, 2)
DEVICES = (1, 2)
MOCCASIN_FACTOR, MOCCASIN_MIN_S = 10.0, 60.0
BASELINES = ("checkpoint-sqrt", "recompute-pointwise")
COMMAND = ".venv/bin/python -m experiments.recompute_engine"
#: Said in the report: how the cells without a code stamp were made.
NOTES = """The flagship, Moccasin and baseline cells were computed by one run, started 2026-11-29 05:51 on an
empty cache at HEAD 54fb531 (with other engineers' uncommitted changes of that minute to regal/_io.py
and regal/packing.py: file writing and the packer, not the searches; digest 6b3f7719), in 45 min.
The recompute cells were run again (`--rerun recompute`) at c8728e4 (stage 1 until it stalls, the
climb polled by whole rounds, 24 candidates a round; 12:54-13:20, load 7-17; the search without a
memory limit is the same code at a7497d9) and the runtime cells (`--rerun runtime`) at a7497d9
(under a limit, min(48, budget / 100) candidates a round; from 13:51, load about 5); the digests
after the commits are other engineers' uncommitted changes to regal/torch (not the searches). Moccasin's
time limits T are the first run's (10 x regal's seconds at seed 0 then, at least 60 s).

What the tables show beyond the targets:
- `lstm_2l_h650_s64_b64` at 80 %: M (694.8 MiB) is below SPEC.md 7's lower bound (695.2 MiB: the
  per-op and kept-at-end bounds, which hold for sequences with recomputation too), so no schedule
  fits; at 90 % (781.6 MiB, above the bound) neither regal nor Moccasin (INFEASIBLE over the traced
  order, proved in 1 s) finds one. The (graph, limit) target cannot be met on all 24 pairs.
- At d = 2 the recompute search ends above the no-recompute flagship of the same seed and budget on
  two graphs: `lstm_2l_h650_s64_b64` -3.3 % (extra_fraction 0.000: recomputation buys nothing there)
  and `hk_resnet18_128_b32` -0.6 % (before c8728e4: -8.0 % and -6.6 %, and `flax_unet_d4_128_b16`
  -3.4 %, now +4.0 %). Stage 1 is the full budget's flagship stopped once it stalls; the LSTM's
  flagship falls 3.4 % more between 4,000 and 5,000 evaluations, after stage 1 has stopped.
- The flagship without recomputation is within 0.6 % of PyTorch's traced order on every torch graph
  but VGG-16-BN at d = 1 (10 % below): the traced order is already close to the best order there.
- `checkpoint-sqrt` reaches lower peaks than the recompute search on five CNNs (ResNet-34, MobileNetV2,
  DenseNet, U-Net, EfficientNet) for 2-3x the extra compute (0.21-0.30 against 0.10)."""


# ============================================================================== graphs and cells
def load_manifest(path: str = MANIFEST) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def graph_path(manifest: dict, name: str, manifest_path: str = MANIFEST) -> str:
    return os.path.join(os.path.dirname(manifest_path), manifest["root"], manifest["graphs"][name]["path"])


_GRAPHS: dict = {}


def _graph(path: str):
    import regal
    st = os.stat(path)
    key = (path, st.st_mtime_ns)
    if key not in _GRAPHS:
        _GRAPHS.clear()
        _GRAPHS[key] = regal.load(path)
    return _GRAPHS[key]


def cell_file(graph: str, kind: str, devices: int, seed: int, variant: str = "") -> str:
    v = f"_{variant}" if variant else ""
    return os.path.join(CACHE, graph, f"{kind}_d{devices}{v}_s{seed}.json")


def traced_order(graph) -> np.ndarray | None:
    """The graph's own node order (PyTorch's traced order) when it is topological, else None."""
    n = graph.num_nodes
    owner = np.repeat(np.arange(n), np.diff(graph.pred_ptr))
    return np.arange(n) if bool((graph.pred_idx < owner).all()) else None


def traced_peak(gpath: str) -> int | None:
    """SPEC.md section 3's peak of the graph's node order on one device (None: not topological)."""
    import regal
    cache = os.path.join(CACHE, os.path.basename(gpath)[:-8], "traced.json")
    if os.path.exists(cache):
        with open(cache) as f:
            return json.load(f)["peak_bytes"]
    g = _graph(gpath)
    order = traced_order(g)
    peak = None if order is None else int(regal.simulate(g, np.zeros(g.num_nodes, dtype=np.int32), order, 1).peak_bytes)
    _write_json(cache, {"peak_bytes": peak, "topological": order is not None})
    return peak


def _write_json(path: str, doc) -> None:
    from regal._io import atomic_text
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_text(path) as f:
        json.dump(doc, f)


_CODE: list = []


def code_state() -> str:
    """The code a cell ran: HEAD, and when regal/ or baselines/ differ from it, a digest of that diff."""
    if not _CODE:
        import hashlib
        import subprocess
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        diff = subprocess.run(["git", "diff", "HEAD", "--", "regal", "baselines"], capture_output=True, text=True,
                              cwd=ROOT).stdout
        untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", "regal", "baselines"],
                                   capture_output=True, text=True, cwd=ROOT).stdout.split()
        for f in sorted(untracked):
            with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
                diff += f + fh.read()
        _CODE.append(head + (f"+{hashlib.sha1(diff.encode()).hexdigest()[:8]}" if diff else ""))
    return _CODE[0]


def solve_cell(out: str, method: str, gpath: str, devices: int, seed: int, options: dict, note: dict) -> bool:
    """Solve one cell with a registry method and cache its solution (info: wall_seconds, the code
    it ran (`code_state`) and `note`)."""
    import dataclasses

    import regal.methods
    g = _graph(gpath)
    spec = regal.methods.get(method)
    opts = dict(options)
    if spec.takes_threads:
        opts.setdefault("num_threads", 1)
    t = time.perf_counter()
    try:
        sol = regal.methods.solve(method, g, devices, seed=seed, **opts)
    except ValueError as e:
        _write_json(out, {"refused": (str(e).splitlines() or [""])[0], "method": method, "code": code_state(), **note})
        return True
    wall = time.perf_counter() - t
    sol = dataclasses.replace(sol, info={**sol.info, "wall_seconds": wall, "code": code_state(), **note})
    os.makedirs(os.path.dirname(out), exist_ok=True)
    sol.save(out)
    return True


def read_cell(path: str, gpath: str) -> dict | None:
    """A cached cell as a row: peak re-simulated from the solution file; None when not there."""
    from regal.solution import load_solution
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if "refused" in doc:
        return {"refused": doc["refused"]}
    sol = load_solution(path, _graph(gpath))
    rc = sol.info.get("recompute") or {}
    return {"peak_bytes": int(sol.peak_bytes), "seconds": float(sol.info.get("wall_seconds", sol.seconds)),
            "extra_fraction": float(rc.get("extra_fraction", 0.0)), "recomputations": int(rc.get("count", 0)),
            "info": sol.info}


# ====================================================================================== the plan
def jobs(manifest: dict, stage: str, names: list[str], methods: set[str]) -> list[tuple]:
    """(graph, description, function, args) in the order they run: a first table early (seed 0,
    d = 1), then the memory limits and baselines of the torch graphs, then seeds 1-2, then d = 2."""
    out = []
    torch_graphs = [n for n in names if manifest["graphs"][n]["source"].startswith("torch")]

    def memory(d, s):
        for n in names:
            gp = graph_path(manifest, n)
            out.append((n, f"flagship d{d} s{s}", solve_cell,
                        (cell_file(n, "flagship", d, s), "regal", gp, d, s, {"budget": BUDGET}, {})))
            out.append((n, f"recompute d{d} s{s}", solve_cell,
                        (cell_file(n, "recompute", d, s), "regal", gp, d, s,
                         {"budget": BUDGET, "recompute_budget": RECOMPUTE_BUDGET}, {})))

    def limits(seeds, with_moccasin):
        for n in torch_graphs:
            gp = graph_path(manifest, n)
            for frac in LIMITS:
                v = f"m{round(frac * 100)}"
                for s in seeds:
                    out.append((n, f"runtime {v} s{s}", _runtime_cell, (n, gp, frac, s)))
                if with_moccasin:
                    out.append((n, f"moccasin {v}", _moccasin_cell, (n, gp, frac, methods)))

    def baselines():
        for n in names:
            gp = graph_path(manifest, n)
            for b in BASELINES:
                out.append((n, f"{b} d1", _baseline_cell, (n, gp, b, methods)))

    memory(1, 0)
    if stage == "first":
        return out
    limits((0,), True)
    baselines()
    for s in SEEDS[1:]:
        memory(1, s)
    limits(SEEDS[1:], False)
    for s in SEEDS:
        memory(2, s)
    return out


def _limit(gpath: str, frac: float) -> int | None:
    p = traced_peak(gpath)
    return None if p is None else int(math.floor(frac * p))


def _runtime_cell(name: str, gpath: str, frac: float, seed: int) -> None:
    out = cell_file(name, "runtime", 1, seed, f"m{round(frac * 100)}")
    limit = _limit(gpath, frac)
    if os.path.exists(out):
        return False
    if limit is None:
        _write_json(out, {"refused": "the graph's node order is not topological: no traced peak"})
        return True
    return solve_cell(out, "regal", gpath, 1, seed, {"budget": BUDGET, "objective": "runtime", "memory_limit_bytes": limit,
                                              "recompute_budget": 1.0},
               {"memory_limit_bytes": limit, "limit_fraction": frac})


def _moccasin_cell(name: str, gpath: str, frac: float, methods: set) -> None:
    v = f"m{round(frac * 100)}"
    out = cell_file(name, "moccasin", 1, 0, v)
    if os.path.exists(out) or "moccasin" not in methods:
        return False
    limit = _limit(gpath, frac)
    ref = read_cell(cell_file(name, "runtime", 1, 0, v), gpath)
    if limit is None or ref is None or "refused" in ref:
        return False
    t = max(MOCCASIN_MIN_S, MOCCASIN_FACTOR * ref["seconds"])
    return solve_cell(out, "moccasin", gpath, 1, 0, {"memory_limit_bytes": limit, "time_limit_s": t},
               {"time_limit_s": t, "memory_limit_bytes": limit, "limit_fraction": frac})


def _baseline_cell(name: str, gpath: str, method: str, methods: set) -> None:
    out = cell_file(name, method, 1, 0)
    if os.path.exists(out) or method not in methods:
        return False
    return solve_cell(out, method, gpath, 1, 0, {}, {})


def stale(path: str, kinds: list[str]) -> bool:
    """Whether the cached cell `path` is of one of `kinds` and was made by other code than now's
    (`code_state`): `--rerun` runs it again."""
    if not kinds or not os.path.exists(path) or os.path.basename(path).split("_d", 1)[0] not in kinds:
        return False
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    return (doc.get("code") or (doc.get("info") or {}).get("code")) != code_state()


def run(manifest: dict, stage: str, names: list[str], log, report_every: bool = True,
        rerun: list[str] | None = None) -> None:
    import regal.methods
    methods = set(regal.methods.names())
    missing = [m for m in ("moccasin",) + BASELINES if m not in methods]
    if missing:
        log(f"not registered (their cells are left for a later run): {', '.join(missing)}")
    for n in names:
        check_stamp(os.path.join(CACHE, n), graph_path(manifest, n))
    todo = jobs(manifest, stage, names, methods)
    for n, what, fn, args in todo:
        out = args[0] if fn is solve_cell else cell_file(n, "runtime", 1, args[3], f"m{round(args[2] * 100)}") \
            if fn is _runtime_cell else None
        if out is not None and stale(out, rerun or []):
            os.remove(out)
    t0 = time.perf_counter()
    last_graph, done = None, 0
    for k, (n, what, fn, args) in enumerate(todo):
        out = args[0] if fn is solve_cell else None
        if out is not None and os.path.exists(out):
            continue
        t = time.perf_counter()
        try:
            computed = fn(*args)
        except Exception as e:  # noqa: BLE001 - one cell never takes the run down; logged, retried next run
            log(f"[{time.perf_counter() - t0:7.0f}s] {n} {what}: FAILED {type(e).__name__}: {e}")
            continue
        if not computed:
            continue
        done += 1
        log(f"[{time.perf_counter() - t0:7.0f}s] {n} {what}: {time.perf_counter() - t:.1f}s ({k + 1}/{len(todo)})")
        if report_every and last_graph is not None and n != last_graph:
            write_report(manifest, names)
        last_graph = n
    write_report(manifest, names)
    log(f"done: {done} cells computed in {time.perf_counter() - t0:.0f}s")


# ====================================================================================== the report
def collect(manifest: dict, names: list[str]) -> list[dict]:
    """One row per cached cell."""
    rows = []
    for n in names:
        e = manifest["graphs"][n]
        gp = graph_path(manifest, n)
        folder = os.path.join(CACHE, n)
        if not os.path.isdir(folder):
            continue
        tp = traced_peak(gp) if e["source"].startswith("torch") else None
        for fname in sorted(os.listdir(folder)):
            if not fname.endswith(".json") or fname == "traced.json":
                continue
            kind, rest = fname[:-5].split("_d", 1)
            parts = rest.split("_")
            d, seed = int(parts[0]), int(parts[-1][1:])
            variant = parts[1] if len(parts) == 3 else ""
            r = read_cell(os.path.join(folder, fname), gp)
            row = {"graph": n, "source": e["source"], "split": e["split"], "kind": kind, "devices": d, "seed": seed,
                   "variant": variant, "traced_peak_bytes": tp}
            if "refused" in r:
                row["refused"] = r["refused"]
            else:
                info = r["info"]
                row.update(peak_bytes=r["peak_bytes"], extra_fraction=r["extra_fraction"],
                           recomputations=r["recomputations"], seconds=r["seconds"], code=info.get("code", "-"))
                if "memory_limit_bytes" in info:
                    row["memory_limit_bytes"] = int(info["memory_limit_bytes"])
                    row["feasible"] = r["peak_bytes"] <= int(info["memory_limit_bytes"])
                if kind == "moccasin":
                    row.update(status=info.get("status"), time_limit_s=info.get("time_limit_s"),
                               moccasin_feasible=info.get("feasible"))
            rows.append(row)
    return rows


CSV_FIELDS = ("graph", "source", "split", "kind", "devices", "seed", "variant", "peak_bytes", "extra_fraction",
              "recomputations", "seconds", "memory_limit_bytes", "feasible", "traced_peak_bytes", "status",
              "time_limit_s", "refused", "code")


def _mib(b) -> str:
    return "-" if b is None else f"{b / 2 ** 20:,.1f}"


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


#: (graph, d) -> the room below the flagship's peak: (flagship - SPEC.md 7's lower bound) / flagship
#: (filled by memory_table; no schedule, with or without recomputation, goes below the bound).
ROOM: dict = {}


def memory_table(manifest: dict, names: list[str], rows: list[dict]) -> tuple[str, dict]:
    """Per graph and d: the flagship's and the recompute search's peaks (mean over the seeds run),
    % lower (mean over seeds of the paired reduction), extra_fraction, seconds; and per-graph
    reductions for the source means."""
    by = {}
    for r in rows:
        if r["kind"] in ("flagship", "recompute") and "peak_bytes" in r:
            by.setdefault((r["graph"], r["devices"]), {}).setdefault(r["kind"], {})[r["seed"]] = r
    lines = ["| graph | source | d | seeds | traced MiB | bound MiB | room | flagship MiB | recompute MiB | % lower | "
             "extra_fraction | flagship s | recompute s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    red = {}
    for n in names:
        e = manifest["graphs"][n]
        for d in DEVICES:
            cell = by.get((n, d), {})
            f, rc = cell.get("flagship", {}), cell.get("recompute", {})
            seeds = sorted(set(f) & set(rc))
            if not seeds:
                continue
            lower = [(f[s]["peak_bytes"] - rc[s]["peak_bytes"]) / f[s]["peak_bytes"] for s in seeds]
            red[(n, d)] = float(np.mean(lower))
            tp = f[seeds[0]]["traced_peak_bytes"] if d == 1 else None
            bound = _graph(graph_path(manifest, n)).lower_bound(d)
            fmean = _mean([f[s]["peak_bytes"] for s in seeds])
            ROOM[(n, d)] = (fmean - bound) / fmean
            lines.append(f"| {n} | {e['source']} | {d} | {len(seeds)} | {_mib(tp)} | {_mib(bound)} | "
                         f"{_pct(ROOM[(n, d)])} | "
                         f"{_mib(_mean([f[s]['peak_bytes'] for s in seeds]))} | "
                         f"{_mib(_mean([rc[s]['peak_bytes'] for s in seeds]))} | {_pct(red[(n, d)])} | "
                         f"{_mean([rc[s]['extra_fraction'] for s in seeds]):.3f} | "
                         f"{_mean([f[s]['seconds'] for s in seeds]):.1f} | {_mean([rc[s]['seconds'] for s in seeds]):.1f} |")
    return "\n".join(lines), red


def source_means(manifest: dict, red: dict) -> str:
    lines = ["| graphs | d | count | mean % lower (recompute_budget 0.1 vs the flagship) | min | max | "
             "mean room (flagship to bound) | share of the room taken |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    groups = [(s, [s]) for s in manifest["sources"]] + [
        ("**held out** (all but " + manifest["tune_source"] + ")", list(manifest["held_out_sources"])),
        ("tuned on (" + manifest["tune_source"] + ")", [manifest["tune_source"]]),
        ("all", list(manifest["sources"]))]
    for label, sources in groups:
        for d in DEVICES:
            xs = [v for (n, dd), v in red.items() if dd == d and manifest["graphs"][n]["source"] in sources]
            if xs:
                room = [ROOM[k] for k in red if k[1] == d and manifest["graphs"][k[0]]["source"] in sources
                        and k in ROOM]
                share = float(np.mean(xs)) / float(np.mean(room)) if room and np.mean(room) > 0 else None
                lines.append(f"| {label} | {d} | {len(xs)} | {_pct(float(np.mean(xs)))} | {_pct(min(xs))} | "
                             f"{_pct(max(xs))} | {_pct(_mean(room))} | {_pct(share)} |")
    return "\n".join(lines)


def limit_pairs(names: list[str], rows: list[dict]) -> list[dict]:
    """Per (graph, limit) with regal's runtime cells: feasible on every seed, below Moccasin (every
    seed's extra cost under Moccasin's, or Moccasin without a fitting schedule), within a tenth of
    Moccasin's seconds (regal's slowest seed)."""
    out = []
    for n in names:
        for frac in LIMITS:
            v = f"m{round(frac * 100)}"
            rt = [r for r in rows if r["graph"] == n and r["kind"] == "runtime" and r["variant"] == v and "peak_bytes" in r]
            mo = [r for r in rows if r["graph"] == n and r["kind"] == "moccasin" and r["variant"] == v and "peak_bytes" in r]
            if not rt or not mo:
                continue
            m = mo[0]
            mfeas = bool(m["feasible"]) and bool(m.get("moccasin_feasible", True))
            feas = all(r["feasible"] for r in rt)
            below = feas and (not mfeas or max(r["extra_fraction"] for r in rt) < m["extra_fraction"])
            tenth = max(r["seconds"] for r in rt) <= m["seconds"] / 10 + 1e-9
            out.append({"graph": n, "source": rt[0]["source"], "split": rt[0]["split"], "limit": v, "feasible": feas,
                        "below": below, "tenth": tenth, "moccasin_feasible": mfeas, "seeds": len(rt)})
    return out


def targets(manifest: dict, red: dict, names: list[str], rows: list[dict]) -> str:
    lines = []
    for d in DEVICES:
        xs = [v for (n, dd), v in red.items() if dd == d and manifest["graphs"][n]["split"] == "held_out"]
        if xs:
            m = float(np.mean(xs))
            lines.append(f"- Peak at recompute_budget {RECOMPUTE_BUDGET}, held-out graphs, d = {d}: {_pct(m)} below the "
                         f"flagship on the mean over {len(xs)} graphs (target >= 30 %: {'met' if m >= 0.30 else 'missed'}).")
    pairs = limit_pairs(names, rows)
    for label, sel in (("all torch graphs", pairs), ("held-out torch graphs (torch-seq)",
                                                      [p for p in pairs if p["split"] == "held_out"])):
        if not sel:
            continue
        k = len(sel)
        allmet = sum(p["feasible"] and p["below"] and p["tenth"] for p in sel)
        lines.append(f"- Memory limits, {label}: of {k} (graph, limit) pairs, regal fits on every seed in "
                     f"{sum(p['feasible'] for p in sel)}, spends less recomputation than Moccasin in "
                     f"{sum(p['below'] for p in sel)}, within a tenth of Moccasin's time in {sum(p['tenth'] for p in sel)}; "
                     f"all three in {allmet} (target: all {k}: {'met' if allmet == k else 'missed'}). Moccasin found a "
                     f"fitting schedule in {sum(p['moccasin_feasible'] for p in sel)}.")
    return "\n".join(lines) if lines else "(no cells yet)"


def limits_table(manifest: dict, names: list[str], rows: list[dict]) -> str:
    by = {}
    for r in rows:
        if r["kind"] in ("runtime", "moccasin"):
            by.setdefault((r["graph"], r["variant"]), {}).setdefault(r["kind"], []).append(r)
    lines = ["| graph | source | limit | M MiB | regal feasible | regal extra_fraction | regal s | "
             "Moccasin status | Moccasin feasible | Moccasin extra_fraction | Moccasin s (T) | "
             "regal below Moccasin | regal <= 1/10 of Moccasin's s |",
             "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|---|"]
    for n in names:
        for frac in LIMITS:
            v = f"m{round(frac * 100)}"
            cell = by.get((n, v))
            if not cell:
                continue
            rt = [r for r in cell.get("runtime", []) if "peak_bytes" in r]
            mo = [r for r in cell.get("moccasin", []) if "peak_bytes" in r]
            if not rt:
                continue
            feas = [r for r in rt if r["feasible"]]
            ex = _mean([r["extra_fraction"] for r in feas])
            secs = _mean([r["seconds"] for r in rt])
            m = mo[0] if mo else None
            if m is not None:
                mfeas = bool(m["feasible"]) and bool(m.get("moccasin_feasible", True))
                mex = m["extra_fraction"] if mfeas else None
                below = ("yes" if len(feas) == len(rt) and (not mfeas or max(r["extra_fraction"] for r in feas) < mex)
                         else "no" if len(feas) == len(rt) else "no (infeasible)")
                tenth = "yes" if max(r["seconds"] for r in rt) <= m["seconds"] / 10 + 1e-9 else "no"
                mcols = (f"{m.get('status')} | {'yes' if mfeas else 'no'} | {'-' if mex is None else f'{mex:.4f}'} | "
                         f"{m['seconds']:.0f} ({m.get('time_limit_s', 0):.0f}) | {below} | {tenth}")
            else:
                mcols = "not run | - | - | - | - | -"
            lines.append(f"| {n} | {manifest['graphs'][n]['source']} | {round(frac * 100)} % | "
                         f"{_mib(rt[0]['memory_limit_bytes'])} | {len(feas)}/{len(rt)} | "
                         f"{'-' if ex is None else f'{ex:.4f}'} | {secs:.1f} | {mcols} |")
    return "\n".join(lines)


def baselines_table(manifest: dict, names: list[str], rows: list[dict]) -> str:
    by = {}
    for r in rows:
        if r["devices"] == 1 and (r["kind"] in BASELINES or (r["kind"] in ("flagship", "recompute") and r["seed"] == 0)):
            by.setdefault(r["graph"], {})[r["kind"]] = r
    head = "| graph | source | traced MiB | " + " | ".join(f"{b} MiB | {b} extra" for b in BASELINES) + \
           " | flagship MiB | recompute 0.1 MiB | recompute extra |"
    lines = [head, "|---|---|---:|" + "---:|---:|" * len(BASELINES) + "---:|---:|---:|"]
    for n in names:
        c = by.get(n, {})
        if not any(b in c for b in BASELINES):
            continue
        cols = []
        for b in BASELINES:
            r = c.get(b)
            if r is None:
                cols.append("- | -")
            elif "refused" in r:
                cols.append("refused | -")
            else:
                cols.append(f"{_mib(r['peak_bytes'])} | {r['extra_fraction']:.3f}")
        f, rc = c.get("flagship", {}), c.get("recompute", {})
        tp = next((r.get("traced_peak_bytes") for r in c.values()), None)
        lines.append(f"| {n} | {manifest['graphs'][n]['source']} | {_mib(tp)} | " + " | ".join(cols) +
                     f" | {_mib(f.get('peak_bytes'))} | {_mib(rc.get('peak_bytes'))} | "
                     f"{'-' if 'extra_fraction' not in rc else format(rc['extra_fraction'], '.3f')} |")
    return "\n".join(lines)


def graphs_table(manifest: dict, names: list[str]) -> str:
    lines = ["| graph | source | split | nodes | pinned (recompute: false) | step cost s | cost model |",
             "|---|---|---|---:|---:|---:|---|"]
    for n in names:
        e = manifest["graphs"][n]
        cm = e["cost_model"] if e["cost_model"].startswith("measured") else "roofline"
        lines.append(f"| {n} | {e['source']} | {e['split']} | {e['nodes']:,} | {e['recompute_false']:,} | "
                     f"{e['step_cost_s']:.3f} | {cm} |")
    return "\n".join(lines)


def write_report(manifest: dict, names: list[str]) -> None:
    rows = collect(manifest, names)
    os.makedirs(RESULTS, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k) for k in CSV_FIELDS})
    with open(os.path.join(RESULTS, "cells.csv"), "w", encoding="utf-8") as f:
        f.write(buf.getvalue())
    mem, red = memory_table(manifest, names, rows)
    counts = {k: sum(r["kind"] == k for r in rows) for k in ("flagship", "recompute", "runtime", "moccasin") + BASELINES}
    codes = {}
    for r in rows:
        codes[r.get("code", "-")] = codes.get(r.get("code", "-"), 0) + 1
    code_line = ", ".join(f"{c} ({k} cells)" for c, k in sorted(codes.items()))
    text = f"""# recompute-engine: the search with recomputation on training steps traced here (issue 53)

Command: `{COMMAND}` (resumable: cached cells are not run again; `--report-only` rewrites this
file). Graphs: `data/manifest_recompute.json`, built by `python -m data.recompute_steps`
(data/README.md, "Training steps for the recompute benchmark"). Report written at commit {commit()};
{machine()}; {time.strftime('%Y-%m-%d %H:%M')}. Cells so far: {', '.join(f'{k} {v}' for k, v in counts.items())}
(the run goes on where some are missing: seeds 0-2 and d = 1, 2 are the plan).
Code the cells ran (HEAD, + a digest of uncommitted changes to regal/ and baselines/; "-": not
recorded, cells of the first run, see the note below): {code_line}.

**Held out.** The recompute search's settings (`regal.recompute_search.RecomputeConfig`) are tuned
on `{manifest['tune_source']}` only; every other source ({', '.join(manifest['held_out_sources'])}) is held out,
and its means are reported apart.

Settings: {BUDGET:,} evaluations; the recompute search at `recompute_budget={RECOMPUTE_BUDGET}`; "% lower" is
(flagship peak - recompute peak) / flagship peak, paired by seed and averaged; extra_fraction is
the recomputed cost over one run's cost (SPEC.md 3b; torch graphs: costs measured on this CPU, HLO:
roofline). Seconds are wall time of one search with one Numba thread on this 2-core machine,
shared with other jobs. Every peak is re-simulated from its cached solution. "bound" is SPEC.md
section 7's lower bound (`Graph.lower_bound`: no schedule goes below it, with or without
recomputation, at any compute budget); "room" = (flagship - bound) / flagship is the most any method
could take off, an upper bound (loose: it ignores the compute budget). Where the room is a few per
cent (the JAX LSTM: one op reads all 64 steps' 5 MiB gate tensors at once; the Haiku ResNet-18 at
d = 2), no method reaches 30 %.

## The targets

{targets(manifest, red, names, rows)}

## Per source: the peak at recompute_budget {RECOMPUTE_BUDGET} against the no-recompute flagship

Target (issue 53): >= 30 % lower on the mean over held-out graphs.

{source_means(manifest, red)}

## Per graph

{mem}

## Under a memory limit (torch graphs, d = 1): regal's runtime objective against Moccasin

M = 80 % / 90 % of the peak of PyTorch's traced order (the graph's node order, SPEC.md section 3
with the graph's `reuse` fields). regal: `objective="runtime", memory_limit_bytes=M,
recompute_budget=1.0`, {BUDGET:,} evaluations, seeds 0-2 ("feasible" counts the seeds whose peak is
<= M; extra_fraction is their mean; seconds the mean over seeds). Moccasin
(`regal.methods.solve("moccasin", ...)`, CP-SAT over the traced order, seed 0, its default 2
workers) with time limit T = max({MOCCASIN_MIN_S:.0f} s, {MOCCASIN_FACTOR:.0f} x regal's seconds at seed 0). "regal below
Moccasin": every regal seed feasible with less extra cost than Moccasin's (yes also when Moccasin found
nothing); "1/10": regal's slowest seed within a tenth of Moccasin's seconds. Target: feasible on every
graph, below Moccasin, in a tenth of its time or less.

{limits_table(manifest, names, rows)}

## Recompute baselines over the traced order (d = 1)

`checkpoint-sqrt` (Chen et al. 2016) and `recompute-pointwise` (torch.compile's default trade),
from `regal_baselines`; peaks in MiB, extra = extra_fraction; the flagship and the recompute search
at seed 0 beside them.

{baselines_table(manifest, names, rows)}

## The graphs

{graphs_table(manifest, names)}

## Notes

{NOTES}

Pinned: non-resident nodes marked `recompute: false` (regal.torch's importer: in-place writes and
what they overwrite, BatchNorm's running-statistics write, every multi-output op under
`split_outputs`, random draws); the HLO graphs have none.
"""
    with open(os.path.join(RESULTS, "README.md"), "w", encoding="utf-8") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.recompute_engine", description=__doc__.split("\n")[0])
    p.add_argument("--stage", choices=("first", "all"), default="all",
                   help="first: seed 0 at d = 1 only (the flagship and the recompute search); all: everything")
    p.add_argument("--only", action="append", default=None, metavar="GRAPH")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--manifest", default=MANIFEST)
    p.add_argument("--rerun", action="append", default=[], choices=("flagship", "recompute", "runtime"),
                   help="run the cells of this kind again where the code they ran differs from now's")
    a = p.parse_args(argv)
    manifest = load_manifest(a.manifest)
    names = [n for n in manifest["graphs"] if not a.only or n in a.only]
    os.makedirs(CACHE, exist_ok=True)
    logf = open(os.path.join(CACHE, "progress.log"), "a", encoding="utf-8")

    def log(msg: str) -> None:
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    if not a.report_only:
        log(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} stage {a.stage}, {len(names)} graphs, code {code_state()}")
        run(manifest, a.stage, names, log, rerun=a.rerun)
    write_report(manifest, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
