"""The one search loop: BRKGA's ask/tell over a problem object, with an improver hook.

Every search of the library runs `run_loop`: plain BRKGA (`regal.search`, no improver), the
flagship (`regal.memetic`, the peak-memory climb) and the runtime objective (`regal.runtime`,
the timed climb). They differ only by the problem they hand it (`regal.problems`: chromosome
width, evaluate, decode) and the improver:

    class Improver(Protocol):
        spent: int                                       # evaluations outside the population so far
        def improve(self, state, budget) -> BrkgaState   # after each generation (Lamarckian write-back)
        def finish(self, state, stopped) -> BrkgaState   # once, after the loop

One step: ask for a generation (the initial population first, its first members replaced by
`initial`), cut it so that at most `budget` evaluations are spent in all, evaluate, tell; then the
improver; then the history, the callback (`Progress`; True stops) and the deadline.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Callable, NamedTuple, Protocol

import numpy as np

from regal import brkga
from regal._stop import Deadline, expired
from regal.brkga import BrkgaConfig, BrkgaState
from regal.graph import Graph
from regal.priors import Priors

__all__ = ["Progress", "Problem", "Improver", "LoopResult", "run_loop", "write_back", "numba_threads",
           "check_search_size", "fit_population", "SEARCH_BYTES"]


class Progress(NamedTuple):
    """What the callback sees after every generation."""
    evaluations: int
    budget: int
    generation: int
    best_peak_bytes: float
    seconds: float


class Problem(Protocol):
    """An objective as the loop sees it (`regal.problems`)."""
    num_keys: int

    def evaluate(self, population: np.ndarray) -> np.ndarray: ...


class Improver(Protocol):
    """A local improvement run between generations (module docstring)."""
    spent: int

    def improve(self, state: BrkgaState, budget: int) -> BrkgaState: ...

    def finish(self, state: BrkgaState, stopped: str) -> BrkgaState: ...


class LoopResult(NamedTuple):
    state: BrkgaState   # the final population, best first
    history: list       # [evaluations, best fitness, seconds] each time the best fell
    stopped: str        # "budget", "callback" or "time_limit"
    evaluations: int    # spent in all, the improver's included


@contextmanager
def numba_threads(n: int | None):
    """Run the body with Numba using `n` threads (all of them when None), then restore."""
    import numba
    if n is None:
        yield
        return
    if not 1 <= n <= numba.config.NUMBA_NUM_THREADS:
        raise ValueError(f"num_threads must be in 1..{numba.config.NUMBA_NUM_THREADS}, got {n}")
    before = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(before)


#: The most bytes a search's chromosomes may take before the flagship shrinks its population
#: (`fit_population`, issue 36), counted as three float64[population, keys] copies: the loop
#: holds two (the population and the generation's candidates, each drawn and sorted in place),
#: the third is headroom for the seeds' chromosomes and the graph. A population of 100 keeps
#: fitting up to 335K nodes at d = 2; 1M nodes at d = 2 get 33 (peak RSS 2.9 GiB in all).
SEARCH_BYTES = 2.25 * 2**30


def _memory_limit() -> int:
    """A quarter of this machine's memory (8 GiB where it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def check_search_size(graph: Graph, devices: int, population_size: int, length: int,
                      what: str = "chromosomes") -> None:
    """ValueError, before anything is allocated, when a search cannot fit: more devices than
    nodes, or a population of chromosomes (float64[P, length]) over a quarter of the memory."""
    if devices > graph.num_nodes:
        raise ValueError(f"devices is {devices:,}, more than the graph's {graph.num_nodes:,} nodes can use")
    need = population_size * length * 8 * 3  # parents, children, keys
    limit = _memory_limit()
    if need > limit:
        raise ValueError(f"{devices:,} devices on {graph.num_nodes:,} nodes: a population of {population_size} "
                         f"{what} needs about {need / 2**30:,.1f} GiB, more than a quarter of this "
                         f"machine's memory ({limit / 2**30:,.1f} GiB); use fewer devices or a smaller population")


def fit_population(graph: Graph, devices: int, population_size: int, length: int) -> int:
    """The population a search of chromosomes of `length` keys runs with: `population_size`, or
    fewer where that many would take more than SEARCH_BYTES (at least 2); ValueError as
    `check_search_size` when not even that fits."""
    size = max(2, min(population_size, int(SEARCH_BYTES // max(length * 8 * 3, 1))))
    check_search_size(graph, devices, size, length)
    return size


def write_back(state: BrkgaState, keys: Callable[[], np.ndarray], fitness: float, *,
               overwrite: bool = False) -> BrkgaState:
    """Put a schedule found outside the population into it (Lamarckian), replacing the worst
    member, and re-sort; nothing changes when the population already holds one as good.
    keys: called only when the schedule goes in (encoding it may cost). overwrite: the caller
    keeps no other use of `state.population` (the search loop's own), so the members below the
    new one move down a row in place rather than into a new array (issue 36: a fresh P x L
    array takes seconds to fault in at 300K nodes; a copy, then a sorted gather, took 4.8 s)."""
    if fitness >= state.fitness[-1] or np.any(state.fitness == fitness):
        return state
    i = int(np.searchsorted(state.fitness, fitness))
    fit = np.concatenate([state.fitness[:i], [fitness], state.fitness[i:-1]])
    if overwrite:
        population = state.population
        for j in range(population.shape[0] - 1, i, -1):
            population[j] = population[j - 1]
    else:
        population = np.empty_like(state.population)
        population[:i] = state.population[:i]
        population[i + 1:] = state.population[i:-1]
    population[i] = keys()
    return state._replace(population=population, fitness=fit)


#: Keys (chromosomes x keys each) evaluated between two polls of a deadline: tens of milliseconds.
POLL_KEYS = 2_000_000


def _evaluate(problem: Problem, candidates: np.ndarray, deadline) -> np.ndarray:
    """float64[k]: the fitness of the first k candidates, all of them unless `deadline` passed
    between two slices of about POLL_KEYS keys (the first slice is always evaluated)."""
    if deadline is None:
        return problem.evaluate(candidates)
    step = max(1, POLL_KEYS // max(problem.num_keys, 1))
    parts = []
    for lo in range(0, candidates.shape[0], step):
        if lo > 0 and expired(deadline):
            break
        parts.append(problem.evaluate(candidates[lo:lo + step]))
    return np.concatenate(parts) if parts else np.empty(0)


def run_loop(problem: Problem, config: BrkgaConfig, budget: int, seed: int, *, priors: Priors | None = None,
             initial=(), improver: Improver | None = None, t0: float, deadline: Deadline | float | None = None,
             callback: Callable[[Progress], bool | None] | None = None,
             report_budget: int | None = None) -> LoopResult:
    """BRKGA on `problem` until `budget` evaluations (population and improver together) are
    spent, the deadline passes or the callback returns True. deadline: a `regal._stop.Deadline`
    (a stop request too: "stopped" is then its reason) or a perf_counter() value; a generation is
    evaluated in slices between which it is polled, and one it cuts short keeps the chromosomes
    evaluated so far (at least one slice); the improver does not run once it has passed.

    initial: chromosomes that replace the first members of the initial population.
    report_budget: the budget `Progress` reports (default `budget`; the flagship keeps a reserve).
    """
    state = brkga.init(problem.num_keys, config, seed)
    history: list[list[float]] = []
    stopped = "budget"
    spent = (lambda: 0) if improver is None else (lambda: improver.spent)  # noqa: E731
    spare = None  # the last generation's candidates, drawn over by the next one (not faulted in anew)
    while state.evaluations + spent() < budget:
        if state.generation == 0 and len(initial) and expired(deadline):
            # stopped before the search began: the initial chromosomes (the seeds) alone, not a
            # slice of random ones (drawing and decoding those takes a second on 100,000 nodes)
            candidates = np.array(initial[:config.population_size], dtype=np.float64)
        else:
            candidates, state = brkga.ask(state, config, priors, out=spare)
        if state.generation == 0:
            for i, keys in enumerate(initial[:candidates.shape[0]]):
                candidates[i] = keys
        drawn = candidates
        candidates = candidates[:budget - state.evaluations - spent()]
        fitness = _evaluate(problem, candidates, deadline)
        # the population is sorted into the memory of the candidates (first generation) or of the
        # old population: no new P x L array, whose pages take seconds to fault in at 300K nodes
        state = brkga.tell(state, candidates[:fitness.shape[0]], fitness, config, overwrite=True)
        spare = None if np.may_share_memory(drawn, state.population) else drawn
        if improver is not None and (not history or state.best_fitness < history[-1][1]):
            # the population's best before the improver's round (the seeds among it): an anytime
            # curve must not show a climb from a worse start as the answer so far
            history.append([state.evaluations + spent(), state.best_fitness,
                            round(time.perf_counter() - t0, 6)])
        if improver is not None and not expired(deadline):
            state = improver.improve(state, budget)
        used = state.evaluations + spent()
        seconds = time.perf_counter() - t0
        if not history or state.best_fitness < history[-1][1]:
            history.append([used, state.best_fitness, round(seconds, 6)])
        if callback is not None and callback(Progress(used, report_budget or budget, state.generation,
                                                      state.best_fitness, seconds)):
            stopped = "callback"
            break
        if expired(deadline):
            stopped = getattr(deadline, "reason", None) or "time_limit"
            break
    if improver is not None:
        state = improver.finish(state, stopped)
    return LoopResult(state, history, stopped, state.evaluations + spent())
