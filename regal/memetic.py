"""The flagship search: a memetic REGAL (BRKGA with Lamarckian local improvement).

`regal.optimize(graph, devices, budget=5000, seed=0)` runs it (`optimize_memory`): the search loop
(`regal.loop`) on `regal.problems.MemoryProblem` with the improver `Polish`; its settings are the
fields of `regal.FlagshipConfig` (`config=`). Three parts, each of which can be switched off (everything
off is plain BRKGA, bit for bit):

- **Seeding.** The initial population holds every cheap heuristic solution the library has
  (`regal.heuristics.heuristic_solutions`: METIS + DFS, greedy, XLA's list/DFS/post-order and
  Inductor's LPMF/BFS/DFS orders) and, on several devices, the "computes on fewer devices"
  starts (`regal.heuristics.packed_solutions`: every operation on one device, the parameters
  re-homed across all, as a parameter server keeps them; `packed_seeds`), encoded as
  chromosomes (`regal.decode.encode`); the rest of the population is drawn as mutants. Each
  seed costs one evaluation, as any member does, and a packed one one more (the step trace it
  is packed on). Packed seeds are used only while they fit in a tenth of the budget, on graphs
  of at most `packed_seeds_nodes_per_eval` nodes per evaluation: with fewer evaluations than
  nodes the climb cannot spread the work of a one-device start again.
- **Priors.** Mutants are drawn from per-gene Beta priors (REGAL, Paliwal et al., ICLR 2020):
  a trained policy's (`policy`), or explicit `priors`; `prior_share` of them, the rest uniform.
  With seeding on, the schedule of the priors' means (every gene at its Beta's mean) is one
  more start.
- **Polish.** One peak-focused local-search climb (`regal.local_search`: order and device
  moves near the peak, plateau walks, kicks; with `informed` moves, which aim at the peak
  device, and directed ones, which take a tensor held across a peak step off it; its settings are
  `FlagshipConfig.climb`, `regal.climb.FLAGSHIP_CLIMB` by default) runs between
  the generations. It starts from the best heuristic seed (by the local search's own score, as
  the local-search baseline picks its start) and keeps walking across generations; whenever it
  finds a better schedule, the schedule is encoded back into the population (Lamarckian
  memetic algorithm, Moscato 1989), where crossover can spread it. The climb never jumps to a
  member of the population: a random placement can beat every heuristic at first and trap a
  climb far above where a heuristic's basin leads. A share of the evaluations
  (`regal.config.polish_share`) goes to the climb. The climb anneals (Kirkpatrick et al. 1983):
  early on it sometimes accepts a move that raises the peak a little (`climb.anneal_temperature`),
  which lets it leave the basin its start lies in; less on a graph of more nodes than the
  budget has evaluations (`anneal_evals_per_node`, `anneal_scale_power`): an uphill move pays
  only if the climb has the evaluations to come back down past it. It picks each move's kind
  (uniform, peak-focused, informed, directed) by how often that kind has improved the score
  lately (`adaptive_moves`), so it leans on whatever pays on the graph. Each new best of the
  climb has its resident tensors (parameters) re-homed to the devices where they cost least
  (`pack_residents`), and so does the final one, with the last two evaluations.
- **Start choice** (issue 34). A policy with a start-choice head (`policy="learned"`) picks which
  of the starts the first climb goes on from, from the graph and the starts' scores
  (`regal.policy.start_choice`), instead of the lowest score; it costs one evaluation more.
- **Move proposals** (issue 47). A policy with a move head (`policy="learned"`) gives every
  climb per-node weights for which node its moves pick and per-node odds of grouping a device
  move (`regal.moves`); a share of the picks follows them, the rest are the climb's own.
- **Restarts** (issue 33). A climb that has found no new best for `restart_stall` of the budget
  starts again: from the population's best when the population has found a better schedule
  than the climb, else from the best start of the other kind (a plain start after a "computes on
  fewer devices" one, or the reverse) not yet climbed from; its best stays in the population. A
  climb from a packed start is checked every half stall rather than between generations: a
  one-device schedule the climb cannot spread over the devices again is the trap that costs
  most (ViT forward graphs: up to 49 % above local search before), and at 1,000 evaluations a
  generation's round is most of the budget.

Population: BRKGA's 100 members (`FlagshipConfig.brkga`), but at most one per
`evaluations_per_member` (40) evaluations of the budget, at least `min_population` (10): the
initial population's random members are evaluations the climb does not get, and at 1,000
evaluations a population of 25 ends lower than one of 100 (experiments/results/INDEX.md).

Budget: `budget` evaluations in all, heuristic seeds, decodes and local moves alike (one
evaluation = one simulation); the last step is cut short so exactly `budget` are spent, unless
`time_limit_s` or the callback stops the search first; once the deadline has passed the climb
is neither re-homed, written back nor restarted, and the answer takes the climb's best as it is
where it beats the population's. The answer is never worse than the best seed (elitism). A
population too large for memory is shrunk (`regal.loop.fit_population`: at most 2.25 GiB of
chromosomes; info "population_asked" then holds the size asked for, "config" the one used).
Thread-count invariant: the population is decoded in parallel, each chromosome on its own; the
local search is sequential and seeded from `seed`.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Callable

import numpy as np

from regal._stop import Deadline, as_deadline, expired
from regal.brkga import BrkgaConfig, BrkgaState
from regal.config import FlagshipConfig, as_flagship_config, check_arguments, polish_share
from regal.decode import encode
from regal.graph import Graph, check_devices
from regal.heuristics import heuristic_solutions, packed_solutions
from regal.climb import Climb
from regal.loop import Progress, fit_population, numba_threads, run_loop, write_back
from regal.policy.names import DEFAULT_POLICY_NAME
from regal.policy.resolve import resolve_moves, resolve_policy
from regal.priors import Priors
from regal.problems import MemoryProblem
from regal.solution import Solution, make_solution

__all__ = ["optimize_memory", "packed_seed_devices", "polish_share", "Polish", "FlagshipConfig"]


def packed_seed_devices(devices: int, config: FlagshipConfig = FlagshipConfig()) -> list[int]:
    """The device counts the flagship's packed seeds compute on (`config.packed_seeds`)."""
    return [k for k in range(1, int(config.packed_seeds) + 1) if k < devices]


def _seed_solutions(graph: Graph, devices: int, seed: int, budget: int, config: FlagshipConfig,
                    deadline: Deadline | None = None) -> tuple[list, int]:
    """The seeds (name, placement, order) and the simulations they cost beyond their own
    evaluations: the heuristic starts, then the "computes on fewer devices" starts, one
    simulation each, as long as those stay within a tenth of the budget, on graphs of at most
    `packed_seeds_nodes_per_eval` nodes per evaluation."""
    starts = list(heuristic_solutions(graph, devices, seed, deadline=deadline))
    packed = list(itertools.islice(packed_solutions(graph, devices, seed, packed_seed_devices(devices, config),
                                                    deadline=deadline),
                                   budget // 10)) \
        if config.packed_seeds and devices > 1 and graph.num_nodes <= config.packed_seeds_nodes_per_eval * budget \
        else []
    return starts + packed, len(packed)


class Polish:
    """The flagship's improver (`regal.loop.Improver`): one local-search climb between the
    generations, its new bests re-homed (`pack_residents`) and written back into the population,
    restarted when it stalls (`restart_stall`).

    starts: (name, placement, order) the climb picks its start from (the best by its own score,
    or the one `chooser` (names, scores) -> index picks: a policy's start choice, issue 34; none:
    the population's best); extra: evaluations the seeds spent outside the population;
    share: the climb's share of the evaluations (0: no climb); reserve: evaluations kept for
    re-homing the final best (`finish`), beyond the loop's budget."""

    def __init__(self, problem: MemoryProblem, config: FlagshipConfig, brkga_config: BrkgaConfig, budget: int,
                 seed: int, starts: list, extra: int, share: float, reserve: int, deadline: float | None,
                 chooser=None, moves=None):
        self.problem, self.config, self.brkga_config = problem, config, brkga_config
        self.budget, self.starts, self.extra, self.share = budget, starts, extra, share
        self.reserve, self.deadline = reserve, deadline
        self.chooser = chooser  # a policy's start choice (names, scores) -> index, for the first climb
        self.moves = moves      # a policy's move proposals (`regal.moves.MoveProposals`), for every climb
        self.rng = np.random.default_rng([seed, 0x5EED])  # the local search's own stream
        self.climber: Climb | None = None
        self.packed = None    # the best score last re-homed
        self.retired = 0      # evaluations of the climbs a restart ended
        self.kind = None      # the kind of start the climb went on from: packed, plain or population
        self.start_name = None  # the name of that start (a seed's name, or "population")
        self.tried = set()    # the kinds of start climbed from so far
        self.climb_best = (float("inf"), 0)   # the climb's best peak, and the evaluations spent then
        self.climbs = []      # each climb's kind of start, start and best peak, evaluations
        self.marks = []       # (climb, its evaluations, the run's evaluations) before each climb step
        self.kept = None      # (peak, placement, order): the best a climb a restart ended had found

    @property
    def spent(self) -> int:
        return self.extra + self.retired + (0 if self.climber is None else self.climber.evaluations)

    def improve(self, state: BrkgaState, budget: int) -> BrkgaState:
        """Start the climb (first time) or restart it if it has stalled, then climb on for a
        share of a generation's evaluations."""
        if self.share <= 0.0:
            return state
        if self.climber is None and state.evaluations + self.spent < budget:
            self._start(state, budget - state.evaluations - self.spent)
        used = state.evaluations + self.spent
        if used < budget and self.config.restart_stall > 0 and self._stalled():
            self._restart(state, budget - used)
            used = state.evaluations + self.spent
        if used < budget:
            cfg = self.brkga_config
            chunk = int(round((cfg.population_size - cfg.num_elites) * self.share / (1.0 - self.share)))
            self._climb(state, min(max(chunk, 2), budget - used))
            if expired(self.deadline):
                # the time is up: no re-homing, and no write-back (encoding the schedule, then
                # moving the population's rows); the answer takes the climb's best as it is
                return state
            self._pack(state)
            if self.climber.best_peak < self.climb_best[0]:
                self.climb_best = (self.climber.best_peak, self.spent)
            if self.climber.best_peak < state.best_fitness:
                state = self._write_back(state)
        return state

    def _climb(self, state: BrkgaState, evaluations: int) -> None:
        """Climb on for `evaluations`. A climb from a packed start goes in steps of half the
        stall length and restarts as soon as it stalls: a one-device schedule it cannot spread
        again is the trap that costs most, and a round may be most of a short budget."""
        stall = self.config.restart_stall * self.budget
        end = self.spent + evaluations
        while self.spent < end:
            spent = self.spent
            step = end - spent if stall <= 0 or self.kind != "packed" else max(int(stall // 2), 10)
            self.marks.append((self.climber, self.climber.evaluations, state.evaluations + spent))
            self.climber.run(min(step, end - spent), self.deadline)
            if self.spent == spent or self.spent >= end:   # done, or the deadline / no move left
                break
            if self.climber.best_peak < self.climb_best[0]:
                self.climb_best = (self.climber.best_peak, self.spent)
            elif expired(self.deadline):   # no restart (a new climb and its first evaluation) after the deadline
                break
            elif self._stalled():
                self._restart(state, end - self.spent)

    def finish(self, state: BrkgaState, stopped: str) -> BrkgaState:
        """With the reserve: re-home the final best's resident tensors, climb on with what is left."""
        climber = self.climber
        if not (self.reserve and stopped == "budget" and climber is not None):
            return state
        full = self.budget + self.reserve
        climber.pack(full - state.evaluations - self.spent)
        climber.run(full - state.evaluations - self.spent, self.deadline)  # what pack left
        return self._write_back(state) if climber.best_peak < state.best_fitness else state

    def best(self, state: BrkgaState) -> tuple[np.ndarray, np.ndarray, float]:
        """(placement, order, peak_bytes) of the best schedule the search found: the population's
        best, decoded, or a climb's that is not in the population: the current climb's when the
        deadline passed before it could be written back, or one a restart ended within a round."""
        best = (state.best_fitness, None, None)
        if self.climber is not None and self.climber.best_peak < best[0]:
            best = (self.climber.best_peak, *self.climber.best)
        if self.kept is not None and self.kept[0] < best[0]:
            best = self.kept
        if best[1] is None:
            return (*self.problem.decode(state.best_keys), state.best_fitness)
        return best[1].copy(), best[2].copy(), best[0]

    def history(self, loop_history: list, t0: float) -> list:
        """The loop's history ([evaluations, best peak, seconds] after each generation's
        evaluation and after each round) with every new best a climb found inside a round, at the
        evaluation it was found: the anytime curve."""
        points = list(loop_history)
        for climber in {id(m[0]): m[0] for m in self.marks}.values():
            marks = [(count, at) for c, count, at in self.marks if c is climber]
            for count, peak, when in climber.state.history:
                prior = [m for m in marks if m[0] <= count]
                if prior:
                    points.append([prior[-1][1] + count - prior[-1][0], float(peak), round(max(when - t0, 0.0), 6)])
        points.sort(key=lambda p: (p[0], p[1]))
        out = []
        for p in points:
            if not out or p[1] < out[-1][1]:
                out.append(p)
        return out

    def report(self) -> list:
        """Each climb of the run, the last one too: its kind of start, start and best peak, evaluations."""
        return self.climbs + ([] if self.climber is None else [self._climb_record()])

    def _stalled(self) -> bool:
        """Whether the climb has found no new best for `restart_stall` of the budget."""
        return self.spent - self.climb_best[1] >= self.config.restart_stall * self.budget

    def _restart(self, state: BrkgaState, left: int) -> None:
        """A stalled climb starts again: from the population's best when that is better than the
        climb's best, else from the best start of the other kind (packed / plain) not yet climbed
        from; nothing when neither exists (the stall is then counted afresh)."""
        if state.best_fitness < self.climber.best_peak:
            starts, kind = [self.problem.decode(state.best_keys)], "population"
        else:
            named = [(name, p, o) for name, p, o in self.starts if _kind(name) not in self.tried]
            if not named:
                self.climb_best = (self.climb_best[0], self.spent)
                return
            starts, kind = [(p, o) for _, p, o in named], _kind(named[0][0])
        self.climbs.append(self._climb_record())
        if self.kept is None or self.climber.best_peak < self.kept[0]:  # not written back if found this round
            self.kept = (self.climber.best_peak, *(a.copy() for a in self.climber.best))
        self.retired += self.climber.evaluations
        self._new_climb(starts, left)
        self.kind = kind
        self.start_name = "population" if kind == "population" else named[self.climber.start_index][0]
        self.tried.add(kind)
        self.climb_best = (self.climber.best_peak, self.spent)

    def _start(self, state: BrkgaState, left: int) -> None:
        if self.starts:
            names = [name for name, _, _ in self.starts]
            choose = None if self.chooser is None else (lambda scores: self.chooser(names, scores))
            self._new_climb([(p, o) for _, p, o in self.starts], left, choose)
            self.start_name = self.starts[self.climber.start_index][0]
            self.kind = _kind(self.start_name)
        else:
            self._new_climb([self.problem.decode(state.best_keys)], left)
            self.kind = self.start_name = "population"
        self.tried.add(self.kind)
        self.climb_best = (self.climber.best_peak, self.spent)
        self._pack(state)

    def _new_climb(self, starts: list, left: int, choose=None) -> None:
        graph, budget = self.problem.graph, self.budget + self.reserve
        params = self.config.climb.params(graph.num_nodes, budget)
        self.climber = Climb(graph, self.problem.devices, self.rng, params, self.moves)
        self.climber.start(starts, left, self.deadline, choose)

    def _climb_record(self) -> dict:
        c = self.climber
        return {"kind": self.kind, "start": self.start_name, "start_peak_bytes": int(c.state.history[0][1]),
                "best_peak_bytes": int(c.best_peak), "evaluations": int(c.evaluations),
                "screened": c.state.screened, "grouped": c.state.grouped}

    def _pack(self, state: BrkgaState) -> None:
        """Re-home the climb's best schedule's resident tensors if it is new since the last time."""
        best = self.climber.state.best_score
        if self.config.pack_residents >= 2 and best != self.packed and not expired(self.deadline):
            self.climber.pack(self.budget - state.evaluations - self.spent)
            self.packed = self.climber.state.best_score

    def _write_back(self, state: BrkgaState) -> BrkgaState:
        # the loop's own population: the members below the new one move down a row in place
        return write_back(state, lambda: encode(*self.climber.best, self.problem.devices), self.climber.best_peak,
                          overwrite=True)


def _kind(name: str) -> str:
    """A start's kind: "packed" (computes on fewer devices) or "plain"."""
    return "packed" if "/compute-on-" in name else "plain"


def optimize_memory(graph: Graph, devices: int = 1, budget: int = 5000, seed: int = 0, *,
                    policy=DEFAULT_POLICY_NAME, priors: Priors | None = None, seeding: bool = True,
                    polish: bool = True, config: FlagshipConfig | BrkgaConfig | None = None,
                    time_limit_s: float | None = None, callback: Callable[[Progress], bool | None] | None = None,
                    num_threads: int | None = None, initial: list[np.ndarray] | None = None,
                    method: str | None = None, deadline: Deadline | None = None) -> Solution:
    """The flagship on peak memory (`regal.optimize` with objective="memory"; its arguments)."""
    t0 = time.perf_counter()
    check_arguments(graph, budget, config, time_limit_s)
    devices = check_devices(devices)
    flagship = as_flagship_config(config)
    config = flagship.resolved_brkga(seeding or polish)
    if seeding or polish:  # a short budget's population is smaller (plain BRKGA's stays as asked)
        config = config._replace(population_size=flagship.population_for(int(budget), config.population_size))
    problem = MemoryProblem(graph, devices)
    asked = config.population_size  # fewer where that many would not fit in memory (issue 36)
    config = config._replace(population_size=fit_population(graph, devices, asked, problem.num_keys)).validate()
    priors, chooser = resolve_policy(graph, devices, priors, policy)
    moves = resolve_moves(graph, devices, policy) if polish else None
    deadline = None if time_limit_s is None and deadline is None else as_deadline(deadline, time_limit_s, t0)
    # the last evaluations re-home the resident tensors of the climb's best (pack_residents)
    reserve = 2 if (flagship.pack_residents and polish and devices > 1 and budget > config.population_size + 2
               and graph.resident.any()) else 0
    starts, extra = _seed_solutions(graph, devices, seed, int(budget), flagship, deadline) if seeding else ([], 0)
    if seeding and priors is not None:  # the priors' most likely schedule is one more start
        starts.append(("priors-mean", *problem.decode(priors.alpha / (priors.alpha + priors.beta))))
    seeds = [encode(placement, order, devices) for _, placement, order in starts]
    share = polish_share(graph.num_nodes, devices) if polish else 0.0
    improver = Polish(problem, flagship, config, int(budget) - reserve, seed, starts, extra, share, reserve, deadline,
                      chooser, moves)
    with numba_threads(num_threads):
        out = run_loop(problem, config, int(budget) - reserve, seed, priors=priors, initial=seeds + list(initial or []),
                       improver=improver, t0=t0, deadline=deadline, callback=callback, report_budget=int(budget))
    state = out.state
    placement, order, best_peak = improver.best(state)
    info = {"seed": seed, "budget": int(budget), "generations": state.generation, "stopped": out.stopped,
            "seeding": [name for name, _, _ in starts], "priors": priors is not None,
            "policy": os.fspath(policy) if isinstance(policy, (str, os.PathLike)) else type(policy).__name__,
            "polish_share": share, "polish_evaluations": improver.spent - extra, "config": config._asdict(),
            "climbs": improver.report(),
            "history": improver.history(out.history, t0)}
    if config.population_size < asked:
        info["population_asked"] = asked
    sol = make_solution(graph, placement, order, devices, method=method or "regal", evaluations=out.evaluations,
                        seconds=time.perf_counter() - t0, info=info)
    assert sol.peak_bytes == best_peak, "decoder and simulator disagree"
    return sol
