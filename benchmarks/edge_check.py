"""Issue 55 checked from outside: the installed `regal` program and the library, driven in
subprocesses as a user would, one case per item of the issue's "Why" and "Build" lists and its
first-hour list; then Ctrl-C and SIGTERM in the long calls of every command, timed.

    python -m benchmarks.edge_check [--only TEXT] [--tries 3] [--no-stops] [--no-cases] [--load N]

Each case runs `regal ...` (the console script beside this Python) or `python -c ...` in a fresh
process and is judged on what a user sees: the exit status against the expected one(s), no
"Traceback" in its output, a refusal in ONE `Error:` line naming the option (or the argument),
never an exit status 0 where a refusal is due (a "wrong exit 0"). The out-of-range cases are
made from the commands' own click options (every count, size, budget, fraction and time option
of every command: 2**63, 10**30, -1, NaN, inf, ...), so a new option is checked without a new line
here. The stops: each long call is sent SIGINT or SIGTERM (alternately; the library's, SIGINT)
at a random moment of its main work, `--tries` times; latency is from the signal to the exit
(the library's: to the caller's `except KeyboardInterrupt`), and a stop is as documented
(docs/terminal.md, "Exit statuses") when it exits 3 with its result written, or 128 + the
signal's number with nothing written, no traceback, within 2 s.

Prints two Markdown tables (cases, stops) and a summary line; exit status 0 when every case and
stop passed, else 1. The default run takes about 8 minutes on the 2-core machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REGAL = os.path.join(os.path.dirname(sys.executable), "regal")
TINY = os.path.join(ROOT, "tests", "data", "tiny.hlo")
VIT = os.path.join(ROOT, "data", "graphs", "real", "vit_l8_d256_b8_train_opt.json.gz")
PROGRAM = os.path.join(ROOT, "data", "programs", "small_resnet.py") + ":make"
#: A stop later than this after its signal misses issue 55's target.
STOP_TARGET_S = 2.0
HUGE, GIANT = str(2**63), str(10**30)


@dataclass
class Case:
    """One check: `argv` (after `regal`) or `code` (a Python program), the exit statuses that are
    right, `names`: what the one error line must name (a refusal), `check`: a predicate on the
    result (stdout, stderr, rc) -> an empty string when right, else what is wrong."""
    item: str
    label: str
    argv: list | None = None
    expect: tuple = (0,)
    names: str | None = None
    code: str | None = None
    check: object = None
    shell: str | None = None
    timeout_s: float = 120.0
    result: dict = field(default_factory=dict)
    batch: list | None = None


def run_case(c: Case, env: dict) -> dict:
    if c.shell is not None:
        cmd = ["bash", "-c", c.shell]
    elif c.code is not None:
        cmd = [sys.executable, "-c", c.code]
    else:
        cmd = [REGAL, *map(str, c.argv)]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=c.timeout_s, env=env, cwd=ROOT)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else \
            (e.stdout or ""), (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    seconds = time.perf_counter() - t
    problems = []
    if rc not in c.expect:
        problems.append("wrong exit 0" if rc == 0 else f"exit {rc}")
    if "Traceback" in out or "Traceback" in err:
        problems.append("traceback")
    if c.names is not None and rc != 0:
        errors = [line for line in (err + out).splitlines() if line.startswith("Error:")]
        if len(errors) != 1:
            problems.append(f"{len(errors)} error lines")
        elif c.names not in errors[0]:
            problems.append(f"error line does not name {c.names}")
    if c.check is not None and rc != "timeout":
        why = c.check(out, err, rc)
        if why:
            problems.append(why)
    text = (err or out).strip().splitlines()
    errline = next((line for line in reversed(text) if line.startswith("Error:")), text[-1] if text else "")
    return {"rc": rc, "seconds": seconds, "problems": problems, "line": errline[:160], "stdout": out}


# ---------------------------------------------------------------- the cases

def _base_args(tmp: str) -> dict:
    """A valid invocation of each command that takes a number (the value under test goes after)."""
    csvp = os.path.join(tmp, "in.csv")
    return {"optimize": [TINY], "solve": ["local-search", TINY], "fit": [TINY, "--memory", "1GiB"],
            "info": [TINY], "pack": [csvp], "torch": [PROGRAM], "evaluate": [TINY, os.path.join(tmp, "tiny.sol.json")],
            "plot": [TINY, os.path.join(tmp, "tiny.sol.json"), "-o", os.path.join(tmp, "p.png")],
            "import-onnx": [os.path.join(ROOT, "data", "onnx", "resnet50.onnx.gz"), "-o", os.path.join(tmp, "g.json")],
            "export-onnx": [os.path.join(ROOT, "data", "onnx", "resnet50.onnx.gz"), os.path.join(tmp, "tiny.sol.json"),
                            "-o", os.path.join(tmp, "o.onnx")],
            "train": ["-o", os.path.join(tmp, "train-out")]}


def _bad_values(ptype, opt: str = "") -> list[str]:
    """Values out of the option type's declared range (its low / high read from the type)."""
    name = type(ptype).__name__
    if name == "Count" or isinstance(ptype, __import__("click").IntRange):
        low = getattr(ptype, "low", None) if name == "Count" else ptype.min
        return [HUGE, "nan", "-1" if low is None else str(low - 1)] + ([GIANT] if opt == "--budget" else [])
    if name == "Fraction":
        vals = ["nan", "inf"]
        if ptype.low > -1 or (ptype.low_open and ptype.low >= -1):
            vals.append("-1")
        if ptype.high is not None:
            vals.append(repr(ptype.high + 1))
        return vals
    if name == "_Seconds":
        return ["nan", "inf", "-1", "1e300"]
    if name == "_Size":
        return ["-1", "nan", "0", GIANT + "GiB"]
    return []


#: Options typed as text that carry a number, and values of them out of range.
TEXT_NUMBERS = {"--memory-limit": ["-1", "nan", "0", GIANT + "GiB"],
                "--bandwidth": ["-1GB/s", "nanGB/s", "0GB/s"],
                "--latency": ["-5us", "nanus"],
                "--speed": ["nan", "-1", "0", "1,inf"],
                "--dim": ["batch=" + GIANT, "batch=-1"],
                "--collect-seeds": [str(2**31), "-1", GIANT]}


def option_cases(tmp: str) -> list[Case]:
    """Every numeric option of every command (read from click), each bad value: exit 2 (a usage
    error), one Error line naming the option."""
    import click

    from regal.cli import main
    ctx = click.Context(main)
    base = _base_args(tmp)
    out = []
    for name in main.list_commands(ctx):
        cmd = main.get_command(ctx, name)
        sub = [(name, cmd)] if not isinstance(cmd, click.Group) else \
            [(f"{name} {s}", cmd.get_command(ctx, s)) for s in cmd.list_commands(ctx)]
        for full, command in sub:
            key = full.split()[0]
            for p in command.params:
                if not isinstance(p, click.Option) or p.is_flag:
                    continue
                opt = max(p.opts, key=len)
                vals = TEXT_NUMBERS.get(opt, []) if type(p.type).__name__ == "StringParamType" else _bad_values(p.type, opt)
                for v in vals:
                    if key not in base:
                        continue
                    extra, argv0 = [], None
                    if opt in ("--memory-limit", "--bandwidth", "--latency", "--speed"):
                        extra = ["--objective", "runtime"] + (["--memory-limit", "1GiB"] if opt != "--memory-limit"
                                                              else [])
                        if key == "solve":
                            extra = extra[2:]
                            argv0 = ["solve", "heft", TINY]
                    argv = (argv0 if key == "solve" and extra else full.split() + base[key]) + extra + [f"{opt}={v}"]
                    out.append(Case("Build: every count/size/budget checked at the door", f"regal {full} {opt} {v}",
                                    argv, expect=(2,) if type(p.type).__name__ != "StringParamType" else (1, 2),
                                    names=opt, timeout_s=90))
    return out


#: The library's refusals run in one process per function family (importing torch costs
#: seconds), each call on its own: a line `@case I ok|bad|raised MESSAGE` per call; a call that
#: hangs ends the batch (the timeout), its lines so far kept.
LIB_HARNESS = """
import sys, traceback
def refused(i, fn, name):
    try:
        fn()
    except (ValueError, TypeError) as e:
        m = str(e)
        ok = m.startswith(name) and "\\n" not in m and (".." in m or "finite" in m)
        print(f"@case {i} {'ok' if ok else 'bad'} {m.splitlines()[0] if m else type(e).__name__}", flush=True)
        return
    except Exception as e:  # noqa: BLE001 - anything else reached the user as a traceback
        print(f"@case {i} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        return
    print(f"@case {i} bad NOT REFUSED", flush=True)
"""


def _batch(item: str, prefix: str, calls: list[tuple[str, str, str]], timeout_s: float = 180.0) -> list[Case]:
    """Cases (label, call expression, argument name) run in one process after `prefix`: one Case
    per call (their results filled in by `run_batches`), the first holding the program."""
    lines = [LIB_HARNESS, prefix] + [f"refused({i}, lambda: {call}, {name!r})" for i, (_, call, name) in enumerate(calls)]
    cases = [Case(item, label, expect=("refused",)) for label, _, _ in calls]
    cases[0].code, cases[0].timeout_s = "\n".join(lines), timeout_s
    cases[0].batch = cases
    return cases


def library_cases() -> list[Case]:
    item = "Why: out-of-range numbers to the library"
    out = []
    base = f"import regal, regal.methods, regal.fit\ng = regal.load({TINY!r})\n"
    calls = {
        "regal.optimize": "regal.optimize(g, 2, {})",
        "methods.solve local-search": "regal.methods.solve('local-search', g, 2, {})",
        "regal.fit": "regal.fit.fit(g, 10**9, 2, {})",
    }
    for label, fn in calls.items():
        batch = []
        for arg, vals in (("budget", ["10**30", "2**63", "-1", "0", "float('nan')"]),
                          ("seed", ["2**63", "-1"]), ("time_limit_s", ["float('nan')", "-1.0", "1e300"])):
            batch += [(f"{label}({arg}={v})", fn.format(f"{arg}={v}"), arg) for v in vals]
        if label == "regal.optimize":
            batch += [(f"regal.optimize(devices={v})", f"regal.optimize(g, {v})", "devices") for v in ("2**63", "0", "-1")]
        if label == "regal.fit":
            batch += [(f"regal.fit(memory_limit_bytes={v})", f"regal.fit.fit(g, {v}, 2)", "memory_limit_bytes")
                      for v in ("2**70", "-1")]
        out += _batch(item, base, batch)
    pk = ("from regal import packing\nimport numpy as np\n"
          "inst = packing.instance(np.array([0]), np.array([2]), np.array([4]), ['a'])\n")
    out += _batch(item, pk, [(f"packing.pack(time_limit_s={v})", f"packing.pack(inst, time_limit_s={v})", "time_limit_s")
                             for v in ("float('nan')", "float('inf')", "-1.0")])
    model = ("import torch, regal, regal.torch\nfrom regal.torch.compare import compare\n"
             "from regal.torch.eager import measure_anchors\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 2)\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.randn(3, 4)\n")
    batch = [(f"planned_step({arg}={v})", f"regal.torch.planned_step(model, opt, (x,), {arg}={v})", arg)
             for arg, v in (("budget", "10**30"), ("budget", "2**63"), ("budget", "-1"), ("budget", "float('nan')"),
                            ("seed", "2**63"), ("seed", "-1"), ("devices", "2**63"), ("devices", "0"))]
    batch += [(f"regal.torch.compare.compare({arg}={v})", f"compare(model, (x,), {arg}={v})", arg)
              for arg, v in (("budget", "10**30"), ("budget", "-1"), ("seed", "2**63"), ("devices", "0"))]
    batch += [(f"regal.torch.eager.measure_anchors({arg}={v})", f"measure_anchors(model, opt, (x,), {arg}={v})", arg)
              for arg, v in (("budget", "10**30"), ("budget", "-1"), ("seed", "2**63"))]
    batch += [(f"regal.torch.compile(recompute_budget={v})", f"regal.torch.compile(model, recompute_budget={v})",
               "recompute_budget") for v in ("float('nan')", "-1.0")]
    out += _batch(item, model, batch, timeout_s=300)
    return out


def run_batch(c: Case, env: dict) -> None:
    """Run a batch's program; each of its cases gets its own verdict from its `@case` line."""
    r = run_case(c, env)
    got = {}
    for line in (r.pop("stdout", "") or "").splitlines():
        if line.startswith("@case "):
            _, i, verdict, *msg = line.split(" ", 3) + [""]
            got[int(i)] = (verdict, " ".join(msg).strip())
    for i, case in enumerate(c.batch):
        verdict, msg = got.get(i, (None, ""))
        if verdict == "ok":
            case.result = {"rc": "refused", "seconds": r["seconds"], "problems": [], "line": msg}
        elif verdict == "bad":
            case.result = {"rc": "refused" if msg != "NOT REFUSED" else "returned", "seconds": r["seconds"],
                           "problems": ["wrong exit 0" if msg == "NOT REFUSED" else "not one line naming it"],
                           "line": msg}
        elif verdict == "raised":
            case.result = {"rc": "raised", "seconds": r["seconds"], "problems": ["traceback"], "line": msg}
        else:   # the batch ended before this call answered: a hang (timeout) or a crash
            case.result = {"rc": r["rc"], "seconds": r["seconds"], "problems": [f"no answer (batch: {r['rc']})"],
                           "line": r["line"]}


def _has(text: str):
    return lambda out, err, rc: "" if text in out + err else f"no {text!r} in the output"


def _file_check(path: str, pred, what: str):
    def check(out, err, rc):
        try:
            return "" if pred(path) else what
        except Exception as e:  # noqa: BLE001 - a broken file is the finding
            return f"{what} ({type(e).__name__}: {e})"
    return check


GLOBAL_STATE = r"""
import random, sys, os
import numpy as np, torch, numba
import torch._inductor.config as ic, torch._functorch.config as fc
import regal, regal.torch
def snap():
    return {"threads": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
            "numba threads": numba.get_num_threads(), "torch rng": torch.get_rng_state().numpy().tobytes(),
            "py rng": random.getstate(), "np rng": repr(np.random.get_state()), "inductor": ic.get_config_copy(),
            "functorch": fc.get_config_copy(), "grad": torch.is_grad_enabled(), "dtype": torch.get_default_dtype(),
            "matmul": torch.get_float32_matmul_precision(), "det": torch.are_deterministic_algorithms_enabled(),
            "mkldnn": torch.backends.mkldnn.enabled, "env": dict(os.environ)}
torch.manual_seed(3); random.seed(3); np.random.seed(3)
# no Dropout: a step then draws no random number, so any change of a generator is the library's
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
ce = lambda out, x, y: torch.nn.functional.cross_entropy(out, y)
g = regal.load(sys.argv[1])
def call(name):
    if name == "regal.optimize": regal.optimize(g, 2, budget=200)
    elif name == "methods.solve": __import__("regal.methods").methods.solve("local-search", g, 2, budget=200)
    elif name == "regal.fit": __import__("regal.fit").fit.fit(g, g.lower_bound(2) * 2, 2, budget=100, time_limit_s=10)
    elif name == "planned_step": regal.torch.planned_step(model, opt, (x, y), loss_fn=ce, budget=300)(x, y)
    elif name == "measure_anchors":
        from regal.torch.eager import measure_anchors
        measure_anchors(model, opt, (x, y), loss_fn=ce, budget=200)
    elif name == "compare":
        from regal.torch.compare import compare
        compare(model, (x,), budget=200)
    elif name == "from_module": regal.torch.from_module(model, (x,), training=True)
    elif name == "regal.torch.compile": regal.torch.compile(model)(x).sum().backward()
if sys.argv[2] in ("measure_anchors", "regal.torch.compile"):   # what torch.compile itself sets once, before
    torch.compile(lambda a: a * 2)(torch.ones(2))
    torch._dynamo.reset()
before = snap()
call(sys.argv[2])
after = snap()
bad = [k for k in before if before[k] != after[k]]
for k in bad:
    if isinstance(before[k], dict):
        print(k, {n: (before[k].get(n), after[k].get(n)) for n in set(before[k]) | set(after[k])
                  if before[k].get(n) != after[k].get(n)})
    else:
        print(k, "changed")
sys.exit(1 if bad else 0)
"""


def other_cases(tmp: str) -> list[Case]:
    """The named items of the issue's lists."""
    out = []
    sol = os.path.join(tmp, "tiny.sol.json")
    why, first = "Why", "first hour"
    out += [
        Case(why, "optimize -d 2 -n 2**63", ["optimize", TINY, "-d", 2, "-n", HUGE], (2,), "--budget"),
        Case(why, "fit -n 2**63", ["fit", TINY, "--memory", "1GiB", "-n", HUGE], (2,), "--budget"),
        Case(why, "solve local-search -n 10**30", ["solve", "local-search", TINY, "-n", GIANT], (2,), "--budget"),
        Case(why, "torch -n 10**30", ["torch", PROGRAM, "-n", GIANT], (2,), "--budget"),
        Case(why, "torch -n 2**63", ["torch", PROGRAM, "-n", HUGE], (2,), "--budget"),
    ]
    for cmd in (["optimize", TINY], ["solve", "brkga", TINY], ["fit", TINY, "--memory", "1GiB"],
                ["import-hlo", TINY], ["plot", TINY, sol], ["pack", os.path.join(tmp, "in.csv")],
                ["import-onnx", os.path.join(ROOT, "data", "onnx", "resnet50.onnx.gz"), "--dim", "batch=1"],
                ["export-onnx", os.path.join(ROOT, "data", "onnx", "resnet50.onnx.gz"), sol]):
        out.append(Case(why, f"regal {cmd[0]} -o ''", cmd + ["-o", ""], (2,), "-o"))
    out.append(Case(why, "regal train -o ''", ["train", "-o", ""], (2,), "-o"))
    # a closed pipe: the reader leaves before (| true) or after the first line (| head -1)
    for label, pipe in (("regal info G | head -1", f"{REGAL} info {TINY} | head -1"),
                        ("regal optimize G -n 300 | head -1", f"{REGAL} optimize {TINY} -n 300 | head -1"),
                        ("regal solve --list | head -1", f"{REGAL} solve --list | head -1"),
                        ("regal evaluate G S | true", f"sleep 0; {REGAL} evaluate {TINY} {sol} | true"),
                        ("regal optimize G --json | true", f"{REGAL} optimize {TINY} -n 300 --json | true")):
        out.append(Case(why, label, shell=f"set -o pipefail; {pipe} 2>{tmp}/pipe.err; s=${{PIPESTATUS[0]}}; "
                                           f"cat {tmp}/pipe.err >&2; exit $s",
                        expect=(0, 141), check=lambda o, e, rc: "" if e == "" else "stderr not empty"))
    # quoted ids
    quoted = os.path.join(tmp, "quoted.csv")
    packed = os.path.join(tmp, "quoted.out.csv")
    ids = [" a", "b ", "c,d", 'e"q']

    def ids_kept(path):
        with open(path, newline="") as f:
            return [r["id"] for r in csv.DictReader(f)] == ids
    out.append(Case(why, 'pack keeps a quoted id " a"', ["pack", quoted, "-o", packed],
                    check=_file_check(packed, ids_kept, "ids changed")))
    out.append(Case(first, "pack --json ends with a newline", ["pack", quoted, "--json"],
                    check=lambda o, e, rc: "" if o.endswith("}\n") and json.loads(o) else "no newline"))
    # a directory where a cached cell belongs
    cell = os.path.join(tmp, "cells", "cell.json")
    out.append(Case(why, "a directory in place of a cached experiment cell", code=(
        "import os, sys\nfrom experiments.runner import json_job, run_files\n"
        f"os.makedirs({cell!r}, exist_ok=True)\nrun_files([({cell!r}, json_job, (lambda: 1, {cell!r}))], progress=False)"),
        expect=(1,), check=lambda o, e, rc: "" if len(e.strip().splitlines()) == 1 and "directory" in e
        else "not one line naming the directory"))
    # an orphan temporary file of a pid that runs again (another process)
    me = os.getpid()
    with open(f"/proc/{me}/stat") as f:
        start = int(f.read().rpartition(")")[2].split()[19])
    orphan_out = os.path.join(tmp, "orphan.json")
    orphan = f"{orphan_out}.{me}-{start + 1}-0123abcd.tmp.json"
    out.append(Case(why, "an orphan temp file of a reused live pid goes",
                    shell=f"echo partial > {orphan}; {REGAL} optimize {TINY} -n 100 -o {orphan_out} >/dev/null",
                    check=_file_check(orphan, lambda p: not os.path.exists(p), "the orphan stayed")))
    # the policy by its heads
    pol = {name: os.path.join(tmp, f"policy-{name}.json") for name in ("name", "file")}
    policy_path = os.path.join(ROOT, "regal", "policy", "learned.npz")
    both = " && ".join(f"{REGAL} optimize {VIT} -d 2 -n 600 --policy {policy} -o {pol[name]} >/dev/null"
                       for name, policy in (("name", "learned"), ("file", policy_path)))

    def same_policy(o, e, rc):
        a, b = (json.load(open(pol[k])) for k in ("name", "file"))
        return "" if (a["placement"], a["order"], a["peak_bytes"]) == (b["placement"], b["order"], b["peak_bytes"]) \
            else f"different solutions ({a['peak_bytes']} vs {b['peak_bytes']})"
    out.append(Case(why, "--policy regal/policy/learned.npz equals --policy learned (placement, order, peak)",
                    shell=both, check=same_policy, timeout_s=300))
    # nothing global changed
    for call in ("regal.optimize", "methods.solve", "regal.fit", "planned_step", "measure_anchors", "compare",
                 "from_module", "regal.torch.compile"):
        out.append(Case("Build: nothing global left changed", f"{call} leaves torch/Inductor/threads/rng/env",
                        code=GLOBAL_STATE.replace("sys.argv[1]", repr(TINY)).replace("sys.argv[2]", repr(call)),
                        timeout_s=300, check=lambda o, e, rc: o.strip()))
    # first hour
    for path, name in ((os.path.join(tmp, "nope.json"), "regal.load"), (os.path.join(tmp, "nope.hlo"), "regal.load")):
        out.append(Case(first, f"{name}(missing {os.path.basename(path)}) is an OSError", code=(
            f"import regal\ntry:\n    regal.load({path!r})\nexcept OSError as e:\n    print(type(e).__name__, e)\n"
            "else:\n    raise SystemExit('no error')")))
    out.append(Case(first, "load_solution(missing file) is an OSError", code=(
        f"import regal\nfrom regal.solution import load_solution\ng = regal.load({TINY!r})\n"
        f"try:\n    load_solution({os.path.join(tmp, 'nope.sol.json')!r}, g)\nexcept OSError as e:\n    print(e)\n"
        "else:\n    raise SystemExit('no error')")))
    out.append(Case(first, "packing.read_csv(missing file) is an OSError", code=(
        "from regal import packing\n"
        f"try:\n    packing.read_csv({os.path.join(tmp, 'nope.csv')!r})\nexcept OSError as e:\n    print(e)\n"
        "else:\n    raise SystemExit('no error')")))
    out.append(Case(first, "regal info missing-file: exit 1, one line", ["info", os.path.join(tmp, "nope.json")], (1,),
                    "no such file"))
    out.append(Case(first, "a solution's numbers are JSON-serializable (every method)", code=(
        "import json, regal, regal.methods\n"
        f"g = regal.load({TINY!r})\n"
        "for m in ('regal', 'brkga', 'local-search', 'gp-dfs', 'cpsat', 'heft'):\n"
        "    s = regal.methods.solve(m, g, 2, **({} if m in ('gp-dfs', 'cpsat', 'heft') else {'budget': 100}))\n"
        "    json.dumps({'peak': s.peak_bytes, 'd': s.num_devices, 'n': s.evaluations, 's': s.seconds, 'i': s.info})\n"
        "s = regal.optimize(g, 2, budget=100)\n"
        "json.dumps({'peak': s.peak_bytes, 'n': s.evaluations, 'i': s.info, 'dev': s.device_peak_bytes.tolist()})")))
    out.append(Case(first, "fit prints MiB (not raw bytes)", ["fit", VIT, "--memory", "1GiB"], (0,),
                    check=_has("MiB")))
    out.append(Case(first, "an undecided fit says what to try next",
                    ["fit", os.path.join(ROOT, "data", "graphs", "synthetic", "synthetic_s0_0000.json.gz"), "--memory",
                     1030, "--time-limit", 1, "-n", 50], (5,), check=_has("next")))
    out.append(Case(first, "a loose bound says it is loose (training graph)",
                    ["optimize", os.path.join(ROOT, "data", "graphs", "torch", "torch_mobilenet_v2_train.json.gz"),
                     "-n", 100], check=_has("loose")))
    docs = os.path.join(ROOT, "docs")

    def doc_check(path, pred, what):
        return lambda o, e, rc: "" if pred(open(os.path.join(docs, path)).read()) else what
    out.append(Case(first, "docs/library.md names regal.memory_plan and regal.save", code="pass",
                    check=doc_check("library.md", lambda t: "memory_plan" in t and "regal.save" in t, "missing")))
    out.append(Case(first, "docs/how-it-works.md does not name regal/torch.py", code="pass",
                    check=doc_check("how-it-works.md", lambda t: "regal/torch.py" not in t, "names regal/torch.py")))
    out.append(Case(first, "planned-steps.md: the user's part in its first 50 lines", code="pass",
                    check=doc_check("planned-steps.md", lambda t: "planned_step(" in "\n".join(t.splitlines()[:50]),
                                    "no planned_step( call in the first 50 lines")))
    out.append(Case(first, "docs say how to use solution.json / fit -o offsets in a runtime", code="pass",
                    check=doc_check("terminal.md", lambda t: "Using a solution in a runtime" in t, "no such section")))
    # ONNX: the solution put to use, run by onnxruntime
    model, onnx_sol, ordered = (os.path.join(tmp, f) for f in ("mlp.onnx", "mlp.sol.json", "mlp.ordered.onnx"))
    out.append(Case(first, "ONNX: optimize, export-onnx, onnxruntime runs the file's order, same output", shell=(
        f"{REGAL} optimize {model} -n 300 -o {onnx_sol} >/dev/null && "
        f"{REGAL} export-onnx {model} {onnx_sol} -o {ordered} >/dev/null && "
        f"{sys.executable} -c {shlex.quote(ORT_RUN)} {model} {ordered}"), timeout_s=300))
    return out


#: Runs an ONNX model and its ordered copy in ONNX Runtime (the file's order: docs/terminal.md)
#: and compares their outputs; prints the kernels' order.
ORT_RUN = """
import sys, numpy as np, onnxruntime as ort
def run(path):
    so = ort.SessionOptions()
    so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": np.linspace(-1, 1, 8 * 64, dtype=np.float32).reshape(8, 64)})[0]
a, b = run(sys.argv[1]), run(sys.argv[2])
assert np.array_equal(a, b), "different outputs"
print("same output", a.shape)
"""


def onnx_model(path: str) -> None:
    """A small ONNX model with its weights in the file: four branches of MatMul, Relu, MatMul
    from one input, summed (an order matters for its peak)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    for b in range(4):
        w1 = numpy_helper.from_array(rng.standard_normal((64, 256)).astype(np.float32), f"w1_{b}")
        w2 = numpy_helper.from_array(rng.standard_normal((256, 16)).astype(np.float32), f"w2_{b}")
        inits += [w1, w2]
        nodes += [helper.make_node("MatMul", ["x", f"w1_{b}"], [f"h{b}"], name=f"mm1_{b}"),
                  helper.make_node("Relu", [f"h{b}"], [f"r{b}"], name=f"relu_{b}"),
                  helper.make_node("MatMul", [f"r{b}", f"w2_{b}"], [f"o{b}"], name=f"mm2_{b}")]
        outs.append(f"o{b}")
    nodes += [helper.make_node("Sum", outs, ["y"], name="sum")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


def prepare(tmp: str) -> None:
    """The files the cases read: a solution of the tiny graph, a small CSV with quoted ids, an
    ONNX model with its weights."""
    onnx_model(os.path.join(tmp, "mlp.onnx"))
    subprocess.run([REGAL, "optimize", TINY, "-n", "100", "-o", os.path.join(tmp, "tiny.sol.json")], check=True,
                   capture_output=True)
    with open(os.path.join(tmp, "in.csv"), "w") as f:
        f.write("id,lower,upper,size\na,0,4,3\nb,2,6,5\n")
    with open(os.path.join(tmp, "quoted.csv"), "w") as f:
        f.write('id,lower,upper,size\n" a",0,4,3\n"b ",2,6,5\n"c,d",5,9,3\n"e""q",1,2,3\n')


# ---------------------------------------------------------------- the stops

def stop_cases(tmp: str, big_nodes: int) -> list[tuple]:
    """(label, argv, (phase, lo, hi): the signal's moment, lo..hi seconds after the command's
    `phase` began (`benchmarks.stop_latency.LAUNCHER`'s "@phase NAME" line: its main work, so a
    loaded machine's slower start-up does not move the signal out of it), after the start when
    None (the library's: after its "@ready"); the output file (or None), the exit statuses as
    documented)."""
    from benchmarks.stop_latency import LIBRARY_PROGRAM, layered_graph, pack_instance, trial_cases
    from regal.graph import load, save
    trial_cases(tmp, 20_000, big_nodes)          # writes trial.json.gz, trial.csv and the cached 300K graph
    cache = os.path.join(os.path.expanduser("~"), ".cache", "regal", "bench")
    big, sol = os.path.join(cache, f"layered{big_nodes}.json.gz"), os.path.join(cache, f"layered{big_nodes}.sol.json")
    mid, csvp = os.path.join(tmp, "trial.json.gz"), os.path.join(tmp, "trial.csv")
    fitg = os.path.join(tmp, "fit.json.gz")
    g = layered_graph(3000, seed=2)
    save(g, fitg)
    del pack_instance
    out = os.path.join(tmp, "stop-out")
    stop, nothing = (3, 129, 130, 143), (129, 130, 143)
    limit = str(load(mid).lower_bound(2))
    return [
        (f"regal optimize ({big_nodes:,} nodes, search)", ["optimize", big, "-d", "2", "-n", "100000000",
                                                           "--policy", "none", "-o", out + ".json"], ("search", 0.5, 3.0),
         out + ".json", stop),
        ("regal optimize (20,000 nodes)", ["optimize", mid, "-d", "2", "-n", "100000000", "-o", out + ".json"],
         ("search", 0.5, 3.0), out + ".json", stop),
        ("regal solve local-search (20,000 nodes)", ["solve", "local-search", mid, "-d", "2", "-n", "100000000",
                                                     "-o", out + ".json"], ("main", 2.0, 8.0), out + ".json", stop),
        ("regal solve brkga (20,000 nodes)", ["solve", "brkga", mid, "-d", "2", "-n", "100000000",
                                              "-o", out + ".json"], ("main", 2.0, 8.0), out + ".json", stop),
        ("regal pack (100,000 buffers)", ["pack", csvp, "--time-limit", "60", "-o", out + ".csv"], ("greedy", 0.1, 2.0),
         out + ".csv", stop),
        ("regal fit (limit at the bound)", ["fit", mid, "-d", "2", "--memory", limit, "--time-limit", "60"],
         ("round", 0.2, 3.0), None, stop),
        (f"regal evaluate ({big_nodes:,} nodes)", ["evaluate", big, sol], ("loading", 0.2, 2.0), None, nothing),
        (f"regal info ({big_nodes:,} nodes)", ["info", big], ("loading", 0.2, 2.0), None, nothing),
        ("regal torch (small_resnet, sgd)", ["torch", PROGRAM, "--train", "sgd", "--budget", "100000000"],
         (None, 3.0, 12.0), None, nothing),
        ("planned_step's planning (library, Ctrl-C)", ["-c", LIBRARY_PROGRAM, "planned_step"], (None, 0.5, 6.0), None,
         (130,)),
        ("regal.optimize (library, Ctrl-C)", ["-c", LIBRARY_PROGRAM, "optimize", mid], (None, 0.5, 5.0), None, (130,)),
    ]


def stop_trial(argv: list, at_s: float, signame: str, output: str | None, timeout_s: float = 60.0,
               phase: str | None = None) -> dict:
    """One run: `signame` `at_s` s after the start (a library program: after its "@ready"; given
    `phase`, after the command's "@phase PHASE" line, run by the launcher)."""
    from benchmarks.stop_latency import LAUNCHER
    library = argv[0] == "-c"
    cmd = [sys.executable, *argv] if library else [sys.executable, "-c", LAUNCHER, *argv] if phase else [REGAL, *argv]
    if output and os.path.exists(output):
        os.remove(output)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "REGAL_JAX_CACHE": "0"})
    lines: queue.Queue = queue.Queue()
    err: list[str] = []
    out: list[str] = []
    threading.Thread(target=lambda: [err.append(x) or lines.put(x) for x in proc.stderr] + [lines.put(None)],
                     daemon=True).start()
    reader = threading.Thread(target=lambda: out.extend((time.perf_counter(), x) for x in proc.stdout), daemon=True)
    reader.start()
    if library or phase:
        mark = "@ready" if library else f"@phase {phase} "
        while True:
            x = lines.get(timeout=timeout_s)
            if x is None or x.startswith(mark):
                break
    try:
        proc.wait(at_s)
        first = True
    except subprocess.TimeoutExpired:
        first = False
    sent, sent_wall = time.perf_counter(), time.time()
    if not first:
        first = proc.poll() is not None    # (send_signal does not signal a process that has ended)
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
    time.sleep(0.05)
    text = "".join(x for x in err if not x.startswith(("@phase", "@end")))
    # exit 0, nothing on stderr, and its whole report on stdout BEFORE the signal was sent: the
    # command had ended (its process exiting: freeing 2 GB takes the kernel 0.1 s) when it came;
    # a report that came after the signal is a lost signal
    if proc.returncode == 0 and not library and out and not text.strip() and out[-1][0] < sent:
        first = True
    caught = [float(x.split()[1]) for x in err if x.startswith("@caught")]
    if caught:
        latency = caught[0] - sent_wall
    written = bool(output) and os.path.exists(output)
    return {"rc": proc.returncode, "latency_s": latency, "lost": lost, "finished_first": first, "written": written,
            "traceback": "Traceback" in text, "touched": "@touched" in text, "stderr": text}


def stop_verdict(r: dict, good: tuple, output: str | None) -> str:
    why = []
    if r["lost"]:
        why.append("lost (killed)")
    if r["rc"] not in good:
        why.append(f"exit {r['rc']}")
    if output and r["rc"] == 3 and not r["written"]:
        why.append("3 without its file")
    if output and r["rc"] in (129, 130, 143) and r["written"]:
        why.append("a file with 128+N")
    if r["traceback"]:
        why.append("traceback")
    if r["touched"]:
        why.append("model touched")
    if r["latency_s"] > STOP_TARGET_S:
        why.append(f"{r['latency_s']:.2f} s")
    return ", ".join(why)


# ---------------------------------------------------------------- the run

def load_now() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="cases and stops whose label contains this text")
    ap.add_argument("--tries", type=int, default=3, help="stops: tries per command")
    ap.add_argument("--no-stops", action="store_true")
    ap.add_argument("--no-cases", action="store_true")
    ap.add_argument("--all", action="store_true", help="print every case (default: the failures and a count)")
    ap.add_argument("--big-nodes", type=int, default=300_000)
    ap.add_argument("--load", type=int, default=0, help="busy processes beside the stops")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=3, help="cases run this many at a time (the stops: one)")
    args = ap.parse_args(argv)
    env = {**os.environ, "REGAL_JAX_CACHE": "0", "PYTHONPATH": ROOT}
    failed = 0
    print(f"edge_check: load average at start {load_now()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        prepare(tmp)
        if not args.no_cases:
            cases = option_cases(tmp) + library_cases() + other_cases(tmp)
            if args.only:
                keep = {id(m) for c in cases for m in (c.batch or [c]) if any(args.only in x.label for x in c.batch or [c])}
                cases = [c for c in cases if id(c) in keep]
            t0 = time.perf_counter()
            def run(c):
                if c.batch is not None:
                    run_batch(c, env)
                elif c.code is not None or c.argv is not None or c.shell is not None:
                    c.result = run_case(c, env)
                    c.result.pop("stdout")
            with ThreadPoolExecutor(args.jobs) as pool:
                list(pool.map(run, cases))
            bad = [c for c in cases if c.result["problems"]]
            failed += len(bad)
            tracebacks = sum("traceback" in c.result["problems"] for c in cases)
            wrong0 = sum("wrong exit 0" in c.result["problems"] for c in cases)
            print(f"\n{len(cases)} cases in {time.perf_counter() - t0:.0f} s (load {load_now()}): {len(bad)} fail, "
                  f"{tracebacks} tracebacks, {wrong0} wrong exit-0 answers\n")
            print("| item | case | expected | got | verdict | error line / output |\n|---|---|---|---|---|---|")
            for c in cases:
                if args.all or c.result["problems"]:
                    r = c.result
                    print(f"| {c.item} | `{c.label}` | {'/'.join(map(str, c.expect))} | {r['rc']} | "
                          f"{'; '.join(r['problems']) or 'pass'} | {r['line'].replace('|', '/')} |", flush=True)
            groups: dict = {}
            for c in cases:
                groups.setdefault(c.item, [0, 0])
                groups[c.item][0] += 1
                groups[c.item][1] += not c.result["problems"]
            print("\n| item | cases | pass |\n|---|---:|---:|")
            for k, (n, ok) in groups.items():
                print(f"| {k} | {n} | {ok} |")
        if not args.no_stops:
            from benchmarks.stop_latency import _Load
            rng = np.random.default_rng(args.seed)
            stops = [s for s in stop_cases(tmp, args.big_nodes) if not args.only or args.only in s[0]]
            busy = _Load(args.load)
            print(f"\nstops (load {load_now()}, {args.load} busy processes beside)\n")
            print("| command | tries | median (s) | max (s) | exit statuses | as documented, within 2 s |\n"
                  "|---|---:|---:|---:|---|---|", flush=True)
            try:
                for label, argv_, (phase, lo, hi), output, good in stops:
                    rows = []
                    for k in range(args.tries):
                        signame = "SIGINT" if argv_[0] == "-c" or k % 2 == 0 else "SIGTERM"
                        r = stop_trial(argv_, float(rng.uniform(lo, hi)), signame, output, phase=phase)
                        r["why"] = "" if r["finished_first"] else stop_verdict(r, good, output)
                        r["signal"] = signame
                        rows.append(r)
                    sent = [r for r in rows if not r["finished_first"]]
                    lat = np.array([r["latency_s"] for r in sent] or [np.nan])
                    bad = [r for r in sent if r["why"]]
                    failed += len(bad)
                    codes = ", ".join(sorted({str(r["rc"]) for r in sent}))
                    print(f"| {label} | {len(sent)}{f' ({len(rows) - len(sent)} ended first)' if len(sent) < len(rows) else ''}"
                          f" | {np.median(lat):.2f} | {lat.max():.2f} | {codes} | "
                          f"{'yes' if not bad else 'no: ' + '; '.join(r['signal'] + ' ' + r['why'] for r in bad)} |",
                          flush=True)
                    for r in bad[:1]:
                        print("    " + r["stderr"].strip()[-300:].replace("\n", "\n    "), file=sys.stderr)
            finally:
                busy.close()
            print(f"\nload at the end {load_now()}")
    print(f"\nedge_check: {'all passed' if not failed else f'{failed} failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
