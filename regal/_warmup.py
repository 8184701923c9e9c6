"""`regal.warmup()`: every Numba kernel a `regal` command can call, compiled or loaded from
Numba's on-disk cache, so that no command compiles inside its `--time-limit` (issue 48: the
first `regal pack`, a report's packed arena and `regal fit` compiled the packer for ~100 s).

A kernel is compiled once per machine (its cache then loads in a fraction of a second): `make`
runs `regal.warmup()` once after installing. A command warms up what it runs before its clock
starts (`regal.commands._common.warm_up`) and, when that compiled something, says so.
`tests/test_startup.py` checks that no kernel of the library is left out.
"""

from __future__ import annotations

import sys

from regal._stop import stops_on_interrupt

__all__ = ["warmup", "warmup_packing", "warmup_report", "kernel_modules", "kernels", "cache_misses"]

#: The modules that hold the library's Numba kernels.
KERNEL_MODULES = tuple(f"regal.kernels.{m}" for m in (
    "alloc", "climb", "climb_picks", "decode", "greedy", "heap", "heft", "minimalloc", "orders", "pack", "peak_memory",
    "timed")) + (
    "regal._takeover", "regal.decode", "regal.loop", "regal.memetic", "regal.runtime", "regal.search")


def kernel_modules() -> tuple[str, ...]:
    """The library's modules that define Numba kernels (`KERNEL_MODULES`, those that exist)."""
    import importlib.util
    return tuple(m for m in KERNEL_MODULES if importlib.util.find_spec(m) is not None)


def kernels(imported_only: bool = False) -> dict[str, object]:
    """Every Numba dispatcher the library defines, by "module.name" (imported_only: of the kernel
    modules already imported, without importing the others)."""
    import importlib
    from numba.core.registry import CPUDispatcher
    out = {}
    for name in kernel_modules():
        if imported_only and name not in sys.modules:
            continue
        mod = importlib.import_module(name)
        for attr, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == name:
                out[f"{name}.{attr}"] = obj
    return out


def cache_misses() -> int:
    """Kernel signatures compiled in this process so far, rather than loaded from the cache
    (Numba's per-dispatcher counts, over the kernel modules imported)."""
    total = 0
    for d in kernels(imported_only=True).values():
        total += sum(getattr(d, "_cache_misses", {}).values())
    return total


def _tiny_graph():
    from regal.graph import Graph
    return Graph.from_records([
        {"id": "w", "bytes": 4, "resident": True},
        {"id": "a", "bytes": 3, "temp_bytes": 1},
        {"id": "b", "bytes": 2, "inputs": ["a", "w"]},
        {"id": "c", "bytes": 2, "inputs": ["b"], "reuse": ["b"]},
        {"id": "e", "bytes": 1, "inputs": ["a", "c"], "control_inputs": []},
    ], name="warmup")


def warmup_packing() -> None:
    """The packer's kernels: the overlap graph, the greedy placements and the exact search."""
    import numpy as np
    from regal import packing
    inst = packing.instance([0, 0, 1, 2, 2, 3], [2, 3, 4, 5, 4, 6], [4, 2, 3, 5, 1, 2])
    packing.pack(inst, time_limit_s=None)  # the greedy placements reach the bound here: no search
    part = packing._part(inst, np.arange(inst.size.shape[0]))
    packing._search(part, part.bound, float("inf"))  # the exact search, called as `pack` calls it


def warmup_report() -> None:
    """What a report computes beside the peak: the allocation (SPEC section 3a), the memory plan
    and its packing, the bound."""
    import numpy as np
    from regal.allocation import allocation
    from regal.memory_plan import plan
    g = _tiny_graph()
    for d in (1, 2):
        placement = np.arange(g.num_nodes, dtype=np.int64) % d
        order = np.arange(g.num_nodes, dtype=np.int64)
        allocation(g, placement, order, d)
        plan(g, placement, order, d, time_limit_s=None)
        g.lower_bound(d)
    g.summary()  # `regal info`: the depth (longest path)
    warmup_packing()


@stops_on_interrupt  # Ctrl-C while loading the kernels: KeyboardInterrupt, never lost inside llvmlite
def warmup(devices: int | None = None, *, seeding: bool = True, polish: bool = True) -> None:
    """Compile (or load from Numba's cache) the kernels, so that the first real search is fast and
    the `seconds` it reports count its search, not the loading. By default every kernel any
    `regal` command can call: the flagship's (memory, runtime and arena objectives), every
    method of the library's registry, the reports' (allocation, memory plan, packer). With
    `devices`, `seeding` or `polish` given, only those a `regal.optimize` with these settings
    runs (`regal.flagship.warmup`)."""
    from regal.flagship import warmup as flagship_warmup
    if devices is not None or not (seeding and polish):
        flagship_warmup(devices, seeding=seeding, polish=polish)
        return
    import regal.methods
    from regal.flagship import optimize
    flagship_warmup()
    warmup_report()
    g = _tiny_graph()
    for d in (1, 2):
        optimize(g, d, budget=60, objective="arena")
        optimize(g, d, budget=60, objective="runtime", memory_limit_bytes=16)
        for name in regal.methods.names():
            spec = regal.methods.get(name)
            if spec.origin != "regal":
                continue
            options = {"memory_limit_bytes": 16} if spec.objective == "runtime" else {}
            regal.methods.solve(name, g, d, budget=60 if spec.takes_budget else None,
                                **({"policy": "none"} if name == "regal-paper" else {}), **options)
