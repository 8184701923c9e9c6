"""`regal` on the command line. Each command parses, calls one library function, prints.

Every expected failure (a bad graph, HLO or solution file, a bad option) ends as a one-line
`Error: ...` on stderr and exit status 1; never a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import signal
import sys
import time

import click

from regal.cli_common import (GRAPH_HELP, NUMBA_OPTIONAL_IMPORTS, human_bytes, load_graph, parse_dims,  # noqa: F401
                               skip_flax_interop, start_numba, use_workqueue_threads)
from regal.cli_common import dim_option_advice as _dim_option_advice
from regal.graph import Graph, GraphError
from regal.policy.names import DEFAULT_POLICY_NAME as DEFAULT_POLICY


def _friendly_errors(fn):
    """Turn the library's validation errors into click's one-line errors."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from regal.simulate import ScheduleError
        from regal.solution import SolutionError
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:  # `regal ... | head`: the reader left; nothing to report
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except (GraphError, SolutionError, ScheduleError, ValueError, OSError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise click.ClickException(msg) from None
    return wrapper


class _Seconds(click.ParamType):
    """A finite, non-negative number of seconds (click's FloatRange lets NaN through)."""
    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(x) or x < 0:
            self.fail(f"{value!r} is not a finite, non-negative number of seconds", param, ctx)
        return x


TIME_LIMIT = _Seconds()

DIM_OPTION = click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
                          help="value of a symbolic ONNX dimension (repeat the option)")


def RUNTIME_OPTIONS(fn):
    """The runtime objective's options (memory limit and device model), for optimize and solve."""
    for option in reversed((
            click.option("--memory-limit", "memory_limit", metavar="SIZE", default=None,
                         help="runtime: bytes per device, e.g. 16GiB, 1.5GB, 512MiB (default: no limit)"),
            click.option("--bandwidth", metavar="RATE", default=None,
                         help="runtime: link bandwidth, e.g. 100GB/s, 25GiB/s [default: 100GB/s]"),
            click.option("--latency", metavar="TIME", default=None,
                         help="runtime: per-transfer latency, e.g. 5us [default: 5us]"),
            click.option("--speed", metavar="S0,S1,...", default=None,
                         help="runtime: each device's speed relative to the nominal device [default: 1 each]"))):
        fn = option(fn)
    return fn


#: Exit status of a search stopped by SIGINT, SIGTERM or SIGHUP: the best solution so far was
#: written (1 is an error, 2 a usage error).
EXIT_INTERRUPTED = 3

#: The commands that stop gracefully on a signal (`regal._stop.STOP_SIGNALS`): `_Main.main`
#: installs their handlers first thing, so that a signal in any phase, start-up included, ends
#: them with status 3 (and their best result written when there is one).
STOPPABLE_COMMANDS = ("optimize", "solve", "train")

#: (Deadline, start) of the stoppable command this process runs, set by `_Main.main`.
_COMMAND_DEADLINE: list = []


@contextlib.contextmanager
def _stop_from_the_start(argv, program: bool = False):
    """For a stoppable command (`argv[0]`), a `Deadline` that SIGINT, SIGTERM and SIGHUP expire
    from here on, while the command's modules are still loading; nothing for other commands
    (they keep the default signals: nothing of theirs is worth finishing). program: run as the
    program itself (`_exit_stopped` may then end the process at once)."""
    from regal._stop import Deadline, stop_on_signals
    if not argv or argv[0] not in STOPPABLE_COMMANDS:
        yield
        return
    deadline = Deadline()
    _COMMAND_DEADLINE.append((deadline, time.perf_counter(), program))
    try:
        with stop_on_signals(deadline):
            yield
    finally:
        _COMMAND_DEADLINE.pop()


def command_deadline(time_limit_s: float | None = None):
    """The `Deadline` a stoppable command polls, with `time_limit_s` counted from the start of
    `main`: the one `_Main.main` installed the signal handlers for (a signal since then has
    already expired it), or a fresh one when the command runs without `main`."""
    from regal._stop import Deadline
    if not _COMMAND_DEADLINE:
        return Deadline(time_limit_s)
    deadline, start, _ = _COMMAND_DEADLINE[-1]
    return deadline.limit(time_limit_s, start)


def _exit_stopped() -> None:
    """Exit with status 3 (EXIT_INTERRUPTED). Run as the program, at once (`os._exit`, the output
    flushed): what the stop left behind (a training step in a helper thread, a Dask cluster whose
    workers end with this process) is not waited for; else by SystemExit."""
    if _COMMAND_DEADLINE and _COMMAND_DEADLINE[-1][2]:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_INTERRUPTED)


def use_jax_cache() -> None:
    """Keep compiled policy networks across runs (JAX's persistent cache), for the CLI only.

    The library never touches JAX's global configuration; the command line, an application,
    does: in $REGAL_JAX_CACHE_DIR or ~/.cache/regal/jax. REGAL_JAX_CACHE=0 turns it off.
    """
    if os.environ.get("REGAL_JAX_CACHE", "1") == "0":
        return
    import jax
    path = os.environ.get("REGAL_JAX_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "regal", "jax")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


#: Commands after which the `regal` process ends without Python's finalization (`_Main`): they
#: hold no cluster, server or child process when they return.
QUICK_EXIT_COMMANDS = ("optimize", "solve", "info", "evaluate", "plot", "import-hlo", "import-onnx")


class _Main(click.Group):
    """The `regal` group. Run as the program itself (the console script or `python -m
    regal.cli`, with no `args`), it ends the process with `os._exit` once a quick command has
    returned and its output is flushed: tearing down the interpreter (Numba's and LLVM's modules,
    OpenMP's threads) would add 0.2 s to every run; so does a stoppable command that a signal
    stopped (a training step it left behind may still run inside JAX in a helper thread, and the
    interpreter's finalization would abort under it). Called with `args` (a test's CliRunner, an
    application), it behaves as any click group. For a stoppable command it first installs the
    signal handlers (`_stop_from_the_start`)."""

    def main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        program = args is None and standalone_mode
        with _stop_from_the_start(sys.argv[1:] if args is None else list(args), program):
            return self._main(args, *rest, standalone_mode=standalone_mode, **kwargs)

    def _main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        command = set(sys.argv[1:2])
        if args is not None or not standalone_mode or not command & set(QUICK_EXIT_COMMANDS + STOPPABLE_COMMANDS):
            return super().main(args, *rest, standalone_mode=standalone_mode, **kwargs)
        try:
            super().main(args, *rest, standalone_mode=True, **kwargs)
            code = 0
        except SystemExit as e:
            code = e.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        stopped = bool(_COMMAND_DEADLINE) and _COMMAND_DEADLINE[-1][0].stop_requested
        if not command & set(QUICK_EXIT_COMMANDS) and not stopped:
            sys.exit(code)  # `regal train` ran to its end: the interpreter's usual finalization
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more to say
                pass
        os._exit(code)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="regal")
def main():
    """regal: place and schedule an ML computation graph for the lowest peak memory (REGAL)."""


@main.command("info", short_help="size, depth and lower bound on peak memory of a graph", help=f"Size, depth and memory lower bound of GRAPH ({GRAPH_HELP}).")
@click.argument("graph_path", metavar="GRAPH")
@click.option("--devices", "-d", default=1, show_default=True, type=click.IntRange(1),
              help="devices for the lower bound")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@DIM_OPTION
@_friendly_errors
def info_cmd(graph_path, devices, as_json, dims):
    g = load_graph(graph_path, dims)
    s = g.summary()
    s["lower_bound_bytes"] = g.lower_bound(devices)
    s["devices"] = devices
    xla = _xla_schedule(g)
    if xla is not None:
        s["xla_schedule"] = xla
    if as_json:
        click.echo(json.dumps(s, indent=1))
        return
    click.echo(f"graph          {s['name']}")
    click.echo(f"nodes          {s['nodes']:,} ({s['resident_nodes']:,} resident)")
    click.echo(f"edges          {s['data_edges']:,} data, {s['control_edges']:,} control")
    click.echo(f"depth          {s['depth']:,} nodes on the longest path")
    click.echo(f"total bytes    {human_bytes(s['total_bytes'])} ({s['total_bytes']:,} B)")
    click.echo(f"resident bytes {human_bytes(s['resident_bytes'])} ({s['resident_bytes']:,} B)")
    click.echo(f"outputs        {human_bytes(s['kept_bytes'])} ({s['kept_bytes']:,} B) never freed: "
               f"{s['output_nodes']:,} marked 'output', and the nodes nobody reads")
    lt = s["largest_tensor"]
    click.echo(f"largest tensor {human_bytes(lt['bytes'])} ({lt['id']})")
    click.echo(f"lower bound    {human_bytes(s['lower_bound_bytes'])} ({s['lower_bound_bytes']:,} B) "
               f"on peak memory with {devices} device{'s' if devices > 1 else ''}")
    if xla is not None:
        click.echo(f"XLA's schedule peak {human_bytes(xla['peak_bytes'])} ({xla['peak_bytes']:,} B), allocated "
                   f"{human_bytes(xla['allocation_bytes'])} ({xla['allocation_bytes']:,} B; SPEC section 3a), "
                   "one device")


def _xla_schedule(g: Graph) -> dict | None:
    """Peak and allocation of the schedule XLA compiled the module with (`meta.xla_order`, which
    the HLO importer records for a scheduled module), on one device; None without one."""
    names = g.meta.get("xla_order") if isinstance(g.meta, dict) else None
    if not isinstance(names, list) or len(names) != g.num_nodes or set(names) != set(g.index):
        return None
    import numpy as np

    from regal.allocation import allocation
    from regal.simulate import ScheduleError, simulate
    order = np.asarray([g.index[i] for i in names])
    placement = np.zeros(g.num_nodes, dtype=np.int64)
    try:
        peak = simulate(g, placement, order, 1).peak_bytes
    except ScheduleError:
        return None
    return {"peak_bytes": int(peak), "allocation_bytes": allocation(g, placement, order, 1).allocation_bytes}


@main.command("import-hlo", short_help="XLA HLO text -> regal-graph/1 file")
@click.argument("module", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="GRAPH.json or GRAPH.json.gz to write")
@click.option("--name", default=None, help="graph name (default: the HLO module's name)")
@_friendly_errors
def import_hlo_cmd(module, output, name):
    """Import an XLA HLO text MODULE (pre-optimization or compiled) as a regal-graph/1 file."""
    from regal.graph import save
    from regal.hlo import load_hlo
    g = load_hlo(module, name=name)
    save(g, output)
    click.echo(f"{output}: {g.num_nodes:,} nodes, {g.num_data_edges:,} data edges, "
               f"{g.num_control_edges:,} control edges, {g.meta.get('folded', 0):,} aliases folded")


@main.command("import-onnx", short_help="ONNX model -> regal-graph/1 file (weights not read)")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="GRAPH.json or GRAPH.json.gz to write")
@click.option("--name", default=None, help="graph name (default: the file name)")
@DIM_OPTION
@_friendly_errors
def import_onnx_cmd(model, output, name, dims):
    """Import an ONNX MODEL (.onnx or .onnx.gz; weights are not read) as a regal-graph/1 file."""
    from regal.graph import save
    from regal.onnx import load_onnx
    with _dim_option_advice():
        g = load_onnx(model, dims=parse_dims(dims) or None, name=name)
    save(g, output)
    click.echo(f"{output}: {g.num_nodes:,} nodes, {g.num_data_edges:,} data edges, "
               f"{g.num_control_edges:,} control edges")


def _report(g: Graph, sol, output: str | None, as_json: bool, deadline=None) -> None:
    """The solution's summary on stdout: JSON (no placement and order) or the text block. A stop
    request (`deadline`) before or during the allocation or the packed arena leaves them out
    (null in JSON); so does REPORT_PACK_WALL_S for the packed arena."""
    if as_json:
        doc = sol.to_json()
        doc.pop("placement")
        doc.pop("order")
        doc["lower_bound_bytes"] = g.lower_bound(sol.num_devices)
        alloc = _allocation(g, sol, deadline)
        doc["allocation_bytes"] = None if alloc is None else alloc.allocation_bytes
        doc["device_allocation_bytes"] = None if alloc is None else alloc.device_allocation_bytes.tolist()
        packed = _packed(g, sol, deadline)
        doc.update(packed or {"arena_bytes": None, "device_arena_bytes": None, "arena_optimal": None})
        click.echo(json.dumps(doc, indent=1))
    else:
        _print_solution(g, sol, output, deadline)


def _effort(sol) -> str:
    """", 5,000 evaluations" for a method with an evaluation budget, else "" (CP-SAT's and the
    exact DP's counts are not evaluations)."""
    import regal.methods
    try:
        counted = regal.methods.get(sol.method).takes_budget
    except ValueError:  # a solution file from elsewhere
        counted = sol.evaluations > 0
    if not counted:
        return ""
    return f", {sol.evaluations:,} evaluation{'' if sol.evaluations == 1 else 's'}"


def _allocation(g: Graph, sol, deadline=None):
    """SPEC section 3a's allocation of the solution's schedule (what XLA's buffer assignment
    reserves): reported beside the peak, never searched. None when `deadline` (a stop request)
    expires first: it can take seconds on a large graph, and the command is asked to end."""
    from regal._stop import Stopped, interruptible
    from regal.allocation import allocation
    try:
        return interruptible(allocation, deadline, g, sol.placement, sol.order, sol.num_devices)
    except Stopped:
        return None


#: Seconds the reports wait for the packed arena: its exact search stops after a second per
#: device, but the greedy placements before it grow quadratically with the buffers (75 s for
#: 77,000 buffers), and the report must not outlast the search.
REPORT_PACK_WALL_S = 5.0


def _packed(g: Graph, sol, deadline=None) -> dict | None:
    """`packed_summary` (the packed arena beside the peak), or None when a stop request
    (`deadline`) comes first or it takes more than REPORT_PACK_WALL_S (then left behind)."""
    from regal._stop import Stopped, interruptible
    if deadline is None:
        return packed_summary(g, sol)
    deadline.at = time.perf_counter() + REPORT_PACK_WALL_S  # the same object: a signal still reaches it
    try:
        return interruptible(packed_summary, deadline, g, sol)
    except Stopped:
        return None
    finally:
        deadline.at = None
        if deadline.reason == "time_limit":
            deadline.reason = None


def _not_packed(deadline) -> str:
    return ("packed    (not computed: stopped)" if deadline is not None and deadline.stop_requested else
            f"packed    (not computed within {REPORT_PACK_WALL_S:g} s; regal fit -o computes it)")


def _print_solution(g: Graph, sol, output: str | None, deadline=None):
    d = sol.num_devices
    click.echo(f"graph     {g.name} ({g.num_nodes:,} nodes)")
    click.echo(f"method    {sol.method}{_effort(sol)} in {sol.seconds:.2f} s"
               + (f" (seed {sol.info['seed']})" if "seed" in sol.info else ""))
    click.echo(f"peak      {human_bytes(sol.peak_bytes)} ({sol.peak_bytes:,} B)")
    if d > 1:
        for k in range(d):
            click.echo(f"  device {k}  {human_bytes(sol.device_peak_bytes[k])} "
                       f"({int((sol.placement == k).sum()):,} nodes)")
    alloc = _allocation(g, sol, deadline)
    if alloc is None:
        click.echo("allocated (not computed: stopped)")
    else:
        click.echo(f"allocated {human_bytes(alloc.allocation_bytes)} ({alloc.allocation_bytes:,} B) by XLA-style "
                   "buffer assignment (SPEC section 3a)")
    packed = _packed(g, sol, deadline)
    click.echo(_not_packed(deadline) if packed is None else packed_line(g, sol, packed))
    lb = g.lower_bound(d)
    if lb and sol.peak_bytes <= lb:
        gap = ": proven optimal"
    else:
        gap = f", gap to bound {(sol.peak_bytes - lb) / lb * 100:.1f} %" if lb else ""
    click.echo(f"bound     {human_bytes(lb)} ({lb:,} B){gap}")
    if sol.info.get("stopped") not in (None, "budget"):
        click.echo(f"stopped   {sol.info['stopped']}")
    if output:
        click.echo(f"wrote     {output}")


@main.command("optimize", short_help="place and schedule a graph for the lowest peak memory (the flagship)", help=(
    "Search placements and orders of GRAPH for the lowest peak memory with regal's flagship: a "
    "memetic REGAL (heuristic seeds, local-search polish, and a trained policy's priors for the "
    "mutants when --policy names one). "
    f"GRAPH is {GRAPH_HELP}. Ctrl-C, SIGTERM or SIGHUP stops the search, still writes the best "
    "solution so far and exits with status 3."))
@click.argument("graph_path", metavar="GRAPH")
@click.option("--devices", "-d", default=1, show_default=True, type=click.IntRange(1), help="number of devices")
@click.option("--budget", "-n", default=5000, show_default=True, type=click.IntRange(1),
              help="evaluations (one decode or local move + one simulation each), seeds included")
@click.option("--seed", "-s", default=0, show_default=True, type=click.IntRange(0))
@click.option("--policy", default=DEFAULT_POLICY, show_default=True,
              help="priors for the mutants: 'default' (the shipped trained policy), 'transfer' (the one chosen across graph sources, scheduling only), 'teacher' or 'teacher-schedule' (the structural teacher's, no network), 'runtime' (trained for --objective runtime, with a transfer-priority head), 'none' (uniform) or a policy file")
@click.option("--seeding/--no-seeding", default=True, show_default=True,
              help="seed the population with the heuristic solutions (on several devices also the one-device starts whose parameters are spread over the others)")
@click.option("--polish/--no-polish", default=True, show_default=True,
              help="improve the best solution with the local search between generations")
@click.option("--population", type=click.IntRange(2), default=100, show_default=True,
              help="BRKGA population size")
@click.option("--elites", "elite_fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.2, show_default=True, help="BRKGA elite fraction")
@click.option("--mutants", "mutant_fraction", type=click.FloatRange(0, 1, max_open=True), default=0.1,
              show_default=True, help="BRKGA mutant fraction")
@click.option("--inheritance", "elite_inheritance", type=click.FloatRange(0, 1), default=0.7, show_default=True,
              help="BRKGA probability that a child's gene comes from its elite parent")
@click.option("--prior-share", "prior_share", type=click.FloatRange(0, 1), default=None,
              help="share of the mutants drawn from the priors, the rest uniform [default: 0.5 with "
                   "seeding or polish, else 1]")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=None, help="seconds")
@click.option("--threads", type=click.IntRange(1), default=None, help="Numba threads (default: all)")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="write the regal-solution/1 file here")
@click.option("--json", "as_json", is_flag=True, help="print the solution summary as JSON")
@click.option("--objective", type=click.Choice(["memory", "runtime", "arena"]), default="memory", show_default=True,
              help="memory: the lowest peak (SPEC section 3); runtime: the shortest makespan under "
                   "--memory-limit (section 4, docs/timed-model.md); arena: the smallest packed arena "
                   "(docs/packing.md)")
@RUNTIME_OPTIONS
@DIM_OPTION
@_friendly_errors
def optimize_cmd(graph_path, devices, budget, seed, policy, seeding, polish, population, elite_fraction,
                 mutant_fraction, elite_inheritance, prior_share, time_limit_s, threads, output, as_json, objective,
                 memory_limit, bandwidth, latency, speed, dims):
    import regal.methods
    from regal._io import check_writable
    from regal.brkga import BrkgaConfig
    config = BrkgaConfig(population, elite_fraction, mutant_fraction, elite_inheritance, prior_share).validate()
    runtime = _runtime_options(objective, devices, memory_limit, bandwidth, latency, speed)
    if objective == "arena":
        runtime = {"objective": "arena"}
    if output:
        check_writable(output, inputs=[graph_path])  # before the search, not after it
    from regal._stop import stop_on_signals
    deadline = command_deadline(time_limit_s)  # from the start of main: loading and seeds included
    with stop_on_signals(deadline):  # a signal stops whatever runs within a second (exit 3)
        _optimize(graph_path, dims, policy, devices, seeding, polish, objective, as_json, budget, seed, config,
                  threads, runtime, output, deadline)
    if deadline.stop_requested:
        sys.exit(EXIT_INTERRUPTED)


def _load_or_exit(graph_path, dims, deadline):
    """The graph, loaded while the caller's thread watches `deadline`; a stop before it is
    loaded ends the command with status 3 and a line saying nothing was written."""
    from regal._stop import Stopped, interruptible
    try:
        return interruptible(load_graph, deadline, graph_path, dims)
    except Stopped:
        if deadline.stop_requested:
            click.echo(f"stopped ({deadline.reason}) while loading {graph_path}: no solution to write", err=True)
            sys.exit(EXIT_INTERRUPTED)
        return load_graph(graph_path, dims)  # the time limit passed: load it all the same, then stop at once


def _optimize(graph_path, dims, policy, devices, seeding, polish, objective, as_json, budget, seed, config,
              threads, runtime, output, deadline):
    import regal.methods
    g = _load_or_exit(graph_path, dims, deadline)
    priors, policy_seconds = _prepare_search(policy, g, devices, seeding, polish, objective, deadline)
    from regal.policy.names import needs_network
    bar = None
    if sys.stderr.isatty() and not as_json:
        from tqdm import tqdm
        bar = tqdm(total=budget, unit="eval", file=sys.stderr, leave=False)

    def callback(p):
        if bar is not None:
            bar.update(p.evaluations - bar.n)
            bar.set_postfix_str(f"fitness {p.best_peak_bytes:.4g}" if runtime
                                else f"peak {human_bytes(p.best_peak_bytes)}")

    try:
        sol = regal.methods.solve("regal", g, devices, seed=seed, budget=budget, deadline=deadline,
                                  policy="none" if needs_network(policy) else policy, priors=priors, seeding=seeding,
                                  polish=polish, config=config, callback=callback, num_threads=threads,
                                  **runtime)
    finally:
        if bar is not None:
            bar.close()
    if priors is not None:  # the solution names the policy that gave the priors, and its time
        sol = dataclasses.replace(sol, info={**sol.info, "policy": policy, "policy_seconds": round(policy_seconds, 6)})
    _write_and_report(g, sol, output, as_json, deadline)


def _write_and_report(g: Graph, sol, output, as_json: bool, deadline) -> None:
    """Write the solution (a further signal is only counted: the file is always complete), then
    report it; a stop request during the report cuts its slow part (the allocation)."""
    if deadline.stop_requested:
        sol = dataclasses.replace(sol, info={**sol.info, "stopped": deadline.reason})
    if output:
        sol.save(output)
    deadline.at = None  # the time limit was the search's; only a stop request cuts the report
    if deadline.reason == "time_limit":
        deadline.reason = None
    if "timed" in sol.info:
        _report_timed(g, sol, output, as_json)
        exit_for_limit(g, sol)
    else:
        _report(g, sol, output, as_json, deadline)


def _runtime_options(objective, devices, memory_limit, bandwidth, latency, speed, method=None) -> dict:
    """The runtime options as `regal.optimize` keywords ({} for memory); a malformed size, rate,
    time or speed list is a one-line error naming the option. method: `regal solve`'s METHOD."""
    given = [name for name, v in (("--memory-limit", memory_limit), ("--bandwidth", bandwidth),
                                  ("--latency", latency), ("--speed", speed)) if v is not None]
    if objective != "runtime":
        if given and method is not None:
            import regal.methods
            timed = [m for m in regal.methods.names() if regal.methods.get(m).objective == "runtime"]
            raise click.UsageError(f"{given[0]} belongs to the runtime methods ({', '.join(timed)}); "
                                   f"{method!r} minimizes peak memory (regal optimize --objective runtime "
                                   "runs the flagship on makespan)")
        if given:
            raise click.UsageError(f"{given[0]} needs --objective runtime")
        return {}
    from regal.timed import DeviceModel, parse_bytes, parse_rate, parse_seconds

    def parse(fn, value, hint):
        try:
            return fn(value)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint=hint) from None

    def speeds(text):
        try:
            return tuple(float(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"{text!r} is not a comma-separated list of numbers") from None

    default = DeviceModel()
    model = DeviceModel(
        bandwidth_bytes_per_s=default.bandwidth_bytes_per_s if bandwidth is None else
        parse(parse_rate, bandwidth, "--bandwidth"),
        latency_s=default.latency_s if latency is None else parse(parse_seconds, latency, "--latency"),
        speed=None if speed is None else parse(speeds, speed, "--speed"))
    model = parse(model.validate, devices, "--speed")  # the only field left unchecked
    limit = None if memory_limit is None else parse(parse_bytes, memory_limit, "--memory-limit")
    return {"objective": "runtime", "memory_limit_bytes": limit, "device_model": model}


def _report_timed(g: Graph, sol, output: str | None, as_json: bool) -> None:
    """A runtime solution's summary: makespan, timed peaks against the limit, the device model."""
    timed = sol.info["timed"]
    if as_json:
        doc = sol.to_json()
        doc.pop("placement")
        doc.pop("order")
        doc["info"]["timed"]["transfers"] = len(timed["transfers"])
        click.echo(json.dumps(doc, indent=1))
        return
    from regal.timed import DeviceModel
    limit = timed["memory_limit_bytes"]
    click.echo(f"graph     {g.name} ({g.num_nodes:,} nodes)")
    click.echo(f"method    {sol.method}{_effort(sol)} in {sol.seconds:.2f} s"
               + (f" (seed {sol.info['seed']})" if "seed" in sol.info else ""))
    click.echo(f"makespan  {timed['makespan_s'] * 1e3:,.4f} ms ({len(timed['transfers']):,} transfers)")
    fit = "fits" if timed["feasible"] else "OVER the limit"
    click.echo(f"peak      {human_bytes(timed['peak_bytes'])} over time"
               + ("" if limit is None else f", limit {human_bytes(limit[0])} per device: {fit}"))
    for k in range(sol.num_devices):
        click.echo(f"  device {k}  {human_bytes(timed['device_peak_bytes'][k])} "
                   f"({int((sol.placement == k).sum()):,} nodes)")
    click.echo(f"devices   {DeviceModel(**timed['device_model']).describe()}")
    if sol.info.get("stopped") not in (None, "budget"):
        click.echo(f"stopped   {sol.info['stopped']}")
    if output:
        click.echo(f"wrote     {output}")


def _policy_priors(policy: str, g: Graph, devices: int, objective: str = "memory"):
    """(priors, seconds): a trained policy's priors for `g` and the seconds spent loading the
    policy and running it (JAX's import, the network's compilation or its cache, inference)."""
    t = time.perf_counter()
    use_jax_cache()
    skip_flax_interop()
    from regal.policy.resolve import resolve_priors
    priors = resolve_priors(g, devices, None, policy, objective=objective)
    return priors, time.perf_counter() - t


class _PolicyJob:
    """A trained policy's priors for the graph, computed while this process loads the search's
    kernels: in a forked child where that is safe (Linux; no JAX, no Numba worker threads and no
    other thread here yet), so that JAX's start runs on another core; else right here. `result()`
    gives (priors, seconds) or raises the error the policy raised (a one-line ValueError for a bad
    policy file)."""

    def __init__(self, policy: str, g: Graph, devices: int, objective: str = "memory"):
        self.pid = None
        if not self._can_fork():
            self.value = _policy_priors(policy, g, devices, objective)
            return
        import pickle
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compute, send, leave without running the parent's exit handlers
            os.close(read)
            try:
                out = ("ok", _policy_priors(policy, g, devices, objective))
            except BaseException as e:  # noqa: BLE001  (sent to the parent, which raises it)
                import traceback
                kind = ("value" if isinstance(e, (ValueError, TypeError)) else "os" if isinstance(e, OSError)
                        else "interrupt" if isinstance(e, KeyboardInterrupt) else "other")
                out = (kind, str(e) if kind != "other" else traceback.format_exc())
            try:
                with os.fdopen(write, "wb") as f:
                    pickle.dump(out, f)
            finally:
                os._exit(0)
        os.close(write)
        self.pid, self.read = pid, read

    @staticmethod
    def _can_fork() -> bool:
        import threading
        if not sys.platform.startswith("linux") or "jax" in sys.modules or threading.active_count() > 1:
            return False
        try:
            from numba.np.ufunc import parallel
        except ImportError:
            return False
        return getattr(parallel, "_is_initialized", True) is False

    def cancel(self) -> None:
        """End the child, if any, without waiting for its answer."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            os.close(self.read)
            self.pid = None
            self.value = (None, None)

    def result(self, deadline=None):
        """(priors, seconds); (None, None) once `deadline` expires before the answer (the child
        is ended: a stop or the time limit does not wait for JAX)."""
        if self.pid is None:
            return self.value
        import pickle
        import select
        while deadline is not None and not select.select([self.read], [], [], 0.02)[0]:
            if deadline.expired():
                self.cancel()
                return self.value
        try:
            with os.fdopen(self.read, "rb") as f:
                data = f.read()
        finally:
            os.waitpid(self.pid, 0)
        if not data:
            raise OSError("the policy's process ended without an answer")
        kind, value = pickle.loads(data)
        if kind == "ok":
            return value
        if kind == "value":
            raise ValueError(value)
        if kind == "os":
            raise OSError(value)
        if kind == "interrupt":
            raise KeyboardInterrupt
        raise RuntimeError(f"the policy's process failed:\n{value}")


def _prepare_search(policy: str, g: Graph, devices: int, seeding: bool, polish: bool, objective: str = "memory",
                    deadline=None):
    """(priors, seconds) of a trained `policy` for `g` (None, None for 'none' or a teacher's name),
    with everything the search loads (kernels, the priors' quantile tables) loaded, so that the
    search's `seconds` count the search; the policy runs beside the loading (`_PolicyJob`).
    A stop request (`deadline`) while the kernels load ends the command with status 3 (there is
    no solution yet); the deadline expiring while the policy runs drops it: (None, None), and
    the search, without priors, stops after its first slice."""
    from regal.policy.names import check_objective, needs_network
    check_objective(policy, objective)
    job = _PolicyJob(policy, g, devices, objective) if needs_network(policy) else None
    try:
        _warm_up(deadline, devices, seeding, polish)
        if job is None:
            return None, None
        from regal.priors import prepare_tables
        if job.pid is not None:  # while the policy runs beside: the tables its actions may ask for
            from regal.policy.actions import BETA_ACTIONS
            prepare_tables(BETA_ACTIONS)
    except BaseException:
        if job is not None:
            job.cancel()
        raise
    priors, seconds = job.result(deadline)
    if priors is not None:
        prepare_tables((a, b) for a, b, _ in priors.groups)
    return priors, seconds


def _warm_up(deadline, devices: int, seeding: bool, polish: bool) -> None:
    """`regal.warmup` (the kernels, compiled or loaded from Numba's cache: seconds when the cache
    is cold) while this thread watches `deadline`: a stop request ends the command with status 3
    within a poll interval; the time limit lets it finish (every result needs the kernels)."""
    from regal._stop import Stopped, interruptible
    from regal.flagship import warmup
    try:
        interruptible(warmup, deadline, devices, seeding=seeding, polish=polish, requests_only=True)
    except Stopped:
        click.echo(f"stopped ({deadline.reason}) while loading the search's kernels: no solution to write", err=True)
        sys.exit(EXIT_INTERRUPTED)


def _is_solution_file(path: str) -> bool:
    """Whether `path` says it is a regal-solution/1 file (its "format" field, near the start)."""
    from regal._io import open_text
    try:
        with open_text(path) as f:
            return '"regal-solution/' in f.read(256)
    except (OSError, UnicodeDecodeError, EOFError):
        return False


def _graph_then_solution(first: str, second: str) -> tuple[str, str]:
    """The (graph, solution) paths of a command that takes both, whichever order they came in."""
    return (second, first) if _is_solution_file(first) and not _is_solution_file(second) else (first, second)


@main.command("evaluate", short_help="re-simulate a solution file on its graph; reject an invalid one")
@click.argument("graph_path", metavar="GRAPH")
@click.argument("solution_path", metavar="SOLUTION")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@DIM_OPTION
@_friendly_errors
def evaluate_cmd(graph_path, solution_path, as_json, dims):
    """Re-simulate a regal-solution/1 file (from regal or elsewhere) on GRAPH; reject an invalid
    one. The two files may come in either order."""
    from regal.solution import load_solution
    graph_path, solution_path = _graph_then_solution(graph_path, solution_path)
    g = load_graph(graph_path, dims)
    sol = load_solution(solution_path, g)
    alloc = _allocation(g, sol)
    if as_json:
        click.echo(json.dumps({"graph": g.name, "devices": sol.num_devices, "peak_bytes": sol.peak_bytes,
                               "device_peak_bytes": [int(x) for x in sol.device_peak_bytes],
                               "allocation_bytes": alloc.allocation_bytes,
                               "device_allocation_bytes": alloc.device_allocation_bytes.tolist(),
                               "lower_bound_bytes": g.lower_bound(sol.num_devices), "valid": True}, indent=1))
        return
    click.echo(f"{os.path.basename(solution_path)}: valid {sol.num_devices}-device schedule of {g.name}")
    click.echo(f"peak        {human_bytes(sol.peak_bytes)} ({sol.peak_bytes:,} B; SPEC section 3)")
    click.echo(f"allocation  {human_bytes(alloc.allocation_bytes)} ({alloc.allocation_bytes:,} B; SPEC section 3a, "
               "what XLA's buffer assignment reserves: arguments + outputs + heap)")
    for k in range(sol.num_devices):
        click.echo(f"  device {k}  peak {human_bytes(sol.device_peak_bytes[k])}, allocation "
                   f"{human_bytes(alloc.device_allocation_bytes[k])} = {human_bytes(alloc.argument_bytes[k])} + "
                   f"{human_bytes(alloc.output_bytes[k])} + {human_bytes(alloc.heap_bytes[k])}")


@main.command("solve", short_help="run any method of the registry (baselines included) on a graph", help=(
    "Run METHOD (any method of the registry: the library's searches and the baselines) on GRAPH and "
    "write its regal-solution/1 file. `regal solve --list` names and describes them."))
@click.argument("method", required=False)
@click.argument("graph_path", metavar="GRAPH", required=False)
@click.option("--devices", "-d", default=1, show_default=True, type=click.IntRange(1))
@click.option("--budget", "-n", type=click.IntRange(1), default=None,
              help="evaluations, for the methods that take a budget (default: the method's)")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=None, help="seconds")
@click.option("--seed", "-s", default=0, show_default=True, type=click.IntRange(0))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None)
@click.option("--list", "list_methods", is_flag=True, help="list the methods and exit")
@click.option("--json", "as_json", is_flag=True, help="print the solution summary as JSON")
@RUNTIME_OPTIONS
@DIM_OPTION
@_friendly_errors
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
    runtime = spec.objective == "runtime"
    options = _runtime_options("runtime" if runtime else "memory", devices, memory_limit, bandwidth, latency, speed,
                               method=method)
    options.pop("objective", None)
    if output:
        from regal._io import check_writable
        check_writable(output, inputs=[graph_path])
    from regal._stop import Stopped, interruptible, stop_on_signals
    deadline = command_deadline(time_limit_s)
    with stop_on_signals(deadline):
        g = _load_or_exit(graph_path, dims, deadline)
        if _takes_deadline(spec):  # it polls the deadline and returns its best so far
            sol = regal.methods.solve(method, g, devices, seed=seed, budget=budget, deadline=deadline, **options)
        else:  # it runs to its end; a stop leaves it behind and writes the fallback schedule
            try:
                sol = interruptible(regal.methods.solve, deadline, method, g, devices, seed=seed,
                                    time_limit_s=time_limit_s, budget=budget, **options)
            except Stopped:
                if not deadline.stop_requested:
                    raise
                from regal.heuristics import fallback_solution
                from regal.solution import make_solution
                name, placement, order = fallback_solution(g)
                sol = make_solution(g, placement, order, devices, method=method, info={
                    "stopped": deadline.reason, "note": f"{method} was stopped before it returned: "
                                                        f"this is the fallback schedule ({name})"})
        _write_and_report(g, sol, output, as_json, deadline)
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


#: The `regal train` option behind each field a resumed run must keep (regal.policy.reinforce.ResumeError).
_RESUME_OPTIONS = {"devices": "--devices", "max_devices": "--devices", "samples": "--samples", "budget": "--budget",
                   "learning_rate": "--lr", "entropy_coef": "--entropy", "imitation_steps": "--imitate",
                   "seed": "--seed", "kind": "--kind", "features": "--features", "placement": "--heads", "scheduling": "--heads",
                   "elite": "--heads", "objective": "--objective", "transfer_priority": "--objective",
                   "train_graphs": "--manifest, --split, --synthetic or --max-nodes",
                   "valid_graphs": "--manifest, --valid-split, --max-valid or --max-nodes"}


@main.command("train", short_help="train a REGAL policy (imitation, then REINFORCE on Dask)", help=(
    "Train a REGAL policy on a data split: imitation of the structural teacher, then REINFORCE; "
    "the defaults are the recipe of the shipped policy (regal/policy/default.json), except --features "
    "(it reads v1; new policies read the source-invariant v2). BRKGA runs "
    "fan out over Dask (a local cluster of --workers processes, or an existing one with --scheduler). Resumes from OUT's "
    "checkpoint unless --fresh. Writes OUT/best.npz, OUT/train.csv, OUT/valid.csv, OUT/curves.png."))
@click.option("--manifest", default=None, help="data set manifest (default: the shipped data/manifest.json)")
@click.option("--split", default="train", show_default=True, help="training split (real data set)")
@click.option("--valid-split", default="valid", show_default=True)
@click.option("--synthetic/--no-synthetic", default=False, show_default=True,
              help="also train on the synthetic data set's training split")
@click.option("--max-nodes", default=2000, show_default=True, type=int, help="skip larger training graphs")
@click.option("--max-valid", default=12, show_default=True, type=int, help="validation graphs used")
@click.option("--devices", "-d", multiple=True, type=click.IntRange(1, 8), default=(1, 2), show_default=True,
              help="device counts, cycled over steps (repeat the option)")
@click.option("--steps", default=400, show_default=True, type=click.IntRange(1))
@click.option("--samples", default=6, show_default=True, type=click.IntRange(2))
@click.option("--budget", "-n", default=5000, show_default=True, type=click.IntRange(1),
              help="evaluations of each BRKGA run (each sample's and the plain reference's)")
@click.option("--lr", "learning_rate", default=1e-4, show_default=True, type=float)
@click.option("--entropy", "entropy_coef", default=0.0005, show_default=True, type=float)
@click.option("--imitate", "imitation_steps", default=400, show_default=True, type=click.IntRange(0),
              help="warm-start steps imitating the structural teacher (regal.policy.teacher)")
@click.option("--kind", type=click.Choice(["gnn", "gas"]), default="gnn", show_default=True)
@click.option("--objective", type=click.Choice(["memory", "runtime"]), default="memory", show_default=True,
              help="the reward: peak memory, or makespan (BRKGA on the timed chromosome, no memory limit, the "
                   "default device model; the policy gets REGAL's transfer-priority head)")
@click.option("--heads", default="placement,scheduling", show_default=True,
              help="active heads: any of placement, scheduling, elite")
@click.option("--features", type=click.Choice(["v1", "v2"]), default="v2", show_default=True,
              help="node features: v2 is source-invariant (regal.policy.features), v1 REGAL's original")
@click.option("--workers", default=None, type=click.IntRange(1), help="local Dask workers (default: cores)")
@click.option("--scheduler", default=None, help="tcp://HOST:PORT of an existing Dask scheduler")
@click.option("--seed", "-s", default=0, show_default=True, type=click.IntRange(0),
              help="the network's initialization, the order of the graphs and the BRKGA seeds drawn")
@click.option("--fresh", is_flag=True, help="ignore an existing checkpoint in OUT")
@click.option("-o", "--output", "out_dir", default=None, type=click.Path(file_okay=False),
              help="OUT: the directory to write (and resume from); one run at a time")
@click.option("--out", "out_alias", default=None, type=click.Path(file_okay=False), hidden=True)  # the old spelling
@_friendly_errors
def train_cmd(manifest, split, valid_split, synthetic, max_nodes, max_valid, devices, steps, samples,
              budget, learning_rate, entropy_coef, imitation_steps, kind, objective, heads, features, workers,
              scheduler, seed, fresh, out_dir, out_alias):
    if out_dir and out_alias and out_dir != out_alias:
        raise click.UsageError("give the directory once: -o/--output (--out is its old spelling)")
    out_dir = out_dir or out_alias
    if not out_dir:
        raise click.UsageError("Missing option '-o' / '--output' (the directory to write).")
    from regal.dataset import split_paths, spread
    from regal.parallel import dask_client
    from regal.policy.network import PolicyConfig
    from regal.policy.reinforce import CheckpointError, TrainConfig, check_resume, run_setup, train
    active = {h.strip() for h in heads.split(",") if h.strip()}
    unknown = active - {"placement", "scheduling", "elite"}
    if unknown or not active:
        raise click.BadParameter(f"unknown or no heads: {sorted(unknown) or heads!r}", param_hint="--heads")
    train_paths = split_paths(split, manifest=manifest, max_nodes=max_nodes)
    if synthetic:
        train_paths += split_paths(split, manifest=manifest, synthetic=True)
    valid_paths = spread(split_paths(valid_split, manifest=manifest, max_nodes=max_nodes), max_valid, manifest)
    if not train_paths:
        raise click.ClickException(f"no training graphs in split {split!r}")
    pc = PolicyConfig(kind=kind, placement="placement" in active, scheduling="scheduling" in active,
                      elite="elite" in active, max_devices=max(4, max(devices)), features=features,
                      transfer_priority=objective == "runtime")
    tc = TrainConfig(devices=tuple(devices), steps=steps, samples=samples, budget=budget,
                     learning_rate=learning_rate, entropy_coef=entropy_coef, seed=seed,
                     imitation_steps=imitation_steps, objective=objective)
    from regal._io import directory_lock
    from regal._stop import Stopped, interruptible, stop_on_signals
    deadline = command_deadline()
    try:  # one run per directory, held from before the cluster starts; a signal writes the checkpoint (exit 3)
        with stop_on_signals(deadline), directory_lock(out_dir, what="another regal train"):
            if not fresh:  # a checkpoint of another setting fails now, not once a cluster has started
                check_resume(out_dir, run_setup(tc, pc, train_paths, valid_paths))
            click.echo(f"training a {kind} policy on {len(train_paths)} graphs, validating on {len(valid_paths)}, "
                       f"devices {list(devices)}, heads {sorted(active)}")
            interruptible(_start_jax, deadline)  # seconds, before the cluster: a stop needs no cluster closed
            # a stop ends the process without closing the cluster (its workers end with it); the
            # multiprocessing resource tracker, started with the cluster, then cleans up its
            # semaphores without a warning (it takes this process's -W options)
            sys.warnoptions.append("ignore:resource_tracker:UserWarning")
            with dask_client(scheduler, workers) as client:  # a stop exits inside: its workers end with us
                try:
                    pol = train(train_paths, valid_paths, out_dir, pc, tc, client=client, resume=not fresh,
                                log=click.echo, deadline=deadline)
                except Stopped as e:
                    _stopped_before_training(e)
                if "stopped" in pol.meta:
                    click.echo(f"stopped ({pol.meta['stopped']}) at step {pol.meta['step']}: the same command "
                               f"resumes from {os.path.join(out_dir, 'checkpoint.npz')}", err=True)
                    _exit_stopped()
    except CheckpointError as e:
        option = _RESUME_OPTIONS.get(getattr(e, "field", None))
        raise click.ClickException(f"{e} ({'option ' + option + '; ' if option else ''}--fresh starts over)") from None
    except Stopped as e:
        _stopped_before_training(e)
    click.echo(f"best policy: {os.path.join(out_dir, 'best.npz')} "
               f"(step {pol.meta.get('step')}, valid {pol.meta.get('valid_improvement_pct', float('nan')):+.3f}%)")


def _stopped_before_training(e) -> None:
    click.echo(f"stopped ({e.reason}) before the first step: no checkpoint written", err=True)
    _exit_stopped()


def _start_jax() -> None:
    """Import JAX, Haiku and optax (a few seconds: training's start)."""
    skip_flax_interop()
    import haiku  # noqa: F401
    import jax  # noqa: F401
    import optax  # noqa: F401


@main.command("plot", short_help="draw memory over the schedule of a solution (PNG)")
@click.argument("graph_path", metavar="GRAPH")
@click.argument("solution_path", metavar="SOLUTION")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="FIG.png")
@DIM_OPTION
@_friendly_errors
def plot_cmd(graph_path, solution_path, output, dims):
    """Plot memory over the schedule of SOLUTION on GRAPH: one line per device, the peak marked,
    and which device ran each node. The two files may come in either order."""
    from regal.plot import plot_solution
    from regal.solution import load_solution
    graph_path, solution_path = _graph_then_solution(graph_path, solution_path)
    g = load_graph(graph_path, dims)
    sol = load_solution(solution_path, g)
    plot_solution(g, sol, output)
    click.echo(f"wrote {output} (peak {human_bytes(sol.peak_bytes)})")


from regal.cli_torch import torch_cmd  # noqa: E402 - a command in its own module

main.add_command(torch_cmd)

from regal.cli_pack import exit_for_limit, fit_cmd, pack_cmd, packed_line, packed_summary  # noqa: E402 (issue 35)

main.add_command(pack_cmd)
main.add_command(fit_cmd)

if __name__ == "__main__":
    main()
