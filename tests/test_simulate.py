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


# ---------------------------------------------------------------------------- in-place reuse
REUSE_CASES = [(seed, 1 + seed % 4) for seed in range(600)]


def _decode_against_naive(g, seed, d):
    """(placement, order, simulation) of a random chromosome, and whether decoder, simulator and
    population kernel all equal the literal SPEC on it."""
    keys = _keys(seed, g.num_nodes, d)
    placement, order, sim = decode_evaluate(g, keys, d)
    ref_peak, ref_dev = naive.simulate(g, placement.tolist(), order.tolist(), d)
    fit = evaluate_population(g, keys[None, :], d)[0]
    agree = sim.peak_bytes == ref_peak and sim.device_peak_bytes.tolist() == ref_dev and fit == ref_peak
    return placement, order, sim, agree


def _without(g, field):
    return Graph.from_records([{k: v for k, v in r.items() if k != field} for r in g.to_records()])


def test_kernels_agree_with_naive_with_reuse_fields():
    """Decoder, simulator and population kernel equal the literal SPEC with `reuse` on 600 DAGs."""
    mismatches, lowered = [], 0
    for seed, d in REUSE_CASES:
        g = random_dag(seed, max_nodes=25, reuse_fraction=0.6)
        placement, order, sim, agree = _decode_against_naive(g, seed, d)
        if not agree:
            mismatches.append((seed, d))
        lowered += simulate(_without(g, "reuse"), placement, order, d).peak_bytes > sim.peak_bytes
    assert mismatches == []
    assert lowered > 60  # taking over does lower peaks in this sample


def _chain(**reuse):
    """Resident x(4) -> a(4) -> b(4) -> c(4), with the given reuse lists."""
    recs = [{"id": "x", "bytes": 4, "resident": True}, {"id": "a", "bytes": 4, "inputs": ["x"]},
            {"id": "b", "bytes": 4, "inputs": ["a"]}, {"id": "c", "bytes": 4, "inputs": ["b"]}]
    for r in recs:
        if r["id"] in reuse:
            r["reuse"] = reuse[r["id"]]
    return Graph.from_records(recs)


def test_spec_worked_example_a_chain_of_elementwise_ops_runs_in_two_buffers():
    """SPEC section 3: the chain beside its resident input holds x and one buffer (8), not 12."""
    sim, trace = memory_trace(_chain(a=["x"], b=["a"], c=["b"]), [0] * 4, [0, 1, 2, 3], 1)
    assert sim.peak_bytes == 8 and trace[:, 0].tolist() == [4, 8, 8, 8]
    sim, trace = memory_trace(_chain(), [0] * 4, [0, 1, 2, 3], 1)
    assert sim.peak_bytes == 12 and trace[:, 0].tolist() == [4, 8, 12, 12]


def test_resident_inputs_are_never_taken_over():
    """a lists the resident x: it still needs its own 4 bytes beside x (and x is never freed)."""
    assert memory_trace(_chain(a=["x"]), [0] * 4, [0, 1, 2, 3], 1)[1][:, 0].tolist() == [4, 8, 12, 12]


def test_a_fork_keeps_its_input_alive():
    """u feeds a and b: a (run first) cannot take u over; b, its last consumer, can."""
    g = Graph.from_records([{"id": "u", "bytes": 10}, {"id": "a", "bytes": 10, "inputs": ["u"], "reuse": ["u"]},
                            {"id": "b", "bytes": 10, "inputs": ["u"], "reuse": ["u"]}])
    sim, trace = memory_trace(g, [0, 0, 0], [0, 1, 2], 1)
    assert trace[:, 0].tolist() == [10, 20, 20]  # a: u + a; b takes u over: u + a, not + b
    assert naive.simulate(g, [0, 0, 0], [0, 1, 2], 1)[0] == sim.peak_bytes == 20


def test_a_graph_output_is_never_taken_over_and_keeps_its_bytes():
    """An output (no consumers) is no one's input; an output that takes over holds its full size."""
    g = Graph.from_records([{"id": "u", "bytes": 6}, {"id": "o", "bytes": 6, "inputs": ["u"], "reuse": ["u"]},
                            {"id": "p", "bytes": 3}])
    sim, trace = memory_trace(g, [0, 0, 0], [0, 1, 2], 1)
    assert trace[:, 0].tolist() == [6, 6, 9]  # o took u over; o (6) stays to the end beside p


def test_taking_over_needs_the_same_device_and_the_home_copy_freed_by_this_step():
    """Across devices: a remote consumer never takes over; the home consumer only once every
    other device holding a consumer has its copy."""
    g = Graph.from_records([{"id": "u", "bytes": 10}, {"id": "a", "bytes": 10, "inputs": ["u"], "reuse": ["u"]},
                            {"id": "b", "bytes": 10, "inputs": ["u"], "reuse": ["u"]}])
    # b on device 1 copies u in and cannot take it over; a on u's home then does
    sim, trace = memory_trace(g, [0, 0, 1], [0, 2, 1], 2)
    assert trace[:, 0].tolist() == [10, 10, 10] and sim.device_peak_bytes.tolist() == [10, 20]
    # a runs first on u's home while b (device 1) has no copy yet: u's home copy stays, no take
    sim, trace = memory_trace(g, [0, 0, 1], [0, 1, 2], 2)
    assert trace[1].tolist() == [20, 0] and sim.device_peak_bytes.tolist() == [20, 20]
    for placement, order in (([0, 0, 1], [0, 2, 1]), ([0, 0, 1], [0, 1, 2]), ([0, 1, 1], [0, 1, 2])):
        assert naive.simulate(g, placement, order, 2)[1] == simulate(g, placement, order, 2).device_peak_bytes.tolist()


def test_taking_over_follows_the_preference_order_and_the_size():
    """Inputs are taken in `reuse` order while their bytes fit in the output's."""
    g = Graph.from_records([{"id": "p", "bytes": 6}, {"id": "q", "bytes": 10}, {"id": "r", "bytes": 4},
                            {"id": "v", "bytes": 10, "inputs": ["p", "q", "r"], "reuse": ["p", "q", "r"]}])
    # p (6) fits, q (6 + 10 > 10) does not, r (6 + 4) does: v adds 0 new bytes
    assert memory_trace(g, [0] * 4, [0, 1, 2, 3], 1)[1][:, 0].tolist() == [6, 16, 20, 20]
    g2 = Graph.from_records([{**r, "reuse": ["q", "p", "r"]} if r["id"] == "v" else r for r in g.to_records()])
    # q first: it fills v's 10 bytes, nothing else fits
    assert memory_trace(g2, [0] * 4, [0, 1, 2, 3], 1)[1][:, 0].tolist() == [6, 16, 20, 20]
    g3 = Graph.from_records([{**r, "bytes": 5} if r["id"] == "v" else r for r in g.to_records()])
    # v (5): p (6) does not fit, q neither, r (4) does: 20 + 5 - 4
    assert memory_trace(g3, [0] * 4, [0, 1, 2, 3], 1)[1][:, 0].tolist() == [6, 16, 20, 21]


# ---------------------------------------------------------------------------- graph outputs
def test_kernels_agree_with_naive_with_output_fields():
    """Decoder, simulator and population kernel equal the literal SPEC with `output` (and
    `reuse`) on 600 DAGs; marking outputs never lowers a peak, and does raise some."""
    mismatches, raised = [], 0
    for seed, d in REUSE_CASES:
        g = random_dag(seed, max_nodes=25, reuse_fraction=0.5 * (seed % 2), output_fraction=0.3)
        placement, order, sim, agree = _decode_against_naive(g, seed, d)
        if not agree:
            mismatches.append((seed, d))
        before = simulate(_without(g, "output"), placement, order, d).peak_bytes
        assert before <= sim.peak_bytes
        raised += before < sim.peak_bytes
        assert sim.peak_bytes >= g.lower_bound(d)
    assert mismatches == []
    assert raised > 60


def test_spec_worked_example_an_output_with_a_consumer_stays_to_the_end():
    """SPEC section 3: a(4) -> b(2) -> c(1) with b returned: b is kept after c, 3 bytes at the end."""
    recs = [{"id": "a", "bytes": 4}, {"id": "b", "bytes": 2, "inputs": ["a"], "output": True},
            {"id": "c", "bytes": 1, "inputs": ["b"]}]
    g = Graph.from_records(recs)
    sim, trace = memory_trace(g, [0] * 3, [0, 1, 2], 1)
    assert sim.peak_bytes == 6 and trace[:, 0].tolist() == [4, 6, 3]
    assert naive.simulate(g, [0] * 3, [0, 1, 2], 1)[0] == 6
    # after c, b (2) and c (1) remain: a d node after them sees them
    g2 = Graph.from_records(recs + [{"id": "e", "bytes": 5, "inputs": ["c"]}])
    assert memory_trace(g2, [0] * 4, [0, 1, 2, 3], 1)[1][:, 0].tolist() == [4, 6, 3, 8]
    g3 = _without(g2, "output")
    assert memory_trace(g3, [0] * 4, [0, 1, 2, 3], 1)[1][:, 0].tolist() == [4, 6, 3, 6]


def test_an_output_is_never_taken_over():
    """b lists its input a, an output: b needs its own bytes, and a stays."""
    g = Graph.from_records([{"id": "a", "bytes": 4, "output": True},
                            {"id": "b", "bytes": 4, "inputs": ["a"], "reuse": ["a"]}])
    assert memory_trace(g, [0, 0], [0, 1], 1)[1][:, 0].tolist() == [4, 8]
    assert naive.simulate(g, [0, 0], [0, 1], 1)[0] == 8
    assert g.max_taken_bytes().tolist() == [0, 0]


def test_an_outputs_remote_copy_is_freed_its_home_copy_kept():
    """Two devices: the output u (home 0) is copied to device 1 for b; the copy goes after b,
    the home copy stays."""
    g = Graph.from_records([{"id": "u", "bytes": 10, "output": True}, {"id": "b", "bytes": 1, "inputs": ["u"]},
                            {"id": "c", "bytes": 2}])
    sim, trace = memory_trace(g, [0, 1, 1], [0, 1, 2], 2)
    assert trace.tolist() == [[10, 0], [10, 11], [10, 3]]
    assert naive.simulate(g, [0, 1, 1], [0, 1, 2], 2)[1] == sim.device_peak_bytes.tolist() == [10, 11]


def test_the_output_field_round_trips_and_is_validated():
    import networkx  # noqa: F401
    from regal.graph import GraphError, from_json, from_networkx, mark_outputs, to_networkx
    recs = [{"id": "a", "bytes": 4}, {"id": "b", "bytes": 4, "inputs": ["a"], "output": True, "reuse": ["a"]},
            {"id": "c", "bytes": 4, "inputs": ["b"], "reuse": ["b"]}]
    g = Graph.from_records(recs)
    assert g.output.tolist() == [False, True, False] and g.kept.tolist() == [False, True, True]
    assert from_json(g.to_json()).output.tolist() == g.output.tolist()
    assert from_networkx(to_networkx(g)).output.tolist() == g.output.tolist()
    with pytest.raises(GraphError, match="node 'b': 'output' must be true or false"):
        Graph.from_records([{**r, "output": 1} if r["id"] == "b" else r for r in recs])
    plain = [{k: v for k, v in r.items() if k != "output"} for r in recs]  # records, not a Graph
    mark_outputs(plain, [1])
    assert plain[1]["output"] is True and "reuse" not in plain[2]


def test_the_kept_bound_counts_every_output_at_the_end():
    """One device: resident + every never-freed node is present at the last step."""
    g = Graph.from_records([{"id": "w", "bytes": 3, "resident": True},
                            {"id": "a", "bytes": 5, "inputs": ["w"], "output": True},
                            {"id": "b", "bytes": 1, "inputs": ["a"]}, {"id": "c", "bytes": 4, "inputs": ["w"]}])
    assert g.lower_bound(1) == 3 + 5 + 1 + 4
    assert simulate(g, [0] * 4, [0, 1, 2, 3], 1).peak_bytes == 13


def test_shipped_graphs_carry_reuse_and_outputs_and_every_kernel_agrees():
    """The shipped compiled graphs carry the importer's `reuse` and `output` fields, round-trip
    unchanged, and the kernels give the literal SPEC peak on them."""
    import json
    import os
    import regal
    root = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
    with open(os.path.join(root, "manifest.json")) as f:
        entries = sorted(json.load(f)["graphs"].values(), key=lambda e: e["nodes"])
    entries = [e for e in entries if e["stage"] == "opt"][:6]
    assert entries
    for e in entries:
        g = regal.load(os.path.join(root, "graphs", e["path"]))
        assert g.output.any() and g.has_reuse, e["path"]
        assert Graph.from_records(g.to_records()).to_records() == g.to_records()
        keys = _keys(1, g.num_nodes, 2)
        placement, order, sim = decode_evaluate(g, keys, 2)
        assert naive.simulate(g, placement.tolist(), order.tolist(), 2)[0] == sim.peak_bytes
