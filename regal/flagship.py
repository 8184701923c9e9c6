"""`regal.optimize`: the flagship on either objective, and its registry entries.

One entry point dispatches on the objective: "memory" runs `regal.memetic.optimize_memory`
(the search loop on `MemoryProblem` with the local-search improver), "runtime" runs
`regal.runtime.optimize_runtime` (the loop on `RuntimeProblem` with the timed climb). Both take
the same `regal.FlagshipConfig`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from regal._stop import Deadline, stops_on_interrupt
from regal.brkga import BrkgaConfig
from regal.config import FlagshipConfig
from regal.graph import Graph
from regal.loop import Progress
from regal.memetic import optimize_memory
from regal.policy.names import DEFAULT_POLICY_NAME
from regal.priors import Priors
from regal.solution import Solution

__all__ = ["optimize", "warmup", "solve_flagship", "solve_regal_paper", "DEFAULT_POLICY"]

#: The policy `regal.optimize` and `regal optimize` use when none is named (`regal.policy.names`).
DEFAULT_POLICY = DEFAULT_POLICY_NAME


@stops_on_interrupt  # Ctrl-C: KeyboardInterrupt, never lost in Numba's kernel loading (issue 55)
def optimize(graph: Graph, devices: int = 1, budget: int = 5000, seed: int = 0, *, policy=DEFAULT_POLICY,
             priors: Priors | None = None, seeding: bool = True, polish: bool = True,
             config: FlagshipConfig | BrkgaConfig | None = None, time_limit_s: float | None = None,
             callback: Callable[[Progress], bool | None] | None = None, num_threads: int | None = None,
             initial: list[np.ndarray] | None = None, method: str | None = None, objective: str = "memory",
             memory_limit_bytes=None, device_model=None, deadline: Deadline | None = None,
             recompute_budget: float = 0.0) -> Solution:
    """Search placements and orders of `graph` on `devices` devices for the lowest peak memory.

    budget: evaluations in all (seeds, decodes and local moves); seed: the only randomness.
    policy: a trained policy for the mutants' priors ("default" for the shipped one, a path or a
        loaded Policy; "teacher" / "teacher-schedule" for the structural teacher's), or "learned":
        the start choice of the first climb (no priors; issue 34); None or "none" for uniform
        mutants and the flagship's own start. priors: explicit priors instead. With seeding or polish on,
        config.prior_share of the mutants are drawn from them (config.brkga.prior_share), else all.
    seeding / polish: the flagship's other two parts (`regal.memetic`); with both off and no
        policy this is plain BRKGA, bit for bit.
    config: the flagship's settings (`regal.FlagshipConfig`; a `regal.BrkgaConfig` sets its BRKGA
        part); None: the adopted ones. With seeding or polish on, the population is at most one
        member per `evaluations_per_member` evaluations of the budget (at least `min_population`);
        `FlagshipConfig(brkga=..., evaluations_per_member=0)` runs brkga.population_size exactly.
    time_limit_s: stop after the first step that ends past this many seconds.
    callback: called with a `Progress` after every step; returning True stops the search.
    deadline: a `regal._stop.Deadline` that the seeds, the generations and the climb poll (a
        signal handler's stop request, a time limit): once it has passed the search ends within
        a poll interval with the best schedule so far, its reason in info["stopped"].
    num_threads: Numba threads for decoding the population; the result is the same for any value.
    initial: extra chromosomes (float64[L] each) for the initial population, after the seeds.
    method: the name the Solution carries (default "regal").
    objective: "memory" (SPEC.md section 3) or "runtime": the shortest makespan (section 4) with
        every device's peak <= memory_limit_bytes (None: no limit; an int, or one per device) on
        `device_model` (`regal.timed.DeviceModel`; None: its defaults), with the same budget,
        seeding, polish, config and priors (of the timed chromosome: a policy trained for this
        objective, e.g. "runtime").
    recompute_budget: the extra compute the search may spend on recomputing values instead of
        keeping them (SPEC.md section 3b), a fraction of the cost of running every node once
        (`regal.recompute.op_costs`; 0.1: at most 10 % more). 0 (the default): no recomputation,
        the search as before, bit for bit. With objective "runtime" and a memory limit at d = 1,
        the step time is minimized with at most this much recomputation (`regal.recompute_search`).
        The Solution's order then may list a node again; info["recompute"] says how much.
    Returns the best Solution found; its peak is re-simulated (SPEC.md section 3). Its info
    (objective "memory") says how the budget went: "seeding" (the starts), "generations",
    "polish_evaluations", "climbs" (each climb's kind of start, start and best peak,
    evaluations, the moves it rejected unsimulated, `FlagshipConfig.climb.screen_moves`, and its
    group moves, `FlagshipConfig.climb.group_moves`: a climb that stalls restarts,
    `FlagshipConfig.restart_stall`), "history"
    ([evaluations, best peak, seconds] at each new best: the anytime curve) and "stopped".
    """
    from regal._args import check_search_args
    check_search_args(devices=devices, budget=budget, seed=seed, time_limit_s=time_limit_s)
    common = dict(seeding=seeding, polish=polish, config=config, policy=policy, priors=priors,
                  time_limit_s=time_limit_s, callback=callback, num_threads=num_threads, initial=initial,
                  method=method, deadline=deadline)
    from regal.recompute_search import check_recompute_budget
    recompute_budget = check_recompute_budget(recompute_budget)
    if recompute_budget > 0.0:
        return _optimize_recompute(graph, devices, budget, seed, recompute_budget, objective, memory_limit_bytes,
                                   device_model, common)
    # each objective's modules are imported when it runs (issue 36: a command pays for what it uses)
    if objective == "runtime":
        from regal.runtime import optimize_runtime
        return optimize_runtime(graph, devices, budget, seed, memory_limit_bytes=memory_limit_bytes,
                                device_model=device_model, **common)
    if objective == "arena":  # the smallest packed arena (issue 35): the flagship, then a climb
        from regal.arena_search import PEAK_SHARE as ARENA_PEAK_SHARE, optimize_arena
        peak_budget = max(1, int(round(budget * ARENA_PEAK_SHARE)))
        start = optimize_memory(graph, devices, peak_budget, seed, **common)
        return optimize_arena(graph, devices, budget - peak_budget, seed, start=start, time_limit_s=time_limit_s,
                              method=method, deadline=deadline)
    if objective != "memory":
        raise ValueError(f"objective must be 'memory', 'runtime' or 'arena', got {objective!r}")
    if memory_limit_bytes is not None or device_model is not None:
        raise ValueError("memory_limit_bytes and device_model belong to objective='runtime'")
    return optimize_memory(graph, devices, budget, seed, **common)


def _optimize_recompute(graph, devices, budget, seed, recompute_budget, objective, memory_limit_bytes, device_model,
                        common) -> Solution:
    """`optimize` with recomputation (`regal.recompute_search`): the memory objective, or the
    runtime objective under a memory limit: at d = 1 the step time is the sequence's cost, at
    d > 1 the timed model's makespan (`regal.recompute_runtime`)."""
    from regal.recompute_search import optimize_recompute
    if objective == "memory":
        if memory_limit_bytes is not None or device_model is not None:
            raise ValueError("memory_limit_bytes and device_model belong to objective='runtime'")
        return optimize_recompute(graph, devices, budget, seed, recompute_budget, **common)
    if objective != "runtime":
        raise ValueError(f"recompute_budget > 0 works with objective 'memory' or 'runtime', not {objective!r}")
    if memory_limit_bytes is None:
        raise ValueError("recompute_budget with objective='runtime' needs memory_limit_bytes: without a limit "
                         "the fastest step recomputes nothing")
    if devices != 1:  # the step time is the timed model's makespan (regal.recompute_runtime)
        from regal.recompute_runtime import optimize_recompute_runtime
        return optimize_recompute_runtime(graph, devices, budget, seed, recompute_budget,
                                          memory_limit_bytes=memory_limit_bytes, device_model=device_model, **common)
    limit = memory_limit_bytes[0] if isinstance(memory_limit_bytes, (list, tuple)) else memory_limit_bytes
    return optimize_recompute(graph, devices, budget, seed, recompute_budget, memory_limit_bytes=int(limit),
                              device_model=device_model, **common)


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
    config = BrkgaConfig(population_size=10)
    for d in ((1, 2) if devices is None else (1 if devices == 1 else 2,)):
        optimize(g, devices=d, budget=60, seeding=seeding, polish=polish, config=config)
        if seeding or polish:  # the seeds and the climb can spend 60 evaluations before a crossover
            optimize(g, devices=d, budget=30, seeding=False, polish=False, config=config)


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
