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
- report: `regal.commands._report._report` (allocation, packed arena, bound; after the file is written);
- `regal pack` (issue 48): reading the CSV, the greedy placements, the exact search, the check,
  the packer's warm-up with a cold cache; `regal fit`: its first round, the memory plan;
- `regal solve` local-search (in its seeds), brkga (mid-search) and cpsat (a method without a
  deadline, left behind: the fallback schedule is written), a few seconds after `main` began;
- `regal train` (three small graphs, one Dask worker): start of main, the cluster's start, the
  imitation warm start, the first validation, a REINFORCE step ("file written": the checkpoint).

Prints a Markdown table; the numbers depend on the machine's load (say it with them).

    python -m benchmarks.stop_latency --tries 10 --load 2 [--only LABEL]

The other table (issue 55): every command, and the library's long calls, `--tries` times each,
the signal (alternately SIGINT and SIGTERM for the commands, SIGINT, i.e. Ctrl-C, for the
library) sent at a random moment of the run (start-up, loading, kernels, search: `TRIAL_WINDOW`),
with `--load` busy processes (one per core: a loaded machine) beside: latency (signal -> exit;
median, max), the exit statuses, and whether every try ended as documented (docs/terminal.md,
"Exit statuses": 3 with the best result written, else 128 + the signal's number and nothing
written; the library: KeyboardInterrupt, the model and optimizer untouched). A try that runs
`--timeout` seconds past its signal is killed and counted as lost.
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
import regal.commands._report, regal.commands.optimize, regal.commands.train
_load = sys.modules["regal.load"]  # (the attribute regal.load is the function)
_load.load_graph = _mark("loading", _load.load_graph)
regal.flagship.warmup = _mark("warm-up", regal.flagship.warmup)
regal.memetic._seed_solutions = _mark("seeding", regal.memetic._seed_solutions)
regal.memetic.run_loop = _mark("search", regal.memetic.run_loop)
regal.commands._report._report = _mark("report", regal.commands._report._report)
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


#: The library's long calls, as a program: `planned_step` (the README's model, a long search)
#: and `regal.optimize` on a graph file; a KeyboardInterrupt is caught, the model's parameters
#: and the optimizer's state checked untouched, and the exit status is 130 (0: it finished, the
#: interrupt lost; 1: touched). The trial's clock starts at "@ready" (imports done: a Ctrl-C in
#: `import torch` is PyTorch's), its latency ends at "@caught" (the caller has control back).
LIBRARY_PROGRAM = r"""
import os, sys, time
which = sys.argv[1]
import regal
if which == "planned_step":
    import torch, regal.torch
print("@ready", time.time(), file=sys.stderr, flush=True)  # the trial's clock starts here

def caught(code):
    print("@caught", time.time(), file=sys.stderr, flush=True)
    os._exit(code)

try:
    if which == "planned_step":
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                    torch.nn.Flatten(), torch.nn.Linear(16 * 30 * 30, 10))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
        before = [p.detach().clone() for p in model.parameters()] + [b.clone() for b in model.buffers()]
        loss_fn = lambda out, x, y: torch.nn.functional.cross_entropy(out, y)
        try:
            regal.torch.planned_step(model, opt, (x, y), loss_fn=loss_fn, budget=10**9)
        except KeyboardInterrupt:
            after = [p.detach() for p in model.parameters()] + list(model.buffers())
            same = all(torch.equal(a, b) for a, b in zip(before, after)) and not opt.state
            print("@untouched" if same else "@touched", file=sys.stderr, flush=True)
            caught(130 if same else 1)
    else:
        g = regal.load(sys.argv[2])
        try:
            regal.optimize(g, 2, budget=10**9)
        except KeyboardInterrupt:
            caught(130)
except KeyboardInterrupt:
    caught(130)
os._exit(0)
"""

#: (lo, hi): the signal is sent at a moment drawn uniformly in this window (seconds after the
#: process started; the library's, after its imports), per trial case; the windows cover each
#: command's start-up, loading, kernels and main work on this 2-core machine. They begin at 0.3 s:
#: before that the interpreter's own start runs (site, .pth files), before any code of regal
#: can install a handler: there a signal has its default action (killed by SIGTERM; SIGINT's
#: KeyboardInterrupt in an import).
TRIAL_WINDOW = {"optimize": (0.3, 12.0), "solve": (0.3, 12.0), "pack": (0.3, 15.0), "fit": (0.3, 15.0),
                "evaluate": (0.3, 20.0), "info": (0.3, 15.0), "import-onnx": (0.3, 2.0),
                "torch": (0.3, 20.0), "planned_step": (0.0, 8.0), "regal.optimize": (0.0, 5.0)}


def trial_cases(tmp: str, nodes: int, big_nodes: int) -> list[tuple[str, list[str], str, set]]:
    """(label, argv, key of TRIAL_WINDOW, the exit statuses that are as documented) for every
    command and library call of the trials' table, on graphs written under `tmp` (the
    `big_nodes` one for evaluate and info, cached in ~/.cache/regal/bench: minutes to make)."""
    from regal.graph import save
    exe = [sys.executable, "-m", "regal.cli"]
    mid = os.path.join(tmp, "trial.json.gz")
    save(layered_graph(nodes, seed=3), mid)
    cache = os.path.join(os.path.expanduser("~"), ".cache", "regal", "bench")
    os.makedirs(cache, exist_ok=True)
    big, sol = os.path.join(cache, f"layered{big_nodes}.json.gz"), os.path.join(cache, f"layered{big_nodes}.sol.json")
    if not os.path.exists(sol):
        from regal.solution import make_solution
        g = layered_graph(big_nodes)
        save(g, big)
        make_solution(g, np.zeros(g.num_nodes, dtype=np.int64), np.arange(g.num_nodes), 1, method="trial").save(sol)
    csv = os.path.join(tmp, "trial.csv")
    pack_instance(csv, 100_000)
    out = os.path.join(tmp, "trial-out")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    stop = {3, 129, 130, 143}   # 3: the best so far written; else nothing written
    nothing = {129, 130, 143}
    from regal.graph import load
    limit = str(load(mid).lower_bound(2))
    return [
        ("regal optimize", exe + ["optimize", mid, "-d", "2", "-n", "100000000", "-o", out + ".json"], "optimize", stop),
        ("regal solve local-search", exe + ["solve", "local-search", mid, "-d", "2", "-n", "100000000",
                                            "-o", out + ".json"], "solve", stop),
        ("regal pack (100,000 buffers)", exe + ["pack", csv, "--time-limit", "60", "-o", out + ".csv"], "pack", stop),
        ("regal fit (limit at the bound)", exe + ["fit", mid, "-d", "2", "--memory", limit, "--time-limit", "60"],
         "fit", stop),
        (f"regal evaluate ({big_nodes:,} nodes)", exe + ["evaluate", big, sol], "evaluate", nothing),
        (f"regal info ({big_nodes:,} nodes)", exe + ["info", big], "info", nothing),
        ("regal import-onnx (resnet50)", exe + ["import-onnx", os.path.join(root, "data", "onnx", "resnet50.onnx.gz"),
                                               "--dim", "batch=8", "-o", out + ".graph.json"], "import-onnx", nothing),
        ("regal torch (small_resnet, sgd)", exe + ["torch", os.path.join(root, "data", "programs", "small_resnet.py") +
                                                  ":make", "--train", "sgd", "--budget", "100000000"], "torch", nothing),
        ("planned_step (library, Ctrl-C)", [sys.executable, "-c", LIBRARY_PROGRAM, "planned_step"], "planned_step",
         {130}),
        ("regal.optimize (library, Ctrl-C)", [sys.executable, "-c", LIBRARY_PROGRAM, "optimize", mid],
         "regal.optimize", {130}),
    ]


def trial(args: list[str], at_s: float, signame: str, timeout_s: float, ready: bool = False) -> dict:
    """One run: `signame` sent `at_s` seconds after the start (ready: after its "@ready" line);
    {"rc", "latency_s" (to its exit, or to its "@caught" line), "lost", "finished_first",
    "traceback", "untouched"}."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "REGAL_JAX_CACHE": "0"})
    err: list[str] = []
    started = threading.Event()

    def read():
        for line in proc.stderr:
            err.append(line)
            if line.startswith("@ready"):
                started.set()
        started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if ready:
        started.wait(timeout_s)
    try:
        proc.wait(at_s)
        finished_first = True
    except subprocess.TimeoutExpired:
        finished_first = False
    sent, sent_wall = time.perf_counter(), time.time()
    if not finished_first:
        proc.send_signal(getattr(signal, signame))
    lost = False
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        lost = True
        proc.kill()
        proc.wait()
    latency = time.perf_counter() - sent
    reader.join(5)
    text = "".join(err)
    caught = [float(line.split()[1]) for line in err if line.startswith("@caught")]
    if caught:
        latency = caught[0] - sent_wall
    return {"rc": proc.returncode, "latency_s": latency, "lost": lost, "finished_first": finished_first,
            "traceback": "Traceback" in text, "untouched": "@touched" not in text, "stderr": text}


class _Load:
    """`n` busy processes (a loaded machine) while the body runs."""

    def __init__(self, n: int):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def trials_table(tmp: str, tries: int, load: int, timeout_s: float, only: str | None, nodes: int, big_nodes: int,
                 seed: int = 0) -> None:
    """The trials' Markdown table (module docstring)."""
    rng = np.random.default_rng(seed)
    cases = [c for c in trial_cases(tmp, nodes, big_nodes) if not only or only in c[0]]
    print("| command | tries | signals | load | median (s) | max (s) | exit statuses | as documented |\n"
          "|---|---:|---|---:|---:|---:|---|---|", flush=True)
    busy = _Load(load)
    try:
        for label, args, key, good in cases:
            lo, hi = TRIAL_WINDOW[key]
            library = args[1] == "-c"
            rows = []
            for k in range(tries):
                signame = "SIGINT" if library or k % 2 == 0 else "SIGTERM"
                rows.append(trial(args, float(rng.uniform(lo, hi)), signame, timeout_s, ready=library))
            sent = [r for r in rows if not r["finished_first"]]
            lat = np.array([r["latency_s"] for r in sent]) if sent else np.array([np.nan])
            codes = sorted({r["rc"] for r in sent})
            ok = all(r["rc"] in good and not r["lost"] and not r["traceback"] and r["untouched"] for r in sent)
            bad = [r for r in sent if not (r["rc"] in good and not r["lost"] and not r["traceback"] and r["untouched"])]
            print(f"| {label} | {len(sent)} | {'SIGINT' if library else 'SIGINT, SIGTERM'} | {load} | "
                  f"{np.median(lat):.2f} | {lat.max():.2f} | {', '.join(map(str, codes))} | "
                  f"{'yes' if ok else f'no ({len(bad)})'} |", flush=True)
            for r in bad[:2]:
                print("    rc", r["rc"], "lost" if r["lost"] else "", r["stderr"].strip()[-400:].replace("\n", "\n    "),
                      flush=True)
    finally:
        busy.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=60_000)
    ap.add_argument("--signal", default="SIGTERM")
    ap.add_argument("--only", default=None, help="rows whose label contains this text")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds after which a run is killed")
    ap.add_argument("--tries", type=int, default=0,
                    help="the trials' table instead: every command and library call this many times each")
    ap.add_argument("--load", type=int, default=0, help="busy processes beside the trials (one per core: loaded)")
    ap.add_argument("--big-nodes", type=int, default=300_000, help="the graph of the trials' evaluate and info")
    args = ap.parse_args(argv)
    if args.tries:
        with tempfile.TemporaryDirectory() as tmp:
            trials_table(tmp, args.tries, args.load, min(args.timeout, 120.0), args.only, args.nodes, args.big_nodes)
        return 0
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
