"""regal.simulate and regal.decode against their naive twins (SPEC.md sections 3 and 5)."""

import numpy as np
import pytest

import naive
from randgraph import random_dag
from regal.decode import chromosome_length, decode, decode_evaluate, encode, evaluate_population
from regal.graph import Graph
from regal.simulate import ScheduleError, memory_trace, simulate

# 1,000 random DAGs x devices 1..4 (each graph is used once per device count)
CASES = [(seed, 1 + seed % 4) for seed in range(1000)]


def _keys(seed, n, d):
    rng = np.random.default_rng(10_000 + seed)
    keys = rng.random(chromosome_length(n, d))
    if seed % 4 == 0:
        keys = np.floor(keys * 4) / 4  # many ties: placement and priority tie-breaking
    return keys


def test_kernels_agree_with_naive_on_1000_random_dags():
    """Decoder and simulator equal the literal SPEC transcription on 1,000 random DAGs, d = 1..4."""
    mismatches = []
    for seed, d in CASES:
        g = random_dag(seed, max_nodes=25)
        keys = _keys(seed, g.num_nodes, d)
        placement, order, sim = decode_evaluate(g, keys, d)
        ref_placement, ref_order = naive.decode(g, keys, d)
        ref_peak, ref_dev = naive.simulate(g, ref_placement, ref_order, d)
        if (placement.tolist() != ref_placement or order.tolist() != ref_order
                or sim.peak_bytes != ref_peak or sim.device_peak_bytes.tolist() != ref_dev):
            mismatches.append((seed, d))
    assert mismatches == []


def test_random_dags_cover_every_rule():
    """The agreement test's graphs include resident nodes, temp bytes, control edges and outputs."""
    graphs = [random_dag(seed, max_nodes=25) for seed, _ in CASES]
    assert sum(int(g.resident.sum()) for g in graphs) > 500
    assert sum(int((g.temp_bytes > 0).sum()) for g in graphs) > 1000
    assert sum(g.num_control_edges for g in graphs) > 100
    assert all(any(g.consumers(v).size == 0 for v in range(g.num_nodes)) for g in graphs)


def test_population_evaluation_equals_single_decodes():
    """evaluate_population gives each chromosome's own peak (batched, parallel kernel)."""
    for seed in range(40):
        g = random_dag(seed, max_nodes=40)
        d = 1 + seed % 3
        pop = np.random.default_rng(seed).random((17, chromosome_length(g.num_nodes, d)))
        fit = evaluate_population(g, pop, d)
        assert fit.tolist() == [decode_evaluate(g, k, d)[2].peak_bytes for k in pop]


def test_spec_worked_example_chain():
    """SPEC section 3: chain a(4) -> b(2) -> c(1) on one device peaks at 6."""
    g = Graph.from_records([{"id": "a", "bytes": 4}, {"id": "b", "bytes": 2, "inputs": ["a"]},
                            {"id": "c", "bytes": 1, "inputs": ["b"]}])
    sim, trace = memory_trace(g, [0, 0, 0], [0, 1, 2], 1)
    assert sim.peak_bytes == 6 and trace[:, 0].tolist() == [4, 6, 3]


def test_copies_and_home_free_across_devices():
    """A tensor with consumers on two devices: the copy and the home copy follow SPEC's free rules."""
    # u(10) on device 0; a(1) on 0 and b(1) on 1 consume u; w(5) on device 0 runs last.
    g = Graph.from_records([{"id": "u", "bytes": 10}, {"id": "a", "bytes": 1, "inputs": ["u"]},
                            {"id": "b", "bytes": 1, "inputs": ["u"]}, {"id": "w", "bytes": 5}])
    placement = [0, 0, 1, 0]
    # order u, a, w, b: u's home copy must wait for device 1's copy, so w runs beside u
    sim = simulate(g, placement, [0, 1, 3, 2], 2)
    assert sim.device_peak_bytes.tolist() == [16, 11]
    # order u, a, b, w: b copies u to device 1, then the home copy is freed before w
    sim = simulate(g, placement, [0, 1, 2, 3], 2)
    assert sim.device_peak_bytes.tolist() == [11, 11]


def test_resident_copies_are_freed_but_home_never():
    """A resident weight used remotely: the copy goes after its last consumer; home stays."""
    g = Graph.from_records([{"id": "w", "bytes": 100, "resident": True},
                            {"id": "x", "bytes": 1, "inputs": ["w"]},
                            {"id": "y", "bytes": 50}])
    sim, trace = memory_trace(g, [0, 1, 1], [0, 1, 2], 2)
    assert trace[:, 0].tolist() == [100, 100, 100]
    assert trace[:, 1].tolist() == [0, 101, 51]  # the copy of w is gone when y runs
    assert sim.device_peak_bytes.tolist() == [100, 101]


def test_temp_bytes_count_only_while_running():
    """temp_bytes raise the peak of the step that runs the node and nothing after."""
    g = Graph.from_records([{"id": "a", "bytes": 4, "temp_bytes": 10}, {"id": "b", "bytes": 1, "inputs": ["a"]}])
    sim, trace = memory_trace(g, [0, 0], [0, 1], 1)
    assert trace[:, 0].tolist() == [14, 5] and sim.peak_bytes == 14


def test_trace_maximum_is_the_device_peak():
    """The per-step trace reaches each device's peak exactly (or its resident floor)."""
    for seed in range(100):
        g = random_dag(seed)
        d = 1 + seed % 3
        placement, order = decode(g, _keys(seed, g.num_nodes, d), d)
        sim, trace = memory_trace(g, placement, order, d)
        assert trace.max(axis=0).tolist() == sim.device_peak_bytes.tolist() or trace.shape[0] == 0


def test_encode_round_trips_any_valid_schedule():
    """encode(placement, order) decodes back to exactly that placement and order."""
    rng = np.random.default_rng(3)
    for seed in range(100):
        g = random_dag(seed)
        d = 1 + seed % 4
        order = naive.decode(g, rng.random(chromosome_length(g.num_nodes, d)), d)[1]
        placement = rng.integers(0, d, g.num_nodes)
        p2, o2 = decode(g, encode(placement, order, d), d)
        assert p2.tolist() == placement.tolist() and o2.tolist() == order


@pytest.mark.parametrize("placement, order, message", [
    ([0, 0, 0], [0, 2, 1], "node 'c' comes before its input 'b'"),
    ([0, 0, 0], [0, 1, 1], "lists node 'b' twice and misses node 'c'"),
    ([0, 2, 0], [0, 1, 2], "node 'b' is placed on device 2, outside 0..1"),
    ([0, 0], [0, 1, 2], "must each have 3 entries"),
])
def test_invalid_schedules_are_rejected_with_a_reason(placement, order, message):
    """simulate refuses a schedule that is not a permutation, not topological or off-device."""
    g = Graph.from_records([{"id": "a", "bytes": 1}, {"id": "b", "bytes": 1, "inputs": ["a"]},
                            {"id": "c", "bytes": 1, "inputs": ["b"]}])
    with pytest.raises(ScheduleError, match=message):
        simulate(g, placement, order, 2)


def test_control_edges_constrain_order_but_move_no_bytes():
    """A control input must come first, yet its bytes are not held for the consumer."""
    g = Graph.from_records([{"id": "a", "bytes": 7}, {"id": "b", "bytes": 1, "control_inputs": ["a"]}])
    with pytest.raises(ScheduleError):
        simulate(g, [0, 0], [1, 0], 1)
    assert simulate(g, [0, 1], [0, 1], 2).device_peak_bytes.tolist() == [7, 1]
