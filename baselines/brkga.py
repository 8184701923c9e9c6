"""Plain and tuned BRKGA as baselines (REGAL's Table 1 rows "BRKGA 5K" and "Tuned BRKGA").

Tuned hyper-parameters come from `baselines/tuned_brkga.json`, written by
`experiments/tune_brkga.py` (a grid search on the train split).
"""

from __future__ import annotations

import json
import os

from regal.brkga import BrkgaConfig
from regal.search import optimize

TUNED_PATH = os.path.join(os.path.dirname(__file__), "tuned_brkga.json")


def solve(graph, devices, *, time_limit_s=None, seed=0, budget=5000, config=None, **options):
    """Plain BRKGA with uniform priors; the default config (REGAL-NOTES.md) unless `config`
    (a BrkgaConfig or a dict of its fields) is given."""
    if isinstance(config, dict):
        config = BrkgaConfig(**config)
    sol = optimize(graph, devices=devices, budget=budget, seed=seed, time_limit_s=time_limit_s,
                   config=config, **options)
    return _renamed(sol, "brkga")


def tuned_config() -> BrkgaConfig:
    with open(TUNED_PATH) as f:
        doc = json.load(f)
    return BrkgaConfig(**doc["config"])


def solve_tuned(graph, devices, *, time_limit_s=None, seed=0, budget=5000, **options):
    """BRKGA with the grid-searched config of `tuned_brkga.json`."""
    sol = optimize(graph, devices=devices, budget=budget, seed=seed, time_limit_s=time_limit_s,
                   config=tuned_config(), **options)
    return _renamed(sol, "tuned-brkga")


def _renamed(sol, method):
    from dataclasses import replace
    return replace(sol, method=method)
