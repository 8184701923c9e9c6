"""Local search: iterated hill climbing over device moves and order moves, BRKGA's budget.

REGAL's "local search" baseline (Paliwal et al., ICLR 2020, Table 1), configured as follows.

- Start: the best (lowest peak) of the heuristic solutions: gp-dfs (METIS placement, DFS order),
  the greedy list schedule, and XLA's list, DFS and post-order and Inductor's LPMF, BFS and DFS
  orders on the METIS placement (`START_NAMES`, `baselines.heuristics`); one evaluation each.
  With the same seed the search thus starts no worse than gp-dfs, greedy or xla-heuristics.
- Moves. *Order move*: take a non-resident node (a resident one's position changes nothing)
  and move it to another position inside its feasible window, after its last predecessor and
  before its first successor in the current order, so the order stays topological; half the
  time anywhere in the window, half the time at most `SHIFT` positions away. *Device move*
  (d > 1): put a node (resident ones too) on another device, chosen uniformly. With d > 1 half
  the moves are device moves.
- Focus: half of the moves pick their node near the peak: inside a window of `focus_width`
  positions around a step where the peak device is at its peak (device moves: a node on that
  device there if there is one). The other half pick uniformly, so no node is out of reach.
- Acceptance, first improvement: one move, one evaluation (one full simulation). The score is
  lexicographic: (peak_bytes, sum of device peaks, number of steps at the peak). The two
  tie-breakers turn the peak's wide plateaus into slopes: lowering another device's peak, or
  removing one of several steps that reach the peak, is progress toward lowering the peak
  itself. A better score is always accepted; an equal score with probability `p_equal` (0.9),
  a random walk across the plateaus that remain; a worse one never. In a sweep on six XLA
  graphs (d = 1, 2; 2,000 evaluations; 2-3 seeds) the mean final/start peak ratio was 0.962 for
  p_equal = 0, 0.963 for 0.5, 0.958 for 0.8, 0.956 for 0.95 and 1.0: walking plateaus pays.
- Perturbation: after `patience` evaluations without a new best, restart from the best solution
  with `kick_moves` random moves applied blindly (iterated local search, Lourenco et al. 2003).
- Budget: `budget` evaluations in all (5,000, as BRKGA 5K), the start included; `time_limit_s`
  stops earlier. The best solution seen is returned, never worse than the start.

Cost: the starts once (the heuristics' O(n * ready * d + e log e)), then per evaluation an
O(n d + e) simulation (the Numba kernel, with its step trace), an O(window) move and an O(n d)
scan of the trace: O(budget * (n d + e)) in all, about what BRKGA spends on as many decodes.
Deterministic for a given seed.
"""

from __future__ import annotations

import time

import numpy as np

from baselines.partition import _check_devices, dfs_order, metis_placement
from regal.graph import Graph
from regal.simulate import kernel_graph, peak_of
from regal.solution import Solution, make_solution

__all__ = ["solve", "SHIFT", "START_NAMES"]

#: Half of the order moves go at most this many positions away (inside the feasible window).
SHIFT = 8


#: The heuristic starts of start="best", in the order they are evaluated (the first wins ties).
START_NAMES = ("gp-dfs", "greedy", "xla-list", "xla-dfs", "xla-post-order", "inductor-lpmf",
               "inductor-bfs", "inductor-dfs")


def _start_solution(graph: Graph, d: int, name: str, seed: int, cache: dict) -> tuple[np.ndarray, np.ndarray]:
    """(placement int32[n], order int32[n]) of one heuristic start; the compiler orders (one
    device) go with gp-dfs's METIS placement, as in `baselines.heuristics`."""
    from baselines import heuristics as H
    from baselines.greedy import greedy_schedule, solve_random
    if "metis" not in cache and name not in ("greedy", "random"):
        cache["metis"] = metis_placement(graph, d, seed)
    if name == "greedy":
        placement, order = greedy_schedule(graph, d)
    elif name == "random":
        r = solve_random(graph, d, seed=seed)
        placement, order = r.placement, r.order
    else:
        orders = {"gp-dfs": dfs_order, "xla-list": H.xla_list_order, "xla-dfs": H.xla_dfs_order,
                  "xla-post-order": H.xla_post_order, "inductor-lpmf": H.lpmf_order,
                  "inductor-bfs": H.inductor_bfs_order, "inductor-dfs": H.inductor_dfs_order}
        placement, order = cache["metis"], orders[name](graph)
    return (np.ascontiguousarray(placement, dtype=np.int32).copy(),
            np.ascontiguousarray(order, dtype=np.int32).copy())


class _Evaluator:
    """Simulates (placement, order) with the SPEC.md section 3 kernel and counts evaluations."""

    def __init__(self, graph: Graph, devices: int):
        self.kg = kernel_graph(graph)
        self.d = devices
        self.device_peak = np.zeros(devices, dtype=np.int64)
        self.resident = graph.resident
        self.count = 0

    def new_trace(self) -> np.ndarray:
        return np.zeros((self.kg.num_nodes, self.d), dtype=np.int64)

    def __call__(self, placement: np.ndarray, order: np.ndarray, trace: np.ndarray) -> tuple:
        """The score of one schedule (one evaluation); its step trace is written to `trace`."""
        peak = peak_of(self.kg, placement, order, self.d, self.device_peak, trace)
        self.count += 1
        at_peak = trace == peak
        at_peak = int(np.count_nonzero(at_peak[~self.resident[order]]))  # resident steps repeat
        return peak, int(self.device_peak.sum()), at_peak


def solve(graph: Graph, devices: int, *, time_limit_s: float | None = None, seed: int = 0,
          budget: int = 5000, start: str = "best", p_equal: float = 0.9, patience: int | None = None,
          kick_moves: int | None = None, focus_fraction: float = 0.5, focus_width: int | None = None,
          **options) -> Solution:
    """Hill climbing from a heuristic start; see the module docstring for the method.

    budget: evaluations (full simulations), the start's included. start: "best" (of all of
    `START_NAMES`), one of `START_NAMES`, or "random". p_equal: probability of accepting an
    equal score. patience: evaluations without a new best before a kick (default
    max(100, budget // 20)). kick_moves: random moves per kick (default clip(n // 100, 3, 50)).
    focus_fraction: share of moves near the peak. focus_width: positions on either side of the
    peak step (default max(8, n // 100)). info reports the start, every start's peak, accepted
    and sideways moves, kicks, the stop reason and the history of best peaks.
    """
    if options:
        raise TypeError(f"local-search: unknown options {sorted(options)}")
    _check_devices(devices)
    if budget < 1:
        raise ValueError(f"budget must be at least 1 evaluation, got {budget}")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    n, d = graph.num_nodes, devices
    patience = max(100, budget // 20) if patience is None else int(patience)
    kick_moves = int(np.clip(n // 100, 3, 50)) if kick_moves is None else int(kick_moves)
    focus_width = max(8, n // 100) if focus_width is None else int(focus_width)
    evaluate = _Evaluator(graph, d)

    # ---- start
    names = START_NAMES if start == "best" else (start,)
    if any(name not in START_NAMES + ("random",) for name in names):
        raise ValueError(f"start must be 'best', 'random' or one of {', '.join(START_NAMES)}; got {start!r}")
    cur = None
    start_peaks = {}
    cache: dict = {}
    for name in names:
        if cur is not None and (evaluate.count >= budget or (
                time_limit_s is not None and time.perf_counter() - t0 >= time_limit_s)):
            break
        placement, order = _start_solution(graph, d, name, seed, cache)
        trace = evaluate.new_trace()
        score = evaluate(placement, order, trace)
        start_peaks[name] = score[0]
        if cur is None or score < cur[0]:
            cur = (score, placement, order, trace, name)
    score, placement, order, trace, start_name = cur
    scratch = evaluate.new_trace()
    placement, order = placement.copy(), order.copy()
    start_peak = score[0]
    best = (score, placement.copy(), order.copy())
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)

    # ---- helpers over the current (placement, order, pos)
    pred_ptr, pred_idx = graph.pred_ptr, graph.pred_idx
    succ_ptr, succ_idx = graph.succ_ptr, graph.succ_idx
    movable = np.flatnonzero(~graph.resident)  # nodes whose position matters

    def window(v: int) -> tuple[int, int]:
        p = pred_idx[pred_ptr[v]:pred_ptr[v + 1]]
        s = succ_idx[succ_ptr[v]:succ_ptr[v + 1]]
        lo = int(pos[p].max()) + 1 if p.size else 0
        hi = int(pos[s].min()) - 1 if s.size else n - 1
        return lo, hi

    def shift(p: int, q: int) -> None:
        """Move the node at position p to position q; the nodes between slide by one."""
        v = order[p]
        if q < p:
            order[q + 1:p + 1] = order[q:p].copy()
        else:
            order[p:q] = order[p + 1:q + 1].copy()
        order[q] = v
        lo, hi = min(p, q), max(p, q)
        pos[order[lo:hi + 1]] = np.arange(lo, hi + 1)

    def focus_nodes(trace: np.ndarray, peak: int) -> tuple[np.ndarray, int]:
        """Nodes in a window around a random step at the peak, and the peak device."""
        hits = np.argwhere(trace == peak)
        t, k = hits[rng.integers(len(hits))] if len(hits) else (rng.integers(n), 0)
        a, b = max(0, int(t) - focus_width), min(n, int(t) + focus_width + 1)
        return order[a:b], int(k)

    def propose(trace: np.ndarray, peak: int, focused: bool):
        """Apply one random move; returns its undo (a closure) or None if none was found."""
        focus, k_peak = focus_nodes(trace, peak) if focused else (None, 0)
        device_move = d > 1 and rng.random() < 0.5
        for _ in range(20):
            if device_move:
                if focus is not None:
                    on_peak = focus[placement[focus] == k_peak]
                    pool = on_peak if on_peak.size else focus
                    v = int(pool[rng.integers(pool.size)])
                else:
                    v = int(rng.integers(n))
                old = int(placement[v])
                new = int(rng.integers(d - 1))
                placement[v] = new + (new >= old)

                def undo(v=v, old=old):
                    placement[v] = old
                return undo
            if focus is not None:
                pool = focus[~graph.resident[focus]]
                if not pool.size:
                    focus = None
                    continue
                v = int(pool[rng.integers(pool.size)])
            else:
                if not movable.size:
                    return None
                v = int(movable[rng.integers(movable.size)])
            lo, hi = window(v)
            p = int(pos[v])
            if rng.random() < 0.5:
                lo, hi = max(lo, p - SHIFT), min(hi, p + SHIFT)
            if hi <= lo:
                continue
            q = int(rng.integers(lo, hi))  # hi - lo other positions
            q += q >= p
            shift(p, q)

            def undo(p=p, q=q):
                shift(q, p)
            return undo
        return None

    # ---- climb
    history = [[evaluate.count, start_peak]]
    since_best = 0
    kicks = accepted = sideways = 0
    stopped = "budget"
    while evaluate.count < budget:
        if time_limit_s is not None and time.perf_counter() - t0 >= time_limit_s:
            stopped = "time_limit"
            break
        if since_best >= patience:
            placement[:] = best[1]
            order[:] = best[2]
            pos[order] = np.arange(n)
            moved = sum(propose(trace, score[0], False) is not None for _ in range(kick_moves))
            score = evaluate(placement, order, trace)
            kicks += 1
            since_best = 0
            if moved == 0:  # nothing can move (e.g. a chain on one device)
                stopped = "no_moves"
                break
            if score < best[0]:
                best = (score, placement.copy(), order.copy())
                if score[0] < history[-1][1]:
                    history.append([evaluate.count, score[0]])
            continue
        undo = propose(trace, score[0], rng.random() < focus_fraction)
        if undo is None:
            since_best += 1
            if movable.size == 0 and d == 1:
                stopped = "no_moves"
                break
            continue
        new_score = evaluate(placement, order, scratch)
        since_best += 1
        if new_score < score or (new_score == score and rng.random() < p_equal):
            accepted += 1
            sideways += new_score == score
            score = new_score
            trace, scratch = scratch, trace
            if score < best[0]:
                best = (score, placement.copy(), order.copy())
                since_best = 0
                if score[0] < history[-1][1]:
                    history.append([evaluate.count, score[0]])
        else:
            undo()

    info = {"seed": seed, "budget": budget, "start": start_name, "start_peak_bytes": start_peak,
            "start_peaks": start_peaks, "accepted": accepted, "sideways": sideways, "kicks": kicks, "stopped": stopped,
            "history": history, "p_equal": p_equal, "patience": patience, "kick_moves": kick_moves}
    return make_solution(graph, best[1], best[2], d, method="local-search",
                         evaluations=evaluate.count, seconds=time.perf_counter() - t0, info=info)
