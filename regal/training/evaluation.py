"""BRKGA runs of a training run on Dask: the plain references (cached in `reference.json`)
and the validation of a policy on held-out graphs; see `regal.training.reinforce`."""

from __future__ import annotations

import json
import os

from regal._io import atomic_text
from regal.graph import load
from regal.policy import Policy
from regal.policy.actions import Actions, to_priors


class _References:
    """Plain-BRKGA peaks (or makespans, objective "runtime") per (graph, devices, seed, budget),
    cached in a JSON file."""

    def __init__(self, path: str, objective: str = "memory"):
        self.path = path
        self.objective = objective
        self.data = {}
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    self.data = json.load(f)
            except (OSError, ValueError, RecursionError) as e:
                raise ValueError(f"{path}: not a readable reference cache ({type(e).__name__}); "
                                 "remove it to run the plain BRKGA references again") from None
            if not isinstance(self.data, dict) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.data.values()):
                raise ValueError(f"{path}: not a reference cache (an object of peaks or makespans); "
                                 "remove it to run the plain BRKGA references again")

    def key(self, gpath, d, seed, budget):
        tail = "|runtime" if self.objective == "runtime" else ""  # the two never share an entry
        return f"{os.path.basename(gpath)}|{d}|{seed}|{budget}{tail}"

    def missing(self, items):
        return [it for it in items if self.key(*it) not in self.data]

    def add(self, item, score):
        self.data[self.key(*item)] = float(score) if self.objective == "runtime" else int(score)

    def get(self, item):
        return self.data[self.key(*item)]

    def save(self):
        with atomic_text(self.path) as f:
            json.dump(self.data, f)


def _run_many(client, jobs, objective: str = "memory"):
    """jobs: list of (path, d, seed, budget, priors_arrays|None) -> peaks (objective "memory") or
    makespans ("runtime"), on Dask or in-process."""
    from regal.training.rewards import brkga_peak as run_brkga
    jobs = [tuple(j) + (objective,) for j in jobs]
    if client is None:
        return [run_brkga(*j) for j in jobs]
    futures = [client.submit(run_brkga, *j, pure=False) for j in jobs]
    return client.gather(futures)


def _priors_arrays(actions: Actions, n: int, d: int, objective: str = "memory"):
    p = to_priors(actions, n, d, objective)
    return (p.alpha, p.beta, p.elite_inheritance)


def evaluate_policy(policy: Policy, paths, devices, seeds, budget, client, refs: _References) -> list[dict]:
    """Per (graph, devices, seed): plain and policy peaks (or makespans) with the most likely actions."""
    items, jobs = [], []
    for path in paths:
        g = load(path)
        for d in devices:
            pa = _priors_arrays(policy.actions(g, d), g.num_nodes, d, refs.objective)
            for s in seeds:
                items.append((path, d, s, budget))
                jobs.append((path, d, s, budget, pa))
    need = refs.missing(items)
    peaks = _run_many(client, jobs + [it + (None,) for it in need], refs.objective)
    for it, pk in zip(need, peaks[len(jobs):]):
        refs.add(it, pk)
    refs.save()
    return [{"graph": os.path.basename(it[0]), "devices": it[1], "seed": it[2], "plain": refs.get(it),
             "policy": pk, "improvement": (refs.get(it) - pk) / refs.get(it)}
            for it, pk in zip(items, peaks[:len(jobs)])]
