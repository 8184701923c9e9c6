"""Exact minimum-peak order on one device: dynamic programming over executed sets (Serenity).

Ahn et al., "Ordering Chaos: Memory-Aware Scheduling of Irregularly Wired Neural Networks for
Edge Devices", MLSys 2020. A state is the set S of executed non-resident nodes, a downset of the
DAG (data and control edges), kept as a Python int bitmask. The bytes held after S has run are
determined by S alone (SPEC.md section 3, d = 1):

    live(S) = resident bytes + sum of bytes(u), u in S, with a consumer outside S, no consumer,
              or marked `output` (a graph output is never freed)

and running v next peaks at live(S) + bytes(v) + temp(v) (its inputs are freed only after it
runs, its temp only while it runs), so the best peak of any order of S is

    best(S) = min over v in S with no successor in S of max(best(S - v), live(S - v) + bytes(v) + temp(v))

with best({}) = resident bytes. The DP runs forward, level by level (|S| = 0, 1, ..., m), keeps
the argmin to rebuild the order, and places the resident nodes first.

Graph outputs (field `output`, SPEC.md section 3) are never freed, like nodes without
consumers: they are left out of every node's freed inputs and of its `reuse` candidates.

In-place reuse (a graph's `reuse` field, SPEC.md section 3) keeps this exact: which inputs v takes
over depends only on S + v (an input is taken over when all its consumers are in S + v), and after
the step the bytes are the same as without it, so live(S) is unchanged and the step's peak is
live(S - v) + bytes(v) - taken(v, S) + temp(v).

Complexity: the number of states is the number of downsets of the non-resident DAG, at most
prod over a chain cover (|chain| + 1), i.e. about (m / w + 1)^w for width w: polynomial in m for
fixed width, exponential in w. Each state costs O(ready nodes x their inputs) big-int operations.
A level with more than `max_states` states (or 10 x that in all: every level's argmin is kept
for the rebuild, ~100 bytes a state) is refused with a ValueError naming the graph.

Three reductions are on by default, each exact (an exchange argument; tested against brute
force and against the plain DP). Free steps: when a ready node frees at least its own bytes
without raising the peak so far, some optimal completion runs it next, so only that successor
is kept (`_free_step`; the argument needs a later step to take over at least as much when more
has run before it, which holds unless a node's `reuse` list mixes sizes that do not all fit at
once, so such graphs skip this reduction: `_monotone_reuse`). Lazy nodes: a node with no temp whose predecessors are all resident
(broadcasts of weights, constants) is best run just before its first successor, so it joins
that successor's step instead of widening the ready set (`_dp`). Serenity's pruning: an upper
bound U from a heuristic (plain BRKGA, or a given `hint`) drops every state whose partial
peak, or the peak of its cheapest next step, is >= U; when nothing survives, the heuristic's
solution is optimal and is returned.

In practice (2 cores, default max_states, 15-60 s limits), on the 99 XLA graphs of up to 300
nodes or in inference mode: solves 40, e.g. every chain-like inference graph after XLA's
passes (CNNs, ViT, transformers, mixer; up to densenet121 fwd, 1,044 nodes, in 0.1 s, at most
~50k states); refuses every training graph (20-40 independent update ops at once) and every
pre-optimization graph (dozens of tiny parameter-preparation ops), plus the recurrent and
WaveNet ones. Random DAGs of tests/randgraph.py: up to ~40 nodes (width ~20) in seconds.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from regal.graph import Graph
from regal.solution import Solution, make_solution

__all__ = ["solve", "DEFAULT_MAX_STATES"]

DEFAULT_MAX_STATES = 2_000_000
DEFAULT_HINT_BUDGET = 500


def solve(graph: Graph, devices: int = 1, *, time_limit_s: float | None = None, seed: int = 0,
          max_states: int = DEFAULT_MAX_STATES, prune: bool = True, dominance: bool = True,
          hint: Solution | None = None,
          hint_budget: int = DEFAULT_HINT_BUDGET, **options) -> Solution:
    """The minimum peak_bytes order of `graph` on one device (placement: all nodes on device 0).

    max_states: refuse (ValueError) when one level of the DP holds more executed sets.
    prune: drop states that cannot beat the heuristic upper bound (from `hint`, or BRKGA with
        `hint_budget` evaluations). dominance: the two exchange-argument reductions below
        (free steps, lazy nodes); off gives the plain DP. time_limit_s: refuse (ValueError)
        past this many seconds (the BRKGA hint included).
    info: optimal (always True), bound_bytes (= peak), source ("dp", or "hint" when pruning
        proved the heuristic optimal), states (total kept), max_level_states, frontier_width
        (largest ready set seen), num_lazy, upper_bound_bytes.
    """
    if options:
        raise TypeError(f"exact: unknown options {sorted(options)}")
    if devices != 1:
        raise ValueError(f"exact: graph '{graph.name}' asks for {devices} devices; the DP orders one "
                         f"device only (use cpsat or brkga)")
    t0 = time.perf_counter()
    n = graph.num_nodes
    resident_nodes = np.flatnonzero(graph.resident)
    upper = None
    if prune:
        if hint is None:
            from regal.search import brkga_search  # plain BRKGA
            hint = brkga_search(graph, 1, budget=hint_budget, seed=seed)
        else:
            hint = make_solution(graph, np.zeros(n, dtype=np.int32), hint.order, 1, method=hint.method)
        upper = int(hint.peak_bytes)

    steps, stats = _dp(graph, max_states, 10 * max_states, upper, dominance, t0, time_limit_s)
    if steps is None:  # every order peaks at >= the heuristic's peak: the heuristic is optimal
        source, peak = "hint", upper
        steps = np.asarray([v for v in hint.order if not graph.resident[v]], dtype=np.int64)
    else:
        source, peak = "dp", stats.pop("peak_bytes")
    order = np.concatenate([resident_nodes, steps]).astype(np.int32)
    info = {"optimal": True, "bound_bytes": int(peak), "source": source, "seed": seed,
            "upper_bound_bytes": upper, **stats}
    sol = make_solution(graph, np.zeros(n, dtype=np.int32), order, 1, method="exact",
                        evaluations=hint.evaluations if hint is not None else 0,
                        seconds=time.perf_counter() - t0, info=info)
    if sol.peak_bytes != peak:
        raise AssertionError(f"exact: graph '{graph.name}': DP peak {peak} but the simulation gives "
                             f"{sol.peak_bytes}")
    return sol


class _Problem(NamedTuple):
    """The DP's view of a graph: its m non-resident nodes as bits 0..m-1, in topological order."""
    nodes: list          # bit i -> node index
    nbytes: list         # int per bit: output bytes
    run: list            # int per bit: output + temp bytes, what running it adds at its peak
    succ: list           # per bit: its non-resident successors (bits; data and control edges)
    inputs: list         # per bit: data inputs, not resident nor outputs (bytes, consumers mask), freed after their last consumer
    reuse: list          # per bit: `reuse` inputs, not resident nor outputs (bytes, consumers mask), in preference order
    run_lb: list         # per bit: run minus the most it can take over, the least its step adds
    monotone: bool       # taking over grows with the executed set (free steps are exact)
    lazy: list           # bool per bit: joins its first successor's step instead of a ready set
    pull: list           # mask per bit: its lazy predecessors
    need: list           # mask per bit: its non-lazy predecessors
    tail: list           # lazy bits without successors: they run last
    steppers: list       # non-lazy bits: every DP step runs one
    resident_bytes: int


class _Limits(NamedTuple):
    """When the DP gives up (ValueError naming the graph)."""
    name: str
    max_states: int
    max_total_states: int
    t0: float
    time_limit_s: float | None


def _dp(graph: Graph, max_states: int, max_total_states: int, upper: int | None, dominance: bool,
        t0: float, time_limit_s: float | None):
    """Forward DP over downsets. Returns (non-resident order, or None if all pruned; stats).

    Lazy nodes (non-resident, no temp, only resident predecessors) never enter a ready set:
    moving such a node later, to just before its first successor, only removes its bytes from
    the steps in between, and its own step peaks below its successor's, which holds it. So a
    step runs one non-lazy node w together with w's lazy predecessors not yet run ("pulled"),
    and lazy nodes without successors run at the very end (their step holds live(all), which
    the last step of any order holds too).
    """
    prob = _problem(graph, dominance)
    lim = _Limits(graph.name, max_states, max_total_states, t0, time_limit_s)
    level, parents, stats = _run_levels(prob, lim, upper, dominance)
    if not level:
        return None, stats
    (full, (peak, live, _)), = level.items()
    peak = max(peak, live + sum(prob.nbytes[i] for i in prob.tail))
    if upper is not None and peak >= upper:
        return None, stats
    stats["peak_bytes"] = peak
    return np.asarray(_rebuild_order(prob, parents, full), dtype=np.int64), stats


def _problem(g: Graph, dominance: bool) -> _Problem:
    """Bit masks of the non-resident nodes; lazy nodes only when `dominance` is on. Graph outputs
    are never freed: no node's `inputs` or `reuse` lists them."""
    nodes = [int(v) for v in g.topological_order() if not g.resident[v]]
    bit = {v: i for i, v in enumerate(nodes)}
    m = len(nodes)
    nbytes = [int(g.bytes[v]) for v in nodes]
    run = [int(g.bytes[v] + g.temp_bytes[v]) for v in nodes]
    pred = [0] * m   # non-resident predecessors (data and control)
    succ = [[] for _ in range(m)]
    cons = [0] * m   # data consumers
    for i, v in enumerate(nodes):
        for u in g.pred_idx[g.pred_ptr[v]:g.pred_ptr[v + 1]]:
            if not g.resident[u]:
                pred[i] |= 1 << bit[int(u)]
                succ[bit[int(u)]].append(i)
        for c in g.consumers(v):
            cons[i] |= 1 << bit[int(c)]
    kept = g.resident | g.output  # never freed: not an input the DP frees, nor one a step takes over
    inputs = [[(nbytes[bit[int(u)]], cons[bit[int(u)]]) for u in g.inputs(v) if not kept[u]]
              for v in nodes]
    reuse = [[(nbytes[bit[int(u)]], cons[bit[int(u)]]) for u in g.reuse(v) if not kept[u]]
             for v in nodes]
    max_taken = g.max_taken_bytes()
    run_lb = [run[i] - int(max_taken[v]) for i, v in enumerate(nodes)]
    lazy = [dominance and pred[i] == 0 and run[i] == nbytes[i] for i in range(m)]
    lazy_mask = sum(1 << i for i in range(m) if lazy[i])
    return _Problem(nodes=nodes, nbytes=nbytes, run=run, succ=succ, inputs=inputs, reuse=reuse,
                    run_lb=run_lb, monotone=all(_monotone_reuse(r, nbytes[i]) for i, r in enumerate(reuse)),
                    lazy=lazy,
                    pull=[pred[i] & lazy_mask for i in range(m)],
                    need=[pred[i] & ~lazy_mask for i in range(m)],
                    tail=[i for i in range(m) if lazy[i] and not succ[i]],
                    steppers=[i for i in range(m) if not lazy[i]],
                    resident_bytes=int(g.bytes[g.resident].sum()))


def _monotone_reuse(cands: list, nbytes: int) -> bool:
    """Whether the bytes taken over can only grow as more candidates die: when every candidate
    has the same size, or all of them fit at once."""
    return len({b for b, _ in cands}) <= 1 or sum(b for b, _ in cands) <= nbytes


def _taken(cands: list, nbytes: int, done: int) -> int:
    """SPEC.md section 3, step 2, one device: the candidates whose consumers have all run once
    the executed set is `done` (the step's node included), in order, while they fit."""
    taken = 0
    for b, c in cands:
        if not c & ~done and taken + b <= nbytes:
            taken += b
    return taken


def _run_levels(prob: _Problem, lim: _Limits, upper: int | None, dominance: bool):
    """Every level of the DP: (the last level, each level's argmin parents, stats).

    A level maps an executed set (mask) to (best peak, live bytes, ready mask); every step adds
    one non-lazy node. The last level is empty when pruning left nothing.
    """
    start_ready = sum(1 << i for i in prob.steppers if prob.need[i] == 0)
    level = {0: (prob.resident_bytes, prob.resident_bytes, start_ready)}
    parents: list[dict[int, int]] = []
    total = 1
    widest = start_ready.bit_count()
    biggest = 1
    for size in range(len(prob.steppers)):
        nxt, parent = _expand_level(level, prob, lim, upper, dominance, size, total, widest)
        widest = _drop_doomed(nxt, parent, prob.run_lb, upper, widest)
        total += len(nxt)
        biggest = max(biggest, len(nxt))
        if len(nxt) > lim.max_states or total > lim.max_total_states:
            raise ValueError(_too_wide(lim, size, widest))
        _check_time(lim, total, widest)
        parents.append(parent)
        level = nxt
        if not level:
            break
    stats = {"states": total, "max_level_states": biggest, "frontier_width": widest,
             "num_steps": len(prob.nodes), "num_lazy": int(sum(prob.lazy))}
    return level, parents, stats


def _expand_level(level: dict, prob: _Problem, lim: _Limits, upper: int | None, dominance: bool,
                  size: int, total: int, widest: int) -> tuple[dict, dict]:
    """The next level (states with one more step, those below `upper`) and each one's last step."""
    run, nbytes, inputs, pull, succ, lazy, need = (prob.run, prob.nbytes, prob.inputs, prob.pull, prob.succ,
                                                   prob.lazy, prob.need)
    reuse = prob.reuse
    free_steps = dominance and prob.monotone
    nxt: dict[int, tuple[int, int, int]] = {}
    parent: dict[int, int] = {}
    for mask, (peak, live, ready) in level.items():
        r = ready
        if free_steps:
            r = _free_step(mask, peak, live, ready, run, nbytes, inputs, pull) or ready
        while r:
            low = r & -r
            r ^= low
            i = low.bit_length() - 1
            new = mask | low
            pulled = 0
            extra = pull[i] & ~mask
            while extra:
                lz = extra & -extra
                extra ^= lz
                pulled += nbytes[lz.bit_length() - 1]
                new |= lz
            p = live + pulled + run[i]
            if reuse[i]:
                p -= _taken(reuse[i], nbytes[i], new)
            if p < peak:
                p = peak
            if upper is not None and p >= upper:
                continue
            old = nxt.get(new)
            if old is not None and old[0] <= p:
                continue
            if old is None:
                after = live + pulled + nbytes[i]
                for b, c in inputs[i]:
                    if not c & ~new:
                        after -= b
                nr = ready ^ low
                for s in succ[i]:
                    if not lazy[s] and not need[s] & ~new:
                        nr |= 1 << s
                nxt[new] = (p, after, nr)
                if len(nxt) > lim.max_states:
                    raise ValueError(_too_wide(lim, size, widest))
                if not len(nxt) & 0xFFFF:
                    _check_time(lim, total + len(nxt), widest)
            else:
                nxt[new] = (p, old[1], old[2])
            parent[new] = i
    return nxt, parent


def _drop_doomed(nxt: dict, parent: dict, run: list, upper: int | None, widest: int) -> int:
    """Serenity's bound: the next step of any completion runs a ready node, so a state whose
    cheapest next step reaches `upper` is dropped (in place); `run` holds what a step adds at
    least (`_Problem.run_lb`). Returns the widest ready set seen."""
    doomed = []
    for mask, (p, live, ready) in nxt.items():
        width = ready.bit_count()
        if width > widest:
            widest = width
        if upper is not None and ready and live + _min_run(ready, run) >= upper:
            doomed.append(mask)
    for mask in doomed:
        del nxt[mask]
        del parent[mask]
    return widest


def _too_wide(lim: _Limits, size: int, width: int) -> str:
    return (f"exact: graph '{lim.name}' has more than {lim.max_states:,} executable sets after {size + 1} "
            f"steps or {lim.max_total_states:,} in all (width ~{width}); use cpsat or brkga")


def _check_time(lim: _Limits, num_states: int, width: int) -> None:
    if lim.time_limit_s is not None and time.perf_counter() - lim.t0 > lim.time_limit_s:
        raise ValueError(f"exact: graph '{lim.name}' not solved within {lim.time_limit_s:g} s "
                         f"({num_states:,} executable sets so far, width ~{width}); use cpsat or brkga")


def _rebuild_order(prob: _Problem, parents: list, full: int) -> list[int]:
    """The non-resident order of the best path to the executed set `full`, lazy nodes included."""
    nodes, pull = prob.nodes, prob.pull
    order = [nodes[i] for i in reversed(prob.tail)]
    succ_mask = [sum(1 << s for s in prob.succ[i]) for i in range(len(nodes))]
    mask = full
    for parent in reversed(parents):
        i = parent[mask]
        rest = mask ^ (1 << i)
        order.append(nodes[i])
        # the lazy predecessors this step pulled: those with no successor run before it
        extra = pull[i] & rest
        while extra:
            lz = extra & -extra
            extra ^= lz
            j = lz.bit_length() - 1
            if not succ_mask[j] & rest:
                order.append(nodes[j])
                rest ^= lz
        mask = rest
    assert mask == 0, "exact: order reconstruction lost nodes"
    order.reverse()
    return order


def _min_run(ready: int, run: list[int]) -> int:
    best = None
    while ready:
        low = ready & -ready
        ready ^= low
        x = run[low.bit_length() - 1]
        if best is None or x < best:
            best = x
    return best


def _free_step(mask: int, peak: int, live: int, ready: int, run: list[int], nbytes: list[int],
               inputs: list, pull: list[int]) -> int:
    """A ready node (as a one-bit mask) that an optimal completion may run next, or 0.

    If the step of w (with the lazy predecessors it pulls, P) stays within the peak so far
    (live + bytes(P) + bytes(w) + temp(w) <= peak) and frees at least bytes(P) + bytes(w) (the
    inputs whose last consumer w is), then moving it to the front of any completion turns every
    later state T into T + P + w, whose live bytes are no larger (bytes(P - T) + bytes(w) -
    freed(w | T) only falls as T grows), so no later step peaks higher.
    """
    r = ready
    while r:
        low = r & -r
        r ^= low
        i = low.bit_length() - 1
        new = mask | low
        pulled = 0
        extra = pull[i] & ~mask
        while extra:
            lz = extra & -extra
            extra ^= lz
            pulled += nbytes[lz.bit_length() - 1]
            new |= lz
        if live + pulled + run[i] > peak:
            continue
        freed = 0
        for b, c in inputs[i]:
            if not c & ~new:
                freed += b
        if freed >= nbytes[i] + pulled:
            return low
    return 0
