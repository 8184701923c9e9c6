"""Tuned BRKGA (REGAL's Table 1 row "Tuned BRKGA"); plain BRKGA is the library's `brkga` method.

Tuned hyper-parameters come from `tuned_brkga.json` beside this file, written by
`experiments/tune_brkga.py` (a grid search on the train split).
"""

from __future__ import annotations

import json
import os

from regal.brkga import BrkgaConfig
from regal.search import brkga_search

TUNED_PATH = os.path.join(os.path.dirname(__file__), "tuned_brkga.json")


def tuned_config() -> BrkgaConfig:
    with open(TUNED_PATH) as f:
        doc = json.load(f)
    return BrkgaConfig(**doc["config"])


def solve_tuned(graph, devices, *, time_limit_s=None, seed=0, budget=5000, **options):
    """BRKGA with the grid-searched config of `tuned_brkga.json`."""
    return brkga_search(graph, devices, budget=budget, seed=seed, time_limit_s=time_limit_s,
                        config=tuned_config(), method="tuned-brkga", **options)
