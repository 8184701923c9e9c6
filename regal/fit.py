"""Will it fit? A memory limit answered with a verified plan or a proof.

`fit(graph, memory_limit_bytes, devices)` answers one of three ways:

- **fits** (True): a schedule whose memory plan (`regal.memory_plan`: an offset for every
  buffer, checked) has an arena within the limit on every device;
- **does not fit** (False): a lower bound of SPEC section 7, named, that is above the limit:
  no placement and order on `devices` devices can run in it;
- **undecided** (None): neither within the time limit (the best plan found is still reported).

The search is the flagship on peak memory (stopped as soon as its best peak is within the
limit), then the packer; if the packed arena is over the limit although the peak is not, the
packing-aware search (`regal.arena_search`) tries to close the gap. It goes on in rounds, a new
seed each, until one of the three answers is certain or the time limit ends: "will it fit"
uses the time it is given.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from regal._stop import stops_on_interrupt
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


def size_text(n: int) -> str:
    """"97.67 MiB (102,410,412 B)": bytes as the reports print them, both ways."""
    x, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            break
        x /= 1024
    return f"{int(n):,} B" if unit == "B" else f"{x:.2f} {unit} ({int(n):,} B)"


def _over(graph: Graph, devices: int, limit: int) -> FitResult | None:
    name, lb = largest_bound(graph, devices)
    assert lb == graph.lower_bound(devices), "named bounds and Graph.lower_bound disagree"
    if lb <= limit:
        return None
    return FitResult(False, [], lb, f"does not fit: the {name} lower bound (SPEC section 7) is {size_text(lb)}, "
                                    f"above the limit of {size_text(limit)}")


@stops_on_interrupt
def fit(graph: Graph, memory_limit_bytes: int, devices: int = 1, *, time_limit_s: float | None = 120.0,
        budget: int = 5000, seed: int = 0, pack_time_s: float = 5.0, deadline=None, progress=None) -> FitResult:
    """Whether `graph` runs on `devices` devices of `memory_limit_bytes` each (module docstring).

    The search goes on in rounds until a plan fits, a bound proves that none does, or the time
    is up: each round runs the flagship (`budget` evaluations, seed `seed + round` modulo 2**31,
    stopped once its peak is within the limit), packs its schedule (up to pack_time_s per device) and, when
    the peak fits but the arena does not, climbs on the packed arena (`regal.arena_search`).
    time_limit_s: seconds for all of it (None: one round); deadline: a `regal._stop.Deadline`
    (a signal's stop request, a command's time limit) that every step polls: once it has
    expired the best plan so far is returned, undecided unless it fits. progress: called after
    each round with (round, its schedule, its checked plan or None), e.g. to show it."""
    from regal._args import MAX_MEMORY_BYTES, MAX_SEED, check_int, check_search_args, check_seconds
    from regal._stop import as_deadline
    check_search_args(devices=devices, budget=budget, seed=seed, time_limit_s=time_limit_s)
    check_seconds(pack_time_s, "pack_time_s", none=False)
    if isinstance(memory_limit_bytes, float) and memory_limit_bytes.is_integer():
        memory_limit_bytes = int(memory_limit_bytes)
    limit = check_int(memory_limit_bytes, "memory_limit_bytes", 0, MAX_MEMORY_BYTES, "bytes")
    refused = _over(graph, devices, limit)
    if refused is not None:
        return refused
    lb = graph.lower_bound(devices)
    one_round = time_limit_s is None and (deadline is None or deadline.at is None)
    if deadline is None:
        deadline = as_deadline(None, time_limit_s)
    elif time_limit_s is not None:
        deadline = deadline.limit(time_limit_s)
    best = None  # (solution, plan) with the smallest largest arena, among schedules within the limit
    closest = None  # the schedule of lowest peak, while none is within the limit
    for r in itertools.count():
        sol, mp = _round(graph, devices, limit, budget, (seed + r) % (MAX_SEED + 1), pack_time_s, deadline)
        if progress is not None:
            progress(r, sol, mp)
        if closest is None or sol.peak_bytes < closest.peak_bytes:
            closest = sol
        if mp is not None and (best is None or mp.arena_bytes.max() < best[1].arena_bytes.max()):
            best = (sol, mp)
        if (best is not None and best[1].arena_bytes.max() <= limit) or one_round or deadline.expired():
            break
    if best is None:
        return FitResult(None, [], lb, f"undecided: the best schedule found peaks at {size_text(closest.peak_bytes)}, "
                                       f"over the limit of {size_text(limit)}; the lower bound (SPEC section 7) is "
                                       f"{size_text(lb)}, within it", closest, None)
    sol, mp = best
    arenas = [int(x) for x in mp.arena_bytes]
    if max(arenas) <= limit:
        return FitResult(True, arenas, lb, f"fits: a checked plan of {size_text(max(arenas))} on the fullest device "
                                           f"(peak {size_text(sol.peak_bytes)}) within the limit of {size_text(limit)}",
                         sol, mp)
    return FitResult(None, arenas, lb, f"undecided: the best plan found needs {size_text(max(arenas))} (peak "
                                       f"{size_text(sol.peak_bytes)}), over the limit of {size_text(limit)}; the lower "
                                       f"bound (SPEC section 7) is {size_text(lb)}, within it", sol, mp)


def _round(graph: Graph, devices: int, limit: int, budget: int, seed: int, pack_time_s: float, deadline):
    """One round of `fit`: (the flagship's schedule, its checked plan or None when its peak is
    over the limit); when the peak fits and the arena does not, the packing-aware climb's, if its
    arena is smaller."""
    from regal.flagship import optimize
    from regal.memory_plan import plan
    sol = optimize(graph, devices, budget, seed, deadline=deadline, callback=lambda p: p.best_peak_bytes <= limit)
    if sol.peak_bytes > limit:
        return sol, None
    mp = plan(graph, sol.placement, sol.order, devices, time_limit_s=pack_time_s, deadline=deadline)
    if mp.arena_bytes.max() <= limit or deadline.expired():
        return sol, mp
    from regal.arena_search import optimize_arena
    alt = optimize_arena(graph, devices, budget, seed, start=sol, deadline=deadline)
    alt_plan = plan(graph, alt.placement, alt.order, devices, time_limit_s=pack_time_s, deadline=deadline)
    return (alt, alt_plan) if alt_plan.arena_bytes.max() < mp.arena_bytes.max() else (sol, mp)
