"""The runtime objective with recomputation at d > 1 (issue 53): the shortest step under a
memory limit per device, the search free to run values again (SPEC.md sections 3b and 4).

`regal.optimize(graph, d, objective="runtime", memory_limit_bytes=M, recompute_budget=B)` with
d > 1 runs `optimize_recompute_runtime`. The step time is the timed model's makespan on the
solution's instance graph (section 3b: the instances run with the sequence as their dispatch
priorities), with transfers and devices that run side by side, so the extra compute is not the
time; a schedule fits when every device's peak over time (section 4) is at most its limit. Every
candidate is scored that way (`timed_score`; `regal.timed.instance_schedule` builds the instance
graph), which is what `Solution.info["timed"]` holds and `regal evaluate` re-simulates.

Section 4 runs a recomputation in its place on its device: it is ready only once every entry
before it in the sequence on its device has started (`regal.timed.instance_schedule`). Before that
rule a recomputation was ready as soon as its inputs existed, a device that waited ran it early,
and recomputation made no limit fit (experiments/results/recompute-runtime, before and after).
The peak over time still sits above the sequential peak (copies occupy their device from the
transfer's start, devices run ahead of each other), so candidates are scored by the timed model.
Stages that share the evaluations:

1. **The runtime search without recomputation** under the limits (`regal.runtime.optimize_runtime`,
   `LIMITED_SHARE` of the budget). When it fits, the rest of the budget goes to it (stage 5):
   recomputation only adds compute to a schedule that fits.
2. **Everything on one device** (the fastest): d = 1's recompute search under that device's limit
   (`regal.recompute_search.optimize_recompute`, `ONE_DEVICE_SHARE` of what is left). One device
   never waits, so the sequential peak is the timed one: it fits where d = 1 can.
3. **The recompute search on the memory objective** at d devices (`MEMORY_SHARE` of what is left):
   the lowest sequential peak; then the timed recompute climb (`fit_by_recompute`) from its
   recomputations.
4. **The timed recompute climb** from stage 1's schedule.
5. **The runtime search again** with what is left, from stage 1's best (`initial`).

The answer: the shortest makespan among the candidates that fit, else the least bytes over the
limits (then the shortest makespan); info["candidates"] lists each stage's [source, makespan,
bytes over the limits, evaluations]. At d = 1 `regal.recompute_search` solves this problem
directly (the step time is the sequence's cost).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from regal._stop import Deadline, as_deadline, expired
from regal.graph import Graph
from regal.recompute import op_costs
from regal.recompute_search import recompute_sequence
from regal.solution import Solution, make_solution
from regal.timed import (check_device_model, excess_bytes, instance_schedule, memory_limits, resimulate, run_timed,
                         timed_info)

__all__ = ["optimize_recompute_runtime", "fit_by_recompute", "timed_score", "TimedScore", "LIMITED_SHARE",
           "ONE_DEVICE_SHARE", "MEMORY_SHARE", "STAGES", "CANDIDATES", "DROP_TRIES"]

#: The runtime search under the limits: its share of the evaluations (0.5 measured short of the
#: plain runtime search's fit on a graph where 3,500 of 5,000 fit: experiments/results/recompute-runtime).
LIMITED_SHARE = 0.8
#: The one-device recompute search's share of what the runtime search leaves.
ONE_DEVICE_SHARE = 0.5
#: The memory-objective recompute search's share of what is left after the one-device stage.
MEMORY_SHARE = 0.5
#: The stages `optimize_recompute_runtime` runs (module docstring).
STAGES = ("one-device", "memory", "timed-climb", "continue")
#: The timed recompute climb: the values held at the peak it tries per round (each alone and with its inputs).
CANDIDATES = 16
#: The timed recompute climb, once the schedule fits: the recomputations it tries to drop per round.
DROP_TRIES = 8


class TimedScore(NamedTuple):
    """A candidate: its schedule and the timed model's figures on its instance graph."""
    placement: np.ndarray   # int32[n]
    sequence: np.ndarray    # int32[m >= n]: the order, recomputations included
    makespan: float
    device_peak: np.ndarray  # int64[d], over time
    excess: int             # bytes over the limits, summed over devices
    source: str
    solution: Solution | None = None   # a runtime search's own schedule (its transfer order kept)

    def key(self) -> tuple:
        """Lower is better: fits first, then the makespan; over the limits, the excess first."""
        return (self.excess > 0, self.excess, self.makespan)


def _simulate(graph: Graph, placement, sequence, devices: int, model, trace: bool = False):
    """(instance graph, instance placement, TimedSimulation): the timed model of a sequence with
    recomputations, the sequence its dispatch order (`regal.timed.resimulate` without a transfer
    order: the priorities of `simulate_timed` for order = arange(m))."""
    if np.shape(sequence)[0] == graph.num_nodes:
        inst, place, order = graph, np.asarray(placement, dtype=np.int32), np.asarray(sequence, dtype=np.int64)
    else:   # built by recompute_sequence: valid
        inst, nodes, place = instance_schedule(graph, placement, sequence, checked=True)
        order = np.arange(nodes.shape[0])
    m = inst.num_nodes
    prio = np.empty(m, dtype=np.float64)
    prio[order] = m - np.arange(m, dtype=np.float64)
    sim = run_timed(inst, place, prio, np.repeat(prio[:, None], devices, axis=1), devices, model, trace)
    return inst, place, sim


def timed_score(graph: Graph, placement, sequence, devices: int, model, limits: np.ndarray,
                source: str = "") -> TimedScore:
    """The timed model (SPEC.md section 4) of a placement and a sequence with recomputations
    (section 3b: the instance graph, the sequence as its dispatch order)."""
    _, _, sim = _simulate(graph, placement, sequence, devices, model)
    return TimedScore(np.asarray(placement, dtype=np.int32), np.asarray(sequence, dtype=np.int32),
                      float(sim.makespan_s), sim.device_peak_bytes.copy(),
                      excess_bytes(sim.device_peak_bytes, limits), source)


def _live_at_peak(graph: Graph, inst: Graph, place, nodes, sim, limits) -> np.ndarray:
    """The nodes that may run again whose instances are held on the device most over its limit
    at its peak instant (the home copy, or a copy there, made before it and read after it),
    the largest first (int64[*])."""
    over = np.where(limits >= 0, sim.device_peak_bytes - limits, np.iinfo(np.int64).min)
    q = int(np.argmax(over))
    rows = np.flatnonzero(sim.trace_bytes[:, q] == sim.device_peak_bytes[q])
    t = float(sim.trace_s[rows[0]])
    src = np.repeat(np.arange(inst.num_nodes), np.diff(inst.out_ptr))   # each data edge: producer -> consumer
    dst = inst.out_idx
    read_after = (sim.finish_s[dst] > t) & (place[dst] == q)
    made = np.where(place[src] == q, sim.start_s[src], np.inf)
    if sim.transfer_node.size:
        arrive = np.full((inst.num_nodes, sim.device_peak_bytes.shape[0]), np.inf)
        arrive[sim.transfer_node, sim.transfer_device] = sim.transfer_start_s
        made = np.where(place[src] == q, made, arrive[src, q])
    v = np.unique(nodes[np.unique(src[read_after & (made <= t)])])
    v = v[~(graph.kept[v] | graph.no_recompute[v])]
    return v[np.argsort(-graph.bytes[v], kind="stable")]


def _extra(graph: Graph, sequence: np.ndarray, cost: np.ndarray) -> float:
    """The cost of a sequence's recomputations."""
    return float((np.maximum(np.bincount(sequence, minlength=graph.num_nodes) - 1, 0) * cost).sum())


def fit_by_recompute(graph: Graph, placement, order, devices: int, model, limits: np.ndarray, allowed: float,
                     evaluations: int, chosen=None, deadline=None, source: str = "") -> tuple[TimedScore, int]:
    """The timed recompute climb: make a schedule (placement, order: int32[n] each) fit the limits
    by recomputation within `allowed` extra cost, every move scored by the timed model on the
    instance graph (what the sequential peak does not see: copies held from their transfer's
    start, devices running ahead of each other). Each round scores, while over the limit, for the CANDIDATES
    largest values held across the peak instant of the device most over its limit
    (`_live_at_peak`), recomputing the node alone and with its inputs that may run again
    (SPEC.md section 5b places them), and, always, dropping each of the DROP_TRIES costliest
    recomputations; it takes the best by (bytes over the limits, makespan) when it beats the
    schedule, else stops. chosen: the recomputations to start from (bool[n]; None: none).
    Returns (the TimedScore it ends at, evaluations: one per timed score)."""
    n = graph.num_nodes
    cost, _ = op_costs(graph)
    placement = np.ascontiguousarray(placement, dtype=np.int32)
    order = np.ascontiguousarray(order, dtype=np.int32)
    may = ~(graph.kept | graph.no_recompute)
    chosen = np.zeros(n, dtype=np.bool_) if chosen is None else np.array(chosen, dtype=np.bool_) & may

    def score(ch, trace=False):
        seq = recompute_sequence(graph, order, ch)
        inst, place, sim = _simulate(graph, placement, seq, devices, model, trace)
        sc = TimedScore(placement, seq, float(sim.makespan_s), sim.device_peak_bytes.copy(),
                        excess_bytes(sim.device_peak_bytes, limits), source)
        return sc, (inst, place, seq, sim)

    cur, state = score(chosen, trace=True)
    spent = 1
    while spent < evaluations and not expired(deadline):
        moves = []
        if cur.excess > 0:   # add: a value held at the peak, alone or with its inputs
            inst, place, seq, sim = state
            for v in [int(x) for x in _live_at_peak(graph, inst, place, seq, sim, limits)
                      if not chosen[x]][:CANDIDATES]:
                ins = graph.inputs(v)
                ins = np.unique(ins[may[ins] & ~chosen[ins]])
                moves.append(([v], True))
                if ins.size:
                    moves.append(([v] + ins.tolist(), True))
        drops = np.flatnonzero(chosen)   # drop: the costliest recomputations first
        moves += [([int(v)], False) for v in drops[np.argsort(-cost[drops], kind="stable")][:DROP_TRIES]]
        extra = _extra(graph, cur.sequence, cost)
        best, best_chosen = cur, None
        for members, on in moves:
            if spent >= evaluations:
                break
            if on and extra + float(cost[members].sum()) > allowed:
                continue
            ch = chosen.copy()
            ch[members] = on
            sc, _ = score(ch)
            spent += 1
            if sc.key() < best.key():
                best, best_chosen = sc, ch
        if best_chosen is None:
            break
        chosen = best_chosen
        cur, state = score(chosen, trace=True)
        spent += 1
    return cur, spent


def optimize_recompute_runtime(graph: Graph, devices: int, budget: int, seed: int, recompute_budget: float, *,
                               memory_limit_bytes, device_model=None, time_limit_s: float | None = None,
                               deadline: Deadline | None = None, method: str | None = None,
                               stages: tuple = STAGES, **common) -> Solution:
    """The shortest makespan under `memory_limit_bytes` (an int, or one per device) with at most
    `recompute_budget` times one run's cost spent on recomputations, at d > 1 (module
    docstring). The other arguments are `regal.optimize`'s. info["timed"]: the timed model of the
    instance graph; info["candidates"]: each stage's best [source, makespan, bytes over the limits,
    evaluations]."""
    from regal.recompute_search import optimize_recompute
    from regal.runtime import optimize_runtime
    t0 = time.perf_counter()
    budget = int(budget)
    model = check_device_model(device_model, devices)
    limits = memory_limits(memory_limit_bytes, devices)
    deadline = None if time_limit_s is None and deadline is None else as_deadline(deadline, time_limit_s, t0)
    cost, cost_model = op_costs(graph)
    allowed = recompute_budget * float(cost.sum())
    runtime_kw = {k: common[k] for k in ("seeding", "polish", "config", "callback", "num_threads", "policy",
                                         "priors") if k in common}
    spent = 0
    cands: list[TimedScore] = []
    used: list[int] = []

    def add(score: TimedScore, evaluations: int) -> TimedScore:
        nonlocal spent
        spent += int(evaluations)
        cands.append(score)
        used.append(int(evaluations))
        return score

    def left() -> int:
        return 0 if expired(deadline) else budget - spent

    limited = optimize_runtime(graph, devices, max(1, int(round(budget * LIMITED_SHARE))), seed,
                               memory_limit_bytes=memory_limit_bytes, device_model=model, deadline=deadline,
                               initial=common.get("initial"), **runtime_kw)
    first = add(_own_score(graph, limited, model, limits, "runtime"), limited.evaluations)
    stopped = limited.info.get("stopped", "budget")
    if first.excess > 0 and "one-device" in stages and left() > 0:
        k = int(np.argmax(model.speeds(devices)))   # everything on the fastest device: d = 1's problem
        one = optimize_recompute(graph, 1, max(1, int(round(left() * ONE_DEVICE_SHARE))), seed, recompute_budget,
                                 memory_limit_bytes=int(limits[k]) if limits[k] >= 0 else None,
                                 config=common.get("config"), deadline=deadline,
                                 num_threads=common.get("num_threads"), seeding=common.get("seeding", True),
                                 polish=common.get("polish", True))
        add(timed_score(graph, np.full(graph.num_nodes, k, dtype=np.int32), one.order, devices, model, limits,
                        "one-device"), one.evaluations)
    if first.excess > 0 and "memory" in stages and left() > 0:   # the lowest sequential peak at d devices
        mem = optimize_recompute(graph, devices, max(1, int(round(left() * MEMORY_SHARE))), seed, recompute_budget,
                                 config=common.get("config"), deadline=deadline,
                                 num_threads=common.get("num_threads"), seeding=common.get("seeding", True),
                                 polish=common.get("polish", True))
        spent += mem.evaluations
        nodes = mem.order.astype(np.int64)
        sigma = nodes[np.sort(np.unique(nodes, return_index=True)[1])].astype(np.int32)   # each node's first entry
        chosen = np.bincount(nodes, minlength=graph.num_nodes) > 1
        found, climbed = fit_by_recompute(graph, mem.placement, sigma, devices, model, limits, allowed, left() // 2,
                                          chosen=chosen, deadline=deadline, source="memory+timed-climb")
        spent -= mem.evaluations   # counted again with the climb's, in its candidate's row
        add(found, mem.evaluations + climbed)
    if first.excess > 0 and "timed-climb" in stages and left() > 0:
        add(*fit_by_recompute(graph, limited.placement, limited.order, devices, model, limits, allowed, left(),
                              deadline=deadline, source="runtime+timed-climb"))
    if "continue" in stages and left() > 0:   # the rest to the runtime search, from its best
        from regal.timed import encode_timed
        sim = resimulate(graph, limited, model)
        more = optimize_runtime(graph, devices, left(), seed + 1, memory_limit_bytes=memory_limit_bytes,
                                device_model=model, deadline=deadline,
                                initial=[encode_timed(limited.placement, sim.order, devices,
                                                      (sim.transfer_node, sim.transfer_device))], **runtime_kw)
        add(_own_score(graph, more, model, limits, "runtime"), more.evaluations)
        stopped = more.info.get("stopped", stopped)
    best = min(cands, key=TimedScore.key)
    if expired(deadline):
        stopped = getattr(deadline, "reason", None) or "time_limit"
    info = {"objective": "runtime", "seed": seed, "budget": budget, "stopped": stopped,
            "recompute_budget": recompute_budget, "source": best.source,
            "candidates": [[c.source, c.makespan, int(c.excess), u] for c, u in zip(cands, used)]}
    if best.solution is not None:   # a runtime search's schedule as it is, with its transfer order
        info["timed"] = best.solution.info["timed"]
    sol = make_solution(graph, best.placement, best.sequence, devices, method=method or "regal",
                        evaluations=min(spent, budget), seconds=time.perf_counter() - t0, info=info)
    if not sol.recomputes:
        sol.info["recompute"] = {"count": 0, "extra_cost": 0.0, "extra_fraction": 0.0, "cost_model": cost_model}
    sol.info["timed"] = _timed_block(graph, sol, model, memory_limit_bytes)
    return sol


def _own_score(graph: Graph, sol: Solution, model, limits: np.ndarray, source: str) -> TimedScore:
    """A runtime search's solution scored with its own transfer order (`regal.timed.resimulate`)."""
    sim = resimulate(graph, sol, model)
    return TimedScore(sol.placement, sol.order, float(sim.makespan_s), sim.device_peak_bytes.copy(),
                      excess_bytes(sim.device_peak_bytes, limits), source, sol)


def _timed_block(graph: Graph, sol: Solution, model, memory_limit_bytes) -> dict:
    """info["timed"]: section 4 on the solution's instance graph (its own graph without repeats),
    with the transfer order info["timed"] names, if any (a runtime search's schedule as it is)."""
    from regal.solution import instance_solution
    inst, isol = instance_solution(graph, sol)
    sim = resimulate(graph, sol, model)
    return timed_info(inst, sim, sol.num_devices, model, memory_limit_bytes)
