"""One registry that names every method: the library's searches and every plugged-in baseline.

    import regal.methods
    regal.methods.names()                                   # every method, library's first
    sol = regal.methods.solve("local-search", graph, devices=2, seed=0, budget=5000)
    regal.methods.get("cpsat").description

Each method is `solve(graph, devices, *, seed=0, time_limit_s=None, [budget=...], **options)
-> Solution`, and the Solution carries the method's own name (set where the method is defined,
never patched afterwards). The CLI (`regal solve`, `regal optimize`), the experiments and the
tests reach every solver through this module (evosax's `Strategies` dict).

The library's own methods are listed here; more come from the `regal.methods` entry point group
(each entry a mapping name -> (target "module:function", description, takes_budget,
takes_threads[, objective])). This repository's `baselines/` folder, installed as `regal_baselines`, is such
an entry: the library discovers it and never imports it by name. Targets are imported on first
use, so listing the methods imports nothing heavy.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Callable, NamedTuple

from regal._stop import stops_on_interrupt

__all__ = ["MethodSpec", "get", "names", "solve", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "regal.methods"


class MethodSpec(NamedTuple):
    """A registered method. target: "module:function" of its solve function."""
    name: str
    target: str
    description: str
    takes_budget: bool  # an evaluation budget (the anytime searches)
    takes_threads: bool  # `num_threads` (Numba threads for the population)
    objective: str = "memory"  # "runtime": it takes memory_limit_bytes and device_model (section 4)
    origin: str = "regal"  # the library, or the entry point that plugged it in

    def load(self) -> Callable:
        module, fn = self.target.split(":")
        return getattr(importlib.import_module(module), fn)


# The library's own methods (regal/). The flagship first.
_LIBRARY = {
    "regal": ("regal.flagship:solve_flagship",
              "the flagship: memetic REGAL (heuristic seeds, policy priors, Lamarckian local search)", True, True),
    "regal-paper": ("regal.flagship:solve_regal_paper",
                    "REGAL as in the paper: BRKGA with a trained policy's per-node Beta priors", True, True),
    "brkga": ("regal.search:solve_brkga", "plain BRKGA (uniform mutants), 5,000 evaluations", True, True),
    "teacher": ("regal.search:solve_teacher",
                "BRKGA with the structural teacher's priors (DFS-position scheduling, METIS placement); no learning",
                True, True),
    # the runtime objective's baselines (timed model, SPEC.md section 4); the flagship takes
    # objective="runtime" itself
    "brkga-runtime": ("regal.runtime:solve_brkga_runtime",
                      "runtime: plain BRKGA on the timed chromosome (uniform mutants, no seeds, no polish)", True, True,
                      "runtime"),
    "heft": ("regal.timed_heuristics:solve_heft",
             "runtime: HEFT list scheduling (Topcuoglu et al. 2002), scored by the timed model", False, False,
             "runtime"),
    "heft-mem": ("regal.timed_heuristics:solve_heft_mem",
                 "runtime: memory-aware HEFT (a memory booking capped under the limit), timed model", False, False,
                 "runtime"),
    "critical-path": ("regal.timed_heuristics:solve_critical_path",
                      "runtime: critical-path list scheduling on the METIS placement, timed model", False, False,
                      "runtime"),
    "one-device": ("regal.timed_heuristics:solve_one_device",
                   "runtime: every node on the fastest device (the sequential sum), timed model", False, False,
                   "runtime"),
}


@lru_cache(maxsize=1)
def _registry() -> dict[str, MethodSpec]:
    specs = {name: MethodSpec(name, *entry) for name, entry in _LIBRARY.items()}
    from importlib.metadata import entry_points
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        for name, entry in ep.load().items():
            if name in specs:
                raise RuntimeError(f"method {name!r} of entry point {ep.name!r} is already registered "
                                   f"by {specs[name].origin}")
            specs[name] = MethodSpec(name, *entry, origin=ep.name)
    return specs


def names() -> list[str]:
    """Every registered method name, the library's first."""
    return list(_registry())


def get(name: str) -> MethodSpec:
    specs = _registry()
    if name not in specs:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(specs)}")
    return specs[name]


@stops_on_interrupt
def solve(name: str, graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
          budget: int | None = None, **options):
    """Run method `name` on `graph` with `devices` devices.

    budget: evaluations, for the methods that take one (`get(name).takes_budget`); None keeps the
    method's default. A budget given to a method without one is a ValueError, not ignored.
    """
    from regal._args import check_search_args
    check_search_args(devices=devices, budget=budget, seed=seed, time_limit_s=time_limit_s)
    spec = get(name)
    if budget is not None:
        if not spec.takes_budget:
            raise ValueError(f"method {name!r} takes no evaluation budget (use time_limit_s)")
        options["budget"] = budget
    return spec.load()(graph, devices, seed=seed, time_limit_s=time_limit_s, **options)
