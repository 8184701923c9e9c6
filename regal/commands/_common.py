"""What every `regal` command shares: reading a graph (any format, `--dim`), printing bytes; the
one-line errors, the shared options (--time-limit, --dim, the runtime options), the stop set-up
a command polls (`command_deadline`, exit status 3) and the kernels' warm-up before its clock
(`warm_up`), loading the graph under that deadline (`load_or_exit`, keeping time for the plan
and the report). The commands (`regal.commands.*`) import it; it imports none of them. The program's
lean start (Numba's private patches) is `regal._lean_start`."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import sys
from typing import TYPE_CHECKING

import click

from regal import _args
from regal._lean_start import skip_flax_interop, start_numba  # noqa: F401  (the commands import them here)

if TYPE_CHECKING:
    from regal.graph import Graph

__all__ = ["DIM_OPTION", "EXIT_INTERRUPTED", "GRAPH_HELP", "RUNTIME_OPTIONS", "TIME_LIMIT", "command_deadline",
           "dim_option_advice", "human_bytes", "load_graph", "parse_dims", "skip_flax_interop", "start_numba",
           "use_jax_cache", "warm_up"]


GRAPH_HELP = ("a regal-graph/1 file (.json or .json.gz), an XLA HLO text module (.hlo, .txt) or an "
              "ONNX model (.onnx, .onnx.gz)")


def parse_dims(dims: tuple[str, ...]) -> dict[str, int]:
    """--dim NAME=VALUE options -> {NAME: VALUE}; a one-line error for a malformed one."""
    out = {}
    for item in dims:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.strip().isdigit():
            raise click.BadParameter(f"expected NAME=VALUE with a non-negative integer, got {item!r}",
                                     param_hint="--dim")
        if int(value) > _args.MAX_DIMENSION:
            raise click.BadParameter(f"{key.strip()}={int(value):,} is not in "
                                     f"{_args.range_text(0, _args.MAX_DIMENSION)}", param_hint="--dim")
        out[key.strip()] = int(value)
    return out


def load_graph(path: str, dims: tuple[str, ...] = ()) -> Graph:
    """A graph file, or an HLO or ONNX module imported on the fly (`regal.load`); an ONNX
    dimension left without a value is named with the option that gives it (--dim NAME=VALUE)."""
    from regal.load import load_graph as load
    start_numba()
    with dim_option_advice():
        return load(path, dims=parse_dims(dims) or None)


@contextlib.contextmanager
def dim_option_advice():
    """The ONNX importer's error for a dimension without a value, with the command line's advice
    (--dim NAME=VALUE) in place of the library's (a Python keyword argument)."""
    from regal.graph import GraphError
    try:
        yield
    except GraphError as e:
        head, sep, _ = str(e).partition(": pass dims={")
        if not sep:
            raise
        name = re.search(r"symbolic dimension '([^']*)'", head)
        raise GraphError(f"{head}: pass --dim {name.group(1) if name else 'NAME'}=VALUE") from None


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def friendly_errors(fn):
    """Turn the library's validation errors into click's one-line errors."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from regal.graph import GraphError
        from regal.simulate import ScheduleError
        from regal.solution import SolutionError
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:  # `regal ... | head`: the reader left; quietly, 141 as SIGPIPE's
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
        except (GraphError, SolutionError, ScheduleError, ValueError, OSError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise click.ClickException(msg) from None
    return wrapper


class _Seconds(click.ParamType):
    """A finite, non-negative number of seconds, at most `regal._args.MAX_SECONDS` (click's
    FloatRange lets NaN through)."""
    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(x) or not 0 <= x <= _args.MAX_SECONDS:
            self.fail(f"{value!r} is not a finite number of seconds in 0..{_args.MAX_SECONDS:.0e}", param, ctx)
        return x


TIME_LIMIT = _Seconds()


class Count(click.ParamType):
    """An integer option in low..high (`regal._args`'s ranges: the library refuses the same
    values in the same words), refused in one line naming the option and the range; `what` is
    the unit said after it. Unlike click's IntRange it has an upper bound for every option, so
    no number reaches a kernel that cannot hold it."""
    name = "integer"

    def __init__(self, low: int, high: int, what: str = ""):
        self.low, self.high, self.what = low, high, what

    def convert(self, value, param, ctx):
        unit = f" ({self.what})" if self.what else ""
        if isinstance(value, bool):
            self.fail(f"{value!r} is not an integer", param, ctx)
        if isinstance(value, int):
            v = value
        else:
            try:
                v = int(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not an integer in {_args.range_text(self.low, self.high)}{unit}", param, ctx)
        if not self.low <= v <= self.high:
            self.fail(f"{v:,} is not in {_args.range_text(self.low, self.high)}{unit}", param, ctx)
        return v

    def __repr__(self) -> str:
        return f"Count({self.low}, {self.high})"


class Fraction(click.ParamType):
    """A finite number in low..high, the ends open where asked (click's FloatRange lets NaN
    through: every comparison with NaN is false)."""
    name = "float"

    def __init__(self, low: float, high: float | None = None, low_open: bool = False, high_open: bool = False):
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        high = math.inf if self.high is None else self.high
        ok = math.isfinite(x) and (x > self.low if self.low_open else x >= self.low) and \
            (x < high if self.high_open else x <= high)
        if not ok:
            left, right = "(" if self.low_open else "[", ")" if self.high_open or self.high is None else "]"
            self.fail(f"{value!r} is not a finite number in {left}{self.low:g}, "
                      f"{'inf' if self.high is None else format(self.high, 'g')}{right}", param, ctx)
        return x


class OutputPath(click.Path):
    """click.Path for a file (or, with file_okay=False, a directory) a command writes; an empty
    path is refused in one line (it was taken as "no output" and nothing was written)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("dir_okay", False)
        super().__init__(**kwargs)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r} is an empty path: give a {'file' if self.file_okay else 'directory'} name",
                      param, ctx)
        return super().convert(value, param, ctx)


#: The option types of the counts the commands share (their ranges: `regal._args`).
BUDGET = Count(1, _args.MAX_EVALUATIONS, "evaluations")
SEED = Count(0, _args.MAX_SEED)
DEVICES = Count(1, _args.MAX_DEVICES)
POPULATION = Count(2, _args.MAX_POPULATION)
SEED_HELP = f"the random seed, in {_args.range_text(0, _args.MAX_SEED)} (what every method's generator takes)"

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
#: written (1 is an error, 2 a usage error). Stopped before it had any result, a command writes
#: nothing and exits with 128 + the signal's number (`regal._stop.signal_status`: 130 for Ctrl-C).
EXIT_INTERRUPTED = 3

#: (Deadline, start) of the stoppable command this process runs, set by `regal.cli._Main.main`.
_COMMAND_DEADLINE: list = []


def command_deadline(time_limit_s: float | None = None):
    """The `Deadline` a stoppable command polls, with `time_limit_s` counted from the program's
    start (`regal.cli._PROGRAM_START`; from `main`'s call when it is called with arguments): the
    one `RegalGroup.main` made, or a fresh one when the command runs without `main`. From this
    call on, SIGINT, SIGTERM and SIGHUP ask it to stop (the command's work begins: a stop then
    writes its best result); before, a signal ended the command at once."""
    from regal._stop import Deadline, request_stop_on_signals
    if not _COMMAND_DEADLINE:
        return Deadline(time_limit_s)
    deadline, start, _ = _COMMAND_DEADLINE[-1]
    request_stop_on_signals(deadline)  # the program's `exit_on_signals` puts its handlers back at the end
    return deadline.limit(time_limit_s, start)


def command_start() -> float:
    """perf_counter() when the command's clock started: the program's start (`regal.cli`), or
    `main`'s call, or now when the command runs without `main`."""
    import time
    return _COMMAND_DEADLINE[-1][1] if _COMMAND_DEADLINE else time.perf_counter()


#: Seconds per node that a command keeps from its time limit for what follows the search: the
#: solution re-simulated and its file written (issue 36: 1.7 us per node after the deadline at
#: 300K and 1M nodes on the 2-core machine, benchmarks/results/big_graph.md), so that the plan
#: is written within the limit: 2.5 ms at 1K nodes, 0.75 s at 300K, 2.5 s at 1M.
PLAN_SECONDS_PER_NODE = 2.5e-6

#: Share of --time-limit kept for the report: the search stops this share before the limit, the
#: report (allocation, packed arena, bound) ends at most this share after it, whatever it then
#: leaves out said so: the command as a whole ends within 10 % of the limit, exiting included.
REPORT_SHARE = 0.05


def load_or_exit(graph_path, dims, deadline):
    """The graph, loaded while the caller's thread watches `deadline`; a stop before it is
    loaded ends the command with status 3 and a line saying nothing was written. Once it is
    loaded, the deadline's time limit moves earlier by the time writing its plan will take
    (`PLAN_SECONDS_PER_NODE`) and by REPORT_SHARE of the limit, the report's (`write_and_report`
    gives the report its own limit once the plan is written)."""
    from regal._stop import Stopped, interruptible
    try:
        g = interruptible(load_graph, deadline, graph_path, dims)
    except Stopped:
        if deadline.stop_requested:
            click.echo(f"stopped ({deadline.reason}) while loading {graph_path}: no solution to write", err=True)
            exit_stopped(nothing=deadline)
        return load_graph(graph_path, dims)  # the time limit passed: load it all the same, then stop at once
    if deadline.at is not None:
        deadline.at -= PLAN_SECONDS_PER_NODE * g.num_nodes + REPORT_SHARE * max(0.0, deadline.at - command_start())
    return g


def exit_stopped(nothing=None) -> None:
    """Exit with status 3 (EXIT_INTERRUPTED: the best result so far was written), or, given
    `nothing` (the stopped `Deadline` of a command that had no result yet), with 128 + the
    signal's number. Run as the program, at once (`os._exit`, the output flushed): what the stop
    left behind (a training step in a helper thread, a Dask cluster whose workers end with this
    process) is not waited for; else by SystemExit."""
    code = EXIT_INTERRUPTED
    if nothing is not None:
        from regal._stop import signal_status
        code = signal_status(nothing.signum)
    if _COMMAND_DEADLINE and _COMMAND_DEADLINE[-1][2]:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)


def warm_up(deadline, fn, *args, what: str = "the kernels", nothing: str = "nothing to write", **kwargs) -> bool:
    """`fn(*args, **kwargs)`, a warm-up (Numba kernels loaded from the cache, or compiled), run
    while this thread watches `deadline`: a stop request ends the command with status 3 within
    a poll interval, saying that there is nothing to write; the time limit lets it finish (every
    result needs the kernels). When it compiled a kernel (Numba's cache was empty or stale: tens
    of seconds, `regal.warmup()` does it once), the time limit moves later by the warm-up's time
    and a line on stderr says so: compilation is not counted in --time-limit. Returns whether it
    compiled."""
    import time

    from regal._stop import Stopped, interruptible
    from regal._warmup import cache_misses
    t, before = time.perf_counter(), cache_misses()
    try:
        interruptible(fn, deadline, *args, requests_only=True, **kwargs)
    except Stopped:
        click.echo(f"stopped ({deadline.reason}) while loading {what}: {nothing}", err=True)
        exit_stopped(nothing=deadline)
    if cache_misses() == before:
        return False
    spent = time.perf_counter() - t
    if _COMMAND_DEADLINE and _COMMAND_DEADLINE[-1][0] is deadline:  # the report's clock moves too
        _, start, program = _COMMAND_DEADLINE[-1]
        _COMMAND_DEADLINE[-1] = (deadline, start + spent, program)
    if deadline.at is not None:
        deadline.at += spent
        if deadline.reason == "time_limit":
            deadline.reason = None
    click.echo(f"compiled {what} in {spent:.1f} s (Numba's cache lacked them; `regal.warmup()` compiles every "
               "kernel once): not counted in --time-limit", err=True)
    return True


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


#: The exit statuses of `regal fit` and of a runtime search over its --memory-limit (pack.py).
EXIT_FITS, EXIT_DOES_NOT_FIT, EXIT_UNDECIDED = 0, 4, 5

#: Seconds per device the reports of `regal optimize` / `solve` / `evaluate` give the packer's
#: search: none, the greedy placements alone, so a report is the same on every run (a search
#: cut by the clock was not: 102,164,300 B and 102,149,908 B for one demo command) and costs
#: a tenth; `regal fit` and `regal pack` search under their own --time-limit.
REPORT_PACK_TIME_S = 0.0


def packed_summary(g, sol, time_limit_s: float = REPORT_PACK_TIME_S) -> dict:
    """{"arena_bytes": largest device arena of the solution's memory plan, "device_arena_bytes",
    "arena_optimal"}: what the reports print beside the peak."""
    from regal.memory_plan import plan
    mp = plan(g, sol.placement, sol.order, sol.num_devices, time_limit_s=time_limit_s)
    return {"arena_bytes": int(mp.arena_bytes.max()), "device_arena_bytes": [int(x) for x in mp.arena_bytes],
            "arena_optimal": bool(mp.optimal.all())}


def packed_line(g, sol, summary: dict | None = None) -> str:
    """The text reports' line: the packed arena beside the peak (`summary`: packed_summary's, if
    computed already)."""
    s = packed_summary(g, sol) if summary is None else summary
    a = s["arena_bytes"]
    extra = "at the peak" if a == sol.peak_bytes else f"+{(a - sol.peak_bytes) / max(sol.peak_bytes, 1) * 100:.2f} % over the peak"
    return f"packed    {a:,} B in one arena per device ({extra}; offsets: regal fit -o)"


def exit_for_limit(g, sol) -> None:
    """After a runtime search with a memory limit: exit 4 when a lower bound valid in the timed
    model (per op, resident share, largest resident; with one device SPEC section 7's bound) is
    above the limit, 5 when the result is over the limit without such a proof; return when it
    fits."""
    timed = sol.info.get("timed") or {}
    limits = timed.get("memory_limit_bytes")
    if limits is None or timed.get("feasible", True):
        return
    from regal.fit import named_bounds
    bounds = named_bounds(g, sol.num_devices)
    if sol.num_devices > 1:
        bounds.pop("one-device bound over d", None)
    name = max(bounds, key=lambda k: bounds[k])
    limit = min(int(x) for x in limits)
    if bounds[name] > limit:
        click.echo(f"does not fit: the {name} lower bound (SPEC section 7) is {bounds[name]:,} B, above the limit "
                   f"of {limit:,} B", err=True)
        sys.exit(EXIT_DOES_NOT_FIT)
    click.echo(f"undecided: the best schedule found is over the limit of {limit:,} B; no lower bound shows "
               "that none fits", err=True)
    sys.exit(EXIT_UNDECIDED)
