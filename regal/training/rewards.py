"""The reward of a policy's priors during training: the peak (or makespan) of one BRKGA run.

A Dask task of `regal.training.reinforce`; it sits above the searches (it runs them), so the
searches never import it.
"""

from __future__ import annotations

from regal.methods import solve
from regal.parallel import cached_graph
from regal.priors import Priors
from regal.runtime import optimize_runtime

__all__ = ["brkga_peak"]


def brkga_peak(path: str, devices: int, seed: int, budget: int, priors_arrays=None, objective: str = "memory"):
    """Peak of one BRKGA run on one thread, on the graph file `path` (loaded once per process):
    plain (registry method "brkga"), or with priors given as (alpha, beta, inherit) arrays
    ("regal-paper", REGAL's setting). With objective "runtime": the makespan (seconds) of BRKGA
    on the timed chromosome ("brkga-runtime", no memory limit, the default device model), plain
    or with priors of that chromosome."""
    graph = cached_graph(path)
    if objective == "runtime":
        priors = None if priors_arrays is None else Priors(*priors_arrays)
        sol = optimize_runtime(graph, devices, budget, seed, seeding=False, polish=False, priors=priors,
                               num_threads=1, method="brkga-runtime")
        return float(sol.info["timed"]["makespan_s"])
    if priors_arrays is None:
        return solve("brkga", graph, devices, seed=seed, budget=budget, num_threads=1).peak_bytes
    return solve("regal-paper", graph, devices, seed=seed, budget=budget, policy="none",
                 priors=Priors(*priors_arrays), num_threads=1).peak_bytes
