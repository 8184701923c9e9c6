"""Where `regal optimize --time-limit T` spends its wall time, before and after the deadline (issue 36).

    python -m benchmarks.bench_timeline GRAPH -d 2 --time-limit 20 -o /tmp/plan.json

Runs the command in this process with its steps wrapped (loading, seeds, the loop's ask /
evaluate / tell, the climb and its write-back, the solution, the report) and prints, on stderr,
each step's start and end in seconds since this process began, then the deadline (the command
counts its limit from the start of `main`, after the imports) and a table of the steps that ran
or ended after it. The plan's file is watched from a thread; once it exists the peak RSS is
read and the process ends (the report after the plan is not part of it). Every argument after
the module's name is `regal optimize`'s own.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time

T0 = time.perf_counter()
EVENTS: list[tuple[str, float, float]] = []   # (step, start, end), seconds since T0
DEADLINE: list[float] = []

#: (module, attribute) of every step timed; a class's method as "Class.method".
STEPS = [
    ("regal.commands.optimize", "_load_or_exit"), ("regal.commands.optimize", "_prepare_search"),
    ("regal.memetic", "_seed_solutions"), ("regal.memetic", "run_loop"), ("regal.brkga", "ask"),
    ("regal.loop", "_evaluate"), ("regal.brkga", "tell"), ("regal.memetic", "Polish.improve"),
    ("regal.memetic", "Polish._write_back"), ("regal.memetic", "Polish._pack"), ("regal.memetic", "Polish.finish"),
    ("regal.memetic", "Polish.best"), ("regal.memetic", "make_solution"),
    ("regal.commands.optimize", "_write_and_report"),
]


def _wrap(owner, name: str, label: str) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        start = time.perf_counter() - T0
        try:
            return fn(*args, **kwargs)
        finally:
            EVENTS.append((label, start, time.perf_counter() - T0))

    setattr(owner, name, timed)


def _install() -> None:
    import importlib
    for module, attr in STEPS:
        owner = importlib.import_module(module)
        *cls, name = attr.split(".")
        owner = getattr(owner, cls[0]) if cls else owner
        if hasattr(owner, name):   # an older commit may lack a step
            _wrap(owner, name, attr)
    import regal.commands.optimize as command
    real = command.command_deadline

    def command_deadline(time_limit_s=None):
        deadline = real(time_limit_s)
        if deadline.at is not None:
            DEADLINE.append(deadline.at - T0)
        return deadline

    command.command_deadline = command_deadline


def _report(written: float) -> None:
    with open("/proc/self/status") as f:
        hwm = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), 0)
    at = DEADLINE[0] if DEADLINE else float("nan")
    out = sys.stderr
    for label, start, end in sorted(EVENTS, key=lambda e: e[1]):
        if end - start >= 0.05 or end > at:
            out.write(f"{start:8.2f} {end:8.2f} {end - start:7.2f}  {label}\n")
    print(f"\ndeadline at {at:.2f} s; plan written at {written:.2f} s ({written - at:+.2f} s), "
          f"peak RSS {hwm / 2**30:.2f} GiB\n\n| step after the deadline | seconds after it |\n|---|---:|", file=out)
    for label, start, end in sorted(EVENTS, key=lambda e: e[1]):
        if end > at and end - max(start, at) >= 0.01 and label not in ("run_loop", "Polish.improve"):
            print(f"| {label} | {end - max(start, at):.2f} |", file=out)
    out.flush()


def main() -> None:
    args = sys.argv[1:]
    if "-o" not in args:
        raise SystemExit("give the plan's file: -o PATH (the run ends once it is written)")
    plan = os.path.abspath(args[args.index("-o") + 1])
    if os.path.exists(plan):
        os.remove(plan)

    def watch():
        while not os.path.exists(plan):
            time.sleep(0.01)
        _report(time.perf_counter() - T0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    import regal.cli
    _install()
    sys.argv = ["regal", "optimize", *args]
    regal.cli.main()


if __name__ == "__main__":
    main()
