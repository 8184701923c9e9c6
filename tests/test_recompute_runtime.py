"""The runtime objective with recomputation at d > 1 (`regal.recompute_runtime`, issue 53): the
shortest step under a memory limit per device, scored by the timed model on the instance graph."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import regal
from regal.cli import main
from regal.decode import order_by_priority
from regal.graph import Graph
from regal.recompute import instance_graph
from regal.recompute_runtime import fast_instance_graph, timed_score
from regal.recompute_search import optimize_recompute, recompute_sequence
from regal.solution import load_solution
from regal.timed import check_device_model, memory_limits, resimulate

from randgraph import random_dag

LIMIT = 80   # below every no-recompute schedule of `_train_chain` on two devices (101 / 91 B)


def _train_chain(k: int = 16, size: int = 10) -> Graph:
    """A training step's shape: a forward chain of k values of `size` bytes, each read again by the
    backward step of its layer; without recomputation one device holds all of them (172 B), two
    devices about half each (the lowest the searches find: 91 B)."""
    recs = [{"id": "x", "bytes": 1, "resident": True}]
    prev = "x"
    for i in range(1, k + 1):
        recs.append({"id": f"a{i}", "bytes": size, "cost": 1.0, "inputs": [prev]})
        prev = f"a{i}"
    recs.append({"id": "loss", "bytes": 1, "cost": 1.0, "inputs": [prev]})
    prev = "loss"
    for i in range(k, 0, -1):
        recs.append({"id": f"g{i}", "bytes": size, "cost": 1.0, "inputs": [prev, f"a{i}"]})
        prev = f"g{i}"
    return Graph.from_records(recs, name="train_chain")


@pytest.mark.parametrize("seed", range(12))
def test_fast_instance_graph_is_instance_graph(seed):
    g = random_dag(seed, max_nodes=40, control_fraction=0.3, reuse_fraction=0.3, output_fraction=0.1)
    rng = np.random.default_rng(seed)
    order = order_by_priority(g, rng.random(g.num_nodes))
    seq = recompute_sequence(g, order, rng.random(g.num_nodes) < 0.6)
    a, na = instance_graph(g, seq)
    b, nb = fast_instance_graph(g, seq)
    assert a.ids == b.ids and a.ops == b.ops and (na == nb).all()
    for f in ("bytes", "temp_bytes", "cost", "resident", "output", "no_recompute", "in_ptr", "in_idx", "ctrl_in_ptr",
              "ctrl_in_idx", "reuse_ptr", "reuse_idx", "pred_ptr", "pred_idx", "succ_ptr", "succ_idx"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all(), f


def test_timed_score_is_what_evaluate_resimulates():
    g = _train_chain()
    sol = regal.optimize(g, 2, budget=300, recompute_budget=0.5)
    assert sol.recomputes
    model = check_device_model(None, 2)
    score = timed_score(g, sol.placement, sol.order, 2, model, memory_limits(LIMIT, 2))
    sim = resimulate(g, sol)
    assert score.makespan == sim.makespan_s and score.device_peak.tolist() == sim.device_peak_bytes.tolist()


def test_fits_where_the_search_without_recomputation_does_not(tmp_path):
    g = _train_chain()
    plain = regal.optimize(g, 2, budget=8000, objective="runtime", memory_limit_bytes=LIMIT)
    assert not plain.info["timed"]["feasible"]
    sol = regal.optimize(g, 2, budget=8000, objective="runtime", memory_limit_bytes=LIMIT, recompute_budget=1.0)
    timed = sol.info["timed"]
    assert timed["feasible"] and max(timed["device_peak_bytes"]) <= LIMIT
    assert sol.recomputes and 0 < sol.info["recompute"]["extra_fraction"] <= 1.0
    assert sol.evaluations <= 8000
    sim = resimulate(g, sol)   # the timed figures are the instance graph's, as `regal evaluate` finds them
    assert timed["makespan_s"] == sim.makespan_s
    assert timed["device_peak_bytes"] == sim.device_peak_bytes.tolist()
    path = tmp_path / "s.json"
    sol.save(path)
    back = load_solution(path, g)   # checks the peak and info.timed against the simulations
    assert back.peak_bytes == sol.peak_bytes and back.info["timed"]["makespan_s"] == timed["makespan_s"]


def test_cli_json_evaluate_and_budget(tmp_path):
    path = tmp_path / "g.json"
    regal.save(_train_chain(), path)
    out = tmp_path / "s.json"
    args = ["optimize", str(path), "--devices", "2", "--objective", "runtime", "--memory-limit", str(LIMIT)]
    r = CliRunner().invoke(main, args + ["--budget", "8000", "--recompute-budget", "1", "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc["recompute"]) == {"count", "extra_cost", "extra_fraction"}
    assert doc["recompute"]["count"] > 0 and doc["info"]["timed"]["feasible"]
    r = CliRunner().invoke(main, ["evaluate", str(path), str(out), "--json"])
    assert r.exit_code == 0, r.output
    ev = json.loads(r.output)
    assert ev["peak_bytes"] == doc["peak_bytes"]
    assert ev["timed"] == {k: doc["info"]["timed"][k] for k in ("makespan_s", "device_peak_bytes", "feasible")}
    # --recompute-budget bounds the recomputation (a smaller budget: over the limit, exit 5)
    r = CliRunner().invoke(main, args + ["--budget", "1000", "--recompute-budget", "0.05", "--json"])
    assert r.exit_code in (0, 5), r.output
    doc, _ = json.JSONDecoder().raw_decode(r.output)   # exit 5: a line after it says it is over the limit
    assert doc["recompute"]["extra_fraction"] <= 0.05 + 1e-12


@pytest.mark.parametrize("extra, message", [
    (["--recompute-budget", "1"], "--memory-limit"),
    (["--memory-limit", "80", "--recompute-budget", "-1"], "--recompute-budget"),
])
def test_cli_bad_input_is_one_line(tmp_path, extra, message):
    path = tmp_path / "g.json"
    regal.save(_train_chain(), path)
    args = ["optimize", str(path), "--devices", "2", "--budget", "100", "--objective", "runtime"]
    r = CliRunner().invoke(main, args + extra)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_one_device_is_the_d1_search_bit_for_bit():
    g = _train_chain(8)
    a = regal.optimize(g, 1, budget=400, objective="runtime", memory_limit_bytes=60, recompute_budget=1.0)
    b = optimize_recompute(g, 1, 400, 0, 1.0, memory_limit_bytes=60)
    assert a.order.tolist() == b.order.tolist() and a.placement.tolist() == b.placement.tolist()
    assert a.info["timed"] == b.info["timed"]
