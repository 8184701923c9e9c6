"""The `regal` program: its click group (`RegalGroup`), how it starts (the lean start, the
signal handlers of a stoppable command installed first thing) and how it ends (`os._exit` once
a quick command's output is flushed). `regal.cli` makes the group and registers the commands."""

from __future__ import annotations

import contextlib
import os
import sys
import time

import click

from regal.commands._common import _COMMAND_DEADLINE

__all__ = ["RegalGroup", "STOPPABLE_COMMANDS", "QUICK_EXIT_COMMANDS", "runs_a_command"]

#: The commands that stop gracefully on a signal (`regal._stop.STOP_SIGNALS`) once their work has
#: begun (`regal.commands._common.command_deadline`): status 3, their best result written; before it,
#: and for every other command, a signal ends the command at once, 128 + its number (handlers
#: installed first thing by `RegalGroup.main`; docs/terminal.md, "Exit statuses").
STOPPABLE_COMMANDS = ("optimize", "solve", "train", "pack", "fit")

#: Commands after which the `regal` process ends without Python's finalization (`RegalGroup`):
#: they hold no cluster, server or child process when they return.
QUICK_EXIT_COMMANDS = ("optimize", "solve", "info", "evaluate", "plot", "import-hlo", "import-onnx", "export-onnx", "pack",
                       "fit")

#: Exit status when standard output is a pipe whose reader left (`regal info G | head -1`):
#: 128 + SIGPIPE's number, what a program the signal killed reports; no message.
EXIT_BROKEN_PIPE = 141


def quiet_stdout() -> None:
    """Standard output to /dev/null: the reader left, and Python's own flush at exit must not
    fail ("Exception ignored ... BrokenPipeError")."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


#: Seconds a command with nothing to write (info, evaluate, plot, import-*, torch) is given,
#: once signalled, to unwind from its KeyboardInterrupt before the watchdog ends the process
#: (`regal._stop.exit_on_signals`): the main thread may be inside one long call into C.
GRACE_S = 1.0


@contextlib.contextmanager
def _stop_from_the_start(argv, start: float, program: bool = False):
    """For a stoppable command (`argv[0]`), a `Deadline` with its time limit counted from `start`,
    which SIGINT, SIGTERM and SIGHUP expire once the command has taken it (`command_deadline`:
    from then on it has something to finish); before, and for the other commands (nothing of
    theirs is worth finishing), each of the signals raises KeyboardInterrupt (`RegalGroup.invoke`
    makes it exit status 128 + the signal's number), never lost (`regal._stop.exit_on_signals`,
    with its watchdog for the other commands run as the program). A signal that came before
    (recorded by `regal.cli` while it loaded) counts as coming now. program: run as the program
    itself (`exit_stopped` may then end the process at once)."""
    from regal._stop import Deadline, exit_on_signals, take_early_signals
    if not argv or argv[0] not in STOPPABLE_COMMANDS:
        with exit_on_signals(GRACE_S if program else None, on_exit=_last_words):
            _raise_early(take_early_signals())
            yield
        return
    deadline = Deadline()
    _COMMAND_DEADLINE.append((deadline, start, program))
    try:
        # until the command takes its deadline (`regal.commands._common.command_deadline`: its work
        # begins) it has nothing to finish: a signal ends it at once, 128 + its number
        with exit_on_signals(None):
            _raise_early(take_early_signals())
            yield
    finally:
        _COMMAND_DEADLINE.pop()


def _raise_early(signals: list) -> None:
    if signals:
        from regal._stop import record_signal
        record_signal(signals[0])
        raise KeyboardInterrupt


def _interrupted_line(signum) -> str:
    import signal
    return f"stopped (interrupted ({signal.Signals(signum or signal.SIGINT).name})): nothing written"


def _last_words(signum: int) -> None:
    """The watchdog's, before it ends the process: the children a command started (`regal
    torch`'s device processes) ended, and the line a KeyboardInterrupt would have printed."""
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        for child in mp.active_children():
            with contextlib.suppress(Exception):
                child.kill()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(_interrupted_line(signum) + "\n")


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
        from regal._stop import record_signal
        record_signal(None)
        self._program = program
        try:
            with _stop_from_the_start(sys.argv[1:] if args is None else list(args), start, program):
                return self._main(args, *rest, standalone_mode=standalone_mode, **kwargs)
        except KeyboardInterrupt:  # before the command began (an early signal): as in `invoke`
            self._exit_interrupted(standalone_mode)

    def invoke(self, ctx):
        """The command; a KeyboardInterrupt (a signal to a command with nothing to write: its
        handler raises it) is one line on stderr and exit status 128 + the signal's number
        (130 for Ctrl-C), not click's 'Aborted!' and 1. So is a command that finished although
        a signal came (the handler's exception was lost inside a call into C)."""
        from regal._stop import last_signal
        try:
            out = super().invoke(ctx)
            sys.stdout.flush()  # a reader that left (`regal ... | head -1`): found here, not at exit
        except KeyboardInterrupt:
            self._exit_interrupted()
        except BrokenPipeError:
            quiet_stdout()
            raise SystemExit(EXIT_BROKEN_PIPE) from None
        if last_signal() is not None and not _COMMAND_DEADLINE:
            self._exit_interrupted()
        return out

    def _exit_interrupted(self, standalone_mode: bool = True):
        """One line, then exit status 128 + the signal's number; run as the program, at once
        (`os._exit`: the interpreter's teardown with PyTorch loaded takes a second), the
        children a command started (`regal torch`'s device processes) ended first."""
        from regal._stop import last_signal, signal_status
        signum = last_signal()
        if getattr(self, "_program", False):
            _last_words(signum)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            os._exit(signal_status(signum))
        click.echo(_interrupted_line(signum), err=True)
        if not standalone_mode:
            raise click.exceptions.Exit(signal_status(signum))
        raise SystemExit(signal_status(signum))

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
            except BrokenPipeError:  # the reader left: quietly, as a program killed by SIGPIPE
                code = code or EXIT_BROKEN_PIPE
            except (OSError, ValueError):
                pass
        os._exit(code)
