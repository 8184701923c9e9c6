"""`regal` on the command line: the group `main` and its commands, each in its own module of
`regal.commands` (each parses, calls one library function, prints). This module only registers
them; the program's start and end are `regal.commands.program`'s.

Every expected failure (a bad graph, HLO, CSV or solution file, a bad option) ends as a one-line
`Error: ...` on stderr and exit status 1; never a traceback.
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: When this module began to load: run as the program, a command's time limit counts from here
#: (the interpreter's start is ~0.02 s before it; the imports below, ~0.2 s, are inside the limit).
_PROGRAM_START = time.perf_counter()

#: Run as the program: the signals that come while the modules below load, recorded (first
#: thing, before any import that takes time), for the command to act on once its handlers are
#: in place (`regal._stop.take_early_signals`): no KeyboardInterrupt traceback from an import.
_EARLY_SIGNALS: list = []
if __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "regal":
    for _name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, _name):
            signal.signal(getattr(signal, _name), lambda signum, frame: _EARLY_SIGNALS.append(signum))

import click  # noqa: E402

from regal.commands.program import RegalGroup  # noqa: E402

__all__ = ["main"]


@click.group(cls=RegalGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="regal")
def main():
    """regal: place and schedule an ML computation graph for the lowest peak memory (REGAL)."""


main.program_start = _PROGRAM_START


def _hand_over_early_signals() -> None:
    import regal._stop
    regal._stop._EARLY_SIGNALS = _EARLY_SIGNALS


_hand_over_early_signals()


def _register() -> None:
    from regal.commands.evaluate import evaluate_cmd, plot_cmd
    from regal.commands.graphs import export_onnx_cmd, import_hlo_cmd, import_onnx_cmd, info_cmd
    from regal.commands.optimize import optimize_cmd
    from regal.commands.pack import fit_cmd, pack_cmd
    from regal.commands.solve import solve_cmd
    from regal.commands.torch import torch_cmd
    from regal.commands.train import train_cmd
    for command in (info_cmd, import_hlo_cmd, import_onnx_cmd, export_onnx_cmd, optimize_cmd, evaluate_cmd, solve_cmd,
                    train_cmd, plot_cmd, torch_cmd, pack_cmd, fit_cmd):
        main.add_command(command)


_register()

if __name__ == "__main__":
    main()
