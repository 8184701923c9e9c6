"""Start-up cost of regal: imports, loading the cached kernels, and whole `regal optimize` runs.

    python -m benchmarks.bench_startup --repeats 5 --baseline REF

Every measurement is a fresh Python process (what a user who types the command waits for),
timed from outside: wall time, CPU time (user + system, all threads) and, for the optimize runs,
the `seconds` the solution reports. With `--baseline REF`, each row is measured for `git archive
REF` too (or REF's own regal/, when REF is a directory holding one: e.g. a revision with some
files swapped, to time one change alone; runs alternate between the two, so that a change of
load hits both alike) and the peaks of the two are compared.

- cold: a first run after installing: Numba's and JAX's on-disk caches empty (fresh
  NUMBA_CACHE_DIR and REGAL_JAX_CACHE_DIR), so every kernel is compiled (median of `--cold`).
- warm: the caches filled by an earlier run, the files in the OS page cache: median of
  `--repeats` runs after one discarded run.

Rows: `regal --help` (the floor: the interpreter, click and what `regal.cli` imports); `import
regal`; `import regal.cli`; `regal.warmup()` after `import regal` (loading every cached kernel,
timed inside the process); `regal optimize` on a shipped 990-node graph, d = 2, 5,000
evaluations: plain BRKGA (`--no-seeding --no-polish --policy none`), the flagship's default, and
the flagship with the shipped policy (`--policy default`). Writes benchmarks/results/startup.md
(`--out`).

`--phases N` (issue 36) instead times where a warm `regal optimize GRAPH -d 2 -n 5000` spends
its wall time, in N fresh processes (a launcher wraps, never replaces, each phase's function):
the interpreter's start, the imports, Numba's CPU target, the graph's loading and validation,
the kernels' loading from Numba's cache (the warm-up), the heuristic seeds, the search, the
solution, the report and the exit; medians, written to benchmarks/results/startup_phases.md,
each run beside a `regal --help` (the floor). With `--baseline REF` (and `--ref REF`) it times
both sources, run by run in turn, in two columns.

`--lean-switch` (issue 49) measures the working tree twice instead, with the program's lean
start on and off (`REGAL_LEAN_START=1` / `0`: Numba's private patches, `regal._lean_start`).

Regal's own modules are byte-compiled first (`compileall`, as `pip install` does; `--no-compile`
skips it): this machine sets PYTHONDONTWRITEBYTECODE=1, so without that every run compiles
regal's 50 modules from source (about 0.1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPH = os.path.join(ROOT, "data", "graphs", "real", "vit_l8_d256_b32_fwd_pre.json.gz")  # 990 nodes


def rows(graph: str) -> list[tuple[str, list[str]]]:
    py = [sys.executable, "-c"]
    script = os.path.join(os.path.dirname(sys.executable), "regal")  # the console script, as users run it
    regal = [script] if os.path.exists(script) else [sys.executable, "-m", "regal.cli"]
    optimize = regal + ["optimize", graph, "-d", "2", "-n", "5000", "--json"]
    return [
        ("`regal --help` (the floor)", regal + ["--help"]),
        ("`import regal`", py + ["import regal"]),
        ("`import regal.cli`", py + ["import regal.cli"]),
        ("`regal.warmup()`, every kernel (in-process time)",
         py + ["import time, regal; t = time.perf_counter(); regal.warmup(); "
               "print('{\"seconds\": %f}' % (time.perf_counter() - t))"]),
        ("`regal optimize`, plain BRKGA (`--no-seeding --no-polish --policy none`)",
         optimize + ["--no-seeding", "--no-polish", "--policy", "none"]),
        ("`regal optimize`, flagship default", optimize),
        ("`regal optimize`, flagship `--policy default`", optimize + ["--policy", "default"]),
    ]


def run_once(cmd: list[str], env: dict, cwd: str) -> tuple[float, float, float | None, int | None]:
    """(wall seconds, CPU seconds, reported seconds or None, peak bytes or None) of one process."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        return wall, cpu, None, None
    return wall, cpu, doc.get("seconds"), doc.get("peak_bytes")


def _median(xs):
    return float(np.median(xs)) if xs else None


def measure(cmd: list[str], envs: dict, cwd: str, repeats: int, cold: int) -> dict:
    """Per source (a name of `envs`): cold wall and seconds, warm wall, CPU, seconds, peaks."""
    out = {name: {"cold_wall": [], "cold_seconds": [], "wall": [], "cpu": [], "seconds": [], "peaks": set()}
           for name in envs}
    for _ in range(cold):
        for name, env in envs.items():
            with tempfile.TemporaryDirectory() as numba_dir, tempfile.TemporaryDirectory() as jax_dir:
                w, _, s, _ = run_once(cmd, {**env, "NUMBA_CACHE_DIR": numba_dir, "REGAL_JAX_CACHE_DIR": jax_dir}, cwd)
            out[name]["cold_wall"].append(w)
            if s is not None:
                out[name]["cold_seconds"].append(s)
    for env in envs.values():
        run_once(cmd, env, cwd)  # fills the warm caches; discarded
    for _ in range(repeats):
        for name, env in envs.items():
            w, c, s, p = run_once(cmd, env, cwd)
            m = out[name]
            m["wall"].append(w)
            m["cpu"].append(c)
            if s is not None:
                m["seconds"].append(s)
            if p is not None:
                m["peaks"].add(p)
    return {name: {k: (_median(v) if isinstance(v, list) else v) for k, v in m.items()} | {"min": min(m["wall"])}
            for name, m in out.items()}


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _export(ref: str, into: str) -> None:
    """`regal/` of git revision `ref`, extracted under `into`."""
    archive = subprocess.run(["git", "archive", ref, "regal"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


#: The phases launcher: wraps each phase's function so that it records (name, start, end) in
#: perf_counter time, then runs `regal.cli.main` as the console script does and prints the
#: records to stderr as JSON just before the process's own `os._exit`. Calls made inside the
#: warm-up (its searches on a tiny graph) count as the warm-up's. "imports" holds the modules
#: `regal optimize` imports when it starts (`import regal` names its functions lazily).
PHASES_LAUNCHER = r"""
import functools, json, os, sys, time
T0 = time.perf_counter()
marks, inside = [("process", T0, T0)], []
def wrap(owner, attr, name):
    fn = getattr(owner, attr)
    @functools.wraps(fn)
    def wrapper(*a, **k):
        if inside:
            return fn(*a, **k)
        t = time.perf_counter()
        if name.startswith("warm-up"):
            inside.append(1)
        try:
            return fn(*a, **k)
        finally:
            if name.startswith("warm-up"):
                inside.pop()
            marks.append((name, t, time.perf_counter()))
    setattr(owner, attr, wrapper)
import regal.cli
# what the program does before the first kernel module loads (at `main`, or at `import regal.cli`
# in older trees, where this is a no-op): Numba without SciPy and PyYAML
_lean = sys.modules.get("regal._lean_start") or sys.modules["regal.cli_common"]  # older trees: in cli_common
_lean.import_numba_lean()
import regal.flagship, regal.memetic, regal.solution, regal.load, regal.methods  # optimize imports them
marks.append(("imports", T0, time.perf_counter()))
load = sys.modules["regal.load"]
wrap(sys.modules.get("regal.commands._common") or sys.modules["regal.cli_common"], "start_numba", "Numba's CPU target")
wrap(load, "load_graph", "graph: parse + validate")
wrap(regal.flagship, "warmup", "warm-up: kernels from Numba's cache")
wrap(regal.memetic, "_seed_solutions", "heuristic seeds")
wrap(regal.memetic, "run_loop", "search")
wrap(regal.memetic, "make_solution", "solution (re-simulated)")
import regal.commands._report
wrap(regal.commands._report, "_report", "report (allocation, packed arena, bound)")
_exit = os._exit
def leave(code):
    marks.append(("end", time.perf_counter(), time.perf_counter()))
    sys.stderr.write("@marks " + json.dumps({"wall0": time.time() - (time.perf_counter() - T0), "marks": marks}) + "\n")
    sys.stderr.flush()
    _exit(code)
os._exit = leave
sys.argv = ["regal"] + sys.argv[1:]
regal.cli.main()
"""


def compile_sources(paths) -> None:
    """Byte-compile regal/ under each path (what `pip install` does; this machine sets
    PYTHONDONTWRITEBYTECODE=1, so imports never write the .pyc files themselves)."""
    for path in paths:
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(path, "regal")],
                       check=True, capture_output=True)


def _phases_of(doc: dict, t_wall: float, wall: float) -> list[tuple[str, float]]:
    """(phase, seconds) rows of one run's marks, the gaps between phases as "other" rows."""
    marks = sorted(doc["marks"], key=lambda m: m[1])
    t0 = marks[0][1]
    rows = [("interpreter start (before the first line)", doc["wall0"] - t_wall)]
    prev = t0
    for name, a, b in marks[1:]:
        if a - prev > 1e-4:
            rows.append((f"other, before {name}", a - prev))
        if name != "end":
            rows.append((name, b - a))
        prev = max(prev, b)
    rows.append(("exit (flush, os._exit) and process teardown", wall - (doc["wall0"] - t_wall) - (prev - t0)))
    return rows


def measure_phases(graph: str, repeats: int, envs: dict, cwd: str) -> dict:
    """Per source (a name of `envs`): {"rows": [(phase, median seconds, runs)], "walls": [...],
    "floor": [...]}, over `repeats` fresh processes after a discarded one; the sources and the
    floor (`regal --help`) alternate run by run, so that a change of load hits them alike. The
    time between phases ("other": click, the search's set-up, writing) is its own row."""
    cmd = [sys.executable, "-c", PHASES_LAUNCHER, "optimize", graph, "-d", "2", "-n", "5000", "--json"]
    floor_cmd = rows(graph)[0][1]  # `regal --help`, the console script
    out = {name: {"per": {}, "order": [], "walls": [], "floor": []} for name in envs}
    for i in range(repeats + 1):
        for name, env in envs.items():
            m = out[name]
            t = time.perf_counter()
            subprocess.run(floor_cmd, env=env, cwd=cwd, capture_output=True, check=True)
            floor = time.perf_counter() - t
            t_wall = time.time()
            t = time.perf_counter()
            run = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
            wall = time.perf_counter() - t
            line = [x for x in run.stderr.splitlines() if x.startswith("@marks ")]
            if run.returncode != 0 or not line:
                raise SystemExit(f"phases run failed ({run.returncode}): {run.stderr.strip()[-800:]}")
            if i == 0:
                continue  # the first run fills the page cache; discarded
            m["walls"].append(wall)
            m["floor"].append(floor)
            for phase, sec in _phases_of(json.loads(line[-1][len("@marks "):]), t_wall, wall):
                if phase not in m["per"]:
                    m["per"][phase] = []
                    m["order"].append(phase)
                m["per"][phase].append(sec)
    return {name: {"rows": [(p, float(np.median(m["per"][p])), len(m["per"][p])) for p in m["order"]],
                   "walls": m["walls"], "floor": m["floor"]} for name, m in out.items()}


def phases_main(args, envs: dict, cwd: str, t0: float, what: dict) -> None:
    res = measure_phases(args.graph, args.phases, envs, cwd)
    names = list(envs)
    order = []
    for name in names:
        order += [p for p, _, _ in res[name]["rows"] if p not in order]
    walls = {n: float(np.median(res[n]["walls"])) for n in names}
    head = "| phase | " + " | ".join(f"{n} (s) | {n}: share of the wall" for n in names) + " |"
    table = [head, "|---|" + "---:|---:|" * len(names)]
    for phase in order:
        cells = []
        for n in names:
            got = {p: (sec, k) for p, sec, k in res[n]["rows"]}
            if phase not in got:
                cells += ["-", "-"]
                continue
            sec, k = got[phase]
            note = "" if k == len(res[n]["walls"]) else f" ({k} of {len(res[n]['walls'])} runs)"
            cells += [f"{sec:.3f}{note}", f"{sec / walls[n] * 100:.0f} %"]
        table.append(f"| {phase} | " + " | ".join(cells) + " |")
    table.append("| **wall, from the shell** | " + " | ".join(f"**{walls[n]:.3f}** | 100 %" for n in names) + " |")
    table.append("| `regal --help` beside it (the floor) | "
                 + " | ".join(f"{float(np.median(res[n]['floor'])):.3f} | {float(np.median(res[n]['floor'])) / walls[n] * 100:.0f} %"
                              for n in names) + " |")
    print("\n".join(table))
    import numba
    argv = f"--phases {args.phases}" + (f" --baseline {args.baseline}" if args.baseline else "") + \
        (f" --ref {args.ref}" if args.ref else "")
    doc = ["# Where `regal optimize` spends its wall time (issue 36)", "",
           f"Command: `python -m benchmarks.bench_startup {argv}`  ",
           "Measured: " + "; ".join(f"{n}: {w}" for n, w in what.items()) + "  ",
           f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, numba {numba.__version__}; load "
           f"average at the end {os.getloadavg()[0]:.2f}; wall time {time.time() - t0:.0f} s.", "",
           f"`regal optimize {os.path.relpath(args.graph, ROOT)} -d 2 -n 5000 --json` (990 nodes, the flagship's "
           f"default, policy none), warm Numba cache, regal byte-compiled; median of {args.phases} fresh processes "
           "per source after a discarded one, each beside a `regal --help` (the floor; the sources and the floor "
           "alternate run by run). A phase's median and the wall's are taken separately, so the rows need not "
           "add up to the wall exactly.", ""] + table
    out = os.path.join(os.path.dirname(args.out), "startup_phases.md")
    from regal._io import atomic_text
    with atomic_text(out) as f:
        f.write("\n".join(doc) + "\n")
    print(f"wrote {out}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="warm runs per row and source (median)")
    ap.add_argument("--cold", type=int, default=1, help="cold runs per row and source (median); 0 skips them")
    ap.add_argument("--baseline", default=None,
                    help="git revision to compare with (its regal/, exported), or a directory holding a regal/")
    ap.add_argument("--ref", default=None, help="git revision to measure (default: the working tree)")
    ap.add_argument("--graph", default=GRAPH)
    ap.add_argument("--only", type=int, nargs="*", default=None, help="row numbers (1-based) to run")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "startup.md"))
    ap.add_argument("--phases", type=int, default=0, metavar="N",
                    help="instead: where `regal optimize` spends its wall time, median of N processes")
    ap.add_argument("--lean-switch", action="store_true",
                    help="instead of a baseline: the working tree with its lean start on and off "
                         "(REGAL_LEAN_START=1 / 0, regal._lean_start), in two columns")
    ap.add_argument("--no-compile", dest="compile", action="store_false",
                    help="do not byte-compile regal/ first (every import then compiles from source)")
    args = ap.parse_args(argv)
    t0 = time.time()
    base_env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "REGAL_JAX_CACHE_DIR")}
    with tempfile.TemporaryDirectory() as tmp:
        sources = {}
        for name, ref in (("before", args.baseline), ("after", args.ref)):
            if name == "before" and ref is None:
                continue
            if ref is None:
                sources[name] = ROOT
            elif os.path.isdir(os.path.join(ref, "regal")):  # a directory holding a regal/ of its own
                sources[name] = os.path.abspath(ref)
            else:
                os.makedirs(os.path.join(tmp, name))
                _export(ref, os.path.join(tmp, name))
                sources[name] = os.path.join(tmp, name)
        if args.compile:
            compile_sources(sources.values())
        envs = {name: {**base_env, "PYTHONPATH": path} for name, path in sources.items()}
        if args.lean_switch:  # one source, the switch on and off
            envs = {"lean on": {**envs["after"], "REGAL_LEAN_START": "1"},
                    "lean off": {**envs["after"], "REGAL_LEAN_START": "0"}}
        cwd = os.path.join(tmp, "cwd")  # not the repository: its regal/ would come first on sys.path
        os.makedirs(cwd)
        names = list(envs)
        tree = f"the working tree ({_git('rev-parse', '--short', 'HEAD')})"
        what = {n: (args.baseline if n == "before" else f"{tree}, REGAL_LEAN_START={n == 'lean on':d}"
                    if n.startswith("lean") else args.ref or tree) for n in names}
        if args.phases:
            phases_main(args, envs, cwd, t0, what)
            return
        head = ["what"] + [f"{col} {n}" for col in ("cold wall (s)", "warm wall (s)", "warm CPU (s)", "warm `seconds`")
                           for n in names] + ["peak (B)"]
        table = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        for i, (label, cmd) in enumerate(rows(args.graph), 1):
            if args.only and i not in args.only:
                continue
            m = measure(cmd, envs, cwd, args.repeats, args.cold)
            peaks = {n: m[n]["peaks"] for n in names}
            same = len({frozenset(p) for p in peaks.values()}) == 1
            peak = ", ".join(f"{p:,}" for p in sorted(set().union(*peaks.values()))) or "-"
            peak = peak if same else "; ".join(f"{n} {', '.join(f'{p:,}' for p in sorted(v))}" for n, v in peaks.items())
            cells = [fmt(m[n][k]) for k in ("cold_wall", "wall", "cpu", "seconds") for n in names]
            table.append(f"| {label} | " + " | ".join(cells) + f" | {peak} |")
            print(table[-1], flush=True)
    import numba
    doc = ["# Start-up benchmark", "",
           f"Command: `python -m benchmarks.bench_startup {' '.join(argv if argv is not None else sys.argv[1:])}`".rstrip()
           + "  ",
           "Measured: " + "; ".join(f"{n}: {w}" for n, w in what.items()) + "  ",
           f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, numba {numba.__version__}; "
           f"load average at the end {os.getloadavg()[0]:.2f}; wall time {time.time() - t0:.0f} s.",
           "", f"Graph: `{os.path.relpath(args.graph, ROOT)}` (990 nodes), d = 2, 5,000 evaluations, seed 0. Each "
           "cell is a fresh process; cold = empty Numba and JAX caches (a first run after installing), warm = caches "
           f"filled (median of {args.repeats} runs after a discarded one). `seconds` is what the solution reports; "
           "CPU is user + system time of all the process's threads and children.", ""] + table
    if args.out:
        from regal._io import atomic_text
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with atomic_text(args.out) as f:
            f.write("\n".join(doc) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
