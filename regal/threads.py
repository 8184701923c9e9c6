"""Numba's threading layer for regal's parallel kernels (issue 36): `use_fast_threads`.

The population's decode (`regal.kernels.decode.evaluate_population`) runs on Numba's threads. Which
threading layer runs them matters on a busy machine: measured on the 2-core machine
(benchmarks/results/threads.md), BRKGA 5K on 2 threads against 1 thread: Intel TBB 1.7x idle and
1.0x with the other core busy; Numba's own pool ("workqueue") 1.4x and 0.96x (it wakes its
sleeping workers for every parallel region); OpenMP 1.8x idle but 0.4-0.7x busy (its idle workers
spin, taking the core the search's own thread needs). Numba picks its layer once per process, at
the first parallel call; the `regal` program calls `use_fast_threads` first, the library leaves
the choice to its caller (no global configuration at import or call time).
"""

from __future__ import annotations

import os
import sys

__all__ = ["use_fast_threads", "preload_tbb"]


def use_fast_threads() -> None:
    """Run regal's parallel kernels on Intel TBB's threads where its library loads (the `tbb`
    wheel, a dependency on Linux x86-64), else on Numba's own pool (the "workqueue" layer),
    never on OpenMP's, unless NUMBA_THREADING_LAYER names a layer (or
    NUMBA_THREADING_LAYER_PRIORITY orders them: that order is kept). The `regal` program calls it
    at its start; an application calls it (`regal.use_fast_threads()`) before its first search,
    or sets NUMBA_THREADING_LAYER itself. Too late once Numba's threads run: then it does
    nothing. Answers do not depend on the layer or the thread count."""
    if "NUMBA_THREADING_LAYER" in os.environ:
        return
    import numba
    from numba.np.ufunc import parallel
    if getattr(parallel, "_is_initialized", False):  # too late: the pool is running
        return
    preload_tbb()
    # Numba tries the layers in this order and takes the first that loads (TBB: when its version
    # suits this Numba); OpenMP last, which workqueue always precedes
    numba.config.THREADING_LAYER = "default"
    if "NUMBA_THREADING_LAYER_PRIORITY" not in os.environ:
        numba.config.THREADING_LAYER_PRIORITY = ["tbb", "workqueue", "omp"]


def preload_tbb() -> bool:
    """Load TBB's shared library where pip put it (the environment's lib/ folder, which the
    dynamic loader does not search), so that Numba's TBB layer finds it; True when it is loaded.
    Harmless when TBB is missing or already loadable (LD_LIBRARY_PATH, a system install)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import site
    for folder in (None, os.path.join(sys.prefix, "lib"), os.path.join(site.USER_BASE or "", "lib")):
        path = "libtbb.so.12" if folder is None else os.path.join(folder, "libtbb.so.12")
        if folder is not None and not os.path.exists(path):
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return True
        except OSError:
            continue
    return False
