"""The runtime objective: the shortest makespan under a memory limit per device (issue 16).

`regal.optimize(graph, devices, objective="runtime", memory_limit_bytes=..., device_model=...)`
runs `optimize_runtime`: the flagship's loop (`regal.memetic`) on the timed chromosome
(`regal.timed`, SPEC.md section 5: per node d affinities, a priority and d transfer priorities)
scored by the timed model (section 4). Fitness (`regal.timed.runtime_fitness`): the makespan
when every device's peak fits its limit, else a value above every feasible makespan that grows
with the bytes over the limits, so the search is pulled back to feasibility and an infeasible
schedule never wins while a feasible one is known.

- **Seeding.** The initial population holds the timed list schedulers (`regal.timed_heuristics`:
  HEFT, memory-aware HEFT under a limit when its schedule fits it, critical path on METIS, one
  device), each encoded so that it decodes to exactly the schedule it was scored with, and the
  peak-memory heuristics (`regal.heuristics`: METIS + DFS, greedy, the compiler orders), whose
  low-memory schedules are the feasible starts when the limit binds; one evaluation each.
  Memory-aware HEFT that does not fit is left out: the climb starts from the best seed, the
  least over the limit when none fits, and from that HEFT schedule it was measured to stay over
  the limit on a graph (a 1.5x limit, d = 2) that the other seeds' start repaired.
- **Polish.** A climb over timed schedules runs between the generations (`TimedClimb`): device
  moves (a node to another device), priority moves (a node just before another one of its
  device, near it in the dispatch order) and transfer moves (a transfer just before another one
  on its link); three quarters of them on the current critical path (the chain of tasks that
  waited for each other back from the last finish), or, while the schedule is over its limit,
  off the device most over it. Each move is one evaluation, `batch` of them evaluated in
  parallel; the best of a batch is taken when it is no worse (plateaus are walked). Its best is
  written back into the population (Lamarckian), as in the peak-memory flagship. While the best
  schedule is still over the limit the climb gets at most `FlagshipConfig.infeasible_share`
  (half) of the evaluations, the population's search the rest: the population's search is what
  finds a fitting schedule where the climb's moves stall.
- **Priors.** From a policy trained for this objective (`regal train --objective runtime`:
  placement, scheduling and transfer-priority heads; the shipped one is `policy="runtime"`),
  when one is given; none by default.

Budget, time limit, callback and thread-count invariance as in `regal.optimize` (`regal.flagship`).
"""

from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

from regal._stop import Deadline, as_deadline, expired
from regal.brkga import BrkgaConfig, BrkgaState
from regal.config import FlagshipConfig, as_flagship_config, check_arguments, polish_share
from regal.graph import Graph, check_devices
from regal.heuristics import heuristic_solutions
from regal.loop import Progress, check_search_size, numba_threads, run_loop, write_back
from regal.policy.resolve import resolve_priors
from regal.problems import RuntimeProblem
from regal.solution import Solution, timed_solution
from regal.timed import (DeviceModel, TimedSimulation, check_device_model, encode_timed, excess_bytes,
                         memory_limits)
from regal.timed_heuristics import timed_starts

__all__ = ["optimize_runtime", "TimedClimb", "TimedPolish", "critical_nodes", "timed_seeds", "solve_brkga_runtime"]


def timed_seeds(graph: Graph, devices: int, model: DeviceModel, seed: int,
                memory_limit_bytes=None, deadline: Deadline | None = None) -> list[tuple[str, np.ndarray]]:
    """(name, timed chromosome) of every seed: the timed list schedulers (encoded to decode to
    their own schedule; memory-aware HEFT only when it fits the limit), then the peak-memory
    heuristics (their order as priorities).

    Memory-aware HEFT is there to give the search a fast schedule that fits; one that does not
    fit would only take the climb's start (the least over the limit) from the seeds it used to
    repair from, which measured worse (module docstring)."""
    limits = memory_limits(memory_limit_bytes, devices)
    seeds = []
    for name, placement, sim in timed_starts(graph, devices, model, seed, memory_limit_bytes=memory_limit_bytes):
        if name == "heft-mem" and excess_bytes(sim.device_peak_bytes, limits) > 0:
            continue
        seeds.append((name, encode_timed(placement, sim.order, devices, (sim.transfer_node, sim.transfer_device))))
    if expired(deadline):
        return seeds
    for name, placement, order in heuristic_solutions(graph, devices, seed, deadline=deadline):
        seeds.append((name, encode_timed(placement, order, devices)))
    return seeds


def critical_nodes(graph: Graph, placement: np.ndarray, sim: TimedSimulation) -> np.ndarray:
    """int64[*]: the critical path of a timed schedule, from the last node to finish back: each
    node's start was fixed by the last of (its device freeing up, a predecessor finishing, an
    input arriving); follow that task back (for an arrival, to the tensor's producer)."""
    compute = ~graph.resident
    if not compute.any():
        return np.empty(0, dtype=np.int64)
    preds = graph.cached("pred_lists", lambda: [graph.pred_idx[graph.pred_ptr[v]:graph.pred_ptr[v + 1]].tolist()
                                                for v in range(graph.num_nodes)])
    resident = graph.resident.tolist()
    place = placement.tolist()
    start, finish = sim.start_s.tolist(), sim.finish_s.tolist()
    arrival = dict(zip(zip(sim.transfer_node.tolist(), sim.transfer_device.tolist()), sim.transfer_finish_s.tolist()))
    prev = {}  # the previous node on each node's device, in the dispatch order
    last: dict[int, int] = {}
    for v in sim.order.tolist():
        if not resident[v]:
            prev[v] = last.get(place[v], -1)
            last[place[v]] = v
    v = int(np.flatnonzero(compute)[np.argmax(sim.finish_s[compute])])
    path, seen = [], set()
    while v >= 0 and v not in seen:
        seen.add(v)
        path.append(v)
        s, k = start[v], place[v]
        nxt = -1
        for u in preds[v]:
            if resident[u]:
                continue
            if (finish[u] == s and place[u] == k) or arrival.get((u, k)) == s or (finish[u] == s):
                nxt = u
                break
        p = prev[v]
        if nxt < 0 and p >= 0 and finish[p] == s:
            nxt = p
        v = nxt
    return np.asarray(path, dtype=np.int64)


class TimedClimb:
    """The runtime flagship's polish: a batched first-best climb over timed chromosomes."""

    def __init__(self, problem: RuntimeProblem, rng: np.random.Generator, batch: int = 16, focus: float = 0.75):
        self.problem = problem
        self.rng = rng
        self.batch = batch
        self.focus = focus
        self.evaluations = 0
        self.best_keys: np.ndarray | None = None
        self.best_fitness = np.inf
        self._cur_keys: np.ndarray | None = None
        self._cur_fitness = np.inf

    def start(self, keys: np.ndarray, fitness: float) -> None:
        self._cur_keys = np.array(keys, dtype=np.float64)
        self._cur_fitness = float(fitness)
        if fitness < self.best_fitness:
            self.best_keys, self.best_fitness = self._cur_keys.copy(), float(fitness)
        self._study()

    def _study(self) -> None:
        """Decode the current schedule once more, recording it, for the moves' targets."""
        p = self.problem
        self._placement, self._sim = p.decode(self._cur_keys)
        self._critical = None  # computed when a move first asks for it
        over = np.where(p.limits >= 0, self._sim.device_peak_bytes - p.limits, -1)
        self._over_device = int(np.argmax(over)) if over.max() > 0 else -1
        self._device_seq = [self._sim.order[(self._placement[self._sim.order] == k)
                                            & ~p.graph.resident[self._sim.order]] for k in range(p.devices)]
        self._pos = np.empty(p.graph.num_nodes, dtype=np.int64)
        for seq in self._device_seq:
            self._pos[seq] = np.arange(seq.shape[0])

    def _pick(self) -> int:
        g = self.problem.graph
        if self._over_device >= 0 and self.rng.random() < self.focus:
            on = self._device_seq[self._over_device]
            if on.size:
                return int(on[self.rng.integers(on.size)])
        if self.rng.random() < self.focus:
            if self._critical is None:
                self._critical = critical_nodes(g, self._placement, self._sim)
            if self._critical.size:
                return int(self._critical[self.rng.integers(self._critical.size)])
        return int(self.rng.integers(g.num_nodes))

    def _group(self, v: int, q: int) -> list[int]:
        """The nodes a device move of v to q takes along: a weight (resident node) goes with its
        consumers (up to 4 of them), and a node takes its weights that nobody off q reads
        otherwise; split apart, either side would copy the weight at time 0 and save nothing."""
        g = self.problem.graph
        if g.resident[v]:
            consumers = g.consumers(v)
            return [v] + (consumers.tolist() if consumers.size <= 4 else [])
        group = [v]
        for u in g.inputs(v).tolist():
            if g.resident[u]:
                others = [c for c in g.consumers(u).tolist() if c != v]
                if all(self._placement[c] == q for c in others):
                    group.append(u)
        return group

    def _move(self, keys: np.ndarray) -> None:
        p = self.problem
        d = p.devices
        row = keys.reshape(p.graph.num_nodes, 2 * d + 1)
        r = self.rng.random()
        v = self._pick()
        if d > 1 and r < 0.4:  # device move
            k = int(self._placement[v])
            if self._over_device >= 0 and k == self._over_device:
                q = int(np.argmin(np.where(np.arange(d) == k, np.iinfo(np.int64).max, self._sim.device_peak_bytes)))
            else:
                q = int((k + 1 + self.rng.integers(d - 1)) % d)
            for w in self._group(v, q):
                row[w, :d] = 0.25
                row[w, q] = 0.75
            return
        if d == 1 or r < 0.85 or self._sim.transfer_node.size == 0:  # priority move
            seq = self._device_seq[int(self._placement[v])]
            if seq.size < 2 or p.graph.resident[v]:
                return
            i = self._pos[v]
            j = int(np.clip(i + self.rng.integers(-8, 9), 0, seq.size - 1))
            if j == i:
                j = i - 1 if i > 0 else i + 1
            w = seq[j]
            before = row[seq[j - 1], d] if j > 0 else 1.0  # put v just ahead of w
            if j > i:  # moving later: just after w
                after = row[seq[j + 1], d] if j + 1 < seq.size else 0.0
                row[v, d] = 0.5 * (row[w, d] + after)
            else:
                row[v, d] = 0.5 * (row[w, d] + before)
            return
        # transfer move: a transfer just ahead of another one on its link, near it in time
        sim = self._sim
        t = int(self.rng.integers(sim.transfer_node.size))
        u, q = int(sim.transfer_node[t]), int(sim.transfer_device[t])
        link = self._placement[sim.transfer_node] * d + sim.transfer_device
        same = np.flatnonzero(link == link[t])
        if same.size < 2:
            row[u, d + 1 + q] = self.rng.random()
            return
        i = int(np.searchsorted(same, t))
        j = int(np.clip(i + self.rng.integers(-4, 5), 0, same.size - 1))
        if j == i:
            j = i - 1 if i > 0 else i + 1
        w, qw = int(sim.transfer_node[same[j]]), int(sim.transfer_device[same[j]])
        before = row[int(sim.transfer_node[same[j - 1]]), d + 1 + q] if j > 0 else 1.0
        row[u, d + 1 + q] = 0.5 * (row[w, d + 1 + qw] + before) if j < i else 0.5 * row[w, d + 1 + qw]

    def run(self, evaluations: int, deadline: float | None) -> None:
        """Spend `evaluations` evaluations (fewer if `deadline`, a perf_counter(), passes)."""
        left = evaluations
        while left > 0:
            if expired(deadline):
                break
            m = min(self.batch, left)
            cand = np.repeat(self._cur_keys[None], m, axis=0)
            for c in cand:
                self._move(c)
            fit = self.problem.evaluate(cand)
            self.evaluations += m
            left -= m
            i = int(np.argmin(fit))
            if fit[i] <= self._cur_fitness:
                self._cur_keys, self._cur_fitness = cand[i], float(fit[i])
                if fit[i] < self.best_fitness:
                    self.best_keys, self.best_fitness = cand[i].copy(), float(fit[i])
                self._study()


class TimedPolish:
    """The runtime flagship's improver (`regal.loop.Improver`): the timed climb between the
    generations, started from the population's best, its best written back; while the best
    schedule is over the limit it gets at most `infeasible_share` of the evaluations."""

    def __init__(self, problem: RuntimeProblem, config: FlagshipConfig, brkga_config: BrkgaConfig, seed: int,
                 share: float, deadline: float | None):
        self.problem, self.config, self.brkga_config = problem, config, brkga_config
        self.share, self.deadline = share, deadline
        self.climber = TimedClimb(problem, np.random.default_rng([seed, 0x7173]))  # the climb's own stream

    @property
    def spent(self) -> int:
        return self.climber.evaluations

    def improve(self, state: BrkgaState, budget: int) -> BrkgaState:
        used = state.evaluations + self.spent
        if used >= budget:
            return state
        climber = self.climber
        if climber.best_keys is None:
            climber.start(state.best_keys, state.best_fitness)
        cur = self.share if state.best_fitness <= self.problem.bound else min(self.share, self.config.infeasible_share)
        cfg = self.brkga_config
        chunk = int(round((cfg.population_size - cfg.num_elites) * cur / (1.0 - cur)))
        climber.run(min(max(chunk, 2), budget - used), self.deadline)
        if climber.best_fitness < state.best_fitness:
            state = write_back(state, lambda: climber.best_keys, climber.best_fitness)
        return state

    def finish(self, state: BrkgaState, stopped: str) -> BrkgaState:
        return state


def optimize_runtime(graph: Graph, devices: int = 1, budget: int = 5000, seed: int = 0, *,
                     memory_limit_bytes=None, device_model=None, seeding: bool = True, polish: bool = True,
                     config=None, time_limit_s: float | None = None,
                     callback: Callable[[Progress], bool | None] | None = None, num_threads: int | None = None,
                     initial: list[np.ndarray] | None = None, method: str | None = None, policy=None,
                     priors=None, deadline: Deadline | None = None) -> Solution:
    """Search placements, priorities and transfer orders of `graph` on `devices` devices for the
    shortest makespan with every device's peak memory <= memory_limit_bytes (module docstring).

    memory_limit_bytes: None (no limit), an int for every device, or one int per device.
    device_model: a `regal.timed.DeviceModel`, a dict of its fields, or None for the defaults.
    initial: extra timed chromosomes (float64[n (2d + 1)] each) for the initial population.
    policy / priors: per-gene Beta priors of the timed chromosome for the mutants, from a policy
        trained for this objective ("runtime", a path or a Policy; `regal.search.resolve_priors`)
        or given; with seeding or polish on, config.prior_share of the mutants are drawn from
        them (config.brkga.prior_share), else all; None / "none": uniform.
    The other arguments as in `regal.optimize`. The Solution's order is the dispatch order of
    the best schedule; info["timed"] holds its makespan, timed peaks, feasibility, the limit
    and the device model, re-simulated from the solution (`regal.solution.timed_solution`).
    """
    t0 = time.perf_counter()
    check_arguments(graph, budget, config, time_limit_s)
    devices = check_devices(devices)
    model = check_device_model(device_model, devices)
    limits = memory_limits(memory_limit_bytes, devices)
    flagship = as_flagship_config(config)
    config = flagship.resolved_brkga(seeding or polish)
    problem = RuntimeProblem(graph, devices, model, memory_limit_bytes, limits)
    check_search_size(graph, devices, config.population_size, problem.num_keys, "timed chromosomes")
    priors = resolve_priors(graph, devices, priors, policy, objective="runtime")
    deadline = None if time_limit_s is None and deadline is None else as_deadline(deadline, time_limit_s, t0)
    for keys in initial or []:
        if np.shape(keys) != (problem.num_keys,):
            raise ValueError(f"initial chromosomes must have {problem.num_keys} keys (the timed layout), "
                             f"got {np.shape(keys)}")
    seeds = timed_seeds(graph, devices, model, seed, memory_limit_bytes, deadline) if seeding else []
    starts = [keys for _, keys in seeds] + [np.asarray(k, dtype=np.float64) for k in initial or []]
    share = polish_share(graph.num_nodes, devices) if polish else 0.0
    improver = TimedPolish(problem, flagship, config, seed, share, deadline) if share > 0.0 else None
    with numba_threads(num_threads):
        out = run_loop(problem, config, budget, seed, priors=priors, initial=starts, improver=improver, t0=t0,
                       deadline=deadline, callback=callback)
    state = out.state
    placement, sim = problem.decode(state.best_keys)
    assert problem.fitness(sim) == state.best_fitness, "decoder and timed simulator disagree"
    info = {"objective": "runtime", "seed": seed, "budget": budget, "generations": state.generation,
            "priors": priors is not None,
            "policy": (os.fspath(policy) if isinstance(policy, (str, os.PathLike))
                       else None if policy is None else type(policy).__name__),
            "stopped": out.stopped, "seeding": [name for name, _ in seeds], "polish_share": share,
            "polish_evaluations": 0 if improver is None else improver.spent, "config": config._asdict(),
            "history": out.history}
    return timed_solution(graph, placement, sim, devices, model, method=method or "regal",
                          memory_limit_bytes=memory_limit_bytes, evaluations=out.evaluations,
                          seconds=time.perf_counter() - t0, info=info)


# ---------------------------------------------------------------- registry entries (regal.methods)
def solve_brkga_runtime(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                        budget: int = 5000, memory_limit_bytes=None, device_model=None,
                        config: BrkgaConfig | dict | None = None, **options) -> Solution:
    """Plain BRKGA on the timed chromosome under the runtime objective (the reference "BRKGA 5K")."""
    if isinstance(config, dict):
        config = BrkgaConfig(**config)
    return optimize_runtime(graph, devices, budget, seed, memory_limit_bytes=memory_limit_bytes,
                            device_model=device_model, seeding=False, polish=False, config=config,
                            time_limit_s=time_limit_s, method="brkga-runtime", **options)
