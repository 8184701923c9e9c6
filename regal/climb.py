"""The local-search climb, the part the local-search baseline (`regal.local_search`) and the
flagship's polish (`regal.memetic`) share: its settings (`LocalSearchConfig`, the flagship's
`FLAGSHIP_CLIMB`), its score (`Score`, `Evaluator`), its state (`ClimbRun`, around the kernel's
`regal.kernels.structs.ClimbState`) and `Climb`, a climb advanced in steps. The moves, the
acceptance and the kicks are one Numba kernel, `regal.kernels.climb.climb`; `regal.local_search`'s
docstring says what each does and cites the papers.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from regal.kernels import climb as _climb_kernel
from regal.kernels import decode as _kernels
from regal.kernels.climb_picks import LOGITS, PICK_FIELDS, STATS
from regal.kernels.structs import ClimbParams, ClimbState
from regal._stop import expired
from regal.graph import Graph, check_devices
from regal.heuristics import pack_candidates, pack_on_trace
from regal.simulate import kernel_graph, peak_of

__all__ = ["Climb", "ClimbRun", "Evaluator", "Score", "LocalSearchConfig", "FLAGSHIP_CLIMB", "KINDS", "SHIFT",
           "new_state", "run_climb"]

#: Half of the order moves go at most this many positions away (inside the feasible window).
SHIFT = 8


class LocalSearchConfig(NamedTuple):
    """The climb's settings, one name per knob (the baseline's defaults; the flagship's climb is
    `FLAGSHIP_CLIMB`, `regal.FlagshipConfig.climb`). None: the size-dependent default
    (`params`). `params(num_nodes, budget)` resolves them into what the kernel reads."""
    p_equal: float = 0.9                # probability of accepting an equal score
    patience: int | None = None         # moves without a new best before a kick; None: max(100, budget // 20)
    kick_moves: int | None = None       # random moves per kick; None: clip(n // 100, 3, 50)
    focus_fraction: float = 0.5         # share of moves that pick their node near the peak
    focus_width: int | None = None      # positions on either side of the peak step; None: max(8, n // 100)
    shift: int = SHIFT                  # half of the order moves go at most this far
    informed: bool = False              # focused moves aim at the peak device (below)
    directed_share: float = 0.0         # share of focused moves aimed at a tensor held across the peak
    anneal_temperature: float = 0.0     # annealing: start temperature (a relative peak rise); 0: off
    anneal_evals_per_node: float = 1.0  # below this many evaluations per node the temperature is scaled
    #                                     by (budget / (this * nodes)) ** anneal_scale_power; 0: never
    anneal_scale_power: float = 3.0
    adaptive_moves: bool = False        # choose among the move kinds by their recent success (below)
    adaptive_floor: float = 0.05        # adaptive: each move kind's least probability
    adaptive_rate: float = 0.02         # adaptive: the step of a success estimate, per move of its sort
    screen_moves: int = 0               # 1 (True): device moves provably above the peak rejected
    #                                     unsimulated (below); 2: audit (every move simulated, counted)
    group_moves: float = 0.0            # share of device moves that take neighbours along (below)
    group_cap: int = 8                  # the most nodes a group move moves, the node itself included
    group_adaptive: bool = False        # the grouped share by the recent success of grouped and single moves

    @classmethod
    def resolve(cls, num_nodes: int, budget: int, **settings) -> ClimbParams:
        """`LocalSearchConfig(**settings).params(num_nodes, budget)`; TypeError on an unknown setting."""
        unknown = sorted(set(settings) - set(cls._fields))
        if unknown:
            raise TypeError(f"local-search: unknown options {unknown}")
        return cls(**settings).params(num_nodes, budget)

    def params(self, num_nodes: int, budget: int) -> ClimbParams:
        """The kernel's settings for a climb of `budget` evaluations on `num_nodes` nodes: the
        None fields' size-dependent defaults, the start temperature scaled (`anneal_temperature`
        times min(1, budget / (anneal_evals_per_node * nodes)) ** anneal_scale_power, unscaled when
        anneal_evals_per_node is 0), the annealing horizon `budget`. ValueError on a group share
        outside [0, 1] or a cap below 2."""
        if not 0.0 <= self.group_moves <= 1.0 or (self.group_moves > 0.0 and int(self.group_cap) < 2):
            raise ValueError(f"group moves: group_moves must be in [0, 1] and group_cap at least 2, got "
                             f"{self.group_moves!r}, {self.group_cap!r}")
        n = num_nodes
        return ClimbParams(
            p_equal=float(self.p_equal),
            patience=max(100, budget // 20) if self.patience is None else int(self.patience),
            kick_moves=int(np.clip(n // 100, 3, 50)) if self.kick_moves is None else int(self.kick_moves),
            focus_fraction=float(self.focus_fraction),
            focus_width=max(8, n // 100) if self.focus_width is None else int(self.focus_width),
            shift=int(self.shift), informed=bool(self.informed), directed_share=float(self.directed_share),
            temperature=self.start_temperature(n, budget), horizon=int(budget),
            adaptive_moves=bool(self.adaptive_moves), adaptive_floor=float(self.adaptive_floor),
            adaptive_rate=float(self.adaptive_rate), screen_moves=int(self.screen_moves),
            group_moves=float(self.group_moves), group_cap=int(self.group_cap),
            group_adaptive=bool(self.group_adaptive))

    def start_temperature(self, num_nodes: int, budget: int) -> float:
        """The climb's start temperature: anneal_temperature, scaled by min(1, budget /
        (anneal_evals_per_node * num_nodes)) ** anneal_scale_power (no scaling when
        anneal_evals_per_node is 0)."""
        if self.anneal_evals_per_node <= 0:
            return float(self.anneal_temperature)
        scale = min(1.0, budget / (self.anneal_evals_per_node * max(num_nodes, 1)))
        return float(self.anneal_temperature) * scale ** self.anneal_scale_power


#: The flagship's climb (`regal.FlagshipConfig.climb`): informed, directed and adaptive moves,
#: annealing, screened and (adaptively) grouped device moves; how each was chosen is in
#: experiments/results/INDEX.md.
FLAGSHIP_CLIMB = LocalSearchConfig(informed=True, directed_share=1.0, anneal_temperature=0.02,
                                   adaptive_moves=True, screen_moves=True, group_moves=0.5, group_adaptive=True)


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


#: The move kinds an adaptive climb chooses among, as (focused, informed, directed share):
#: uniform, focused (the baseline's), informed, directed; defined unpacked where the kernel
#: reads them (`regal.kernels.climb.KIND_*`).
KINDS = tuple(zip(_climb_kernel.KIND_FOCUSED, _climb_kernel.KIND_INFORMED, _climb_kernel.KIND_DIRECTED))


def _counter(value: int = 0) -> np.ndarray:
    return np.array(value, dtype=np.int64)


def new_state(graph: Graph, devices: int, placement, order, score: Score, trace: np.ndarray,
              count: int, moves=None) -> ClimbState:
    """The kernel's `ClimbState` of a climb that starts at (placement, order) of `score`, its
    step trace `trace` (int64[n, d]), after `count` evaluations; moves: a move policy's arrays
    (`regal.moves.MoveProposals.arrays`, shared: what the climb counts and learns adds up there),
    or None."""
    n, d = trace.shape
    movable = np.flatnonzero(~graph.resident).astype(np.int64)
    if moves is None:
        none = np.zeros(0)
        moves = dict(move_weight=none, move_cum=none, move_cum_movable=none, move_group=none,
                     move_stats=np.zeros((0, STATS)), move_grad=np.zeros((0, LOGITS)), move_glob=np.zeros(2),
                     move_pick=np.zeros(PICK_FIELDS))
    else:
        moves = moves.arrays(movable)
    placement = np.ascontiguousarray(placement, dtype=np.int32).copy()
    order = np.ascontiguousarray(order, dtype=np.int32).copy()
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    traces = np.zeros((2, n, d), dtype=np.int64)
    traces[0] = trace
    hist = np.zeros((64, 2), dtype=np.int64)
    hist[0] = count, score.peak_bytes
    return ClimbState(
        placement=placement, order=order, pos=pos, best_placement=placement.copy(), best_order=order.copy(),
        traces=traces, device_peak=np.zeros(d, dtype=np.int64), score=np.array(score, dtype=np.int64),
        best_score=np.array(score, dtype=np.int64), quality=np.full(len(KINDS), 0.1),
        group_quality=np.full(2, 0.1), hist=hist, count=_counter(count), since=_counter(), accepted=_counter(),
        sideways=_counter(), kicks=_counter(), cur=_counter(), num_hist=_counter(1), screened=_counter(),
        missed=_counter(), grouped=_counter(), movable=movable,
        hits=np.empty((n * d, 2), dtype=np.int64), cand=np.empty(n, dtype=np.int64),
        last=np.empty(n, dtype=np.int64), pool=np.empty(n, dtype=np.int64), **moves)


class ClimbRun:
    """One climb's state: the kernel's arrays (`arrays`, a `regal.kernels.structs.ClimbState`, which
    `regal.kernels.climb.climb` updates in place) and the clock reading of each new best in its history."""

    def __init__(self, arrays: ClimbState):
        self.arrays = arrays
        self.hist_times = [time.perf_counter()]

    def adopt(self, placement, order, score: Score, trace: np.ndarray, count: int) -> None:
        """Make (placement, order), of `score` and step trace `trace`, the current schedule and,
        when it scores better than the best, the best; the counters and the move kinds'
        estimates stay."""
        s = self.arrays
        s.placement[:] = placement
        s.order[:] = order
        s.pos[s.order] = np.arange(s.order.shape[0])
        s.traces[s.cur[()]] = trace
        s.score[:] = score
        s.count[()] = count
        if score < self.best_score:  # as the kernel's _keep_if_best (not called from Python: a
            s.best_score[:] = score   # compile warmup skips)
            s.best_placement[:] = placement
            s.best_order[:] = order
            s.since[()] = 0
            if score.peak_bytes < s.hist[s.num_hist[()] - 1, 1]:
                self.reserve(1)
                s = self.arrays
                s.hist[s.num_hist[()]] = count, score.peak_bytes
                s.num_hist[()] += 1
                self.hist_times.append(time.perf_counter())

    def reserve(self, rows: int) -> None:
        """Room in the history for `rows` more new bests."""
        s = self.arrays
        need = int(s.num_hist[()]) + rows
        if need > s.hist.shape[0]:
            self.arrays = s._replace(hist=np.concatenate([s.hist, np.zeros((max(need, s.hist.shape[0]), 2),
                                                                            dtype=np.int64)]))

    placement = property(lambda self: self.arrays.placement)
    order = property(lambda self: self.arrays.order)
    best_placement = property(lambda self: self.arrays.best_placement)
    best_order = property(lambda self: self.arrays.best_order)
    trace = property(lambda self: self.arrays.traces[self.arrays.cur[()]], doc="the current schedule's step trace")
    score = property(lambda self: Score(*map(int, self.arrays.score)))
    best_score = property(lambda self: Score(*map(int, self.arrays.best_score)))
    evaluations = property(lambda self: int(self.arrays.count[()]))
    accepted = property(lambda self: int(self.arrays.accepted[()]))
    sideways = property(lambda self: int(self.arrays.sideways[()]))
    kicks = property(lambda self: int(self.arrays.kicks[()]))
    screened = property(lambda self: int(self.arrays.screened[()]))
    missed = property(lambda self: int(self.arrays.missed[()]))
    grouped = property(lambda self: int(self.arrays.grouped[()]))

    @property
    def history(self) -> list:
        """[evaluations, best peak_bytes, time.perf_counter()] at the start and each time it fell
        (the time is the end of the kernel call that found it)."""
        hist = self.arrays.hist
        return [[int(e), int(p), t] for (e, p), t in zip(hist[:len(self.hist_times)], self.hist_times)]


# ---------------------------------------------------------------------------- climb
def _chunk(state: ClimbState, nnz: int) -> int:
    """Evaluations per kernel call between deadline checks: about 10^6 array entries simulated."""
    n, d = state.traces.shape[1:]
    return int(np.clip(1_000_000 // max(n * d + nnz, 1), 1, 4096))


def run_climb(run: ClimbRun, evaluate: Evaluator, params: ClimbParams, rng, budget: int,
           deadline: float | None) -> str:
    """Moves until evaluate.count reaches budget or the deadline passes; returns why it stopped.

    The loop is one Numba kernel (`regal.kernels.climb.climb`), called in chunks so that the deadline
    is checked every few milliseconds. Adaptive (`adaptive_moves`): each move is of one of
    `KINDS`, with probability `adaptive_floor` + (1 - 4 `adaptive_floor`) q_k / sum(q)
    (probability matching, Thierens 2005); a kind's success estimate q_k moves by
    `adaptive_rate` toward 1 when its move improved the score, toward 0 when not (adaptive
    operator selection, as in adaptive large neighbourhood search, Ropke and Pisinger 2006): the
    climb leans on the moves that pay on this graph at this stage."""
    kg = evaluate.kg
    run.arrays.count[()] = evaluate.count
    chunk = _chunk(run.arrays, kg.in_idx.shape[0])
    stopped = "budget"
    while evaluate.count < budget:
        if expired(deadline):
            stopped = getattr(deadline, "reason", None) or "time_limit"
            break
        stop = min(budget, evaluate.count + chunk)
        run.reserve(stop - evaluate.count + 1)
        found = int(run.arrays.num_hist[()])
        code = _climb_kernel.climb(kg, run.arrays, params, rng, stop)
        evaluate.count = run.evaluations
        run.hist_times += [time.perf_counter()] * (int(run.arrays.num_hist[()]) - found)
        if code == 1:
            stopped = "no_moves"
            break
    return stopped


class Climb:
    """One climb that can be advanced in steps: a memetic search runs it between generations.

        climb = Climb(graph, devices, rng, config.params(num_nodes, budget))
        climb.start([(placement, order), ...], budget)   # the best of these starts (one evaluation each)
        climb.run(500, deadline=None)                    # 500 more evaluations
        climb.best_peak, climb.best, climb.evaluations
    """

    def __init__(self, graph: Graph, devices: int, rng: np.random.Generator, params: ClimbParams, moves=None):
        self.graph, self.num_devices = graph, check_devices(devices)
        self.candidates = pack_candidates(graph)
        self.evaluate = Evaluator(graph, devices)
        self.moves = moves   # a move policy (`regal.moves.MoveProposals`) or None
        self.params = params if moves is None else params._replace(mix=float(moves.mix))
        self.rng = rng
        self.state: ClimbRun | None = None
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
        self.state = ClimbRun(new_state(self.graph, self.num_devices, placement, order, scores[i], trace,
                                        self.evaluate.count, self.moves))

    def run(self, evaluations: int, deadline: float | None = None) -> str:
        """Climb for up to `evaluations` more evaluations; returns why it stopped."""
        return run_climb(self.state, self.evaluate, self.params, self.rng, self.evaluate.count + evaluations, deadline)

    def pack(self, evaluations: int) -> bool:
        """Re-home the best schedule's resident tensors (`regal.heuristics.pack_residents`) and
        go on from there if that scores better. Costs one evaluation to score the packed
        schedule when anything moved, plus one first when the best is not the current schedule
        (its step trace is simulated); nothing on one device, without resident tensors, or with
        fewer `evaluations` left than it may need. Returns whether the best improved."""
        state = self.state
        if self.num_devices == 1 or self.candidates.size == 0:
            return False
        at_best = (state.score == state.best_score and np.array_equal(state.placement, state.best_placement)
                   and np.array_equal(state.order, state.best_order))
        if evaluations < (1 if at_best else 2):
            return False
        placement, order = state.best_placement.copy(), state.best_order.copy()
        if at_best:
            trace = state.trace.copy()
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
