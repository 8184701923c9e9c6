"""`brkga_search(graph, ...) -> Solution`: the BRKGA loop with its budget, time limit and callback.

REGAL's search as the paper runs it (Paliwal et al., ICLR 2020): BRKGA over the chromosome of
`regal.decode`, scored by `regal.simulate`, with mutants drawn from priors that a trained policy
(`regal.policy`, imported only when a policy is asked for) predicts for this graph. The flagship,
`regal.optimize` (`regal.memetic`), runs this loop with heuristic seeds and local improvement.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Callable, NamedTuple

import numpy as np

from regal import brkga
from regal.brkga import BrkgaConfig
from regal.decode import chromosome_length, decode, evaluate_population
from regal.graph import Graph, check_devices
from regal.priors import Priors
from regal.solution import Solution, make_solution

__all__ = ["Progress", "brkga_search", "resolve_priors", "warmup", "numba_threads", "solve_brkga",
           "solve_teacher", "brkga_peak"]


class Progress(NamedTuple):
    """What the callback sees after every generation."""
    evaluations: int
    budget: int
    generation: int
    best_peak_bytes: float
    seconds: float


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


def check_search_size(graph: Graph, devices: int, population_size: int, length: int | None = None,
                      what: str = "chromosomes") -> None:
    """ValueError, before anything is allocated, when a search cannot fit: more devices than
    nodes, or a population of chromosomes (float64[P, length], default the peak-memory
    chromosome's n (d + 1); the timed one passes its own) over a quarter of the memory."""
    if devices > graph.num_nodes:
        raise ValueError(f"devices is {devices:,}, more than the graph's {graph.num_nodes:,} nodes can use")
    length = chromosome_length(graph.num_nodes, devices) if length is None else length
    need = population_size * length * 8 * 3  # parents, children, keys
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        limit = 8 * 2**30
    if need > limit:
        raise ValueError(f"{devices:,} devices on {graph.num_nodes:,} nodes: a population of {population_size} "
                         f"{what} needs about {need / 2**30:,.1f} GiB, more than a quarter of this "
                         f"machine's memory ({limit / 2**30:,.1f} GiB); use fewer devices or a smaller population")


def _check_priors(priors: Priors | None, num_keys: int, devices: int) -> None:
    if priors is not None and priors.num_keys != num_keys:
        raise ValueError(f"priors have {priors.num_keys} genes; the graph needs {num_keys} for {devices} devices")


#: Policy names that need no trained network (NumPy only): the structural teacher's priors
#: (`regal.policy.teacher`: DFS-position scheduling priors and, for d > 1, METIS placement
#: priors), or its scheduling half alone.
TEACHER_POLICIES = ("teacher", "teacher-schedule")
#: The shipped policies, by name (`regal.policy.load_policy`: regal/policy/NAME.npz).
SHIPPED_POLICIES = ("default", "gas", "transfer", "runtime")
#: Every policy name that is not a file: the shipped policies, the teacher's priors and none.
POLICY_NAMES = SHIPPED_POLICIES + ("none",) + TEACHER_POLICIES


def teacher_priors(graph: Graph, devices: int, placement: bool = True) -> Priors:
    """The structural teacher's priors; placement=False keeps the scheduling half only."""
    from regal.policy.actions import to_priors
    from regal.policy.teacher import teacher_actions
    acts = teacher_actions(graph, devices)
    return to_priors(acts if placement else acts._replace(placement=None), graph.num_nodes, devices)


def resolve_priors(graph: Graph, devices: int, priors: Priors | None, policy,
                   objective: str = "memory") -> Priors | None:
    """Priors to search with: explicit priors, a policy's ("default", a path or a Policy), the
    teacher's ("teacher", "teacher-schedule"), or none; for the chromosome of `objective`
    ("memory", or "runtime": the timed one of SPEC.md section 5, which only a policy trained for
    it, with a transfer-priority head such as "runtime", predicts)."""
    if priors is not None and policy not in (None, "none"):
        raise ValueError("give either priors or a policy, not both")
    if priors is not None and not isinstance(priors, Priors):
        raise TypeError(f"priors must be a regal.Priors, got {type(priors).__name__}")
    if priors is not None:
        if objective == "runtime":
            from regal.timed import timed_chromosome_length
            _check_priors(priors, timed_chromosome_length(graph.num_nodes, devices), devices)
        else:
            _check_priors(priors, chromosome_length(graph.num_nodes, devices), devices)
        return priors
    if policy is None or policy == "none":
        return None
    if isinstance(policy, str) and policy in TEACHER_POLICIES:
        if objective == "runtime":
            raise ValueError(f"policy {policy!r} predicts the memory objective's chromosome; the runtime "
                             "objective takes a policy trained for it (e.g. 'runtime') or 'none'")
        return teacher_priors(graph, devices, placement=policy == "teacher")
    if not isinstance(policy, (str, os.PathLike)) and not hasattr(policy, "priors"):
        raise TypeError(f"policy must be 'default', 'transfer', 'runtime', 'teacher', 'none', a policy file or a "
                        f"loaded Policy, got {policy!r}")
    from regal.policy import load_policy  # JAX is paid for only here
    pol = load_policy(policy) if isinstance(policy, (str, os.PathLike)) else policy
    if pol.objective != objective:
        name = getattr(pol, "source", None) or "this policy"
        raise ValueError(f"{name} was trained for the {pol.objective} objective, not {objective!r}; give a policy "
                         f"of the {objective} objective or 'none'")
    return pol.priors(graph, devices, objective=objective)


def brkga_search(graph: Graph, devices: int, *, budget: int = 5000, seed: int = 0,
                 priors: Priors | None = None, config: BrkgaConfig | None = None,
                 time_limit_s: float | None = None, callback: Callable[[Progress], bool | None] | None = None,
                 num_threads: int | None = None, initial: list[np.ndarray] | None = None,
                 method: str = "brkga", t0: float | None = None) -> Solution:
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
    Returns the best Solution found; its peak is re-simulated (SPEC.md section 3).
    """
    devices = check_devices(devices)
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ValueError(f"budget must be a positive integer number of evaluations, got {budget!r}")
    config = (config or BrkgaConfig()).validate()
    t0 = time.perf_counter() if t0 is None else t0
    check_search_size(graph, devices, config.population_size)
    L = chromosome_length(graph.num_nodes, devices)
    _check_priors(priors, L, devices)
    state = brkga.init(L, config, seed)
    history: list[list[float]] = []
    stopped = "budget"
    with numba_threads(num_threads):
        while state.evaluations < budget:
            candidates, state = brkga.ask(state, config, priors)
            if state.generation == 0 and initial:
                for i, keys in enumerate(initial[:candidates.shape[0]]):
                    candidates[i] = keys
            candidates = candidates[:budget - state.evaluations]
            fitness = evaluate_population(graph, candidates, devices)
            state = brkga.tell(state, candidates, fitness, config)
            seconds = time.perf_counter() - t0
            if not history or state.best_fitness < history[-1][1]:
                history.append([state.evaluations, state.best_fitness, round(seconds, 6)])
            if callback is not None and callback(Progress(state.evaluations, budget, state.generation,
                                                          state.best_fitness, seconds)):
                stopped = "callback"
                break
            if time_limit_s is not None and seconds >= time_limit_s:
                stopped = "time_limit"
                break
    placement, order = decode(graph, state.best_keys, devices)
    info = {"seed": seed, "budget": budget, "generations": state.generation, "stopped": stopped,
            "config": config._asdict(), "history": history}
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


def brkga_peak(path: str, devices: int, seed: int, budget: int, priors_arrays=None, objective: str = "memory"):
    """Peak of one BRKGA run on one thread, on the graph file `path` (loaded once per process):
    plain (registry method "brkga"), or with priors given as (alpha, beta, inherit) arrays
    ("regal-paper", REGAL's setting). A Dask task of training. With objective "runtime": the
    makespan (seconds) of BRKGA on the timed chromosome ("brkga-runtime", no memory limit, the
    default device model), plain or with priors of that chromosome."""
    import regal.methods
    from regal.parallel import cached_graph
    graph = cached_graph(path)
    if objective == "runtime":
        from regal.runtime import optimize_runtime
        priors = None if priors_arrays is None else Priors(*priors_arrays)
        sol = optimize_runtime(graph, devices, budget, seed, seeding=False, polish=False, priors=priors,
                               num_threads=1, method="brkga-runtime")
        return float(sol.info["timed"]["makespan_s"])
    if priors_arrays is None:
        return regal.methods.solve("brkga", graph, devices, seed=seed, budget=budget, num_threads=1).peak_bytes
    return regal.methods.solve("regal-paper", graph, devices, seed=seed, budget=budget, policy="none",
                               priors=Priors(*priors_arrays), num_threads=1).peak_bytes


def warmup(devices: int | None = None, *, seeding: bool = True, polish: bool = True) -> None:
    """Compile (or load from Numba's cache) the kernels, so that the first real search is fast and
    the `seconds` it reports count its search, not the loading: every kernel by default; with
    `devices`, `seeding` and `polish` only those a `regal.optimize` with these settings runs (a
    search on a tiny graph; Numba specializes on the arrays' types, which every graph shares)."""
    g = Graph.from_records([
        {"id": "w", "bytes": 4, "resident": True},
        {"id": "a", "bytes": 3, "temp_bytes": 1},
        {"id": "b", "bytes": 2, "inputs": ["a", "w"]},
        {"id": "c", "bytes": 1, "inputs": ["a", "b"], "control_inputs": []},
    ], name="warmup")
    from regal.memetic import optimize
    config = BrkgaConfig(population_size=10)
    for d in ((1, 2) if devices is None else (1 if devices == 1 else 2,)):
        optimize(g, devices=d, budget=60, seeding=seeding, polish=polish, config=config)
        if seeding or polish:  # the seeds and the climb can spend 60 evaluations before a crossover
            optimize(g, devices=d, budget=30, seeding=False, polish=False, config=config)
