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
from regal.recompute import SequenceError, instance_graph
from regal.recompute_runtime import timed_score
from regal.recompute_search import optimize_recompute, recompute_sequence
from regal.solution import load_solution, make_solution
from regal.timed import (DeviceModel, check_device_model, instance_schedule, memory_limits, resimulate,
                         simulate_timed)

import naive
import naive_timed
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
def test_instance_graph_is_section_3b_instance_graph(seed):
    """The one construction (arrays) against tests/naive.py's SPEC.md section 3b, record by record."""
    g = random_dag(seed, max_nodes=40, control_fraction=0.3, reuse_fraction=0.3, output_fraction=0.1)
    rng = np.random.default_rng(seed)
    order = order_by_priority(g, rng.random(g.num_nodes))
    seq = recompute_sequence(g, order, rng.random(g.num_nodes) < 0.6)
    a, nodes = instance_graph(g, seq)
    b, node_of = naive.expand_instances(g, seq)
    assert a.ids == b.ids and nodes.tolist() == node_of
    for f in ("bytes", "temp_bytes", "cost", "resident", "output", "in_ptr", "in_idx", "ctrl_in_ptr",
              "ctrl_in_idx", "reuse_ptr", "reuse_idx", "pred_ptr", "pred_idx", "succ_ptr", "succ_idx"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.shape == y.shape and (x == y).all(), f
    assert (a.no_recompute == g.no_recompute[nodes]).all()
    assert instance_graph(g, seq, checked=True)[0].ids == a.ids


def test_instance_graph_checks_the_sequence_unless_told():
    g = _train_chain(4)
    ix = g.index
    bad = [ix[k] for k in ["x", "a2", "a1", "a3", "a4", "loss", "g4", "g3", "g2", "g1"]]
    with pytest.raises(SequenceError, match="not topological: node 'a2'"):
        instance_graph(g, bad)


def _early_example():
    """SPEC.md section 4's example of a recomputation in place: a(8) on device 0, b(1) = B(a) on
    0, c(4) = C(b) on 1 (3 s), d(1) = D(c) on 0, z(1) = Z(a, d) on 0; every other cost 1 s;
    1 B/s links, no latency; sequence a b c d a z."""
    g = Graph.from_records([
        {"id": "a", "bytes": 8, "cost": 1.0}, {"id": "b", "bytes": 1, "cost": 1.0, "inputs": ["a"]},
        {"id": "c", "bytes": 4, "cost": 3.0, "inputs": ["b"]}, {"id": "d", "bytes": 1, "cost": 1.0, "inputs": ["c"]},
        {"id": "z", "bytes": 1, "cost": 1.0, "inputs": ["a", "d"]}], name="early")
    ix = g.index
    seq = np.array([ix[k] for k in "abcdaz"], dtype=np.int32)
    return g, np.array([0, 0, 1, 0, 0], dtype=np.int32), seq, DeviceModel(1.0, 0.0)


def test_a_recomputation_waits_for_its_place_on_its_device():
    """Hand-checked. Without the rule, a#2 (no inputs) starts at t = 2, when device 0 waits for
    b's copy and then for c: it holds 8 bytes while c's copy (4) arrives over 6-10 s and d runs,
    peak 8 + 4 + 1 = 13 at d's start (t = 10), makespan 12. With it, a#2 waits for d (the entry
    before it on device 0) and runs at 11-12: peak 10 (a#2 8 + d 1 + z 1 at z's start, t = 12),
    makespan 13; device 1 holds b's copy and c, 5, either way."""
    g, place, seq, model = _early_example()
    inst, nodes = instance_graph(g, seq)
    old = simulate_timed(inst, place[nodes], np.arange(6), 2, model)   # the instance graph as it is
    assert old.start_s.tolist() == [0.0, 1.0, 3.0, 10.0, 2.0, 11.0]
    assert old.device_peak_bytes.tolist() == [13, 5] and old.makespan_s == 12.0
    timed, nodes, ip = instance_schedule(g, place, seq)
    new = simulate_timed(timed, ip, np.arange(6), 2, model)
    assert new.start_s.tolist() == [0.0, 1.0, 3.0, 10.0, 11.0, 12.0]
    assert new.device_peak_bytes.tolist() == [10, 5] and new.makespan_s == 13.0
    sol = make_solution(g, place, seq, 2, method="hand", info={"timed": {"device_model": model.to_json(2)}})
    sim = resimulate(g, sol)
    assert sim.device_peak_bytes.tolist() == [10, 5] and sim.makespan_s == 13.0


def _random_case(seed: int, d: int):
    g = random_dag(seed, max_nodes=30, control_fraction=0.2, reuse_fraction=0.3 if seed % 3 == 0 else 0.0,
                   output_fraction=0.2 if seed % 2 else 0.0)
    rng = np.random.default_rng(7_000 + seed)
    order = order_by_priority(g, rng.random(g.num_nodes))
    seq = recompute_sequence(g, order, rng.random(g.num_nodes) < 0.5)
    placement = rng.integers(0, d, g.num_nodes).astype(np.int32)
    model = DeviceModel(bandwidth_bytes_per_s=[1e6, 1e5][seed % 2], latency_s=[0.0, 5e-6, 1e-4][seed % 3],
                        speed=tuple(rng.choice([0.5, 1.0, 2.0], d)))
    return g, placement, seq, model


@pytest.mark.parametrize("d", [2, 3])
def test_simulator_agrees_with_naive_on_sequences_with_recomputations(d):
    """The kernel on `instance_schedule`'s graph (the rule as control edges) against the naive
    twin, which applies SPEC.md section 4's rule as written ("has started"), on 150 random
    schedules with recomputations: makespan, device peaks, every start and finish, the transfers."""
    mismatches, recomputed, delayed = [], 0, 0
    for seed in range(150):
        g, placement, seq, model = _random_case(seed, d)
        recomputed += seq.shape[0] > g.num_nodes
        timed, nodes, place = instance_schedule(g, placement, seq)
        m = nodes.shape[0]
        sim = simulate_timed(timed, place, np.arange(m), d, model)
        inst, _ = instance_graph(g, seq, checked=True)
        prio = np.arange(m, 0, -1, dtype=np.float64)
        ms, peak, start, finish, transfers = naive_timed.simulate_timed(
            inst, place, prio, np.repeat(prio[:, None], d, axis=1), d, list(model.speed), model.bandwidth_bytes_per_s,
            model.latency_s, instance_of=nodes.tolist())
        same = (ms == sim.makespan_s and peak == sim.device_peak_bytes.tolist()
                and [start[v] for v in range(m)] == sim.start_s.tolist()
                and [finish[v] for v in range(m)] == sim.finish_s.tolist()
                and {k: v[0] for k, v in transfers.items()}
                == dict(zip(zip(sim.transfer_node.tolist(), sim.transfer_device.tolist()), sim.transfer_start_s)))
        if not same:
            mismatches.append(seed)
        delayed += sim.start_s.tolist() != simulate_timed(inst, place, np.arange(m), d, model).start_s.tolist()
    assert mismatches == []
    assert recomputed > 90 and delayed > 40   # the cases exercise the rule (103 and 80 at d = 2)


def test_on_one_device_the_rule_changes_nothing():
    """At d = 1 the device runs the sequence in its order (the first entry not started is always
    ready), so every recomputation already waits for its place: the instance graph with and
    without section 4's gates gives the same schedule (what `regal.recompute_search` reports)."""
    for seed in range(60):
        g, placement, seq, model = _random_case(seed, 1)
        timed, nodes, place = instance_schedule(g, placement, seq)
        inst, _ = instance_graph(g, seq)
        m = nodes.shape[0]
        a = simulate_timed(timed, place, np.arange(m), 1, model)
        b = simulate_timed(inst, place, np.arange(m), 1, model)
        assert a.start_s.tolist() == b.start_s.tolist() and a.device_peak_bytes.tolist() == b.device_peak_bytes.tolist()
        runs = a.order[~timed.resident[a.order]]   # the dispatch order after the resident nodes
        assert runs.tolist() == np.flatnonzero(~timed.resident).tolist()


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
