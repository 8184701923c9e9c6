"""How well regal's peak (SPEC.md section 3) predicts XLA's own memory allocation.

    python -m experiments.xla_fidelity [--only SUBSTRING ...] [--subset fwd-train] [--label NAME]
                                       [--no-reuse] [--no-outputs] [--timeout 900] [--refresh]

For every compiled (`opt`) graph of the data set (`data/manifest.json`), the Haiku model is traced
and compiled again with jax on XLA:CPU, exactly as `data/build_dataset.py` does, and two numbers
are put side by side:

- **XLA**: the allocation of the compiled executable, from `compiled.memory_analysis()`:
  `argument + output + temp - alias` bytes. `temp` is the one preallocated block the heap
  simulator packed every temporary into (fragmentation included); outputs are allocated for the
  whole run; `alias` is the bytes of outputs that reuse donated arguments (0 here: nothing is
  donated); `generated_code` is 0 on CPU. Constants are separate allocations outside these
  numbers (column `const`).
- **regal allocation**: SPEC.md section 3a (`regal.allocation`), the same schedule's allocation
  under XLA's buffer-assignment rules (outputs reserved for the whole run, temporaries packed
  into output allocations or one best-fit heap); column `ratio_allocation`.
- **regal**: the SPEC.md section 3 peak, one device, of XLA's own schedule (`meta.xla_order`) of
  the graph `regal.hlo.parse_hlo` imports from the compiled HLO text. The importer in the
  working tree is used, so the same cache gives the "before" table (`--no-reuse --no-outputs`:
  every node's `reuse` and `output` fields are dropped, the first model), the "reuse" table
  (`--no-outputs`: taking over, but returned values freed after their last consumer) and the
  "after" table (the importer as is).

The compile is the slow part: each graph is compiled once in its own process and cached in
`experiments/cache/xla_fidelity/<graph>.json` (XLA's numbers and a summary of its buffer
assignment, from `--xla_dump_to`) next to `<graph>.hlo.gz` (the compiled HLO text), so a rerun
resumes where it stopped and recomputes only the regal side. `--refresh` recompiles.

The buffer-assignment summary says which in-place reuses XLA really made: a value that shares
its (allocation, offset) with an operand's value whose live range ends where it starts. It is
compared with the importer's `reuse` lists (columns `xla_inplace`, `regal_reuse`, `agree`).

Writes `experiments/results/xla_fidelity/<label>.csv` (one row per graph) and prints a Markdown
table; `<label>.md` holds it with the command, commit and summary.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "experiments", "cache", "xla_fidelity")
RESULTS = os.path.join(ROOT, "experiments", "results", "xla_fidelity")
MANIFEST = os.path.join(ROOT, "data", "manifest.json")
TOLERANCE = 0.02  # the target: within 2 %


# ---------------------------------------------------------------------------- the graphs
def compiled_graphs(only: list[str] | None = None, subset: str | None = None) -> list[dict]:
    """Manifest entries of the `opt` graphs (name, family, variant, batch, mode, nodes), in name order.

    subset "fwd-train": per family the smallest forward and the smallest training graph.
    """
    with open(MANIFEST, encoding="utf-8") as f:
        graphs = json.load(f)["graphs"]
    out = [dict(name=n, **{k: r[k] for k in ("family", "variant", "batch", "mode", "nodes")})
           for n, r in sorted(graphs.items()) if r["stage"] == "opt"]
    if only:
        out = [r for r in out if any(s in r["name"] for s in only)]
    if subset == "fwd-train":
        best: dict = {}
        for r in out:
            key = (r["family"], r["mode"])
            if key not in best or r["nodes"] < best[key]["nodes"]:
                best[key] = r
        out = sorted(best.values(), key=lambda r: r["name"])
    return out


# ---------------------------------------------------------------------------- XLA side (worker)
_ALLOC = re.compile(r"^allocation (\d+): size (\d+), (.*)$")
_VALUE = re.compile(r"^ value: <(\d+) (\S+?)(?:\{([\d,]*)\})? @0> \(size=(\d+),offset=(\d+)\)")
_RANGE = re.compile(r"^    (\S+?)\{([\d,]*)\}:(\d+)-(\d+)$")


def parse_dump(dump_dir: str) -> dict:
    """Summary of XLA's buffer assignment from the `--xla_dump_to` text files of one module.

    allocations: bytes per kind (parameter, maybe-live-out, preallocated-temp, constant,
    thread-local, other); hosted: bytes of values that are not outputs but live in an output
    allocation; inplace: [user, operand] pairs of top-level values that share an allocation and
    offset with the user starting where the operand's live range ends (XLA's in-place reuse).
    """
    files = os.listdir(dump_dir)
    ba = [f for f in files if f.endswith("after_optimizations-buffer-assignment.txt")]
    lr = [f for f in files if f.endswith("after_optimizations-live-range.txt")]
    if not ba or not lr:
        return {}
    kinds: dict[str, int] = {}
    placed: dict[tuple, tuple] = {}   # (instruction, index) -> (allocation, offset, size, kind)
    with open(os.path.join(dump_dir, ba[0]), encoding="utf-8") as f:
        alloc = kind = None
        for line in f:
            m = _ALLOC.match(line)
            if m:
                alloc, size, rest = int(m.group(1)), int(m.group(2)), m.group(3)
                kind = ("parameter" if rest.startswith("parameter") else
                        "maybe-live-out" if "maybe-live-out" in rest else
                        "preallocated-temp" if "preallocated-temp" in rest else
                        "constant" if rest.startswith("constant") else
                        "thread-local" if rest.startswith("thread-local") else "other")
                kinds[kind] = kinds.get(kind, 0) + size
                continue
            m = _VALUE.match(line)
            if m and alloc is not None:
                key = (m.group(2), m.group(3) or "")
                placed[key] = (alloc, int(m.group(5)), int(m.group(4)), kind)
    ranges: dict[tuple, tuple] = {}
    with open(os.path.join(dump_dir, lr[0]), encoding="utf-8") as f:
        section = None
        for line in f:
            if line.startswith("  BufferLiveRange"):
                section = "ranges"
                continue
            if line.startswith("  ") and not line.startswith("    "):
                section = None
            if section == "ranges":
                m = _RANGE.match(line.rstrip("\n"))
                if m:
                    ranges[(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
    live = _live_peaks(placed, ranges)
    by_slot: dict[tuple, list] = {}
    for key, (alloc, off, size, kind) in placed.items():
        if kind in ("maybe-live-out", "preallocated-temp") and key in ranges:
            by_slot.setdefault((alloc, off), []).append(key)
    inplace = []
    for keys in by_slot.values():
        ends = {}
        for key in keys:
            ends.setdefault(ranges[key][1], []).append(key)
        for key in keys:
            for other in ends.get(ranges[key][0], []):
                if other != key and key[1] == "" and other[1] == "":
                    inplace.append([key[0], other[0]])
    return {"allocations": kinds, "inplace": sorted(inplace), **live}


def _live_peaks(placed: dict, ranges: dict) -> dict:
    """XLA's own liveness, step by step, from its buffer assignment and live ranges (inclusive):
    the bytes its values cover at each step (values sharing a chunk count once), without the
    static reservation of outputs and the heap's fragmentation.

    live_peak: parameters + the most bytes covered at one step in every other allocation;
    temp_live_peak: the most covered in the preallocated temp block (its size minus this is the
    heap's fragmentation).
    """
    params = sum(size for (alloc, off, size, kind) in placed.values() if kind == "parameter")
    starts: dict[int, list] = {}
    ends: dict[int, list] = {}
    for key, (alloc, off, size, kind) in placed.items():
        if kind not in ("maybe-live-out", "preallocated-temp") or key not in ranges:
            continue
        a, b = ranges[key]
        item = (alloc, off, off + size, kind)
        starts.setdefault(a, []).append(item)
        ends.setdefault(b, []).append(item)
    active: dict[int, list] = {}
    cover: dict[int, int] = {}
    kind_of: dict[int, str] = {}
    best = best_temp = 0
    for t in range(max(ends, default=-1) + 1):
        dirty = set()
        for item in starts.get(t, []):
            active.setdefault(item[0], []).append(item)
            kind_of[item[0]] = item[3]
            dirty.add(item[0])
        for alloc in dirty:
            cover[alloc] = _union(active[alloc])
        best = max(best, sum(cover.values()))
        best_temp = max(best_temp, sum(c for a, c in cover.items() if kind_of[a] == "preallocated-temp"))
        dirty = set()
        for item in ends.get(t, []):
            active[item[0]].remove(item)
            dirty.add(item[0])
        for alloc in dirty:
            cover[alloc] = _union(active[alloc])
    return {"live_peak": params + best, "temp_live_peak": best_temp}


def _union(items: list) -> int:
    """Bytes covered by [offset, end) chunks."""
    total, reach = 0, -1
    for _, a, b, _ in sorted(items, key=lambda x: x[1]):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _worker(name: str, variant: str, batch: int, mode: str, dump: bool) -> None:
    """Compile one graph (in a fresh process) and write its cache files."""
    dump_dir = tempfile.mkdtemp(prefix="xla_fidelity_") if dump else None
    os.environ["JAX_PLATFORMS"] = "cpu"
    if dump_dir:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump_dir}").strip()
    import jax
    from data.models import MODELS, abstract_args, fwd_fn, train_fn

    spec = MODELS[variant]
    t0 = time.perf_counter()
    args = abstract_args(spec, batch, mode)
    fn = fwd_fn(spec) if mode == "fwd" else train_fn(spec)
    compiled = jax.jit(fn).lower(*args).compile()
    seconds = time.perf_counter() - t0
    ma = compiled.memory_analysis()
    stats = {k: int(getattr(ma, k)) for k in (
        "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
        "generated_code_size_in_bytes")}
    stats["peak_memory_in_bytes"] = int(getattr(ma, "peak_memory_in_bytes", -1))
    record = {"name": name, "variant": variant, "batch": batch, "mode": mode, "xla": stats,
              "compile_s": round(seconds, 2), "jax_version": jax.__version__}
    if dump_dir:
        record["buffer_assignment"] = parse_dump(dump_dir)
        shutil.rmtree(dump_dir, ignore_errors=True)
    os.makedirs(CACHE, exist_ok=True)
    hlo = os.path.join(CACHE, f"{name}.hlo.gz")
    with gzip.open(hlo + ".tmp", "wt", encoding="utf-8") as f:
        f.write(compiled.as_text())
    os.replace(hlo + ".tmp", hlo)
    path = os.path.join(CACHE, f"{name}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)


def compile_missing(entries: list[dict], timeout_s: float, refresh: bool, dump: bool, log) -> None:
    """Compile every entry without a cache record, one subprocess at a time."""
    todo = [r for r in entries if refresh or not os.path.exists(os.path.join(CACHE, f"{r['name']}.json"))]
    todo.sort(key=lambda r: r["nodes"])  # small graphs first: a partial run covers the most graphs
    for i, r in enumerate(todo, 1):
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "experiments.xla_fidelity", "--worker", r["name"], r["variant"],
               str(r["batch"]), r["mode"]] + ([] if dump else ["--no-dump"])
        try:
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
            status = "ok" if p.returncode == 0 else f"failed ({p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else p.returncode})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout_s:.0f}s"
        log(f"[{i}/{len(todo)} {time.perf_counter() - t0:6.1f}s] {r['name']}: {status}")


# ---------------------------------------------------------------------------- regal side
def regal_row(entry: dict, no_reuse: bool, no_outputs: bool = False) -> dict | None:
    """One table row from the cache: XLA's numbers and regal's peak of XLA's schedule.

    no_reuse / no_outputs: drop the importer's `reuse` / `output` fields (the older models)."""
    import numpy as np
    from regal.allocation import allocation
    from regal.graph import Graph
    from regal.hlo import parse_hlo
    from regal.simulate import memory_trace

    path = os.path.join(CACHE, f"{entry['name']}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        rec = json.load(f)
    with gzip.open(os.path.join(CACHE, f"{entry['name']}.hlo.gz"), "rt", encoding="utf-8") as f:
        graph = parse_hlo(f.read(), name=entry["name"])
    reuse = _reuse_lists(graph)
    if (no_reuse and reuse) or (no_outputs and graph.output.any()):
        recs = graph.to_records()
        for r in recs:
            if no_reuse:
                r.pop("reuse", None)
            if no_outputs:
                r.pop("output", None)
        graph = Graph.from_records(recs, name=graph.name, meta=graph.meta)
        reuse = _reuse_lists(graph)
    order = np.asarray([graph.index[i] for i in graph.meta["xla_order"]])
    sim, trace = memory_trace(graph, np.zeros(graph.num_nodes, dtype=np.int64), order, 1)
    peak = sim.peak_bytes
    alloc = allocation(graph, np.zeros(graph.num_nodes, dtype=np.int64), order, 1).allocation_bytes
    # XLA allocates every output for the whole run: the same trace with each output's bytes
    # counted from the start instead of from its step
    is_out = graph.kept & ~graph.resident  # outputs: marked `output`, or without consumers
    out_bytes = np.where(is_out[order], graph.bytes[order], 0)
    unwritten = int(out_bytes.sum()) - np.cumsum(out_bytes)
    static_out = int(max((trace[:, 0] + unwritten).max(initial=0), graph.bytes[graph.resident].sum() + out_bytes.sum()))
    x = rec["xla"]
    xla_total = (x["argument_size_in_bytes"] + x["output_size_in_bytes"] + x["temp_size_in_bytes"]
                 - x["alias_size_in_bytes"])
    const = int(sum(int(graph.bytes[v]) for v in range(graph.num_nodes) if graph.ops[v] == "constant"))
    ba = rec.get("buffer_assignment") or {}
    xla_pairs = {tuple(p) for p in ba.get("inplace", [])}
    regal_pairs = {(graph.ids[v], graph.ids[u]) for v, us in reuse.items() for u in us}
    return {
        "graph": entry["name"], "family": entry["family"], "mode": entry["mode"], "nodes": graph.num_nodes,
        "dataset_nodes": entry["nodes"],
        "xla_argument": x["argument_size_in_bytes"], "xla_output": x["output_size_in_bytes"],
        "xla_temp": x["temp_size_in_bytes"], "xla_alias": x["alias_size_in_bytes"], "xla_total": xla_total,
        "const": const, "regal_resident": int(graph.bytes[graph.resident].sum()), "regal_peak": peak,
        "ratio": peak / xla_total,
        "xla_live_peak": ba.get("live_peak", ""), "ratio_live": peak / ba["live_peak"] if ba.get("live_peak") else "",
        "xla_temp_fragmentation": x["temp_size_in_bytes"] - ba["temp_live_peak"] if "temp_live_peak" in ba else "",
        "regal_static_outputs": static_out, "ratio_static_outputs": static_out / xla_total,
        "regal_allocation": alloc, "ratio_allocation": alloc / xla_total,
        "regal_outputs": int(graph.output.sum()),
        "xla_inplace": len(xla_pairs), "regal_reuse": len(regal_pairs),
        "agree": len(xla_pairs & {(a, b) for a, b in regal_pairs}),
        "compile_s": rec.get("compile_s"),
    }


def _reuse_lists(graph) -> dict:
    """{node: [inputs it may take over]} from the graph's `reuse` field, if the Graph has one."""
    ptr = getattr(graph, "reuse_ptr", None)
    if ptr is None:
        return {}
    idx = graph.reuse_idx
    return {v: idx[ptr[v]:ptr[v + 1]].tolist() for v in range(graph.num_nodes) if ptr[v + 1] > ptr[v]}


# ---------------------------------------------------------------------------- report
FIELDS = ["graph", "family", "mode", "nodes", "dataset_nodes", "xla_argument", "xla_output", "xla_temp",
          "xla_alias", "xla_total", "xla_live_peak", "xla_temp_fragmentation", "const", "regal_resident",
          "regal_peak", "ratio", "ratio_live", "regal_outputs", "regal_static_outputs",
          "ratio_static_outputs", "regal_allocation", "ratio_allocation", "xla_inplace", "regal_reuse", "agree",
          "compile_s"]
RATIOS = ("ratio", "ratio_live", "ratio_static_outputs", "ratio_allocation")


_WHAT = {"ratio": "regal peak / XLA allocation (argument + output + temp)",
         "ratio_live": "regal peak / XLA's own liveness peak (its buffer assignment, no static outputs, "
                       "no fragmentation)",
         "ratio_static_outputs": "regal peak with every output held from the start / XLA allocation",
         "ratio_allocation": "regal allocation (SPEC section 3a, `regal.allocation`) / XLA allocation"}


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for key in RATIOS:
        lines.append(f"{_WHAT[key]}:")
        for mode in ("fwd", "train", None):
            ratios = sorted(r[key] for r in rows if (mode is None or r["mode"] == mode) and r[key] != "")
            if not ratios:
                continue
            within = sum(abs(x - 1) <= TOLERANCE for x in ratios)
            med = ratios[len(ratios) // 2]
            lines.append(f"- {mode or 'all'}: {len(ratios)} graphs, within {TOLERANCE:.0%}: {within} "
                         f"({within / len(ratios):.0%}); min {ratios[0]:.3f}, median {med:.3f}, max {ratios[-1]:.3f}")
    return lines


def table(rows: list[dict]) -> list[str]:
    mb = lambda x: f"{x / 1e6:,.2f}"  # noqa: E731
    f3 = lambda x: f"{x:.3f}" if x != "" else "-"  # noqa: E731
    out = ["| graph | mode | nodes | XLA allocation MB | XLA liveness MB | regal peak MB | regal / XLA alloc. "
           "| regal / XLA liveness | outputs marked | outputs from start / XLA alloc. "
           "| regal allocation / XLA alloc. |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        live = mb(r["xla_live_peak"]) if r["xla_live_peak"] != "" else "-"
        out.append(f"| {r['graph']} | {r['mode']} | {r['nodes']:,} | {mb(r['xla_total'])} | {live} | "
                   f"{mb(r['regal_peak'])} | {f3(r['ratio'])} | {f3(r['ratio_live'])} | "
                   f"{r['regal_outputs']} | {f3(r['ratio_static_outputs'])} | {f3(r['ratio_allocation'])} |")
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        name, variant, batch, mode = argv[1:5]
        _worker(name, variant, int(batch), mode, dump="--no-dump" not in argv)
        return 0
    ap = argparse.ArgumentParser(prog="python -m experiments.xla_fidelity", description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=None, help="graphs whose name contains one of these")
    ap.add_argument("--subset", choices=["fwd-train"], default=None,
                    help="fwd-train: the smallest forward and training graph of every family")
    ap.add_argument("--label", default="after", help="results file name (default: after)")
    ap.add_argument("--no-reuse", action="store_true", help="drop the importer's reuse fields (the old model)")
    ap.add_argument("--no-outputs", action="store_true",
                    help="drop the importer's output fields (outputs with consumers freed after their last one)")
    ap.add_argument("--no-compile", action="store_true", help="only tabulate graphs already cached")
    ap.add_argument("--no-dump", action="store_true", help="skip XLA's buffer-assignment dump when compiling")
    ap.add_argument("--refresh", action="store_true", help="recompile graphs already cached")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per compile")
    a = ap.parse_args(argv)
    entries = compiled_graphs(a.only, a.subset)
    log = lambda s: print(s, flush=True)  # noqa: E731
    if not a.no_compile:
        compile_missing(entries, a.timeout, a.refresh, not a.no_dump, log)
    rows = [r for r in (regal_row(e, a.no_reuse, a.no_outputs) for e in entries) if r is not None]
    if not rows:
        log("no cached graphs")
        return 1
    os.makedirs(RESULTS, exist_ok=True)
    from regal._io import atomic_text
    with atomic_text(os.path.join(RESULTS, f"{a.label}.csv")) as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.4f}" if k in RATIOS and r[k] != "" else r[k]) for k in FIELDS})
    cmd = "python -m experiments.xla_fidelity " + " ".join(argv)
    body = [f"# XLA fidelity: {a.label}", "", f"Command: `{cmd.strip()}`  ", f"Commit: {_commit()}  ",
            f"Graphs: {len(rows)} of {len(entries)} selected ({', '.join(f'{x} fields dropped' for x, on in (('reuse', a.no_reuse), ('output', a.no_outputs)) if on) or 'importer as is'})",
            ""] + summary(rows) + [""] + table(rows)
    with atomic_text(os.path.join(RESULTS, f"{a.label}.md")) as f:
        f.write("\n".join(body) + "\n")
    print("\n".join(body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
