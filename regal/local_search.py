"""Local search: iterated hill climbing over device moves and order moves.

REGAL's "local search" baseline (Paliwal et al., ICLR 2020, Table 1), and the polish that a
memetic search applies to its elites (`improve`). The method:

- Start (`solve`): the best (lowest score) of the heuristic solutions of `regal.heuristics`:
  gp-dfs (METIS placement, DFS order), the greedy list schedule, and XLA's list, DFS and
  post-order and Inductor's LPMF, BFS and DFS orders on the METIS placement (`START_NAMES`);
  one evaluation each. With the same seed the search thus starts no worse than gp-dfs, greedy
  or xla-heuristics. `improve` starts from the schedule it is given.
- Moves. *Order move*: take a non-resident node (a resident one's position changes nothing)
  and move it to another position inside its feasible window, after its last predecessor and
  before its first successor in the current order, so the order stays topological; half the
  time anywhere in the window, half the time at most `shift` positions away. *Device move*
  (d > 1): put a node (resident ones too) on another device, chosen uniformly. With d > 1 half
  the moves are device moves.
- Focus: `focus_fraction` of the moves pick their node near the peak: inside a window of
  `focus_width` positions around a step where the peak device is at its peak (device moves: a
  node on that device there if there is one). The others pick uniformly, so no node is out of
  reach.
- Directed moves (`directed_share`, the flagship's climb; off in the baseline): that share of the
  focused moves picks a tensor held on the peak device across a peak step (made before it, read
  after it), by bytes, and takes it off that step: moves it to the device with the least memory
  there, delays its producer past the step, or advances its last reader to the step or before.
- Adaptive move kinds (`adaptive_moves`, the flagship's climb; off in the baseline): each move is
  uniform, focused, informed or directed (`KINDS`), picked with probability matching each
  kind's recent rate of improving moves (each at least `adaptive_floor`), so the climb leans on the
  moves that pay on this graph (adaptive operator selection; Thierens 2005, Ropke and
  Pisinger 2006).
- Acceptance, first improvement: one move, one evaluation (one full simulation). The `Score` is
  lexicographic: (peak_bytes, sum of device peaks, number of steps at the peak). The two
  tie-breakers turn the peak's wide plateaus into slopes: lowering another device's peak, or
  removing one of several steps that reach the peak, is progress toward lowering the peak
  itself. A better score is always accepted; an equal score with probability `p_equal` (0.9),
  a random walk across the plateaus that remain; a worse one never, unless the climb anneals
  (`anneal_temperature` T > 0, the flagship's climb; off in the baseline): then a move that raises the
  peak by a fraction x of it is accepted with probability exp(-x / T'), T' falling linearly
  from T to 0 over the budget (simulated annealing, Kirkpatrick et al. 1983); T is scaled down
  on a graph of more nodes than the budget has evaluations (`anneal_evals_per_node`,
  `anneal_scale_power`: an uphill move pays only if the climb can come back down past it).
  Walking plateaus pays (experiments/results/INDEX.md: the p_equal sweep).
- Screened device moves (`screen_moves`, the flagship's climb; off in the baseline): before a device
  move of a node v is simulated, the current step trace gives a lower bound on what v's new
  device holds while v runs (what it held in that row, v's output and temp, the copies of v's
  inputs no consumer there keeps across v's step, less the most v may take over). A move whose
  bound is above the current peak is worse for certain: it is rejected without a simulation
  (no evaluation spent), the annealing draw made first so that it is accepted, and then
  simulated, with exactly the probability it would have had. About a fifth of the flagship's
  evaluations at d = 2 and 4 go to such moves otherwise (experiments/results/screen-valid).
- Group moves (`group_moves`, the flagship's climb; off in the baseline): that share of the device
  moves of a non-resident node v takes v's neighbours along: breadth first from v over data
  edges (consumers first, then inputs), every non-resident node still on v's old device goes to
  v's new one, up to `group_cap` nodes in all. A node moved alone to another device needs copies
  of its inputs there and sends its output back to its consumers, so a single move off the peak
  device is often uphill even where moving the chain around it is downhill. One evaluation, as
  any move; a group move is not screened. With `group_adaptive` (the flagship's) the share of
  grouped device moves is not fixed: it is q_group / (q_group + q_single), within 0.1..0.9,
  where each q moves by `adaptive_rate` toward 1 when a device move of its sort improved the score and
  toward 0 when not, as the move kinds' estimates do (on REGAL's random DAGs single moves pay,
  on networks with chains grouped ones).
- Re-homing resident tensors (`Climb.pack`, the flagship's climb; not in the baseline): the
  best schedule's parameters, largest first, each go to the device where (max device peak, sum
  of device peaks) falls most (`regal.heuristics.pack_residents`), priced on the step trace
  rather than searched; the climb goes on from the result when it scores better. One or two
  evaluations a call.
- Perturbation: after `patience` moves without a new best, restart from the best solution
  with `kick_moves` random moves applied blindly (iterated local search, Lourenco et al. 2003).
- Budget: `budget` evaluations in all, the start(s) included (`Evaluator.count` is exact); a
  deadline stops earlier. The best solution seen is returned, never worse than the start.

Cost: per evaluation an O(n d + e) simulation (with its step trace), an O(window) move and an
O(n d) scan of the trace: O(budget * (n d + e)) in all, about what BRKGA spends on as many
decodes. The whole climb (moves, acceptance, kicks) is one Numba kernel,
`regal.kernels.climb.climb`, that draws from the caller's numpy Generator exactly as the Python loop
it replaced did (same moves, same schedules, bit for bit); it is called in chunks of
evaluations so that a deadline is checked every few milliseconds. Deterministic for a given
seed (`solve`) or rng state (`improve`).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from regal.kernels.structs import ClimbParams
from regal._stop import as_deadline, expired
from regal.climb import (FLAGSHIP_CLIMB, KINDS, SHIFT, Climb, ClimbRun, Evaluator, LocalSearchConfig,  # noqa: F401
                         Score, new_state, run_climb)
from regal.graph import Graph, check_devices
from regal.heuristics import START_NAMES, fallback_solution, heuristic_solutions
from regal.simulate import check_schedule
from regal.solution import Solution, make_solution

__all__ = ["solve", "improve", "Climb", "ClimbRun", "Evaluator", "Score", "LocalSearchConfig", "LocalSearchResult",
           "FLAGSHIP_CLIMB", "SHIFT", "START_NAMES"]


class LocalSearchResult(NamedTuple):
    placement: np.ndarray   # int32[n], the best schedule seen
    order: np.ndarray       # int32[n]
    peak_bytes: int
    score: Score
    evaluations: int        # simulations spent, the start's included
    history: list           # [evaluations, best peak_bytes] at the start and each time it fell
    accepted: int           # accepted moves, sideways ones included
    sideways: int           # accepted moves with an equal score
    kicks: int
    stopped: str            # "budget", "time_limit" or "no_moves"


def _relative(history: list, t0: float) -> list:
    """[evaluations, best peak, seconds since t0]: the history's clock readings made relative."""
    return [[e, peak, round(max(t - t0, 0.0), 6)] for e, peak, t in history]


def _check_budget(budget: int) -> None:
    if budget < 1:
        raise ValueError(f"budget must be at least 1 evaluation, got {budget}")


# ---------------------------------------------------------------------------- entry points
def improve(graph: Graph, devices: int, placement, order, *, budget: int, rng: np.random.Generator,
            config: LocalSearchConfig | ClimbParams | None = None,
            deadline: float | None = None) -> LocalSearchResult:
    """Climb from (placement int[n], order int[n]), a valid schedule; the inputs are not modified.

    budget: evaluations, the start's included (so at least 1); the result's `evaluations` is the
    exact number spent. rng: the only source of randomness. config: default `LocalSearchConfig()`
    (resolved for n and budget), or its `params` resolved already. deadline: an absolute `time.perf_counter()` value.
    Returns the best schedule seen, never worse (by `Score`) than the start.
    """
    t0 = time.perf_counter()
    devices = check_devices(devices)
    _check_budget(budget)
    placement, order = check_schedule(graph, placement, order, devices)
    config = LocalSearchConfig() if config is None else config
    params = config.params(graph.num_nodes, budget) if isinstance(config, LocalSearchConfig) else config
    climb = Climb(graph, devices, rng, params)
    climb.start([(placement, order)], 1)
    stopped = climb.run(budget - 1, deadline)
    state = climb.state
    return LocalSearchResult(state.best_placement, state.best_order, state.best_score.peak_bytes,
                             state.best_score, climb.evaluations, _relative(state.history, t0), state.accepted,
                             state.sideways, state.kicks, stopped)


def _best_start(graph: Graph, devices: int, names, seed: int, evaluate: Evaluator, budget: int,
                deadline: float | None) -> tuple[ClimbRun, str, dict]:
    """Evaluate the starts in order (one evaluation each) until the budget or deadline; the first
    lowest score wins. Returns its state, its name and {name: peak_bytes} of those evaluated."""
    best = None
    peaks = {}
    for name, placement, order in heuristic_solutions(graph, devices, seed, names, deadline=deadline):
        trace = evaluate.new_trace()
        score = evaluate(placement, order, trace)
        peaks[name] = score.peak_bytes
        if best is None or score < best[0]:
            best = (score, placement, order, trace, name)
        if evaluate.count >= budget or expired(deadline):
            break
    if best is None:  # stopped before the first start was ready: the cheapest valid schedule
        name, placement, order = fallback_solution(graph)
        trace = evaluate.new_trace()
        best = (evaluate(placement, order, trace), placement, order, trace, name)
        peaks[name] = best[0].peak_bytes
    score, placement, order, trace, name = best
    return ClimbRun(new_state(graph, devices, placement, order, score, trace, evaluate.count)), name, peaks


def solve(graph: Graph, devices: int, *, seed: int = 0, budget: int = 5000,
          time_limit_s: float | None = None, start: str = "best", deadline=None, **settings) -> Solution:
    """Hill climbing from a heuristic start (module docstring); the local-search baseline.

    budget: evaluations (full simulations), the starts' included. start: "best" (of all of
    `START_NAMES`), one of `START_NAMES`, or "random". settings: `LocalSearchConfig`'s fields
    (p_equal, patience, kick_moves, focus_fraction, focus_width, shift, ...). info reports the start,
    every start's peak, accepted and sideways moves, kicks, the stop reason and the history of
    best peaks. deadline: a `regal._stop.Deadline` (a stop request ends the search with the best
    schedule so far; its reason is info["stopped"]).
    """
    params = LocalSearchConfig.resolve(graph.num_nodes, budget, **settings)
    devices = check_devices(devices)
    _check_budget(budget)
    t0 = time.perf_counter()
    deadline = None if time_limit_s is None and deadline is None else as_deadline(deadline, time_limit_s, t0)
    names = START_NAMES if start == "best" else (start,)
    if any(name not in START_NAMES + ("random",) for name in names):
        raise ValueError(f"start must be 'best', 'random' or one of {', '.join(START_NAMES)}; got {start!r}")
    rng = np.random.default_rng(seed)
    evaluate = Evaluator(graph, devices)
    state, start_name, start_peaks = _best_start(graph, devices, names, seed, evaluate, budget, deadline)
    start_peak = state.score.peak_bytes
    stopped = run_climb(state, evaluate, params, rng, budget, deadline)
    info = {"seed": seed, "budget": budget, "start": start_name, "start_peak_bytes": start_peak,
            "start_peaks": start_peaks, "accepted": state.accepted, "sideways": state.sideways,
            "kicks": state.kicks, "stopped": stopped, "history": _relative(state.history, t0),
            "p_equal": params.p_equal, "patience": params.patience, "kick_moves": params.kick_moves}
    return make_solution(graph, state.best_placement, state.best_order, devices, method="local-search",
                         evaluations=evaluate.count, seconds=time.perf_counter() - t0, info=info)
