"""`brkga_search(graph, ...) -> Solution`: plain BRKGA, the search loop with no improver.

REGAL's search as the paper runs it (Paliwal et al., ICLR 2020): BRKGA over the chromosome of
`regal.decode`, scored by `regal.simulate`, with mutants drawn from priors that a trained policy
(`regal.policy`, imported only when a policy is asked for) predicts for this graph. The loop is
`regal.loop.run_loop` on `regal.problems.MemoryProblem`; the flagship (`regal.memetic`) runs the
same loop with heuristic seeds and a local-search improver.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from regal._stop import as_deadline
from regal.brkga import BrkgaConfig
from regal.graph import Graph, check_devices
from regal.loop import Progress, check_search_size, numba_threads, run_loop
from regal.policy.names import POLICY_NAMES, SHIPPED_POLICIES, TEACHER_POLICIES
from regal.policy.resolve import check_priors, resolve_priors, teacher_priors
from regal.priors import Priors
from regal.problems import MemoryProblem
from regal.solution import Solution, make_solution

__all__ = ["Progress", "brkga_search", "resolve_priors", "numba_threads", "solve_brkga", "solve_teacher",
           "teacher_priors", "check_search_size", "POLICY_NAMES", "SHIPPED_POLICIES", "TEACHER_POLICIES"]


def brkga_search(graph: Graph, devices: int, *, budget: int = 5000, seed: int = 0,
                 priors: Priors | None = None, config: BrkgaConfig | None = None,
                 time_limit_s: float | None = None, callback: Callable[[Progress], bool | None] | None = None,
                 num_threads: int | None = None, initial: list[np.ndarray] | None = None,
                 method: str = "brkga", t0: float | None = None, deadline=None) -> Solution:
    """The BRKGA loop: `budget` evaluations of `graph` on `devices` devices, best Solution back.

    budget: evaluations (decode + simulate), the initial population included; the last
        generation is cut short so that exactly `budget` are spent (unless time runs out).
    priors: REGAL's per-gene Beta priors for the mutants (None: uniform, plain BRKGA).
    time_limit_s: stop after the first generation that ends past this many seconds.
    callback: called with a `Progress` after every generation; returning True stops the search.
    num_threads: Numba threads for decoding the population; the result is the same for any value.
    initial: chromosomes (float64[L] each, e.g. `regal.decode.encode` of a heuristic solution)
        that replace the first members of the initial population.
    method: the name the Solution carries. t0: perf_counter() at which the caller started.
    deadline: a `regal._stop.Deadline` polled between slices of a generation (a stop request).
    Returns the best Solution found; its peak is re-simulated (SPEC.md section 3).
    """
    devices = check_devices(devices)
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ValueError(f"budget must be a positive integer number of evaluations, got {budget!r}")
    config = (config or BrkgaConfig()).validate()
    t0 = time.perf_counter() if t0 is None else t0
    problem = MemoryProblem(graph, devices)
    check_search_size(graph, devices, config.population_size, problem.num_keys)
    check_priors(priors, problem.num_keys, devices)
    with numba_threads(num_threads):
        out = run_loop(problem, config, budget, seed, priors=priors, initial=list(initial or []), t0=t0,
                       deadline=None if time_limit_s is None and deadline is None
                       else as_deadline(deadline, time_limit_s, t0), callback=callback)
    state = out.state
    placement, order = problem.decode(state.best_keys)
    info = {"seed": seed, "budget": budget, "generations": state.generation, "stopped": out.stopped,
            "config": config._asdict(), "history": out.history}
    sol = make_solution(graph, placement, order, devices, method=method, evaluations=state.evaluations,
                        seconds=time.perf_counter() - t0, info=info)
    assert sol.peak_bytes == state.best_fitness, "decoder and simulator disagree"
    return sol


# ---------------------------------------------------------------- registry entries (regal.methods)
def solve_brkga(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                budget: int = 5000, config: BrkgaConfig | dict | None = None, **options) -> Solution:
    """Plain BRKGA (uniform mutants); the default config (REGAL-NOTES.md) unless `config` is given."""
    if isinstance(config, dict):
        config = BrkgaConfig(**config)
    return brkga_search(graph, devices, budget=budget, seed=seed, config=config, time_limit_s=time_limit_s,
                        method="brkga", **options)


def solve_teacher(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                  budget: int = 5000, **options) -> Solution:
    """BRKGA with the structural teacher's priors (`regal.policy.teacher`, NumPy only): an ablation."""
    t0 = time.perf_counter()
    devices = check_devices(devices)
    priors = teacher_priors(graph, devices)
    return brkga_search(graph, devices, budget=budget, seed=seed, priors=priors, time_limit_s=time_limit_s,
                        method="teacher", t0=t0, **options)
