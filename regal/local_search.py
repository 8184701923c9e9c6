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
- Directed moves (`directed`, the flagship's climb; off in the baseline): that share of the
  focused moves picks a tensor held on the peak device across a peak step (made before it, read
  after it), by bytes, and takes it off that step: moves it to the device with the least memory
  there, delays its producer past the step, or advances its last reader to the step or before.
- Adaptive move kinds (`adaptive`, the flagship's climb; off in the baseline): each move is
  uniform, focused, informed or directed (`KINDS`), picked with probability matching each
  kind's recent rate of improving moves (each at least `LocalSearchConfig.floor`), so the climb leans on the
  moves that pay on this graph (adaptive operator selection; Thierens 2005, Ropke and
  Pisinger 2006).
- Acceptance, first improvement: one move, one evaluation (one full simulation). The `Score` is
  lexicographic: (peak_bytes, sum of device peaks, number of steps at the peak). The two
  tie-breakers turn the peak's wide plateaus into slopes: lowering another device's peak, or
  removing one of several steps that reach the peak, is progress toward lowering the peak
  itself. A better score is always accepted; an equal score with probability `p_equal` (0.9),
  a random walk across the plateaus that remain; a worse one never, unless the climb anneals
  (`temperature` T > 0, the flagship's climb; off in the baseline): then a move that raises the
  peak by a fraction x of it is accepted with probability exp(-x / T'), T' falling linearly
  from T to 0 over `horizon` evaluations (simulated annealing, Kirkpatrick et al. 1983).
  Walking plateaus pays (experiments/results/INDEX.md: the p_equal sweep).
- Screened device moves (`screen`, the flagship's climb; off in the baseline): before a device
  move of a node v is simulated, the current step trace gives a lower bound on what v's new
  device holds while v runs (what it held in that row, v's output and temp, the copies of v's
  inputs no consumer there keeps across v's step, less the most v may take over). A move whose
  bound is above the current peak is worse for certain: it is rejected without a simulation
  (no evaluation spent), the annealing draw made first so that it is accepted, and then
  simulated, with exactly the probability it would have had. About a fifth of the flagship's
  evaluations at d = 2 and 4 go to such moves otherwise (experiments/results/screen-valid).
- Group moves (`group`, the flagship's climb; off in the baseline): that share of the device
  moves of a non-resident node v takes v's neighbours along: breadth first from v over data
  edges (consumers first, then inputs), every non-resident node still on v's old device goes to
  v's new one, up to `group_cap` nodes in all. A node moved alone to another device needs copies
  of its inputs there and sends its output back to its consumers, so a single move off the peak
  device is often uphill even where moving the chain around it is downhill. One evaluation, as
  any move; a group move is not screened. With `group_adaptive` (the flagship's) the share of
  grouped device moves is not fixed: it is q_group / (q_group + q_single), within 0.1..0.9,
  where each q moves by `rate` toward 1 when a device move of its sort improved the score and
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
`regal._climb.climb`, that draws from the caller's numpy Generator exactly as the Python loop
it replaced did (same moves, same schedules, bit for bit); it is called in chunks of
evaluations so that a deadline is checked every few milliseconds. Deterministic for a given
seed (`solve`) or rng state (`improve`).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from regal import _climb as _climb_kernel, _kernels
from regal._stop import as_deadline, expired
from regal.graph import Graph, check_devices
from regal.heuristics import START_NAMES, fallback_solution, heuristic_solutions, pack_candidates, pack_on_trace
from regal.simulate import check_schedule, kernel_graph, peak_of
from regal.solution import Solution, make_solution

__all__ = ["solve", "improve", "Climb", "Evaluator", "Score", "LocalSearchConfig", "LocalSearchResult",
           "SHIFT", "START_NAMES"]

#: Half of the order moves go at most this many positions away (inside the feasible window).
SHIFT = 8



class LocalSearchConfig(NamedTuple):
    """The climb's settings; `resolve` fills the size-dependent defaults (those below are floors)."""
    p_equal: float = 0.9          # probability of accepting an equal score
    patience: int = 100           # moves without a new best before a kick
    kick_moves: int = 3           # random moves per kick
    focus_fraction: float = 0.5   # share of moves that pick their node near the peak
    focus_width: int = 8          # positions on either side of the peak step
    shift: int = SHIFT            # half of the order moves go at most this far
    informed: bool = False        # focused moves aim at the peak (below); off in the baseline
    directed: float = 0.0         # share of focused moves aimed at a tensor held across the peak
    temperature: float = 0.0      # annealing: start temperature (a relative peak increase); 0: off
    horizon: int = 0              # annealing: evaluations over which the temperature falls to 0
    adaptive: bool = False        # choose among the move kinds by their recent success (below)
    floor: float = 0.05           # adaptive: each move kind's least probability
    rate: float = 0.02            # adaptive: the step of a kind's success estimate, per move of that kind
    screen: int = 0               # 1: device moves provably above the peak rejected unsimulated (below)
    group: float = 0.0            # share of device moves that take neighbours along (below); 0 in the baseline
    group_cap: int = 8            # the most nodes a group move moves
    group_adaptive: bool = False  # the share of grouped moves by their recent success (below)

    @classmethod
    def resolve(cls, num_nodes: int, budget: int, *, p_equal: float = 0.9, patience: int | None = None,
                kick_moves: int | None = None, focus_fraction: float = 0.5,
                focus_width: int | None = None, shift: int = SHIFT, informed: bool = False,
                directed: float = 0.0, temperature: float = 0.0, adaptive: bool = False,
                floor: float = 0.05, rate: float = 0.02, screen: int = 0, group: float = 0.0,
                group_cap: int = 8, group_adaptive: bool = False, **options) -> LocalSearchConfig:
        """Defaults: patience max(100, budget // 20), kick_moves clip(n // 100, 3, 50),
        focus_width max(8, n // 100); the annealing horizon is `budget`. TypeError on an
        unknown option."""
        if options:
            raise TypeError(f"local-search: unknown options {sorted(options)}")
        if not 0.0 <= group <= 1.0 or (group > 0.0 and int(group_cap) < 2):
            raise ValueError(f"group moves: group must be in [0, 1] and group_cap at least 2, got {group!r}, "
                             f"{group_cap!r}")
        n = num_nodes
        return cls(p_equal=p_equal,
                   patience=max(100, budget // 20) if patience is None else int(patience),
                   kick_moves=int(np.clip(n // 100, 3, 50)) if kick_moves is None else int(kick_moves),
                   focus_fraction=focus_fraction,
                   focus_width=max(8, n // 100) if focus_width is None else int(focus_width),
                   shift=int(shift), informed=bool(informed), directed=float(directed),
                   temperature=float(temperature), horizon=int(budget), adaptive=bool(adaptive),
                   floor=float(floor), rate=float(rate), screen=int(screen), group=float(group),
                   group_cap=int(group_cap), group_adaptive=bool(group_adaptive))


class Score(NamedTuple):
    """What the climb minimises, compared lexicographically (as a tuple)."""
    peak_bytes: int
    device_peak_sum_bytes: int   # the sum of the device peaks
    num_steps_at_peak: int       # non-resident steps during which a device is at peak_bytes


class Evaluator:
    """Scores schedules with the SPEC.md section 3 kernel; `count` is exact: one call, one simulation."""

    def __init__(self, graph: Graph, devices: int):
        self.kg = kernel_graph(graph)
        self.num_devices = devices
        self.device_peak = np.zeros(devices, dtype=np.int64)
        self.resident = graph.resident
        self.count = 0

    def new_trace(self) -> np.ndarray:
        """int64[n, d], zeros: room for one schedule's step trace."""
        return np.zeros((self.kg.num_nodes, self.num_devices), dtype=np.int64)

    def __call__(self, placement: np.ndarray, order: np.ndarray, trace: np.ndarray) -> Score:
        """The score of one valid schedule (int32[n] each); its step trace is written to `trace`."""
        peak = peak_of(self.kg, placement, order, self.num_devices, self.device_peak, trace)
        self.count += 1
        at_peak = _kernels.steps_at_peak(trace, order, self.resident, peak)  # resident steps repeat
        return Score(peak, int(self.device_peak.sum()), int(at_peak))


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


class _Moves(NamedTuple):
    """What the climb kernel reads beside the graph (`kernel_graph`'s; n nodes, d devices): the
    movable nodes, and its scratch."""
    num_nodes: int
    num_devices: int
    movable: np.ndarray     # int64[*], the non-resident nodes: those whose position matters
    hits: np.ndarray        # int64[n * d, 2], scratch: the (step, device) entries at the peak
    cand: np.ndarray        # int64[n], scratch: the tensors held across the peak
    last: np.ndarray        # int64[n], scratch: their last consumer's position
    pool: np.ndarray        # int64[n], scratch: the nodes a focused move picks from


#: The move kinds an adaptive climb chooses among, as (focused, informed, directed share):
#: uniform, focused (the baseline's), informed, directed; defined unpacked where the kernel
#: reads them (`regal._climb._KIND_*`).
KINDS = tuple(zip(_climb_kernel._KIND_FOCUSED, _climb_kernel._KIND_INFORMED, _climb_kernel._KIND_DIRECTED))


class ClimbState:
    """The climb's state, in the arrays the kernel (`regal._climb.climb`) updates in place:
    the current schedule (placement, order and positions), its step trace, the best schedule,
    the counters (`st`), the move kinds' success estimates and the history of best peaks."""

    def __init__(self, placement, order, score: Score, trace: np.ndarray, count: int):
        n, d = trace.shape
        self.placement = np.ascontiguousarray(placement, dtype=np.int32).copy()
        self.order = np.ascontiguousarray(order, dtype=np.int32).copy()
        self.pos = np.empty(n, dtype=np.int64)
        self.pos[self.order] = np.arange(n)
        self.traces = np.zeros((2, n, d), dtype=np.int64)
        self.traces[0] = trace
        self.best_placement = self.placement.copy()
        self.best_order = self.order.copy()
        self.st = np.zeros(_climb_kernel._ST, dtype=np.int64)
        self.st[[_climb_kernel._PEAK, _climb_kernel._SUM, _climb_kernel._ATP]] = score
        self.st[[_climb_kernel._BPEAK, _climb_kernel._BSUM, _climb_kernel._BATP]] = score
        self.st[_climb_kernel._COUNT] = count
        self.st[_climb_kernel._NHIST] = 1
        self.quality = np.full(len(KINDS), 0.1)
        self.group_quality = np.full(2, 0.1)
        self.hist = np.zeros((64, 2), dtype=np.int64)
        self.hist[0] = count, score.peak_bytes
        self.hist_times = [time.perf_counter()]

    def adopt(self, placement, order, score: Score, trace: np.ndarray, count: int) -> None:
        """Make (placement, order), of `score` and step trace `trace`, the current schedule and,
        when it scores better than the best, the best; the counters and the move kinds'
        estimates stay."""
        st = self.st
        self.placement[:] = placement
        self.order[:] = order
        self.pos[self.order] = np.arange(self.order.shape[0])
        self.traces[st[_climb_kernel._CUR]] = trace
        st[[_climb_kernel._PEAK, _climb_kernel._SUM, _climb_kernel._ATP]] = score
        st[_climb_kernel._COUNT] = count
        if score < self.best_score:  # as the kernel's _keep_if_best (not called from Python: a
            st[[_climb_kernel._BPEAK, _climb_kernel._BSUM, _climb_kernel._BATP]] = score   # compile warmup skips)
            self.best_placement[:] = placement
            self.best_order[:] = order
            st[_climb_kernel._SINCE] = 0
            if score.peak_bytes < self.hist[st[_climb_kernel._NHIST] - 1, 1]:
                if st[_climb_kernel._NHIST] >= self.hist.shape[0]:
                    self.hist = np.concatenate([self.hist, np.zeros_like(self.hist)])
                self.hist[st[_climb_kernel._NHIST]] = count, score.peak_bytes
                st[_climb_kernel._NHIST] += 1
                self.hist_times.append(time.perf_counter())

    score = property(lambda self: Score(*map(int, self.st[_climb_kernel._PEAK:_climb_kernel._ATP + 1])))
    best_score = property(lambda self: Score(*map(int, self.st[_climb_kernel._BPEAK:_climb_kernel._BATP + 1])))
    accepted = property(lambda self: int(self.st[_climb_kernel._ACC]))
    sideways = property(lambda self: int(self.st[_climb_kernel._SIDE]))
    kicks = property(lambda self: int(self.st[_climb_kernel._KICKS]))
    screened = property(lambda self: int(self.st[_climb_kernel._SCREENED]))
    grouped = property(lambda self: int(self.st[_climb_kernel._GROUPED]))

    @property
    def history(self) -> list:
        """[evaluations, best peak_bytes, time.perf_counter()] at the start and each time it fell
        (the time is the end of the kernel call that found it)."""
        return [[int(e), int(p), t] for (e, p), t in zip(self.hist[:len(self.hist_times)], self.hist_times)]


def _moves(graph: Graph, devices: int) -> _Moves:
    n = graph.num_nodes
    return _Moves(n, devices, np.flatnonzero(~graph.resident).astype(np.int64),
                  np.empty((n * devices, 2), dtype=np.int64), np.empty(n, dtype=np.int64),
                  np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64))


# ---------------------------------------------------------------------------- climb
def _chunk(moves: _Moves, nnz: int) -> int:
    """Evaluations per kernel call between deadline checks: about 10^6 array entries simulated."""
    return int(np.clip(1_000_000 // max(moves.num_nodes * moves.num_devices + nnz, 1), 1, 4096))


def _climb(moves: _Moves, state: ClimbState, evaluate: Evaluator, cfg: LocalSearchConfig, rng,
           budget: int, deadline: float | None) -> str:
    """Moves until evaluate.count reaches budget or the deadline passes; returns why it stopped.

    The loop is one Numba kernel (`regal._climb.climb`), called in chunks so that the deadline
    is checked every few milliseconds. Adaptive (`cfg.adaptive`): each move is of one of `KINDS`,
    with probability `floor` + (1 - 4 `floor`) q_k / sum(q) (probability matching, Thierens
    2005); a kind's success estimate q_k moves by `rate` toward 1 when its move improved the
    score, toward 0 when not (adaptive operator selection, as in adaptive large neighbourhood
    search, Ropke and Pisinger 2006): the climb leans on the moves that pay on this graph at
    this stage."""
    kg, st = evaluate.kg, state.st
    st[_climb_kernel._COUNT] = evaluate.count
    chunk = _chunk(moves, kg.in_idx.shape[0])
    stopped = "budget"
    while evaluate.count < budget:
        if expired(deadline):
            stopped = getattr(deadline, "reason", None) or "time_limit"
            break
        stop = min(budget, evaluate.count + chunk)
        need = int(st[_climb_kernel._NHIST]) + stop - evaluate.count + 1
        if need > state.hist.shape[0]:
            state.hist = np.concatenate([state.hist, np.zeros((need, 2), dtype=np.int64)])
        found = int(st[_climb_kernel._NHIST])
        code = _climb_kernel.climb(
            kg, state.order, state.pos, state.placement, state.best_placement, state.best_order, state.traces, st,
            state.quality, state.hist, stop, moves.num_devices, moves.movable, moves.hits, moves.cand, moves.last,
            moves.pool, evaluate.device_peak, rng, cfg.p_equal, cfg.patience, cfg.kick_moves, cfg.focus_fraction,
            cfg.focus_width, cfg.shift, cfg.informed, cfg.directed, cfg.temperature, cfg.horizon, cfg.adaptive,
            cfg.floor, cfg.rate, cfg.screen, cfg.group, cfg.group_cap, cfg.group_adaptive, state.group_quality)
        evaluate.count = int(st[_climb_kernel._COUNT])
        state.hist_times += [time.perf_counter()] * (int(st[_climb_kernel._NHIST]) - found)
        if code == 1:
            stopped = "no_moves"
            break
    return stopped


def _relative(history: list, t0: float) -> list:
    """[evaluations, best peak, seconds since t0]: the history's clock readings made relative."""
    return [[e, peak, round(max(t - t0, 0.0), 6)] for e, peak, t in history]


def _check_budget(budget: int) -> None:
    if budget < 1:
        raise ValueError(f"budget must be at least 1 evaluation, got {budget}")


# ---------------------------------------------------------------------------- entry points
def improve(graph: Graph, devices: int, placement, order, *, budget: int, rng: np.random.Generator,
            config: LocalSearchConfig | None = None, deadline: float | None = None) -> LocalSearchResult:
    """Climb from (placement int[n], order int[n]), a valid schedule; the inputs are not modified.

    budget: evaluations, the start's included (so at least 1); the result's `evaluations` is the
    exact number spent. rng: the only source of randomness. config: default
    `LocalSearchConfig.resolve(n, budget)`. deadline: an absolute `time.perf_counter()` value.
    Returns the best schedule seen, never worse (by `Score`) than the start.
    """
    t0 = time.perf_counter()
    devices = check_devices(devices)
    _check_budget(budget)
    placement, order = check_schedule(graph, placement, order, devices)
    cfg = LocalSearchConfig.resolve(graph.num_nodes, budget) if config is None else config
    climb = Climb(graph, devices, rng, cfg)
    climb.start([(placement, order)], 1)
    stopped = climb.run(budget - 1, deadline)
    state = climb.state
    return LocalSearchResult(state.best_placement, state.best_order, state.best_score.peak_bytes,
                             state.best_score, climb.evaluations, _relative(state.history, t0), state.accepted,
                             state.sideways, state.kicks, stopped)


class Climb:
    """One climb that can be advanced in steps: a memetic search runs it between generations.

        climb = Climb(graph, devices, rng, config)
        climb.start([(placement, order), ...], budget)   # the best of these starts (one evaluation each)
        climb.run(500, deadline=None)                    # 500 more evaluations
        climb.best_peak, climb.best, climb.evaluations
    """

    def __init__(self, graph: Graph, devices: int, rng: np.random.Generator, config: LocalSearchConfig):
        self.moves = _moves(graph, check_devices(devices))
        self.candidates = pack_candidates(graph)
        self.evaluate = Evaluator(graph, devices)
        self.config = config
        self.rng = rng
        self.state: ClimbState | None = None
        self.start_index = -1

    @property
    def evaluations(self) -> int:
        return self.evaluate.count

    @property
    def best_peak(self) -> float:
        return float("inf") if self.state is None else float(self.state.best_score.peak_bytes)

    @property
    def best(self) -> tuple[np.ndarray, np.ndarray]:
        """(placement int32[n], order int32[n]) of the best schedule seen."""
        return self.state.best_placement, self.state.best_order

    def start(self, starts, budget: int, deadline=None, choose=None) -> None:
        """Score up to `budget` (at least one) of the valid (placement, order) starts, one
        evaluation each, and climb from the first of the lowest score; once `deadline` has
        passed, from the best of those scored so far (at least one). choose: a function of the
        scores (a list of `Score`, one per start scored) that returns the index to climb from
        instead (a policy's start choice, `regal.memetic`), asked when every start was scored
        and one more evaluation fits the budget (the chosen start's step trace, simulated again)."""
        starts = list(starts)[:max(budget, 1)]
        scores, best = [], None
        for i, (placement, order) in enumerate(starts):
            if scores and expired(deadline):
                break
            trace = self.evaluate.new_trace()
            scores.append(self.evaluate(placement, order, trace))
            if best is None or scores[-1] < scores[best[0]]:
                best = (i, trace)   # only the best start's step trace is kept (memory: n x d each)
        i = best[0]
        if choose is not None and len(scores) == len(starts) > 1 and budget > len(scores):
            i = int(choose(scores))
        if i != best[0]:   # the chosen start's step trace: simulated again, one more evaluation
            trace = self.evaluate.new_trace()
            self.evaluate(*starts[i], trace)
        else:
            trace = best[1]
        self.start_index = i   # which of `starts` the climb went on from
        placement, order = starts[i]
        self.state = ClimbState(placement, order, scores[i], trace, self.evaluate.count)

    def run(self, evaluations: int, deadline: float | None = None) -> str:
        """Climb for up to `evaluations` more evaluations; returns why it stopped."""
        return _climb(self.moves, self.state, self.evaluate, self.config, self.rng,
                      self.evaluate.count + evaluations, deadline)

    def pack(self, evaluations: int) -> bool:
        """Re-home the best schedule's resident tensors (`regal.heuristics.pack_residents`) and
        go on from there if that scores better. Costs one evaluation to score the packed
        schedule when anything moved, plus one first when the best is not the current schedule
        (its step trace is simulated); nothing on one device, without resident tensors, or with
        fewer `evaluations` left than it may need. Returns whether the best improved."""
        state = self.state
        if self.moves.num_devices == 1 or self.candidates.size == 0:
            return False
        at_best = (state.score == state.best_score and np.array_equal(state.placement, state.best_placement)
                   and np.array_equal(state.order, state.best_order))
        if evaluations < (1 if at_best else 2):
            return False
        placement, order = state.best_placement.copy(), state.best_order.copy()
        if at_best:
            trace = state.traces[state.st[_climb_kernel._CUR]].copy()
        else:
            trace = self.evaluate.new_trace()
            self.evaluate(placement, order, trace)
        if pack_on_trace(self.evaluate.kg, self.candidates, placement, order, trace) == 0:
            return False
        score = self.evaluate(placement, order, trace)
        if not score < state.best_score:
            return False
        state.adopt(placement, order, score, trace, self.evaluate.count)
        return True


def _best_start(graph: Graph, devices: int, names, seed: int, evaluate: Evaluator, budget: int,
                deadline: float | None) -> tuple[ClimbState, str, dict]:
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
    return ClimbState(placement, order, score, trace, evaluate.count), name, peaks


def solve(graph: Graph, devices: int, *, seed: int = 0, budget: int = 5000,
          time_limit_s: float | None = None, start: str = "best", deadline=None, **settings) -> Solution:
    """Hill climbing from a heuristic start (module docstring); the local-search baseline.

    budget: evaluations (full simulations), the starts' included. start: "best" (of all of
    `START_NAMES`), one of `START_NAMES`, or "random". settings: `LocalSearchConfig.resolve`'s
    (p_equal, patience, kick_moves, focus_fraction, focus_width, shift). info reports the start,
    every start's peak, accepted and sideways moves, kicks, the stop reason and the history of
    best peaks. deadline: a `regal._stop.Deadline` (a stop request ends the search with the best
    schedule so far; its reason is info["stopped"]).
    """
    cfg = LocalSearchConfig.resolve(graph.num_nodes, budget, **settings)
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
    stopped = _climb(_moves(graph, devices), state, evaluate, cfg, rng, budget, deadline)
    info = {"seed": seed, "budget": budget, "start": start_name, "start_peak_bytes": start_peak,
            "start_peaks": start_peaks, "accepted": state.accepted, "sideways": state.sideways,
            "kicks": state.kicks, "stopped": stopped, "history": _relative(state.history, t0), "p_equal": cfg.p_equal,
            "patience": cfg.patience, "kick_moves": cfg.kick_moves}
    return make_solution(graph, state.best_placement, state.best_order, devices, method="local-search",
                         evaluations=evaluate.count, seconds=time.perf_counter() - t0, info=info)
