"""How long `regal optimize` / `regal solve` take to stop after a real signal, per phase (issue 37).

    python -m benchmarks.stop_latency [--nodes 60000] [--signal SIGTERM] [--repeats 1]

Each row is a fresh `regal` process run through a launcher that wraps (never replaces) the
functions of each phase so that they print `@phase NAME` on entry and `@end NAME` on exit to
stderr. The probe waits for the phase's entry line, waits `delay` seconds more, sends the signal
and times the process until it exits: latency (signal -> exit), exit status, whether the
solution file exists and whether the signal landed inside the phase (its `@end` came after the
signal, or never). Phases:

- imports: 0.1 s into `import regal.cli` (before `main`: the signal's default action, nothing begun);
- main: the first moments of `main` (50 ms after `regal.cli.main` is called);
- loading: `regal.load.load_graph` (a large graph file);
- warm-up: `regal.flagship.warmup` with a fresh, empty NUMBA_CACHE_DIR (every kernel compiles);
- policy: `_PolicyJob.result` (the shipped policy's priors: JAX starts in a child process);
- seeding: `regal.memetic._seed_solutions` (the heuristic starts on a large graph);
- search: `regal.memetic.run_loop`;
- report: `regal.commands.report._report` (allocation, packed arena, bound; after the file is written);
- `regal pack` (issue 48): reading the CSV, the greedy placements, the exact search, the check,
  the packer's warm-up with a cold cache; `regal fit`: its first round, the memory plan;
- `regal solve` local-search (in its seeds), brkga (mid-search) and cpsat (a method without a
  deadline, left behind: the fallback schedule is written), a few seconds after `main` began;
- `regal train` (three small graphs, one Dask worker): start of main, the cluster's start, the
  imitation warm start, the first validation, a REINFORCE step ("file written": the checkpoint).

Prints a Markdown table; the numbers depend on the machine's load (say it with them).
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

#: The launcher: wraps each phase's function with entry / exit lines, then runs `regal.cli.main`.
LAUNCHER = r"""
import functools, sys, time
print(f"@phase imports {time.time():.4f}", file=sys.stderr, flush=True)
_INSIDE = []  # the warm-up's own searches on a tiny graph are not the phases probed
def _mark(name, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        quiet = bool(_INSIDE)
        if not quiet:
            print(f"@phase {name} {time.time():.4f}", file=sys.stderr, flush=True)
        if name == "warm-up":
            _INSIDE.append(1)
        try:
            return fn(*a, **k)
        finally:
            if name == "warm-up":
                _INSIDE.pop()
            if not quiet:
                print(f"@end {name} {time.time():.4f}", file=sys.stderr, flush=True)
    return wrapper
import regal.cli, regal.load, regal.flagship, regal.memetic
import regal.commands.report, regal.commands.optimize, regal.commands.train
_load = sys.modules["regal.load"]  # (the attribute regal.load is the function)
_load.load_graph = _mark("loading", _load.load_graph)
regal.flagship.warmup = _mark("warm-up", regal.flagship.warmup)
regal.memetic._seed_solutions = _mark("seeding", regal.memetic._seed_solutions)
regal.memetic.run_loop = _mark("search", regal.memetic.run_loop)
regal.commands.report._report = _mark("report", regal.commands.report._report)
regal.commands.optimize._PolicyJob.result = _mark("policy", regal.commands.optimize._PolicyJob.result)
import regal.packing, regal.fit, regal.memory_plan, regal._warmup
regal.packing.read_csv = _mark("reading", regal.packing.read_csv)
regal.packing._greedy = _mark("greedy", regal.packing._greedy)
regal.packing._search = _mark("exact", regal.packing._search)
regal.packing.check = _mark("check", regal.packing.check)
regal._warmup.warmup_packing = _mark("warm-up", regal._warmup.warmup_packing)
regal.fit._round = _mark("round", regal.fit._round)
regal.memory_plan.plan = _mark("plan", regal.memory_plan.plan)
try:
    import regal.local_search
    regal.local_search.Climb.run = _mark("local-search", regal.local_search.Climb.run)
except (ImportError, AttributeError):
    pass
import os
if os.environ.get("REGAL_PROBE_TRAIN"):  # imports JAX: only for the training's phases
    import distributed, regal.training.reinforce as _rf
    distributed.LocalCluster.__init__ = _mark("cluster", distributed.LocalCluster.__init__)
    _rf.imitate = _mark("imitation", _rf.imitate)
    _rf._train_step = _mark("step", _rf._train_step)
    _rf._validate = _mark("validation", _rf._validate)
    regal.commands.train._start_jax = _mark("jax", regal.commands.train._start_jax)
    distributed.LocalCluster.close = _mark("close", distributed.LocalCluster.close)
sys.argv = ["regal"] + sys.argv[1:]
print(f"@phase main {time.time():.4f}", file=sys.stderr, flush=True)
regal.cli.main()
"""


def flat_graph(num_nodes: int):
    """`num_nodes` nodes without edges (the issue's 100,000-node case: seeds, no search structure)."""
    from regal.graph import Graph
    return Graph.from_records([{"id": f"v{i}", "bytes": 1 + (i * 7919) % 4096} for i in range(num_nodes)],
                              name=f"flat{num_nodes}")


def layered_graph(num_nodes: int, seed: int = 0):
    """A deep DAG of `num_nodes` nodes: each reads one or two of the 64 nodes before it, one in
    twenty is resident (a weight); sizes drawn from a wide range."""
    from regal.graph import Graph
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(num_nodes):
        rec = {"id": f"n{i}", "bytes": int(rng.integers(64, 1 << 20))}
        if i % 20 == 0:
            rec["resident"] = True
        elif i:
            k = min(i, int(rng.integers(1, 3)))
            rec["inputs"] = sorted({f"n{int(j)}" for j in rng.integers(max(0, i - 64), i, size=k)})
        recs.append(rec)
    return Graph.from_records(recs, name=f"layered{num_nodes}")


class Probe:
    """One run: `args` after `regal`, the signal sent `delay` s after `phase` begins."""

    def __init__(self, args: list[str], phase: str, delay: float = 0.3, signame: str = "SIGTERM",
                 env: dict | None = None, output: str | None = None, timeout_s: float = 300.0, nth: int = 1):
        self.args, self.phase, self.delay, self.signame, self.nth = args, phase, delay, signame, nth
        self.env = {**os.environ, "REGAL_JAX_CACHE": "0", **(env or {})}
        self.output, self.timeout_s = output, timeout_s

    def run(self) -> dict:
        """{"rc", "latency_s", "in_phase", "written", "phases", "stdout", "stderr"}; latency_s is
        None when the phase never began (the run ended first)."""
        if self.output and os.path.exists(self.output):
            os.remove(self.output)
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, *self.args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env, bufsize=1)
        lines, sent, sent_wall, q = [], None, None, queue.Queue()
        threading.Thread(target=lambda: [q.put(l) for l in proc.stderr] + [q.put(None)], daemon=True).start()
        give_up = time.perf_counter() + self.timeout_s
        while time.perf_counter() < give_up:
            try:
                line = q.get(timeout=0.05)
            except queue.Empty:
                continue
            if line is None:
                break
            lines.append(line)
            entered = sum(l.startswith(f"@phase {self.phase} ") for l in lines)
            if sent is None and line.startswith(f"@phase {self.phase} ") and entered == self.nth:
                time.sleep(self.delay)
                sent, sent_wall = time.perf_counter(), time.time()
                give_up = sent + self.timeout_s
                proc.send_signal(getattr(signal, self.signame))
        try:
            proc.wait(max(0.0, give_up - time.perf_counter()))
        except subprocess.TimeoutExpired:
            pass
        killed = proc.poll() is None
        if killed:
            proc.kill()
            proc.wait()
        done = time.perf_counter()
        stdout = proc.stdout.read()
        ends = [float(l.split()[2]) for l in lines if l.startswith(f"@end {self.phase} ")][self.nth - 1:]
        return {"rc": proc.returncode, "killed": killed, "latency_s": None if sent is None else done - sent,
                "in_phase": sent is not None and (not ends or ends[0] >= sent_wall),
                "written": bool(self.output) and os.path.exists(self.output),
                "phases": [l.split()[1] for l in lines if l.startswith("@phase ")],
                "stdout": stdout, "stderr": "".join(l for l in lines if not l.startswith("@")), "lines": lines}


def cases(tmp: str, nodes: int) -> list[tuple[str, Probe]]:
    """(label, probe) for every phase, on graphs written under `tmp`."""
    from regal.graph import save
    big, flat = os.path.join(tmp, "layered.json.gz"), os.path.join(tmp, "flat.json.gz")
    small = os.path.join(tmp, "small.json.gz")
    save(layered_graph(nodes), big)
    save(flat_graph(nodes), flat)
    save(layered_graph(400, seed=1), small)
    out = os.path.join(tmp, "sol.json")
    opt = ["optimize", "-d", "2", "-n", "100000000", "-o", out]
    cold = {"NUMBA_CACHE_DIR": os.path.join(tmp, "numba-cold")}
    return [
        ("start-up: imports, before main (no handler can be installed yet)",
         Probe(opt + [small, "--policy", "none"], "imports", 0.1, output=out)),
        ("start-up: first moments of main (50 ms in)", Probe(opt + [small, "--policy", "none"], "main", 0.05,
                                                              output=out)),
        ("start-up: kernel warm-up (cold Numba cache)",
         Probe(opt + [small, "--policy", "none"], "warm-up", 0.5, env=cold, output=out)),
        ("start-up: policy job (--policy default)", Probe(opt + [small, "--policy", "default"], "policy", 0.0,
                                                          output=out)),
        (f"loading ({nodes:,}-node file)", Probe(opt + [big, "--policy", "none"], "loading", 0.2, output=out)),
        (f"seeding ({nodes:,} nodes, no edges)", Probe(opt + [flat, "--policy", "none"], "seeding", 0.5,
                                                        output=out)),
        (f"search ({nodes:,}-node DAG)", Probe(opt + [big, "--policy", "none"], "search", 1.0, output=out)),
        (f"report ({nodes:,}-node DAG, --time-limit 3)",
         Probe(["optimize", "-d", "2", "--time-limit", "3", "-o", out, big, "--policy", "none"], "report", 0.05,
               output=out)),
        (f"solve local-search ({nodes:,}-node DAG, 8 s in: its seeds)",
         Probe(["solve", "local-search", big, "-d", "2", "-n", "100000000", "-o", out], "main", 8.0, output=out)),
        (f"solve brkga ({nodes:,}-node DAG, 5 s in)",
         Probe(["solve", "brkga", big, "-d", "2", "-n", "100000000", "-o", out], "main", 5.0, output=out)),
        (f"solve cpsat ({nodes:,}-node DAG, 5 s in: no deadline, left behind)",
         Probe(["solve", "cpsat", big, "-d", "2", "-o", out], "main", 5.0, output=out)),
    ] + pack_fit_cases(tmp, nodes) + train_cases(tmp)


def pack_instance(path: str, num_buffers: int, seed: int = 0, life: int = 200) -> None:
    """MiniMalloc's CSV of `num_buffers` buffers with random lives (up to `life` steps in a span
    of twice the buffers) and sizes (up to 1 MiB)."""
    rng = np.random.default_rng(seed)
    lo = rng.integers(0, 2 * num_buffers, num_buffers)
    life, size = rng.integers(1, life, num_buffers), rng.integers(1, 1 << 20, num_buffers)
    with open(path, "w") as f:
        f.write("id,lower,upper,size\n")
        f.writelines(f"b{i},{lo[i]},{lo[i] + life[i]},{size[i]}\n" for i in range(num_buffers))


def pack_fit_cases(tmp: str, nodes: int) -> list[tuple[str, Probe]]:
    """`regal pack` and `regal fit`, the signal in each of their phases."""
    from regal.graph import save
    big, small = os.path.join(tmp, "pack-big.csv"), os.path.join(tmp, "pack-small.csv")
    pack_instance(big, 100_000)
    pack_instance(small, 3000, seed=1, life=1000)  # the exact search runs to the limit
    out = os.path.join(tmp, "packed.csv")
    fit_graph = os.path.join(tmp, "fit.json.gz")
    g = layered_graph(3000, seed=2)
    save(g, fit_graph)
    cold = {"NUMBA_CACHE_DIR": os.path.join(tmp, "numba-cold-pack")}
    pack = ["pack", "--time-limit", "60", "-o", out]
    fit = ["fit", fit_graph, "-d", "2", "--memory", str(g.lower_bound(2)), "--time-limit", "60", "-n", "1000000"]
    return [
        ("pack: start of main", Probe(pack + [big], "main", 0.05, output=out)),
        ("pack: kernel warm-up (cold Numba cache)", Probe(pack + [small], "warm-up", 0.5, env=cold, output=out)),
        ("pack: reading 100,000 rows", Probe(pack + [big], "reading", 0.2, output=out)),
        ("pack: greedy placements (100,000 buffers)", Probe(pack + [big], "greedy", 0.5, output=out)),
        ("pack: exact search (3,000 buffers)", Probe(pack + [small], "exact", 1.0, output=out)),
        ("fit: start of main", Probe(fit, "main", 0.05)),
        ("fit: first round's search (3,000 nodes, the limit at the bound)", Probe(fit, "search", 1.0)),
        ("fit: a later round (rounds of 2,000 evaluations)", Probe(fit[:-1] + ["2000"], "round", 0.1, nth=2)),
    ]


def train_cases(tmp: str) -> list[tuple[str, Probe]]:
    """`regal train` on three small graphs, one Dask worker: the signal in each of its phases
    (the output "file" is the checkpoint)."""
    import json
    from regal.graph import save
    data = os.path.join(tmp, "train-data")
    os.makedirs(data, exist_ok=True)
    for i in range(3):
        save(layered_graph(24, seed=10 + i), os.path.join(data, f"g{i}.json"))
    manifest = os.path.join(data, "manifest.json")
    with open(manifest, "w") as f:
        json.dump({"format": "regal-manifest/1", "root": data, "splits": {"train": ["g0", "g1"], "valid": ["g2"]},
                   "graphs": {f"g{i}": {"path": f"g{i}.json", "nodes": 24} for i in range(3)}}, f)
    rows = []
    for phase, delay, imitate in (("main", 0.05, "0"), ("cluster", 0.3, "0"), ("imitation", 1.0, "400"),
                                  ("validation", 0.2, "0"), ("step", 0.3, "0")):
        out = os.path.join(tmp, f"train-{phase}")
        args = ["train", "--manifest", manifest, "-d", "1", "--samples", "2", "--budget", "300", "--imitate", imitate,
                "--steps", "100000", "--workers", "1", "-o", out]
        env = {} if phase == "main" else {"REGAL_PROBE_TRAIN": "1"}
        rows.append((f"train: {phase}", Probe(args, phase, delay, env=env, output=os.path.join(out, "checkpoint.npz"))))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=60_000)
    ap.add_argument("--signal", default="SIGTERM")
    ap.add_argument("--only", default=None, help="rows whose label contains this text")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds after which a run is killed")
    args = ap.parse_args(argv)
    print("| phase | signal | in phase | latency (s) | exit | file written |\n|---|---|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, probe in cases(tmp, args.nodes):
            if args.only and args.only not in label:
                continue
            probe.signame, probe.timeout_s = args.signal, args.timeout
            r = probe.run()
            lat = "never reached" if r["latency_s"] is None else f"{r['latency_s']:.2f}"
            if r["killed"]:
                lat = f"more than {lat} (killed)"
            print(f"| {label} | {args.signal} | {'yes' if r['in_phase'] else 'no'} | {lat} | {r['rc']} | "
                  f"{'yes' if r['written'] else 'no'} |", flush=True)
            if r["rc"] not in (0, 3):
                print("    " + r["stderr"].strip().replace("\n", "\n    ")[-600:], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
