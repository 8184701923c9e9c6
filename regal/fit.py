"""Will it fit? A memory limit answered with a verified plan or a proof.

`fit(graph, memory_limit_bytes, devices)` answers one of three ways:

- **fits** (True): a schedule whose memory plan (`regal.memory_plan`: an offset for every
  buffer, checked) has an arena within the limit on every device;
- **does not fit** (False): a lower bound of SPEC section 7, named, that is above the limit:
  no placement and order on `devices` devices can run in it;
- **undecided** (None): neither within the time limit (the best plan found is still reported).

The search is the flagship on peak memory (stopped as soon as its best peak is within the
limit), then the packer; if the packed arena is over the limit although the peak is not, the
packing-aware search (`regal.arena_search`) tries to close the gap.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from regal.graph import Graph

__all__ = ["FitResult", "fit", "named_bounds", "largest_bound"]


class FitResult(NamedTuple):
    """fits: True, False or None (undecided); arena_bytes: per device, of the best plan found
    ([] when no search ran); bound_bytes: the lower bound of SPEC section 7 on peak memory
    (`Graph.lower_bound`); proof: one line saying why; solution / plan: the best schedule and
    its `regal.memory_plan.MemoryPlan` (None when no search ran)."""
    fits: bool | None
    arena_bytes: list
    bound_bytes: int
    proof: str
    solution: object = None
    plan: object = None


def named_bounds(graph: Graph, devices: int) -> dict[str, int]:
    """Each lower bound of SPEC section 7 on `devices` devices, by name; the largest is
    `graph.lower_bound(devices)`."""
    res_total = int(graph.bytes[graph.resident].sum())
    run = ~graph.resident
    if devices == 1:
        n = graph.num_nodes
        nonres_in = np.zeros(n, dtype=np.int64)
        src = np.repeat(np.arange(n), np.diff(graph.in_ptr))
        np.add.at(nonres_in, src, np.where(graph.resident[graph.in_idx], 0, graph.bytes[graph.in_idx]))
        tail = nonres_in + graph.bytes + graph.temp_bytes - graph.max_taken_bytes()
        return {"per op": res_total + int(tail[run].max(initial=0)),
                "kept at the end": res_total + int(graph.bytes[graph.kept & run].sum())}
    return {"per op": int(graph.node_lower_bound_bytes()[run].max(initial=0)),
            "resident share": -(-res_total // devices),
            "largest resident tensor": int(graph.bytes[graph.resident].max(initial=0)),
            "one-device bound over d": -(-graph.lower_bound(1) // devices)}


def largest_bound(graph: Graph, devices: int) -> tuple[str, int]:
    """(name, bytes) of the largest bound of `named_bounds`."""
    bounds = named_bounds(graph, devices)
    name = max(bounds, key=lambda k: bounds[k])
    return name, bounds[name]


def _over(graph: Graph, devices: int, limit: int) -> FitResult | None:
    name, lb = largest_bound(graph, devices)
    assert lb == graph.lower_bound(devices), "named bounds and Graph.lower_bound disagree"
    if lb <= limit:
        return None
    return FitResult(False, [], lb, f"does not fit: the {name} lower bound (SPEC section 7) is {lb:,} B, "
                                    f"above the limit of {limit:,} B")


def fit(graph: Graph, memory_limit_bytes: int, devices: int = 1, *, time_limit_s: float | None = 120.0,
        budget: int = 5000, seed: int = 0, pack_time_s: float = 5.0) -> FitResult:
    """Whether `graph` runs on `devices` devices of `memory_limit_bytes` each (module docstring).
    time_limit_s bounds the searches (the packing of a plan takes up to pack_time_s more per
    device); budget and seed are the flagship's."""
    from regal.flagship import optimize
    from regal.memory_plan import plan
    limit = int(memory_limit_bytes)
    if limit < 0:
        raise ValueError(f"memory limit must be non-negative, got {memory_limit_bytes!r}")
    t0 = time.perf_counter()
    refused = _over(graph, devices, limit)
    if refused is not None:
        return refused
    lb = graph.lower_bound(devices)
    sol = optimize(graph, devices, budget, seed, time_limit_s=time_limit_s,
                   callback=lambda p: p.best_peak_bytes <= limit)
    best = (sol, plan(graph, sol.placement, sol.order, devices, time_limit_s=pack_time_s))
    if sol.peak_bytes <= limit and best[1].arena_bytes.max() > limit:
        from regal.arena_search import optimize_arena
        left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - t0))
        if left is None or left > 0:
            alt = optimize_arena(graph, devices, budget, seed, time_limit_s=left, start=sol)
            alt_plan = plan(graph, alt.placement, alt.order, devices, time_limit_s=pack_time_s)
            if alt_plan.arena_bytes.max() < best[1].arena_bytes.max():
                best = (alt, alt_plan)
    sol, mp = best
    arenas = [int(x) for x in mp.arena_bytes]
    if max(arenas) <= limit:
        return FitResult(True, arenas, lb, f"fits: a checked plan of {max(arenas):,} B on the fullest device "
                                           f"(peak {sol.peak_bytes:,} B) within the limit of {limit:,} B", sol, mp)
    what = (f"the best schedule found peaks at {sol.peak_bytes:,} B" if sol.peak_bytes > limit else
            f"the best plan found needs {max(arenas):,} B (peak {sol.peak_bytes:,} B)")
    return FitResult(None, arenas, lb, f"undecided: {what}, over the limit of {limit:,} B; the lower bound "
                                       f"(SPEC section 7) is {lb:,} B, within it", sol, mp)
