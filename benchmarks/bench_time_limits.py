"""How far past `--time-limit` each searching command ends (issue 48): `regal optimize`, `regal
pack` and `regal fit`, timed from the shell (process start to exit, the report included).

    python -m benchmarks.bench_time_limits [--limits 10 30] [--repeats 3]

Inputs, made here: a 100,000-node layered DAG (`benchmarks.stop_latency.layered_graph`) for
`optimize -d 2` (an unbounded budget, so that the limit ends it), MiniMalloc's CSV of 100,000
random buffers for `pack`, and a 20,000-node layered DAG for `fit -d 2` at its own lower bound
(undecided: it searches until the limit). Numba's cache warm (`regal.warmup()` first). Prints a
Markdown table: per command and limit, the median wall and overshoot over `--repeats` runs and
the worst; writes benchmarks/results/time_limits.md (`--out`). A run that had to compile a
kernel (its file changed since the warm-up; the command then says so and does not count the
compilation) is left out and run again. The machine may be shared: its load average is printed
with the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def inputs(tmp: str) -> dict[str, list[str]]:
    """The three commands' arguments (without --time-limit), on inputs written under `tmp`."""
    from benchmarks.stop_latency import layered_graph, pack_instance
    from regal.graph import save
    big, fit_path, csv_path = (os.path.join(tmp, n) for n in ("opt.json.gz", "fit.json.gz", "pack.csv"))
    save(layered_graph(100_000), big)
    g = layered_graph(20_000, seed=2)
    save(g, fit_path)
    pack_instance(csv_path, 100_000)
    return {
        "optimize (100,000 nodes, d = 2)": ["optimize", big, "-d", "2", "-n", "1000000000", "--policy", "none",
                                            "-o", os.path.join(tmp, "sol.json")],
        "pack (100,000 buffers)": ["pack", csv_path, "-o", os.path.join(tmp, "packed.csv")],
        "fit (20,000 nodes, d = 2, limit = lower bound)": ["fit", fit_path, "-d", "2", "--memory",
                                                            str(g.lower_bound(2))],
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[10.0, 30.0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "time_limits.md"))
    args = ap.parse_args(argv)
    t0 = time.time()
    script = os.path.join(os.path.dirname(sys.executable), "regal")
    regal = [script] if os.path.exists(script) else [sys.executable, "-m", "regal.cli"]
    subprocess.run([sys.executable, "-c", "import regal; regal.warmup()"], check=True)
    table = ["| command | --time-limit (s) | median wall (s) | median overshoot | worst overshoot | exit statuses |",
             "|---|---:|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for label, cmd in inputs(tmp).items():
            for limit in args.limits:
                walls, codes, compiled = [], [], 0
                while len(walls) < args.repeats and compiled < 3:
                    t = time.perf_counter()
                    r = subprocess.run(regal + cmd + ["--time-limit", f"{limit:g}"], capture_output=True, text=True)
                    wall = time.perf_counter() - t
                    if "compiled " in r.stderr:  # a kernel file changed under us: not counted, said so; run again
                        compiled += 1
                        continue
                    walls.append(wall)
                    codes.append(r.returncode)
                    if r.returncode not in (0, 5) or "Traceback" in r.stderr:
                        print(f"    {label}: exit {r.returncode}: {r.stderr.strip()[-400:]}", flush=True)
                over = [(w - limit) / limit * 100 for w in walls]
                table.append(f"| {label} | {limit:g} | {np.median(walls):.2f} | {np.median(over):+.1f} % | "
                             f"{max(over):+.1f} % | {', '.join(str(c) for c in codes)} |"
                             + (f" ({compiled} run(s) that compiled a kernel left out)" if compiled else ""))
                print(table[-1], flush=True)
    import numba
    argv_s = " ".join(argv if argv is not None else sys.argv[1:])
    doc = ["# Time limits: how far past `--time-limit` each command ends (issue 48)", "",
           f"Command: `python -m benchmarks.bench_time_limits {argv_s}`".rstrip() + "  ",
           f"Machine: {os.cpu_count()} cores (shared), Python {platform.python_version()}, numba {numba.__version__}; "
           f"load average at the end {os.getloadavg()[0]:.2f}; wall time {time.time() - t0:.0f} s.", "",
           "Wall time from the shell, process start to exit (the report included), the Numba cache warm; median "
           f"and worst of {args.repeats} runs. Overshoot = (wall - limit) / limit. The target: within 10 %.", ""]
    doc += table
    from regal._io import atomic_text
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with atomic_text(args.out) as f:
        f.write("\n".join(doc) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
