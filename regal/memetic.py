"""The flagship search: a memetic REGAL (BRKGA with Lamarckian local improvement).

`regal.optimize(graph, devices, budget=5000, seed=0)` runs it; its settings are the fields of
`regal.FlagshipConfig` (`config=`). Three parts, each of which can be switched off (everything
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
  device, and `directed` ones, which take a tensor held across a peak step off it) runs between
  the generations. It starts from the best heuristic seed (by the local search's own score, as
  the local-search baseline picks its start) and keeps walking across generations; whenever it
  finds a better schedule, the schedule is encoded back into the population (Lamarckian
  memetic algorithm, Moscato 1989), where crossover can spread it. The climb never jumps to a
  member of the population: a random placement can beat every heuristic at first and trap a
  climb far above where a heuristic's basin leads. A share of the evaluations
  (`regal.config.polish_share`) goes to the climb. The climb anneals (Kirkpatrick et al. 1983):
  early on it sometimes accepts a move that raises the peak a little (`anneal_temperature`),
  which lets it leave the basin its start lies in; less on a graph of more nodes than the
  budget has evaluations (`anneal_evals_per_node`, `anneal_scale_power`): an uphill move pays
  only if the climb has the evaluations to come back down past it. It picks each move's kind
  (uniform, peak-focused, informed, directed) by how often that kind has improved the score
  lately (`adaptive_moves`), so it leans on whatever pays on the graph. Each new best of the
  climb has its resident tensors (parameters) re-homed to the devices where they cost least
  (`pack_residents`), and so does the final one, with the last two evaluations.

Budget: `budget` evaluations in all, heuristic seeds, decodes and local moves alike (one
evaluation = one simulation); the last step is cut short so exactly `budget` are spent, unless
`time_limit_s` or the callback stops the search first. The answer is never worse than the best
seed (elitism). Thread-count invariant: the population is decoded in parallel, each chromosome
on its own; the local search is sequential and seeded from `seed`.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Callable, NamedTuple

import numpy as np

from regal import brkga
from regal.brkga import BrkgaConfig, BrkgaState
from regal.config import FlagshipConfig, anneal_temperature, as_flagship_config, check_arguments, polish_share
from regal.decode import chromosome_length, decode, encode, evaluate_population
from regal.graph import Graph, check_devices
from regal.local_search import Climb, LocalSearchConfig
from regal.priors import Priors
from regal.search import Progress, check_search_size, numba_threads, resolve_priors
from regal.solution import Solution, make_solution

__all__ = ["optimize", "packed_seed_devices", "polish_share", "solve_flagship", "solve_regal_paper",
           "FlagshipConfig", "DEFAULT_POLICY"]


#: The policy `regal.optimize` and `regal optimize` use when none is named: none (the shipped
#: priors did not pay inside the flagship on held-out graphs; experiments/results/INDEX.md).
DEFAULT_POLICY = "none"


class _Run(NamedTuple):
    """What the loop needs besides the BRKGA state (fixed for one search)."""
    graph: Graph
    devices: int
    budget: int
    config: BrkgaConfig
    priors: Priors | None
    deadline: float | None
    flagship: FlagshipConfig


def packed_seed_devices(devices: int, config: FlagshipConfig = FlagshipConfig()) -> list[int]:
    """The device counts the flagship's packed seeds compute on (`config.packed_seeds`)."""
    return [k for k in range(1, int(config.packed_seeds) + 1) if k < devices]


def _seed_solutions(graph: Graph, devices: int, seed: int, budget: int, config: FlagshipConfig) -> tuple[list, int]:
    """The seeds (name, placement, order) and the simulations they cost beyond their own
    evaluations: the heuristic starts, then the "computes on fewer devices" starts, one
    simulation each, as long as those stay within a tenth of the budget, on graphs of at most
    `packed_seeds_nodes_per_eval` nodes per evaluation."""
    from regal.heuristics import heuristic_solutions, packed_solutions
    starts = list(heuristic_solutions(graph, devices, seed))
    packed = list(itertools.islice(packed_solutions(graph, devices, seed, packed_seed_devices(devices, config)),
                                   budget // 10)) \
        if config.packed_seeds and devices > 1 and graph.num_nodes <= config.packed_seeds_nodes_per_eval * budget \
        else []
    return starts + packed, len(packed)


def _generation(run: _Run, state: BrkgaState, used: int, initial: list[np.ndarray] = ()) -> BrkgaState:
    """One BRKGA generation (the initial population first, its first members replaced by
    `initial`), cut short so that at most `run.budget - used` chromosomes are evaluated."""
    candidates, state = brkga.ask(state, run.config, run.priors)
    for i, keys in enumerate(initial[:candidates.shape[0]]):
        candidates[i] = keys
    candidates = candidates[:run.budget - used]
    return brkga.tell(state, candidates, evaluate_population(run.graph, candidates, run.devices), run.config)


def _write_back(run: _Run, state: BrkgaState, climber: Climb) -> BrkgaState:
    """Put the climb's best into the population (Lamarckian), replacing the worst member, and
    re-sort; nothing changes when the population already holds a schedule as good."""
    peak = climber.best_peak
    if peak >= state.fitness[-1] or np.any(state.fitness == peak):
        return state
    population = state.population.copy()
    fitness = state.fitness.copy()
    population[-1] = encode(*climber.best, run.devices)
    fitness[-1] = peak
    keep = np.argsort(fitness, kind="stable")
    return state._replace(population=population[keep], fitness=fitness[keep])


def _polish(run: _Run, state: BrkgaState, climber: Climb, evaluations: int, packed: list,
            extra: int) -> BrkgaState:
    """Climb on for `evaluations` local-search evaluations, re-home the resident tensors of a
    new best (`pack_residents`; `packed` holds the best score last packed); write a better result
    back. `extra`: the evaluations spent outside the population and the climb (the seeds')."""
    climber.run(evaluations, run.deadline)
    _pack(run, climber, packed, state.evaluations + extra)
    return _write_back(run, state, climber) if climber.best_peak < state.best_fitness else state


def _pack(run: _Run, climber: Climb, packed: list, decoded: int) -> None:
    """Re-home the climb's best schedule's resident tensors if it is new since the last time."""
    best = climber.state.best_score
    if run.flagship.pack_residents >= 2 and best != packed[0]:
        climber.pack(run.budget - decoded - climber.evaluations)
        packed[0] = climber.state.best_score


def optimize(graph: Graph, devices: int = 1, budget: int = 5000, seed: int = 0, *, policy=DEFAULT_POLICY,
             priors: Priors | None = None, seeding: bool = True, polish: bool = True,
             config: FlagshipConfig | BrkgaConfig | None = None, time_limit_s: float | None = None,
             callback: Callable[[Progress], bool | None] | None = None, num_threads: int | None = None,
             initial: list[np.ndarray] | None = None, method: str | None = None, objective: str = "memory",
             memory_limit_bytes=None, device_model=None) -> Solution:
    """Search placements and orders of `graph` on `devices` devices for the lowest peak memory.

    budget: evaluations in all (seeds, decodes and local moves); seed: the only randomness.
    policy: a trained policy for the mutants' priors ("default" for the shipped one, a path or a
        loaded Policy; "teacher" / "teacher-schedule" for the structural teacher's); None or
        "none" for uniform mutants. priors: explicit priors instead. With seeding or polish on,
        config.prior_share of the mutants are drawn from them (config.brkga.prior_share), else all.
    seeding / polish: the flagship's other two parts (module docstring); with both off and no
        policy this is plain BRKGA, bit for bit.
    config: the flagship's settings (`regal.FlagshipConfig`; a `regal.BrkgaConfig` sets its BRKGA
        part); None: the adopted ones.
    time_limit_s: stop after the first step that ends past this many seconds.
    callback: called with a `Progress` after every step; returning True stops the search.
    num_threads: Numba threads for decoding the population; the result is the same for any value.
    initial: extra chromosomes (float64[L] each) for the initial population, after the seeds.
    method: the name the Solution carries (default "regal").
    objective: "memory" (SPEC.md section 3, this function) or "runtime": the shortest makespan
        (section 4) with every device's peak <= memory_limit_bytes (None: no limit; an int, or
        one per device) on `device_model` (`regal.timed.DeviceModel`; None: its defaults), run
        by `regal.runtime.optimize_runtime` with the same budget, seeding, polish, config and
        priors (of the timed chromosome: a policy trained for this objective, e.g. "runtime").
    Returns the best Solution found; its peak is re-simulated (SPEC.md section 3).
    """
    if objective == "runtime":
        from regal.runtime import optimize_runtime
        return optimize_runtime(graph, devices, budget, seed, memory_limit_bytes=memory_limit_bytes,
                                device_model=device_model, seeding=seeding, polish=polish, config=config,
                                policy=policy, priors=priors,
                                time_limit_s=time_limit_s, callback=callback, num_threads=num_threads,
                                initial=initial, method=method)
    if objective != "memory":
        raise ValueError(f"objective must be 'memory' or 'runtime', got {objective!r}")
    if memory_limit_bytes is not None or device_model is not None:
        raise ValueError("memory_limit_bytes and device_model belong to objective='runtime'")
    t0 = time.perf_counter()
    check_arguments(graph, budget, config, time_limit_s)
    devices = check_devices(devices)
    flagship = as_flagship_config(config)
    config = flagship.resolved_brkga(seeding or polish)
    check_search_size(graph, devices, config.population_size)
    priors = resolve_priors(graph, devices, priors, policy)
    deadline = None if time_limit_s is None else t0 + time_limit_s
    # the last evaluations re-home the resident tensors of the climb's best (pack_residents)
    reserve = 2 if (flagship.pack_residents and polish and devices > 1 and budget > config.population_size + 2
               and graph.resident.any()) else 0
    run = _Run(graph, devices, int(budget) - reserve, config, priors, deadline, flagship)
    starts, extra = _seed_solutions(graph, devices, seed, int(budget), flagship) if seeding else ([], 0)
    if seeding and priors is not None:  # the priors' most likely schedule is one more start
        starts.append(("priors-mean", *decode(graph, priors.alpha / (priors.alpha + priors.beta), devices)))
    seeds = [encode(placement, order, devices) for _, placement, order in starts]
    share = polish_share(graph.num_nodes, devices) if polish else 0.0
    rng = np.random.default_rng([seed, 0x5EED])  # the local search's own stream
    climber, packed = None, [None]
    state = brkga.init(chromosome_length(graph.num_nodes, devices), config, seed)
    history: list[list[float]] = []
    stopped, polished = "budget", 0
    with numba_threads(num_threads):
        while state.evaluations + polished + extra < run.budget:
            state = _generation(run, state, state.evaluations + polished + extra,
                                seeds + list(initial or []) if state.generation == 0 else ())
            used = state.evaluations + polished + extra
            if share > 0.0 and climber is None and used < run.budget:
                cfg = LocalSearchConfig.resolve(
                    graph.num_nodes, int(budget), informed=True, directed=flagship.directed_share,
                    temperature=anneal_temperature(graph.num_nodes, int(budget), flagship),
                    adaptive=bool(flagship.adaptive_moves), rate=flagship.adaptive_rate)
                climber = Climb(graph, devices, rng, cfg)
                climber.start([(p, o) for _, p, o in starts] or [decode(graph, state.best_keys, devices)],
                              run.budget - used)
                _pack(run, climber, packed, state.evaluations + extra)
                polished = climber.evaluations
                used = state.evaluations + polished + extra
            if share > 0.0 and used < run.budget:
                chunk = int(round((config.population_size - config.num_elites) * share / (1.0 - share)))
                state = _polish(run, state, climber, min(max(chunk, 2), run.budget - used), packed, extra)
                polished = climber.evaluations
            used = state.evaluations + polished + extra
            seconds = time.perf_counter() - t0
            if not history or state.best_fitness < history[-1][1]:
                history.append([used, state.best_fitness, round(seconds, 6)])
            if callback is not None and callback(Progress(used, int(budget), state.generation,
                                                          state.best_fitness, seconds)):
                stopped = "callback"
                break
            if deadline is not None and time.perf_counter() >= deadline:
                stopped = "time_limit"
                break
    if reserve and stopped == "budget" and climber is not None:
        climber.pack(int(budget) - state.evaluations - polished - extra)
        climber.run(int(budget) - state.evaluations - climber.evaluations - extra, deadline)  # what pack left
        polished = climber.evaluations
        state = _write_back(run, state, climber) if climber.best_peak < state.best_fitness else state
    used = state.evaluations + polished + extra
    placement, order = decode(graph, state.best_keys, devices)
    info = {"seed": seed, "budget": int(budget), "generations": state.generation, "stopped": stopped,
            "seeding": [name for name, _, _ in starts], "priors": priors is not None,
            "policy": os.fspath(policy) if isinstance(policy, (str, os.PathLike)) else type(policy).__name__,
            "polish_share": share,
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
