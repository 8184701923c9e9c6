"""What every `regal` command shares: reading a graph (any format, `--dim`), starting Numba
for a command line, printing bytes; the one-line errors, the shared options (--time-limit,
--dim, the runtime options) and the stop set-up a command polls (`command_deadline`, exit
status 3). `regal.cli` and the commands in their own modules (`regal.commands.*`,
`regal.cli_pack`, `regal.commands.torch`) import it; it imports none of them."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import sys
from typing import TYPE_CHECKING

import click

from regal.threads import use_fast_threads  # the command line's threading layer

if TYPE_CHECKING:
    from regal.graph import Graph

__all__ = ["DIM_OPTION", "EXIT_INTERRUPTED", "GRAPH_HELP", "NUMBA_IMPORT_SKIPS", "NUMBA_OPTIONAL_IMPORTS",
           "RUNTIME_OPTIONS", "TIME_LIMIT", "command_deadline", "dim_option_advice", "human_bytes", "import_numba_lean",
           "load_graph", "load_kernels_lean", "parse_dims", "skip_flax_interop", "start_numba", "use_jax_cache",
           "use_fast_threads"]


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
    from regal.graph import GraphError
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


@contextlib.contextmanager
def _without(names):
    """`import name` fails at once for each of `names` not yet imported, inside the block only."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


#: Modules `import numba` imports that regal does not use: SciPy (for a version check only) and
#: PyYAML (to read a .numba_config.yaml, which is then left importable when one is there).
NUMBA_IMPORT_SKIPS = ("scipy", "yaml")


def import_numba_lean() -> None:
    """`import numba` without `NUMBA_IMPORT_SKIPS` (30 ms, a fifth of Numba's import), for the
    command line only: `regal.cli` runs it before its first import of a kernel module. Numba
    then skips its SciPy version check; both modules stay importable afterwards."""
    if "numba" in sys.modules:
        return
    skips = [name for name in NUMBA_IMPORT_SKIPS if not (name == "yaml" and os.path.exists(".numba_config.yaml"))]
    with _without(skips):
        try:
            import numba  # noqa: F401
        except ImportError:  # reported where a kernel module imports it
            pass


def start_numba() -> None:
    """Start Numba's CPU target (what loading the first cached kernel does) without importing
    `NUMBA_OPTIONAL_IMPORTS`, for the command line only: 0.1 to 0.2 s of every command. With
    those imports failing, Numba falls back to its own loops for np.dot and np.convolve and does
    not type cffi functions, in this process; the modules themselves stay importable. Once
    `load_kernels_lean` ran (the `regal` program), nothing is started here: each kernel's load
    from the cache starts what it needs.
    """
    use_fast_threads()
    try:
        from numba.core import caching
        from numba.core.registry import cpu_target
    except ImportError:  # another Numba layout: it starts the usual way on the first kernel
        return
    if getattr(caching.Cache.load_overload, "lean", False):
        return
    with _without(NUMBA_OPTIONAL_IMPORTS):
        cpu_target.target_context.refresh()


def load_kernels_lean() -> None:
    """Load cached kernels without first starting Numba's compiler, for the `regal` program only
    (issue 36): Numba's `Cache.load_overload` refreshes the CPU target before every load (it
    imports and registers the typing and lowering of all of Numba's own functions, about 0.1 s
    once per process), which machine code read from the cache does not use; a load here only
    initializes Numba's runtime (NRT, which the kernels' arrays need), and the modules the cached
    code names are imported as it is unpickled (`NUMBA_OPTIONAL_IMPORTS` failing, as in
    `start_numba`). A kernel missing from the cache compiles as before: Numba's compiler
    refreshes the target itself. Nothing changes for another Numba version's layout. Also
    `_drop_lock_events`."""
    try:
        from numba.core import caching
        from numba.core.runtime import rtsys
    except ImportError:
        return
    _drop_lock_events()
    cache = caching.Cache
    if getattr(cache.load_overload, "lean", False) or not all(
            hasattr(cache, name) for name in ("_load_overload", "_guard_against_spurious_io_errors")):
        return

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)
        with _without(NUMBA_OPTIONAL_IMPORTS), self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
        return None  # the guard swallowed an error (Windows): compiled instead, as Numba does

    load_overload.lean = True
    cache.load_overload = load_overload
    _defer_linking_modules()


def _defer_linking_modules() -> None:
    """Leave each cached kernel's linking module unparsed until something links against it
    (issue 36): Numba's cache stores a kernel as machine code plus the LLVM bitcode of its
    functions for inlining into later compilations, and parses that bitcode on every load (40 to
    50 ms of the `regal` program's 13 loads, with the walk that lists its symbols), although a
    command that only runs cached kernels never links. Here a loaded library keeps the bytes;
    its entry points are looked up in the machine code itself, and a compilation that links the
    library (a kernel missing from the cache calling a cached one) parses them first, as Numba
    would have. Nothing changes for another Numba version's layout."""
    try:
        from llvmlite import binding as ll
        from numba.core import codegen
    except ImportError:
        return
    lib = getattr(codegen, "JITCodeLibrary", None)
    needed = ("_unserialize", "_get_module_for_linking", "get_pointer_to_function", "enable_object_caching",
              "_set_compiled_object", "_finalize_final_module", "_ensure_finalized")
    if lib is None or getattr(lib.get_pointer_to_function, "lean", False) or not all(
            hasattr(lib, name) for name in needed):
        return
    unserialize = lib._unserialize.__func__
    linking_module = lib._get_module_for_linking
    pointer_to_function = lib.get_pointer_to_function

    def _unserialize(cls, codegen_, state):
        name, kind, data = state
        if kind != "object":
            return unserialize(cls, codegen_, state)
        object_code, shared_bitcode = data
        self = codegen_.create_library(name)
        self.enable_object_caching()
        self._set_compiled_object(object_code)
        self._regal_linking_bitcode = shared_bitcode
        self._finalize_final_module()
        return self

    def _get_module_for_linking(self):
        bitcode = self.__dict__.pop("_regal_linking_bitcode", None)
        if bitcode is not None:  # what Numba's own load does
            self._shared_module = ll.parse_bitcode(bitcode)
            self._codegen._engine._load_defined_symbols(self._shared_module)
        return linking_module(self)

    def get_pointer_to_function(self, name):
        if "_regal_linking_bitcode" not in self.__dict__:
            return pointer_to_function(self, name)
        self._ensure_finalized()
        return self._codegen._engine.get_function_address(name)  # 0 when not defined, as Numba's

    get_pointer_to_function.lean = True
    lib._unserialize = classmethod(_unserialize)
    lib._get_module_for_linking = _get_module_for_linking
    lib.get_pointer_to_function = get_pointer_to_function


def _drop_lock_events() -> None:
    """Remove Numba's callbacks on llvmlite's lock, which turn each of the ~5,000 LLVM calls of
    the kernels' loads into two Numba events (10 to 20 ms): they feed only the "llvm_lock" timer
    of a compilation's metadata, which a compilation in this process then lacks."""
    from llvmlite.binding import ffi
    for acquire, release in list(getattr(getattr(ffi.lib, "_lock", None), "_cblist", ())):
        if getattr(acquire, "__module__", None) == "numba.core.base":
            ffi.unregister_lock_callback(acquire, release)


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


def _friendly_errors(fn):
    """Turn the library's validation errors into click's one-line errors."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from regal.graph import GraphError
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

#: (Deadline, start) of the stoppable command this process runs, set by `regal.cli._Main.main`.
_COMMAND_DEADLINE: list = []


def command_deadline(time_limit_s: float | None = None):
    """The `Deadline` a stoppable command polls, with `time_limit_s` counted from the program's
    start (`regal.cli._PROGRAM_START`; from `main`'s call when it is called with arguments): the
    one `_Main.main` installed the signal handlers for (a signal since then has already expired
    it), or a fresh one when the command runs without `main`."""
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


