"""The flagship with recomputation (SPEC.md sections 3b, 5b): placement, order and what to
recompute, decided together.

`regal.optimize(..., recompute_budget=B)` runs it (B > 0: at most B times the cost of running
every node once is spent on recomputations, `regal.recompute.op_costs`). Three stages share the
budget of evaluations:

1. **The flagship without recomputation** (`regal.memetic.optimize_memory`, with the whole budget)
   until it stalls: at least `first_share` of the evaluations, then until its best falls by less
   than `stall_gain` over `stall_window` of them, at most `first_max` (`_StallStop`): its order
   and placement are the start (an order that keeps little alive is also a good order to
   recompute in). A fixed tenth left the order of graphs where recomputation buys little (an
   LSTM, a Haiku ResNet-18, a Flax U-Net at d = 2) up to 8 % above the full flagship's
   (experiments/results/recompute-tuning).
2. **The recompute climb** (`regal._remat_climb.recompute_climb`) on that schedule: steepest descent
   over the recompute set, adding the recomputation of a tensor held across the peak (alone or
   with the inputs it is made from; the `candidates` largest) that lowers (peak, steps at the
   peak) most (under a memory limit: the most per unit of cost), dropping one that no longer
   pays, within the cost budget.
3. **BRKGA over the joint chromosome** (n (d + 2) keys: each node's affinities, its priority and
   its recompute key), seeded with stage 2's schedule, the climb run again on each new best of
   the population (`RecomputePolish`, Lamarckian write-back), until the budget is spent.

With `memory_limit_bytes` (the runtime objective at d = 1: the step time is the cost of the
sequence), the fitness is the extra cost of a schedule within the limit, and its peak above it:
Checkmate's and Moccasin's problem, with the order and the placement free.
"""

from __future__ import annotations

import bisect
import time
from typing import NamedTuple

import numpy as np

from regal import _remat, _remat_climb
from regal._stop import Deadline, as_deadline, expired
from regal.brkga import BrkgaConfig, BrkgaState
from regal.config import FlagshipConfig
from regal.decode import encode
from regal.graph import Graph
from regal.loop import numba_threads, run_loop, write_back
from regal.priors import Priors
from regal.recompute import op_costs, remat_graph
from regal.simulate import kernel_graph
from regal.solution import Solution, make_solution

__all__ = ["RecomputeConfig", "RecomputeProblem", "optimize_recompute", "check_recompute_budget", "recompute_sequence"]


#: Rounds of the recompute climb between two polls of the deadline (a round scores up to
#: 3 x `regal._remat_climb.CANDIDATES` moves).
CLIMB_ROUNDS = 4


class RecomputeConfig(NamedTuple):
    """The recompute search's settings (module docstring)."""
    first_share: float = 0.1       # the flagship without recomputation's share of the evaluations (the least)
    first_max: float = 0.6         # > first_share: its most, run on until it stalls (`_StallStop`)
    stall_window: float = 0.1      # a stall: over this share of the budget ...
    stall_gain: float = 0.005      # ... its best fell by less than this fraction
    climb_evaluations: int = 4000  # the most evaluations one recompute climb spends
    population_size: int = 40      # the joint BRKGA's population
    candidates: int = 24           # the largest tensors live at the peak one round of stage 2's climb scores
    polish_candidates: int = 24    # the same for stage 3's climbs
    limit_candidates: int = 48     # both, under a memory limit, at most: one per 100 evaluations of the budget


def check_recompute_budget(value) -> float:
    """The budget as a float >= 0, or ValueError naming the argument and its range."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"recompute_budget must be a number >= 0 (a fraction of one run's cost), got {value!r}")
    value = float(value)
    if not (value >= 0.0 and np.isfinite(value)):
        raise ValueError(f"recompute_budget must be a finite number >= 0 (a fraction of one run's cost), got {value!r}")
    return value


#: A memory-limited fitness above this is a schedule over the limit (`_fitness`).
OVER_LIMIT = 1e6


def _fitness(peak: float, extra: float, limit: int, total: float = 1.0) -> float:
    """Lower is better: the peak (no limit); within the limit the extra cost as a fraction of
    `total` (the cost of one run), and above it OVER_LIMIT + peak / limit (a schedule that fits
    always wins, and of two that do not, the lower peak)."""
    if limit < 0:
        return float(peak)
    return float(extra) / total if peak <= limit else OVER_LIMIT + float(peak) / max(limit, 1)


class RecomputeProblem(NamedTuple):
    """The joint chromosome (n (d + 2) keys) scored as `_fitness`."""
    graph: Graph
    devices: int
    cost: np.ndarray      # float64[n]: op_costs
    budget: float         # the extra cost allowed, absolute
    limit: int            # the memory limit (-1: none; the peak is the fitness)
    total: float = 1.0    # the cost of one run (the limited fitness's unit)

    @property
    def num_keys(self) -> int:
        return self.graph.num_nodes * (self.devices + 2)

    def decode(self, keys: np.ndarray):
        """(placement, order, chosen, peak, extra) of one chromosome."""
        n, d = self.graph.num_nodes, self.devices
        placement = np.empty(n, dtype=np.int32)
        order = np.empty(n, dtype=np.int32)
        chosen = np.empty(n, dtype=np.bool_)
        peak = _remat.recompute_decode_simulate(kernel_graph(self.graph), remat_graph(self.graph),
                                                np.ascontiguousarray(keys), d,
                                                self.budget, self.cost, placement, order, chosen,
                                                np.empty(d, dtype=np.int64))
        return placement, order, chosen, int(peak), float(self.cost[chosen].sum())

    def evaluate(self, population: np.ndarray) -> np.ndarray:
        fitness = np.empty(population.shape[0], dtype=np.float64)
        _remat.recompute_evaluate_population(kernel_graph(self.graph), remat_graph(self.graph),
                                             np.ascontiguousarray(population),
                                             self.devices, self.budget, self.cost, fitness)
        if self.limit >= 0:  # the extra cost of each that fits (decoded again), the peak of the others
            for i in range(fitness.shape[0]):
                if fitness[i] <= self.limit:
                    _, _, _, peak, extra = self.decode(population[i])
                    fitness[i] = _fitness(peak, extra, self.limit, self.total)
                else:
                    fitness[i] = _fitness(fitness[i], 0.0, self.limit, self.total)
        return fitness

    def encode(self, placement, order, chosen) -> np.ndarray:
        base = encode(placement, order, self.devices).reshape(self.graph.num_nodes, self.devices + 1)
        keys = np.empty((self.graph.num_nodes, self.devices + 2))
        keys[:, :-1] = base
        keys[:, -1] = np.where(chosen, 0.75, 0.25)
        return keys.reshape(-1)


class _Best(NamedTuple):
    fitness: float
    placement: np.ndarray
    order: np.ndarray
    chosen: np.ndarray


class RecomputePolish:
    """The improver (`regal.loop.Improver`): the recompute climb on each new best of the population,
    written back (Lamarckian)."""

    def __init__(self, problem: RecomputeProblem, start: _Best, climb_evaluations: int, deadline, candidates: int):
        self.problem, self.climb_evaluations, self.deadline = problem, climb_evaluations, deadline
        self.candidates = candidates
        self.best = start
        self.spent = 0
        self.climbed = set()

    def climb(self, placement, order, chosen, evaluations: int) -> _Best:
        """The recompute climb from `chosen` for at most `evaluations`, CLIMB_ROUNDS rounds at a
        time, between which the deadline is polled (the climb goes on as one)."""
        chosen = chosen.copy()
        p = self.problem
        left = max(int(evaluations), 1)
        while True:
            peak, extra, used, cut = _remat_climb.recompute_climb(kernel_graph(p.graph), remat_graph(p.graph), order,
                                                                  placement, p.devices, p.cost, p.budget, chosen,
                                                                  p.limit, (left, CLIMB_ROUNDS, self.candidates))
            self.spent += int(used)
            left -= int(used)
            if not cut or left <= 0 or expired(self.deadline):
                break
        found = _Best(_fitness(peak, extra, p.limit, p.total), placement, order, chosen)
        if found.fitness < self.best.fitness:
            self.best = found
        return found

    def improve(self, state: BrkgaState, budget: int) -> BrkgaState:
        left = budget - state.evaluations - self.spent
        key = state.best_keys.tobytes()
        if left <= 0 or key in self.climbed or expired(self.deadline):
            return state
        self.climbed.add(key)
        placement, order, chosen, _, _ = self.problem.decode(state.best_keys)
        found = self.climb(placement, order, chosen, min(left, self.climb_evaluations))
        return write_back(state, lambda: self.problem.encode(found.placement, found.order, found.chosen),
                          found.fitness, overwrite=True)

    def finish(self, state: BrkgaState, stopped: str) -> BrkgaState:
        return state


class _StallStop:
    """Stage 1's callback: stop the flagship once it has spent `least` evaluations and its best
    fell by less than `gain` (a fraction) over the last `window`, or at `most`."""

    def __init__(self, least: int, most: int, window: int, gain: float):
        self.least, self.most, self.window, self.gain = least, most, window, gain
        self.at, self.best = [], []   # evaluations at each call, and the best seen up to it

    def __call__(self, p) -> bool:
        self.at.append(p.evaluations)
        self.best.append(min(p.best_peak_bytes, self.best[-1]) if self.best else p.best_peak_bytes)
        if p.evaluations >= self.most:
            return True
        if p.evaluations < self.least or p.evaluations < self.window:
            return False
        k = bisect.bisect_right(self.at, p.evaluations - self.window)   # the calls a window ago or before
        before = self.best[k - 1] if k else float("inf")
        return before - p.best_peak_bytes < self.gain * p.best_peak_bytes


def recompute_sequence(graph: Graph, order: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """int32[m]: the sequence of `order` (int32[n]) with the nodes `chosen` (bool[n]) recomputed where
    section 5b puts them (a node with no gap between its readers is not recomputed)."""
    n = graph.num_nodes
    order = np.ascontiguousarray(order, dtype=np.int32)
    seq = np.empty(2 * n, dtype=np.int32)
    m = _remat.build_sequence(kernel_graph(graph), order, remat_graph(graph), np.asarray(chosen, dtype=np.bool_),
                              np.empty(n, dtype=np.int64), seq, np.empty(0, dtype=np.int64))
    return seq[:m].copy()


def optimize_recompute(graph: Graph, devices: int, budget: int, seed: int, recompute_budget: float, *,
                       memory_limit_bytes: int | None = None, device_model=None,
                       config: FlagshipConfig | BrkgaConfig | None = None,
                       recompute_config: RecomputeConfig = RecomputeConfig(), time_limit_s: float | None = None,
                       deadline: Deadline | None = None, callback=None, num_threads: int | None = None,
                       method: str | None = None, joint_priors: Priors | None = None, **flagship) -> Solution:
    """The flagship with recomputation (module docstring). recompute_budget: the extra cost
    allowed, a fraction of running every node once (> 0). memory_limit_bytes: the runtime
    objective's limit (fitness: the least extra cost within it). The other arguments are the
    flagship's (`regal.optimize`). joint_priors: per-gene Beta priors over the joint chromosome
    (n (d + 2) keys, `RecomputeProblem`'s layout) that stage 3's mutants and initial members are
    drawn from (`regal.priors`); None: uniform, as plain BRKGA. Returns a Solution whose order
    may run nodes again (info["recompute"]: `regal.recompute.RecomputeStats`)."""
    from regal.memetic import optimize_memory
    t0 = time.perf_counter()
    budget = int(budget)
    if joint_priors is not None and joint_priors.num_keys != graph.num_nodes * (devices + 2):
        raise ValueError(f"joint_priors have {joint_priors.num_keys} genes; the recompute chromosome of "
                         f"{graph.num_nodes} nodes on {devices} devices has {graph.num_nodes * (devices + 2)}")
    cost, cost_model = op_costs(graph)
    total = float(cost.sum())
    allowed = recompute_budget * total
    limit = -1 if memory_limit_bytes is None else int(memory_limit_bytes)
    deadline = None if time_limit_s is None and deadline is None else as_deadline(deadline, time_limit_s, t0)
    rc = recompute_config
    first = max(1, min(budget, int(round(budget * rc.first_share))))
    if rc.first_max > rc.first_share:  # the full budget's flagship, stopped when it stalls
        stop = _StallStop(first, int(round(budget * rc.first_max)), int(round(budget * rc.stall_window)), rc.stall_gain)
        base = optimize_memory(graph, devices, budget, seed, config=config, deadline=deadline, num_threads=num_threads,
                               callback=stop, **flagship)
    else:
        base = optimize_memory(graph, devices, first, seed, config=config, deadline=deadline, num_threads=num_threads,
                               **flagship)
    problem = RecomputeProblem(graph, devices, cost, allowed, limit, max(total, 1e-300))
    no_recompute = np.zeros(graph.num_nodes, dtype=np.bool_)
    start = _Best(_fitness(base.peak_bytes, 0.0, limit, problem.total), base.placement, base.order, no_recompute)
    # under a memory limit the steepest climb spends the least extra cost, where the budget pays for it
    limited = min(rc.limit_candidates, max(8, budget // 100))
    polish = RecomputePolish(problem, start, rc.climb_evaluations, deadline, rc.candidates if limit < 0 else limited)
    spent = base.evaluations
    stopped = base.info.get("stopped", "budget")
    history = [list(h) for h in base.info.get("history", [])]
    if spent < budget and not expired(deadline):
        polish.climb(base.placement, base.order, no_recompute, min(budget - spent, rc.climb_evaluations))
        spent += polish.spent
        left = budget - spent
        if left > rc.population_size and not expired(deadline):
            polish.spent = 0  # from here on, the loop counts the climbs' evaluations in its own
            polish.candidates = rc.polish_candidates if limit < 0 else limited
            b = polish.best
            bconfig = BrkgaConfig(population_size=rc.population_size).validate()
            with numba_threads(num_threads):
                out = run_loop(problem, bconfig, left, seed, initial=[problem.encode(b.placement, b.order, b.chosen)],
                               priors=joint_priors, improver=polish, t0=t0, deadline=deadline, callback=callback)
            stopped = out.stopped
            spent += out.evaluations
            if out.state.best_fitness < polish.best.fitness:
                placement, order, chosen, _, _ = problem.decode(out.state.best_keys)
                polish.best = _Best(out.state.best_fitness, placement, order, chosen)
    b = polish.best
    seq = recompute_sequence(graph, b.order, b.chosen)
    info = {"seed": seed, "budget": budget, "stopped": stopped, "recompute_budget": recompute_budget,
            "flagship_peak_bytes": int(base.peak_bytes), "flagship_evaluations": int(base.evaluations),
            "history": history}
    if limit >= 0:
        info["memory_limit_bytes"] = limit
    sol = make_solution(graph, b.placement, seq, devices, method=method or "regal", evaluations=spent,
                        seconds=time.perf_counter() - t0, info=info)
    if not sol.recomputes:
        sol.info["recompute"] = {"count": 0, "extra_cost": 0.0, "extra_fraction": 0.0, "cost_model": cost_model}
    if limit >= 0:  # the runtime objective: the timed model's figures of the instance graph
        sol.info["timed"] = _timed_block(graph, sol, device_model, limit)
    return sol


def _timed_block(graph: Graph, sol: Solution, device_model, limit: int) -> dict:
    """info["timed"] of a runtime solution with recomputations: section 4 on its instance graph,
    with section 4's rule for recomputations (`regal.timed.instance_schedule`, as `resimulate`)."""
    from regal.timed import check_device_model, instance_schedule, simulate_timed, timed_info
    order = sol.order
    inst, placement = graph, sol.placement
    if order.shape[0] > graph.num_nodes:   # checked when the Solution was made
        inst, nodes, placement = instance_schedule(graph, sol.placement, order, checked=True)
        order = np.arange(nodes.shape[0])
    model = check_device_model(device_model, sol.num_devices)
    sim = simulate_timed(inst, placement, order, sol.num_devices, model)
    return timed_info(inst, sim, sol.num_devices, model, limit)
