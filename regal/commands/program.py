"""The `regal` program: its click group (`RegalGroup`), how it starts (the lean start, the
signal handlers of a stoppable command installed first thing) and how it ends (`os._exit` once
a quick command's output is flushed). `regal.cli` makes the group and registers the commands."""

from __future__ import annotations

import contextlib
import os
import sys
import time

import click

from regal.cli_common import _COMMAND_DEADLINE

__all__ = ["RegalGroup", "STOPPABLE_COMMANDS", "QUICK_EXIT_COMMANDS", "runs_a_command"]

#: The commands that stop gracefully on a signal (`regal._stop.STOP_SIGNALS`): `RegalGroup.main`
#: installs their handlers first thing, so that a signal in any phase, start-up included, ends
#: them with status 3 (and their best result written when there is one).
STOPPABLE_COMMANDS = ("optimize", "solve", "train", "pack", "fit")

#: Commands after which the `regal` process ends without Python's finalization (`RegalGroup`):
#: they hold no cluster, server or child process when they return.
QUICK_EXIT_COMMANDS = ("optimize", "solve", "info", "evaluate", "plot", "import-hlo", "import-onnx", "pack", "fit")


@contextlib.contextmanager
def _stop_from_the_start(argv, start: float, program: bool = False):
    """For a stoppable command (`argv[0]`), a `Deadline` that SIGINT, SIGTERM and SIGHUP expire
    from here on, while the command's modules are still loading, its time limit counted from
    `start`; nothing for other commands (they keep the default signals: nothing of theirs is
    worth finishing). program: run as the program itself (`_exit_stopped` may then end the
    process at once)."""
    from regal._stop import Deadline, stop_on_signals
    if not argv or argv[0] not in STOPPABLE_COMMANDS:
        yield
        return
    deadline = Deadline()
    _COMMAND_DEADLINE.append((deadline, start, program))
    try:
        with stop_on_signals(deadline):
            yield
    finally:
        _COMMAND_DEADLINE.pop()


def runs_a_command(argv) -> bool:
    """Whether the command line runs a command, rather than asking for help or the version
    (`regal`, `regal --help`, `regal COMMAND --help`): those load neither NumPy nor Numba."""
    return bool(argv) and not any(a in ("-h", "--help", "--version") for a in argv)


class RegalGroup(click.Group):
    """The `regal` group. Run as the program itself (the console script or `python -m
    regal.cli`, with no `args`), it ends the process with `os._exit` once a quick command has
    returned and its output is flushed: tearing down the interpreter (Numba's and LLVM's modules,
    OpenMP's threads) would add 0.2 s to every run; so does a stoppable command that a signal
    stopped (a training step it left behind may still run inside JAX in a helper thread, and the
    interpreter's finalization would abort under it). Called with `args` (a test's CliRunner, an
    application), it behaves as any click group. For a stoppable command it first installs the
    signal handlers (`_stop_from_the_start`; its time limit counts from the program's start,
    `program_start`, or from this call's when called with `args`); run as the program, it
    starts the lean way (`regal._lean_start.lean_start`, 0.1 s) unless it only prints help."""

    #: perf_counter() when the program began to load (`regal.cli` sets it).
    program_start: float | None = None

    def main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        program = args is None and standalone_mode
        start = self.program_start if program and self.program_start is not None else time.perf_counter()
        with _stop_from_the_start(sys.argv[1:] if args is None else list(args), start, program):
            return self._main(args, *rest, standalone_mode=standalone_mode, **kwargs)

    def _main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        command = set(sys.argv[1:2])
        if args is None and standalone_mode and runs_a_command(sys.argv[1:]):
            from regal._lean_start import lean_start
            lean_start()  # before the first kernel module imports Numba
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
