"""The flagship search: a memetic REGAL (BRKGA with Lamarckian local improvement).

`regal.optimize(graph, devices, budget=5000, seed=0)` runs it. Three parts, each of which can be
switched off (everything off is plain BRKGA, bit for bit):

- **Seeding.** The initial population holds every cheap heuristic solution the library has
  (`regal.heuristics.heuristic_solutions`: METIS + DFS, greedy, XLA's list/DFS/post-order and
  Inductor's LPMF/BFS/DFS orders), encoded as chromosomes (`regal.decode.encode`); the rest of
  the population is drawn as mutants. Each seed costs one evaluation, as any member does.
- **Priors.** Mutants are drawn from per-gene Beta priors (REGAL, Paliwal et al., ICLR 2020):
  a trained policy's (`policy`), or explicit `priors`.
- **Polish.** One peak-focused local-search climb (`regal.local_search`: order and device
  moves near the peak, plateau walks, kicks) runs between the generations, from the best
  heuristic seed on; whenever it finds a better schedule, the schedule is encoded back into the
  population (Lamarckian memetic algorithm, Moscato 1989), where crossover spreads it. When
  the climb stalls and the population holds a better schedule, the climb moves there. A share
  of the evaluations (`polish_share`) goes to the climb; it grows with the graph, because BRKGA
  over n(d+1) random keys moves ever less per evaluation as n grows, while one local move costs
  one evaluation at any size.

Budget: `budget` evaluations in all, heuristic seeds, decodes and local moves alike (one
evaluation = one simulation); the last step is cut short so exactly `budget` are spent, unless
`time_limit_s` or the callback stops the search first. The answer is never worse than the best
seed (elitism). Thread-count invariant: the population is decoded in parallel, each chromosome
on its own; the local search is sequential and seeded from `seed`.
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple

import numpy as np

from regal import brkga
from regal.brkga import BrkgaConfig, BrkgaState
from regal.decode import chromosome_length, decode, encode, evaluate_population
from regal.graph import Graph, check_devices
from regal.priors import Priors
from regal.search import Progress, numba_threads, resolve_priors
from regal.solution import Solution, make_solution

__all__ = ["optimize", "polish_share", "solve_flagship", "solve_regal_paper"]


#: The policy `regal.optimize` and `regal optimize` use when none is named (one place for both).
#: "none": inside the flagship the shipped policy's priors did not pay on held-out graphs (on 12
#: valid graphs, d = 2: -3.1 % against local search with them, -1.5 % without; they help at d = 1,
#: +0.6 % against +0.1 %), and graphs from other sources make them worse (issue 12). Name a
#: policy to use one: `policy="default"`.
DEFAULT_POLICY = "none"


def polish_share(num_nodes: int) -> float:
    """Share of the evaluations after the initial population that goes to local improvement.

    0.5 up to 300 nodes, rising by 0.2 per factor of 10 in size to 0.95 from ~50K nodes on: the
    larger the graph, the less a BRKGA generation moves and the more a focused move is worth.
    """
    return float(np.clip(0.5 + 0.2 * math.log10(max(num_nodes, 1) / 300.0), 0.5, 0.95))


class _Run(NamedTuple):
    """What the loop needs besides the BRKGA state (fixed for one search)."""
    graph: Graph
    devices: int
    budget: int
    config: BrkgaConfig
    priors: Priors | None
    t0: float
    deadline: float | None


def _seed_chromosomes(graph: Graph, devices: int, seed: int) -> tuple[list[np.ndarray], list[str]]:
    from regal.heuristics import heuristic_solutions
    keys, names = [], []
    for name, placement, order in heuristic_solutions(graph, devices, seed):
        keys.append(encode(placement, order, devices))
        names.append(name)
    return keys, names


def _initial_generation(run: _Run, state: BrkgaState, initial: list[np.ndarray]) -> BrkgaState:
    candidates, state = brkga.ask(state, run.config, run.priors)
    for i, keys in enumerate(initial[:candidates.shape[0]]):
        candidates[i] = keys
    candidates = candidates[:run.budget]
    return brkga.tell(state, candidates, evaluate_population(run.graph, candidates, run.devices), run.config)


def _generation(run: _Run, state: BrkgaState, used: int) -> BrkgaState:
    candidates, state = brkga.ask(state, run.config, run.priors)
    candidates = candidates[:run.budget - used]
    return brkga.tell(state, candidates, evaluate_population(run.graph, candidates, run.devices), run.config)


class _Climber:
    """One local-search trajectory that persists across the generations (`regal.local_search`).

    It climbs from the best chromosome and keeps walking (plateau moves, kicks) between
    generations; when a generation finds a schedule better than the climb's best, the climb
    restarts there (one evaluation). Its best is written back into the population.
    """

    def __init__(self, graph: Graph, devices: int, budget: int, rng: np.random.Generator):
        from regal import local_search as ls
        self._ls = ls
        self.moves = ls._moves(graph, devices)
        self.evaluate = ls.Evaluator(graph, devices)
        self.config = ls.LocalSearchConfig.resolve(graph.num_nodes, budget)
        self.rng = rng
        self.state = None

    @property
    def best_peak(self) -> float:
        return float("inf") if self.state is None else float(self.state.best_score.peak_bytes)

    def restart(self, placement: np.ndarray, order: np.ndarray) -> None:
        trace = self.evaluate.new_trace()
        score = self.evaluate(placement, order, trace)
        self.state = self._ls._start_state(placement, order, score, trace, self.evaluate)

    def run(self, evaluations: int, deadline: float | None) -> None:
        self._ls._climb(self.moves, self.state, self.evaluate, self.config, self.rng,
                        self.evaluate.count + evaluations, deadline)


def _best_start(state: BrkgaState, seed_keys: list[np.ndarray]) -> np.ndarray:
    """Where the climb starts: the best heuristic seed (the first of the lowest peak, in
    `START_NAMES` order, as the local search picks its start), else the population's best.

    Not simply the population's best: a random placement can beat every heuristic at first and
    then trap the climb far above where a heuristic's basin leads (seen on GRU training graphs
    at d = 2: a climb from METIS + DFS ended 20 % lower than one from a better random start)."""
    best, best_fit = state.best_keys, None
    for keys in seed_keys:
        rows = np.flatnonzero(np.all(state.population == keys, axis=1))
        if rows.size and (best_fit is None or state.fitness[rows[0]] < best_fit):
            best, best_fit = state.population[rows[0]], state.fitness[rows[0]]
    return best


def _write_back(run: _Run, state: BrkgaState, climber: _Climber) -> BrkgaState:
    """Put the climb's best into the population (Lamarckian), replacing the worst member, and
    re-sort; nothing changes when the population already holds a schedule as good."""
    peak = climber.best_peak
    if peak >= state.fitness[-1] or np.any(state.fitness == peak):
        return state
    population = state.population.copy()
    fitness = state.fitness.copy()
    population[-1] = encode(climber.state.best_placement, climber.state.best_order, run.devices)
    fitness[-1] = peak
    keep = np.argsort(fitness, kind="stable")
    return state._replace(population=population[keep], fitness=fitness[keep])


def _polish(run: _Run, state: BrkgaState, climber: _Climber, evaluations: int) -> BrkgaState:
    """Climb on for `evaluations` local-search evaluations; write a better result back.

    When the climb has stalled (half its patience without a new best) and the population holds a
    better schedule, the climb restarts from that one instead of kicking its own best."""
    if state.best_fitness < climber.best_peak and climber.state.since_best >= climber.config.patience // 2:
        placement, order = decode(run.graph, state.best_keys, run.devices)
        climber.restart(placement, order)
        evaluations -= 1
    if evaluations > 0:
        climber.run(evaluations, run.deadline)
    return _write_back(run, state, climber) if climber.best_peak < state.best_fitness else state


def optimize(graph: Graph, devices: int = 1, budget: int = 5000, seed: int = 0, *, policy=DEFAULT_POLICY,
             priors: Priors | None = None, seeding: bool = True, polish: bool = True,
             config: BrkgaConfig | None = None, time_limit_s: float | None = None,
             callback: Callable[[Progress], bool | None] | None = None, num_threads: int | None = None,
             initial: list[np.ndarray] | None = None, method: str | None = None) -> Solution:
    """Search placements and orders of `graph` on `devices` devices for the lowest peak memory.

    budget: evaluations in all (seeds, decodes and local moves); seed: the only randomness.
    policy: a trained policy for the mutants' priors ("default" for the shipped one, a path or a
        loaded Policy); None or "none" for uniform mutants. priors: explicit priors instead.
    seeding / polish: the flagship's other two parts (module docstring); with both off and no
        policy this is plain BRKGA, bit for bit.
    time_limit_s: stop after the first step that ends past this many seconds.
    callback: called with a `Progress` after every step; returning True stops the search.
    num_threads: Numba threads for decoding the population; the result is the same for any value.
    initial: extra chromosomes (float64[L] each) for the initial population, after the seeds.
    method: the name the Solution carries (default "regal").
    Returns the best Solution found; its peak is re-simulated (SPEC.md section 3).
    """
    t0 = time.perf_counter()
    devices = check_devices(devices)
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ValueError(f"budget must be a positive integer number of evaluations, got {budget!r}")
    config = (config or BrkgaConfig()).validate()
    priors = resolve_priors(graph, devices, priors, policy)
    deadline = None if time_limit_s is None else t0 + time_limit_s
    run = _Run(graph, devices, int(budget), config, priors, t0, deadline)
    seeds, seed_names = _seed_chromosomes(graph, devices, seed) if seeding else ([], [])
    share = polish_share(graph.num_nodes) if polish else 0.0
    rng = np.random.default_rng([seed, 0x5EED])  # the local search's own stream
    climber = None
    state = brkga.init(chromosome_length(graph.num_nodes, devices), config, seed)
    history: list[list[float]] = []
    stopped, polished = "budget", 0
    with numba_threads(num_threads):
        while state.evaluations + polished < run.budget:
            if state.generation == 0:
                state = _initial_generation(run, state, seeds + list(initial or []))
            else:
                state = _generation(run, state, state.evaluations + polished)
            used = state.evaluations + polished
            if share > 0.0 and climber is None and used < run.budget:
                climber = _Climber(graph, devices, run.budget, rng)
                climber.restart(*decode(graph, _best_start(state, seeds), devices))
                polished += 1
                used = state.evaluations + polished
            if share > 0.0 and used < run.budget:
                chunk = int(round((config.population_size - config.num_elites) * share / (1.0 - share)))
                before = climber.evaluate.count
                state = _polish(run, state, climber, min(max(chunk, 2), run.budget - used))
                polished += climber.evaluate.count - before
            used = state.evaluations + polished
            if not history or state.best_fitness < history[-1][1]:
                history.append([used, state.best_fitness])
            seconds = time.perf_counter() - t0
            if callback is not None and callback(Progress(used, run.budget, state.generation,
                                                          state.best_fitness, seconds)):
                stopped = "callback"
                break
            if deadline is not None and time.perf_counter() >= deadline:
                stopped = "time_limit"
                break
    used = state.evaluations + polished
    placement, order = decode(graph, state.best_keys, devices)
    info = {"seed": seed, "budget": run.budget, "generations": state.generation, "stopped": stopped,
            "seeding": seed_names, "priors": priors is not None, "polish_share": share,
            "polish_evaluations": polished, "config": config._asdict(), "history": history}
    sol = make_solution(graph, placement, order, devices, method=method or "regal", evaluations=used,
                        seconds=time.perf_counter() - t0, info=info)
    assert sol.peak_bytes == state.best_fitness, "decoder and simulator disagree"
    return sol


# ---------------------------------------------------------------- registry entries (regal.methods)
def solve_flagship(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                   budget: int = 5000, policy=DEFAULT_POLICY, **options) -> Solution:
    """The flagship: seeded, prior-biased BRKGA with Lamarckian local improvement."""
    return optimize(graph, devices, budget=budget, seed=seed, policy=policy, time_limit_s=time_limit_s,
                    method="regal", **options)


def solve_regal_paper(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                      budget: int = 5000, policy="default", heads=None, **options) -> Solution:
    """REGAL as in the paper: a policy's priors in plain BRKGA (no seeding, no polish).

    heads: the policy heads to use (a subset of placement, scheduling, elite), None for all."""
    if heads is not None:
        from regal.policy import load_policy
        pol = load_policy(policy) if isinstance(policy, str) else policy
        cfg = pol.config._replace(placement="placement" in heads, scheduling="scheduling" in heads,
                                  elite="elite" in heads)
        policy = type(pol)(cfg, pol.params, pol.meta)
    return optimize(graph, devices, budget=budget, seed=seed, policy=policy, time_limit_s=time_limit_s,
                    seeding=False, polish=False, method="regal-paper", **options)
