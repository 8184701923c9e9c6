"""`regal solve`: any method of the registry (baselines included) on a graph."""

from __future__ import annotations

import sys

import click

from regal.commands._common import (BUDGET, DEVICES, DIM_OPTION, EXIT_INTERRUPTED, RUNTIME_OPTIONS, SEED, SEED_HELP, TIME_LIMIT,
                              OutputPath, friendly_errors, load_or_exit, command_deadline)
from regal.commands._report import runtime_options, write_and_report


@click.command("solve", short_help="run any method of the registry (baselines included) on a graph", help=(
    "Run METHOD (any method of the registry: the library's searches and the baselines) on GRAPH and "
    "write its regal-solution/1 file. `regal solve --list` names and describes them."))
@click.argument("method", required=False)
@click.argument("graph_path", metavar="GRAPH", required=False)
@click.option("--devices", "-d", default=1, show_default=True, type=DEVICES)
@click.option("--budget", "-n", type=BUDGET, default=None,
              help="evaluations, for the methods that take a budget (default: the method's); the others "
                   "refuse it (their effort: --time-limit)")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=None,
              help="seconds from the start to the end of the report: the search stops 5 % before it, "
                   "the report ends within 5 % after it (what it leaves out, it says)")
@click.option("--seed", "-s", default=0, show_default=True, type=SEED, help=SEED_HELP)
@click.option("-o", "--output", type=OutputPath(), default=None)
@click.option("--list", "list_methods", is_flag=True, help="list the methods and exit")
@click.option("--json", "as_json", is_flag=True, help="print the solution summary as JSON")
@RUNTIME_OPTIONS
@DIM_OPTION
@friendly_errors
def solve_cmd(method, graph_path, devices, budget, time_limit_s, seed, output, list_methods, as_json,
              memory_limit, bandwidth, latency, speed, dims):
    import regal.methods
    if list_methods:
        for name in regal.methods.names():
            click.echo(f"{name:20s} {regal.methods.get(name).description}")
        return
    if not method or not graph_path:
        raise click.UsageError("give METHOD and GRAPH (or --list)")
    spec = regal.methods.get(method)  # an unknown name fails before the graph is read
    if budget is not None and not spec.takes_budget:
        takers = ", ".join(n for n in regal.methods.names() if regal.methods.get(n).takes_budget)
        raise click.BadParameter(f"{method} takes no evaluation budget: its effort is bounded by --time-limit "
                                 f"(the methods with a budget: {takers})", param_hint="--budget")
    runtime = spec.objective == "runtime"
    options = runtime_options("runtime" if runtime else "memory", devices, memory_limit, bandwidth, latency, speed,
                               method=method)
    options.pop("objective", None)
    if output:
        from regal._io import check_writable
        check_writable(output, inputs=[graph_path])
    from regal._stop import Stopped, interruptible, stop_on_signals
    deadline = command_deadline(time_limit_s)
    with stop_on_signals(deadline):
        g = load_or_exit(graph_path, dims, deadline)
        if _takes_deadline(spec):  # it polls the deadline and returns its best so far
            sol = regal.methods.solve(method, g, devices, seed=seed, budget=budget, deadline=deadline, **options)
        else:  # it runs to its end (its own time limit: what is left of --time-limit); a stop
            # request leaves it behind and writes the fallback schedule
            left = deadline.remaining_s() if time_limit_s is not None else None
            try:
                sol = interruptible(regal.methods.solve, deadline, method, g, devices, seed=seed,
                                    time_limit_s=None if left is None else max(left, 0.0), budget=budget,
                                    requests_only=True, **options)
            except Stopped:
                if not deadline.stop_requested:
                    raise
                from regal.heuristics import fallback_solution
                from regal.solution import make_solution
                name, placement, order = fallback_solution(g)
                sol = make_solution(g, placement, order, devices, method=method, info={
                    "stopped": deadline.reason, "note": f"{method} was stopped before it returned: "
                                                        f"this is the fallback schedule ({name})"})
        write_and_report(g, sol, output, as_json, deadline, time_limit_s)
    if deadline.stop_requested:
        sys.exit(EXIT_INTERRUPTED)


def _takes_deadline(spec) -> bool:
    """Whether a registered method's solve function takes `deadline=` (a `regal._stop.Deadline`)."""
    import inspect
    try:
        params = inspect.signature(spec.load()).parameters
    except (TypeError, ValueError, ImportError):
        return False
    if "deadline" in params:
        return True
    return spec.origin == "regal" and spec.name in ("regal", "regal-paper", "brkga", "teacher", "brkga-runtime")
