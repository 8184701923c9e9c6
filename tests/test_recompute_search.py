"""The recompute search's stages (regal.recompute_search): the climb in rounds, stage 1's stop."""

from __future__ import annotations

import numpy as np
import pytest

import regal
from regal import _remat_climb
from regal.loop import Progress
from regal.recompute import op_costs, remat_graph
from regal.recompute_search import RecomputeConfig, _StallStop, optimize_recompute
from regal.simulate import kernel_graph

GRAPH = "data/graphs/torch/torch_resnet18_train.json.gz"


@pytest.mark.parametrize("devices", [1, 2])
def test_the_climb_in_rounds_is_the_climb_in_one_call(devices):
    g = regal.load(GRAPH)
    start = regal.optimize(g, devices, budget=200, seed=1)
    cost, _ = op_costs(g)
    args = (kernel_graph(g), remat_graph(g), start.order.astype(np.int32), start.placement.astype(np.int32), devices,
            cost, 0.1 * cost.sum())
    whole = np.zeros(g.num_nodes, dtype=np.bool_)
    peak, extra, used, cut = _remat_climb.recompute_climb(*args, whole, -1, (3000, 0, 24))
    assert not cut
    sliced = np.zeros(g.num_nodes, dtype=np.bool_)
    spent, calls = 0, 0
    while True:
        p2, x2, u2, cut = _remat_climb.recompute_climb(*args, sliced, -1, (3000 - spent, 2, 24))
        spent += u2
        calls += 1
        if not cut:
            break
    assert calls > 1
    assert p2 == peak and sliced.tolist() == whole.tolist()
    assert spent == used + calls - 1   # each call scores its start once more


def test_stage_one_stops_on_a_stall_within_its_shares():
    stop = _StallStop(least=100, most=1000, window=200, gain=0.01)
    seen = [(50, 900.0), (150, 800.0), (300, 700.0), (450, 697.0), (600, 696.0)]
    said = [stop(Progress(e, 5000, i, b, 0.0)) for i, (e, b) in enumerate(seen)]
    assert said == [False, False, False, False, True]   # 700 -> 696 over the last 200: under 1 %
    assert _StallStop(100, 1000, 200, 0.01)(Progress(1000, 5000, 0, 1.0, 0.0))


@pytest.mark.parametrize("devices", [1, 2])
def test_stage_one_runs_the_full_budgets_flagship_and_spends_the_budget(devices):
    g = regal.load(GRAPH)
    cfg = RecomputeConfig()
    sol = optimize_recompute(g, devices, 1500, 0, 0.1, recompute_config=cfg)
    first = sol.info["flagship_evaluations"]
    assert round(cfg.first_share * 1500) <= first <= round(cfg.first_max * 1500) + 300   # a generation past it
    assert sol.evaluations <= 1500
    assert sol.peak_bytes <= sol.info["flagship_peak_bytes"]
