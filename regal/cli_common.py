"""What every `regal` command shares: reading a graph (any format, `--dim`), starting Numba
for a command line, printing bytes. `regal.cli` and the commands in their own modules
(`regal.cli_pack`, `regal.cli_torch`) import it; it imports none of them."""

from __future__ import annotations

import contextlib
import os
import re
import sys

import click

from regal.graph import Graph, GraphError

__all__ = ["GRAPH_HELP", "NUMBA_OPTIONAL_IMPORTS", "dim_option_advice", "human_bytes", "load_graph", "parse_dims",
           "skip_flax_interop", "start_numba", "use_workqueue_threads"]


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
    try:
        yield
    except GraphError as e:
        head, sep, _ = str(e).partition(": pass dims={")
        if not sep:
            raise
        name = re.search(r"symbolic dimension '([^']*)'", head)
        raise GraphError(f"{head}: pass --dim {name.group(1) if name else 'NAME'}=VALUE") from None


#: Optional modules Numba imports while its CPU target starts, which regal's kernels do not use:
#: scipy.linalg (to learn whether np.dot and np.convolve can call BLAS; about a third of the
#: start) and cffi (to type cffi functions).
NUMBA_OPTIONAL_IMPORTS = ("scipy.linalg.cython_blas", "cffi")


def start_numba() -> None:
    """Start Numba's CPU target (what loading the first cached kernel does) without importing
    `NUMBA_OPTIONAL_IMPORTS`, for the command line only: 0.1 to 0.2 s of every command. With
    those imports failing, Numba falls back to its own loops for np.dot and np.convolve and does
    not type cffi functions, in this process; the modules themselves stay importable.
    """
    use_workqueue_threads()
    try:
        from numba.core.registry import cpu_target
    except ImportError:  # another Numba layout: it starts the usual way on the first kernel
        return
    blocked = [name for name in NUMBA_OPTIONAL_IMPORTS if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # `import name` fails at once
    try:
        cpu_target.target_context.refresh()
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def use_workqueue_threads() -> None:
    """Decode populations on Numba's own thread pool (the "workqueue" threading layer) instead of
    OpenMP's, for the command line only, unless NUMBA_THREADING_LAYER names one: OpenMP's idle
    workers spin after every parallel region, which on a busy machine takes the core the search's
    own thread needs; on the shared 2-core machine, BRKGA 5K on 2 OpenMP threads took 2.5x as
    long as on 1, and 1.0x on 2 workqueue threads (benchmarks/results/threads.md, issue 36). The
    library leaves the choice to its caller (no global configuration at import or call time)."""
    if "NUMBA_THREADING_LAYER" in os.environ:
        return
    import numba
    from numba.np.ufunc import parallel
    if getattr(parallel, "_is_initialized", False):  # too late: the pool is running
        return
    numba.config.THREADING_LAYER = "workqueue"


def skip_flax_interop() -> None:
    """Import Haiku without its optional Flax interop (haiku.experimental.flax imports all of
    Flax when it is installed, 0.1 to 0.2 s, and regal's networks do not use it), for the command
    line only."""
    if "haiku" not in sys.modules:
        sys.modules.setdefault("haiku.experimental.flax", None)  # Haiku then installs its no-Flax shim


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"
