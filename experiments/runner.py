"""The experiments' one back end and one cache: (method x graph x devices x seed) cells on Dask,
each cached as a file, and aggregated.

A cell's result is its `regal-solution/1` file, `CACHE/<method>-<hash>/<graph>/d<D>_s<S>.json`
(`d<D>_<variant>_s<S>.json` for a cell of a variant, e.g. a memory limit of the runtime
experiment: `Cell.variant` names it, `Cell.extra` holds the options it adds),
written atomically by the worker that ran it. A finished cell is never run again, so an
interrupted experiment resumes where it stopped, and deleting one file recomputes only that cell.
The hash covers the method's solver and options, so changing a method's settings starts a new
folder instead of mixing results. Each graph's folder holds `graph.sha1`, the digest of the graph
file its cells were solved on: when the file changes (a rebuilt data set), its cells are stale,
dropped and run again (a folder without the file, from before it existed, is taken as current). Aggregation re-reads every solution file and re-simulates it
(`regal.solution.load_solution`): every reported peak is recomputed from the placement and order,
never carried over from inside a search.

Methods are named in the experiment config:
    {"name": "cpsat", "solver": "cpsat", "options": {"time_limit_s": 30}, "seeds": [0], "devices": [2]}
("seeds" and "devices", optional, narrow the experiment's own for that method.)
`solver` is a method of the registry, `regal.methods` (default: the config's name); a `policy`
option that is a path is relative to the repository; a `config` option that is an object of
`regal.FlagshipConfig` fields (`{"anneal_temperature": 0}`) is that config. A solution file carries
the solver's own method name; reports label it with the config's `name`.

Scripts whose cells are not registry methods (training folds, policy files) use the same back end
and cache through `run_files`: each job writes one result file, a job whose file exists is not run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import NamedTuple

__all__ = ["Method", "Cell", "cells_for", "run_cells", "run_cell", "run_files", "json_job", "load_results", "check_stamp",
           "not_a_cell", "graph_digest", "flagship_config", "dataset_graphs", "machine", "commit", "ROOT"]

ROOT = _ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dataset_graphs(ds: dict, manifest: str | None = None) -> list[str]:
    """The graph files of one dataset entry of a config; the entry's own "manifest" (a path
    relative to the repository) wins over the run's."""
    from regal.dataset import split_paths
    manifest = os.path.join(ROOT, ds["manifest"]) if ds.get("manifest") else manifest
    paths = split_paths(ds["split"], manifest=manifest, synthetic=ds.get("synthetic", False),
                        max_nodes=ds.get("max_nodes"))
    if ds.get("spread"):
        from regal.dataset import spread
        paths = spread(paths, ds["spread"], manifest=manifest, synthetic=ds.get("synthetic", False))
    return paths[:ds["limit"]] if ds.get("limit") else paths


def machine() -> str:
    import platform
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor() or "unknown cpu")
    return f"{platform.node()}: {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def commit() -> str:
    import subprocess
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    # the results folder is what a run writes, so its own changes do not make the code dirty
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!experiments/results"],
                           capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return (out.stdout.strip() or "unknown") + ("+dirty" if dirty else "")


class Method(NamedTuple):
    name: str
    solver: str
    options: dict
    seeds: tuple | None = None  # None: the experiment's seeds
    devices: tuple | None = None  # None: the experiment's device counts (else those of them listed here)

    @property
    def key(self) -> str:
        blob = json.dumps({"solver": self.solver, "options": self.options}, sort_keys=True)
        return f"{self.name}-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"

    @classmethod
    def from_config(cls, doc: dict) -> "Method":
        seeds, devices = doc.get("seeds"), doc.get("devices")
        return cls(doc["name"], doc.get("solver", doc["name"]), dict(doc.get("options", {})),
                   tuple(seeds) if seeds is not None else None, tuple(devices) if devices is not None else None)


class Cell(NamedTuple):
    method: Method
    graph_path: str
    devices: int
    seed: int
    variant: str = ""    # names a cell's extra options in its file name ("" for none)
    extra: tuple = ()    # (option, value) pairs the variant adds to the method's options

    @property
    def graph_name(self) -> str:
        base = os.path.basename(self.graph_path)
        return base[:-8] if base.endswith(".json.gz") else os.path.splitext(base)[0]

    def path(self, cache_dir: str) -> str:
        variant = f"_{self.variant}" if self.variant else ""
        return os.path.join(cache_dir, self.method.key, self.graph_name, f"d{self.devices}{variant}_s{self.seed}.json")


_DIGESTS: dict = {}


def graph_digest(path: str) -> str:
    """sha1 of the graph file's bytes (gzip files are written without a name or time, so a
    rebuild that changes nothing keeps the digest)."""
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _DIGESTS:
        with open(path, "rb") as f:
            _DIGESTS[key] = hashlib.sha1(f.read()).hexdigest()
    return _DIGESTS[key]


def _stamp(cell: Cell, cache_dir: str) -> str:
    return os.path.join(os.path.dirname(cell.path(cache_dir)), "graph.sha1")


def _is_current(cell: Cell, cache_dir: str) -> bool:
    """Whether the cell's folder was solved on the graph file as it is now (or predates stamps)."""
    stamp = _stamp(cell, cache_dir)
    if not os.path.exists(stamp):
        return True
    with open(stamp) as f:
        return f.read().strip() == graph_digest(cell.graph_path)


def check_stamp(folder: str, graph_path: str) -> int:
    """Make `folder` (the cells of one graph) current: when its `graph.sha1` names another digest
    of the graph file, remove its cell files (`*.json`); then stamp it. Returns the files removed."""
    from regal._io import atomic_text
    stamp = os.path.join(folder, "graph.sha1")
    digest = graph_digest(graph_path)
    removed = 0
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().strip() == digest:
                return 0
        for name in os.listdir(folder):
            if name.endswith(".json"):
                os.remove(os.path.join(folder, name))
                removed += 1
    os.makedirs(folder, exist_ok=True)
    with atomic_text(stamp) as f:
        f.write(digest + "\n")
    return removed


def _refresh(cells: list[Cell], cache_dir: str) -> int:
    """Drop the cells of folders stamped with another graph digest; stamp every folder with
    the current one. Returns the number of stale cell files removed."""
    removed, seen = 0, set()
    for c in cells:
        folder = os.path.dirname(c.path(cache_dir))
        if folder not in seen:
            seen.add(folder)
            removed += check_stamp(folder, c.graph_path)
    return removed


def cells_for(methods, graph_paths, devices, seeds) -> list[Cell]:
    return [Cell(m, p, d, s) for p in graph_paths for d in devices for m in methods
            if m.devices is None or d in m.devices
            for s in (m.seeds if m.seeds is not None else seeds)]


def _options(method: Method) -> dict:
    """The method's options as the registry takes them: a policy path made absolute (config paths
    are relative to the repository), one Numba thread per Dask worker."""
    import regal.methods
    from regal.policy.names import POLICY_NAMES
    opts = dict(method.options)
    policy = opts.get("policy")
    if isinstance(policy, str) and policy not in POLICY_NAMES and not os.path.isabs(policy):
        opts["policy"] = os.path.join(_ROOT, policy)
    if isinstance(opts.get("config"), dict):
        opts["config"] = flagship_config(opts["config"].items())
    if regal.methods.get(method.solver).takes_threads:
        opts.setdefault("num_threads", 1)
    return opts


def flagship_config(settings):
    """The default `regal.FlagshipConfig` with each (NAME, VALUE) of `settings` set, NAME a field
    of the config or of its climb (`FlagshipConfig.replace`), VALUE cast to the field's type
    (KeyError naming an unknown field; `brkga` and `climb` are not set whole this way)."""
    import regal
    default = regal.FlagshipConfig()
    fields = default.climb._asdict() | default._asdict()
    changes = {}
    for name, value in settings:
        if name not in fields or name in ("brkga", "climb"):
            raise KeyError(name)
        kind = type(fields[name])
        changes[name] = kind(int(value)) if kind in (bool, int) else kind(value)
    return default.replace(**changes)


def _task(cell: Cell, cache_dir: str) -> tuple:
    """The arguments of `regal.parallel.solve_to_file` for one cell: plain values only, so a
    worker needs regal installed and nothing of this repository."""
    return (cell.method.solver, _options(cell.method) | dict(cell.extra), cell.graph_path, cell.devices, cell.seed,
            cell.path(cache_dir), cell.method.name)


def run_cell(cell: Cell, cache_dir: str) -> dict:
    """Solve one cell and write its solution file (in this process)."""
    from regal.parallel import solve_to_file
    return solve_to_file(*_task(cell, cache_dir))


def run_cells(cells: list[Cell], cache_dir: str, client=None, progress: bool = True) -> dict:
    """Run every cell that has no current file yet (stale ones, of a graph file that changed
    since, are dropped first); returns counts of cached, computed and stale cells."""
    from regal.parallel import solve_to_file
    stale = _refresh(cells, cache_dir)
    counts = run_files([(c.path(cache_dir), solve_to_file, _task(c, cache_dir)) for c in cells], client, progress)
    return {"cells": len(cells), "cached": counts["cached"], "computed": counts["computed"], "stale": stale}


def run_files(jobs: list[tuple], client=None, progress: bool = True) -> dict:
    """The one back end: run each job `(out, fn, args)` whose file `out` does not exist yet,
    `fn(*args)` writing it (atomically), on the Dask `client` (in this process when None).
    Returns counts of jobs cached and computed. A directory (or anything but a file) where a
    job's file belongs ends the run in one line naming it (`not_a_cell`), before any job runs."""
    for out, _, _ in jobs:
        not_a_cell(out)
    todo = [j for j in jobs if not os.path.exists(j[0])]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), unit="cell", desc="cells", smoothing=0.05)
    if client is None:
        for _, fn, args in todo:
            fn(*args)
            if bar is not None:
                bar.update(1)
    else:
        from dask.distributed import as_completed
        futures = [client.submit(fn, *args, pure=False) for _, fn, args in todo]
        for fut in as_completed(futures):
            fut.result()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return {"cached": len(jobs) - len(todo), "computed": len(todo)}


def not_a_cell(path: str) -> None:
    """Exit in one line (status 1, no traceback) when `path`, a cached cell's file, is a
    directory or anything else but a regular file: the cache cannot write it, nor read it."""
    if os.path.exists(path) and not os.path.isfile(path):
        what = "a directory" if os.path.isdir(path) else "not a regular file"
        sys.exit(f"experiments: {path}: {what} where a cached cell's file belongs; move it away and run again")


def json_job(fn, out: str, *args) -> None:
    """A `run_files` job for a function that returns a JSON value: run it and write the value to
    `out` (atomically), so the script's cell is cached like a solver's."""
    import json as _json

    from regal._io import atomic_text
    value = fn(*args)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with atomic_text(out) as f:
        _json.dump(value, f)


def load_results(cells: list[Cell], cache_dir: str) -> list[dict]:
    """One row per finished cell, its peak re-simulated from the solution file. A cell file that
    cannot be read back (cut off, not JSON, a schedule that does not re-simulate to its claimed
    peak) is named in one line on stderr, discarded and computed again here."""
    from regal.parallel import cached_graph
    rows = []
    for c in cells:
        path = c.path(cache_dir)
        not_a_cell(path)
        if not os.path.exists(path) or not _is_current(c, cache_dir):
            continue
        g = cached_graph(c.graph_path)  # a broken graph file is its own error, not the cell's
        try:
            rows.append(_cell_row(c, path, g))
        except (ValueError, KeyError, TypeError) as e:  # JSON, UTF-8, SolutionError, ScheduleError
            reason = (str(e).splitlines() or [""])[0] or type(e).__name__
            print(f"experiments: {path}: corrupt cached cell ({reason}); discarded and computed again",
                  file=sys.stderr, flush=True)
            os.remove(path)
            run_cell(c, cache_dir)
            rows.append(_cell_row(c, path, g))
    return rows


def _cell_row(c: Cell, path: str, g) -> dict:
    """The row of one cell's file; ValueError (or KeyError, TypeError) for one that is corrupt."""
    from regal.solution import load_solution
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    row = {"method": c.method.name, "graph": c.graph_name, "devices": c.devices, "seed": c.seed}
    if c.variant:
        row["variant"] = c.variant
    if isinstance(doc, dict) and "refused" in doc:
        return row | {"peak_bytes": None, "refused": doc["refused"]}
    sol = load_solution(path, g)  # validates the schedule and recomputes the peak
    return row | {"nodes": g.num_nodes, "peak_bytes": sol.peak_bytes, "seconds": sol.seconds,
                  "evaluations": sol.evaluations, "info": sol.info}
