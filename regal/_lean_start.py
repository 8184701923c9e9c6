"""The command line's lean start (issue 36): private patches of Numba and llvmlite, and a Haiku
stub, that save the `regal` program 0.1 to 0.2 s of every run; one module, one switch.

`REGAL_LEAN_START=0` in the environment turns every one of them off: the program then starts
Numba, loads its cached kernels and imports Haiku the usual way (slower, same answers). Each
patch checks the private names it replaces first (`numba_layout_missing` lists them) and, on a
Numba or llvmlite whose layout it does not know, leaves that part alone: an unknown layout only
costs time, never a failure. `tests/test_startup.py` fails loudly on such a layout, naming what
is missing, so that a version bump is noticed and the patches brought up to date.

Only the `regal` program uses them (`regal.cli`), never the library: `import regal` changes
nothing of Numba's.
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["ENV", "enabled", "lean_start", "start_numba", "import_numba_lean", "load_kernels_lean",
           "skip_flax_interop", "numba_layout_missing", "NUMBA_OPTIONAL_IMPORTS", "NUMBA_IMPORT_SKIPS"]

#: The switch: "0" turns the patches off.
ENV = "REGAL_LEAN_START"


def enabled() -> bool:
    """Whether the patches are on (the default; REGAL_LEAN_START=0 turns them off)."""
    return os.environ.get(ENV, "1").strip() != "0"


def lean_start() -> None:
    """What the `regal` program runs before a command's first kernel module loads:
    `import_numba_lean` and `load_kernels_lean` (nothing with the switch off; only the first on
    a Numba layout the patches do not know)."""
    if enabled():
        import_numba_lean()
        load_kernels_lean()


def _patchable() -> bool:
    """The switch is on and every private name the patches touch is where they expect it (else
    none of them is applied: all or nothing)."""
    global _KNOWN
    if not enabled():
        return False
    if _KNOWN is None:
        _KNOWN = not numba_layout_missing()
    return _KNOWN


_KNOWN: bool | None = None


#: The private names of Numba and llvmlite the patches replace or call: (module, attribute path).
PATCHED_NAMES = (
    ("numba.core.caching", "Cache.load_overload"),
    ("numba.core.caching", "Cache._load_overload"),
    ("numba.core.caching", "Cache._guard_against_spurious_io_errors"),
    ("numba.core.runtime", "rtsys.initialize"),
    ("numba.core.registry", "cpu_target.target_context.refresh"),
    ("numba.core.codegen", "JITCodeLibrary._unserialize"),
    ("numba.core.codegen", "JITCodeLibrary._get_module_for_linking"),
    ("numba.core.codegen", "JITCodeLibrary.get_pointer_to_function"),
    ("numba.core.codegen", "JITCodeLibrary.enable_object_caching"),
    ("numba.core.codegen", "JITCodeLibrary._set_compiled_object"),
    ("numba.core.codegen", "JITCodeLibrary._finalize_final_module"),
    ("numba.core.codegen", "JITCodeLibrary._ensure_finalized"),
    ("numba.core.codegen", "JITCPUCodegen.create_library"),
    ("numba.core.codegen", "JitEngine._load_defined_symbols"),
    ("numba.core.codegen", "JitEngine.get_function_address"),
    ("llvmlite.binding", "parse_bitcode"),
    ("llvmlite.binding.ffi", "lib._lock._cblist"),
    ("llvmlite.binding.ffi", "unregister_lock_callback"),
)


def numba_layout_missing() -> list[str]:
    """The names of `PATCHED_NAMES` this Numba and llvmlite lack ([] on a known layout)."""
    import importlib
    missing = []
    for module, path in PATCHED_NAMES:
        try:
            obj = importlib.import_module(module)
        except ImportError:
            missing.append(f"{module} (not importable)")
            continue
        for part in path.split("."):
            if not hasattr(obj, part):
                missing.append(f"{module}.{path}")
                break
            obj = getattr(obj, part)
    return missing


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
    if "numba" in sys.modules or not enabled():
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
    from regal.threads import use_fast_threads
    use_fast_threads()
    if not _patchable():
        return
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
    if not _patchable():
        return
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
    try:
        from llvmlite.binding import ffi
    except ImportError:
        return
    for acquire, release in list(getattr(getattr(ffi.lib, "_lock", None), "_cblist", ())):
        if getattr(acquire, "__module__", None) == "numba.core.base":
            ffi.unregister_lock_callback(acquire, release)


def skip_flax_interop() -> None:
    """Import Haiku without its optional Flax interop (haiku.experimental.flax imports all of
    Flax when it is installed, 0.1 to 0.2 s, and regal's networks do not use it), for the command
    line only."""
    if "haiku" not in sys.modules and enabled():
        sys.modules.setdefault("haiku.experimental.flax", None)  # Haiku then installs its no-Flax shim
