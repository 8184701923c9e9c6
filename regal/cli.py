"""`regal` on the command line. Each command parses, calls one library function, prints.

Every expected failure (a bad graph, HLO or solution file, a bad option) ends as a one-line
`Error: ...` on stderr and exit status 1; never a traceback.
"""

from __future__ import annotations

import time

#: When this module began to load: run as the program, a command's time limit counts from here
#: (the interpreter's start is ~0.02 s before it; the imports below, ~0.2 s, are inside the limit).
_PROGRAM_START = time.perf_counter()

import contextlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import click

from regal.cli_common import (_COMMAND_DEADLINE, DIM_OPTION, EXIT_INTERRUPTED, GRAPH_HELP,  # noqa: F401
                              NUMBA_OPTIONAL_IMPORTS, RUNTIME_OPTIONS, TIME_LIMIT, _exit_stopped, _friendly_errors,
                              _Seconds, command_deadline, human_bytes, import_numba_lean, load_graph,
                              load_kernels_lean, parse_dims, skip_flax_interop, start_numba, use_jax_cache)
from regal.cli_common import dim_option_advice as _dim_option_advice  # noqa: F401
from regal.policy.names import DEFAULT_POLICY_NAME as DEFAULT_POLICY  # noqa: F401


#: The commands that stop gracefully on a signal (`regal._stop.STOP_SIGNALS`): `_Main.main`
#: installs their handlers first thing, so that a signal in any phase, start-up included, ends
#: them with status 3 (and their best result written when there is one).
STOPPABLE_COMMANDS = ("optimize", "solve", "train")


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
    _COMMAND_DEADLINE.append((deadline, _PROGRAM_START if program else time.perf_counter(), program))
    try:
        with stop_on_signals(deadline):
            yield
    finally:
        _COMMAND_DEADLINE.pop()


def _runs_a_command(argv) -> bool:
    """Whether the command line runs a command, rather than asking for help or the version
    (`regal`, `regal --help`, `regal COMMAND --help`): those load neither NumPy nor Numba."""
    return bool(argv) and not any(a in ("-h", "--help", "--version") for a in argv)


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
    signal handlers (`_stop_from_the_start`; its time limit counts from the program's start,
    `_PROGRAM_START`, or from this call's when called with `args`); run as the program, it loads
    the cached kernels without starting Numba's compiler (`load_kernels_lean`, 0.1 s), unless it only prints help."""

    def main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        program = args is None and standalone_mode
        with _stop_from_the_start(sys.argv[1:] if args is None else list(args), program):
            return self._main(args, *rest, standalone_mode=standalone_mode, **kwargs)

    def _main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        command = set(sys.argv[1:2])
        if args is None and standalone_mode and _runs_a_command(sys.argv[1:]):
            import_numba_lean()  # before the first kernel module imports Numba
            load_kernels_lean()
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


# The commands, each in its own module (regal.commands.*, regal.commands.torch, regal.cli_pack); their
# names stay reachable here as regal.cli.X.
from regal.commands.graphs import _xla_schedule, import_hlo_cmd, import_onnx_cmd, info_cmd  # noqa: E402,F401
from regal.commands.report import (REPORT_PACK_WALL_S, _allocation, _effort, _load_or_exit,  # noqa: E402,F401
                                   _not_packed, _packed, _print_solution, _report, _report_timed, _runtime_options,
                                   _write_and_report)
from regal.commands.optimize import (_optimize, _PolicyJob, _policy_priors, _prepare_search,  # noqa: E402,F401
                                     _warm_up, optimize_cmd)
from regal.commands.evaluate import _graph_then_solution, _is_solution_file, evaluate_cmd, plot_cmd  # noqa: E402,F401
from regal.commands.solve import _takes_deadline, solve_cmd  # noqa: E402,F401
from regal.commands.train import _RESUME_OPTIONS, _start_jax, _stopped_before_training, train_cmd  # noqa: E402,F401

for _command in (info_cmd, import_hlo_cmd, import_onnx_cmd, optimize_cmd, evaluate_cmd, solve_cmd, train_cmd, plot_cmd):
    main.add_command(_command)

from regal.commands.torch import torch_cmd  # noqa: E402 - a command in its own module

main.add_command(torch_cmd)

from regal.cli_pack import exit_for_limit, fit_cmd, pack_cmd, packed_line, packed_summary  # noqa: E402 (issue 35)

main.add_command(pack_cmd)
main.add_command(fit_cmd)

if __name__ == "__main__":
    main()
