"""The independent checker (`regal.check`, SPEC.md sections 3 and 3b written plainly) against the
fast simulator and the naive twin, on random graphs with every rule, on sequences that run a
node again, on the worked examples, and on invalid schedules."""

from __future__ import annotations

import numpy as np
import pytest

import naive
from randgraph import random_dag
from regal.check import CheckError, check, check_solution
from regal.decode import order_by_priority
from regal.graph import Graph
from regal.recompute_search import recompute_sequence
from regal.simulate import ScheduleError, simulate


@pytest.mark.parametrize("seed", range(60))
def test_the_checker_agrees_with_the_fast_simulator_and_the_naive_twin(seed):
    g = random_dag(seed, reuse_fraction=0.4, output_fraction=0.1)
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 5))
    placement = rng.integers(0, d, g.num_nodes).astype(np.int32)
    order = order_by_priority(g, rng.random(g.num_nodes))
    got = check(g, placement, order, d)
    fast = simulate(g, placement, order, d)
    assert got.peak_bytes == fast.peak_bytes and got.device_peak_bytes == fast.device_peak_bytes.tolist()
    assert (got.peak_bytes, got.device_peak_bytes) == naive.simulate(g, placement.tolist(), order.tolist(), d)
    seq = recompute_sequence(g, order, rng.random(g.num_nodes) < 0.6)   # section 3b: nodes run again
    got = check(g, placement, seq, d)
    fast = simulate(g, placement, seq, d)
    assert got.peak_bytes == fast.peak_bytes and got.device_peak_bytes == fast.device_peak_bytes.tolist()
    assert got.instances == seq.shape[0]


def _spec_3b() -> Graph:
    return Graph.from_records([
        {"id": "x", "bytes": 4, "resident": True}, {"id": "a", "bytes": 8, "inputs": ["x"]},
        {"id": "b", "bytes": 1, "inputs": ["a"]}, {"id": "c", "bytes": 8, "inputs": ["b"]},
        {"id": "y", "bytes": 1, "inputs": ["c"]}, {"id": "z", "bytes": 1, "inputs": ["a", "y"]}], name="spec3b")


def test_the_worked_examples():
    chain = Graph.from_records([{"id": "a", "bytes": 4}, {"id": "b", "bytes": 2, "inputs": ["a"]},
                                {"id": "c", "bytes": 1, "inputs": ["b"]}])
    assert check(chain, [0, 0, 0], [0, 1, 2], 1).peak_bytes == 6
    reuse = Graph.from_records([{"id": "x", "bytes": 4, "resident": True},
                                {"id": "a", "bytes": 4, "inputs": ["x"], "reuse": ["x"]},
                                {"id": "b", "bytes": 4, "inputs": ["a"], "reuse": ["a"]},
                                {"id": "c", "bytes": 4, "inputs": ["b"], "reuse": ["b"]}])
    assert check(reuse, [0] * 4, [0, 1, 2, 3], 1).peak_bytes == 8
    g = _spec_3b()
    ix = g.index
    assert check(g, [0] * 6, [ix[k] for k in "xabcyz"], 1).peak_bytes == 21
    assert check(g, [0] * 6, [ix[k] for k in "xabcyaz"], 1).peak_bytes == 14


@pytest.mark.parametrize("seq, message", [
    ("xabcyzz", "graph output"),
    ("xxabcyz", "resident"),
    ("xaabcyz", "read by no later run"),
    ("xabcy", "never runs"),
    ("xbaacyz", "before any run of its input"),
])
def test_invalid_sequences_are_rejected_as_the_fast_simulator_rejects_them(seq, message):
    g = _spec_3b()
    order = [g.index[k] for k in seq]
    with pytest.raises(CheckError, match=message):
        check(g, [0] * 6, order, 1)
    with pytest.raises(ScheduleError):
        simulate(g, [0] * 6, order, 1)


def test_a_solution_whose_numbers_are_wrong_is_caught():
    g = _spec_3b()
    ix = g.index

    class Claimed:
        placement, order, num_devices = [0] * 6, [ix[k] for k in "xabcyz"], 1
        peak_bytes, device_peak_bytes = 20, [20]

    with pytest.raises(CheckError, match="gives peak 21 B"):
        check_solution(g, Claimed)
    Claimed.peak_bytes, Claimed.device_peak_bytes = 21, [21]
    assert check_solution(g, Claimed).peak_bytes == 21
    with pytest.raises(CheckError, match="outside 0..0"):
        check(g, [0, 0, 0, 1, 0, 0], Claimed.order, 1)


def test_regal_evaluate_check(tmp_path):
    """`regal evaluate --check` on a schedule that runs a node twice: the checker's line, and
    "checked" in the JSON."""
    from click.testing import CliRunner

    from regal.cli import main
    from regal.graph.io import save
    from regal.solution import make_solution
    g = _spec_3b()
    graph_path, sol_path = tmp_path / "g.json", tmp_path / "s.json"
    save(g, graph_path)
    make_solution(g, [0] * 6, [g.index[k] for k in "xabcyaz"], 1, "hand").save(sol_path)
    r = CliRunner().invoke(main, ["evaluate", str(graph_path), str(sol_path), "--check"])
    assert r.exit_code == 0, r.output
    assert "checked     the independent simulator (regal.check) gives the same peaks, over 7 steps" in r.output
    r = CliRunner().invoke(main, ["evaluate", str(graph_path), str(sol_path), "--check", "--json"])
    assert r.exit_code == 0 and '"checked": true' in r.output
