"""The timed model (SPEC.md section 4, docs/timed-model.md): kernel against its naive twin, the
hand-worked examples, the timed chromosome (section 5) and the runtime objective's ranking."""

import math
import re

import numpy as np
import pytest

import naive_timed
from randgraph import random_dag
from regal.graph import Graph
from regal.simulate import simulate
from regal.timed import (DeviceModel, decode_timed, encode_timed, evaluate_population_timed, makespan_bound,
                         memory_limits, parse_bytes, parse_rate, parse_seconds, runtime_fitness, simulate_timed,
                         timed_chromosome_length)


def _case(seed):
    d = 1 + seed % 4
    g = random_dag(seed, max_nodes=25, reuse_fraction=0.3 if seed % 5 == 0 else 0.0,
                   output_fraction=0.3 if seed % 2 else 0.0)
    rng = np.random.default_rng(20_000 + seed)
    keys = rng.random(timed_chromosome_length(g.num_nodes, d))
    if seed % 3 == 0:
        keys = np.floor(keys * 4) / 4  # ties everywhere: placement, priorities, transfer order
    model = DeviceModel(bandwidth_bytes_per_s=[1e6, 1e5][seed % 2], latency_s=[0.0, 5e-6, 1e-4][seed % 3],
                        speed=tuple(rng.choice([0.5, 1.0, 2.0], d)))
    return g, d, keys, model


def test_timed_kernel_agrees_with_naive_on_400_random_dags():
    """Makespan, device peaks, start and finish of every node and the transfers equal the naive
    twin's; half the graphs mark graph outputs (`output`), never freed at home."""
    mismatches = []
    for seed in range(400):
        g, d, keys, model = _case(seed)
        n = g.num_nodes
        placement, sim = decode_timed(g, keys, d, model)
        row = keys.reshape(n, 2 * d + 1)
        ms, peak, start, finish, transfers = naive_timed.simulate_timed(
            g, placement, row[:, d], row[:, d + 1:], d, list(model.speed), model.bandwidth_bytes_per_s,
            model.latency_s)
        same = (ms == sim.makespan_s and peak == sim.device_peak_bytes.tolist()
                and [start[v] for v in range(n)] == sim.start_s.tolist()
                and [finish[v] for v in range(n)] == sim.finish_s.tolist()
                and {k: v[0] for k, v in transfers.items()}
                == dict(zip(zip(sim.transfer_node.tolist(), sim.transfer_device.tolist()), sim.transfer_start_s)))
        if not same:
            mismatches.append((seed, d))
    assert mismatches == []


def test_random_cases_exercise_transfers_reuse_and_zero_latency():
    """The agreement test's cases include transfers, contended links, zero latency, reuse, and
    graph outputs that are read, sent to other devices and listed in `reuse`."""
    num_transfers, contended, reuse, read_outputs, sent_outputs, reused_outputs = 0, 0, 0, 0, 0, 0
    for seed in range(400):
        g, d, keys, model = _case(seed)
        placement, sim = decode_timed(g, keys, d, model)
        num_transfers += sim.transfer_node.size
        reuse += g.reuse_idx.size
        links = list(zip(placement[sim.transfer_node].tolist(), sim.transfer_device.tolist()))
        contended += len(links) - len(set(links))
        read_outputs += int((g.output & ~g.resident & (np.diff(g.out_ptr) > 0)).sum())
        sent_outputs += int(g.output[sim.transfer_node].sum())
        reused_outputs += int(g.output[g.reuse_idx].sum())
    assert num_transfers > 1000 and contended > 200 and reuse > 50
    assert read_outputs > 300 and sent_outputs > 200 and reused_outputs > 20


def test_one_device_makespan_is_the_sum_of_costs():
    """d = 1: the device never idles, so the makespan is the sum of the costs over the speed."""
    for seed in range(50):
        g = random_dag(seed, max_nodes=40)
        keys = np.random.default_rng(seed).random(timed_chromosome_length(g.num_nodes, 1))
        _, sim = decode_timed(g, keys, 1, DeviceModel(speed=(2.0,)))
        assert sim.makespan_s == pytest.approx(g.cost[~g.resident].sum() / 2.0, rel=1e-12, abs=1e-15)


def test_one_device_timed_peak_equals_the_sequential_peak():
    """d = 1: the timed peak is SPEC section 3's peak of the order the nodes ran in (graph
    outputs, `output`, in a third of the graphs)."""
    for seed in range(100):
        g = random_dag(seed, max_nodes=30, reuse_fraction=0.3 if seed % 2 else 0.0,
                       output_fraction=0.3 if seed % 3 == 0 else 0.0)
        keys = np.random.default_rng(seed).random(timed_chromosome_length(g.num_nodes, 1))
        placement, sim = decode_timed(g, keys, 1)
        assert sim.peak_bytes == simulate(g, placement, sim.order, 1).peak_bytes


def _two_device_example():
    g = Graph.from_records([
        {"id": "a", "bytes": 100, "cost": 1.0},
        {"id": "b", "bytes": 10, "cost": 2.0, "inputs": ["a"]},
        {"id": "c", "bytes": 5, "cost": 1.0, "inputs": ["a"]},
    ], name="two")
    return g, DeviceModel(bandwidth_bytes_per_s=100.0, latency_s=0.5)


def test_hand_worked_two_device_example():
    """a on device 0 feeds b on device 1 (one transfer) and c on device 0 (docs/timed-model.md).

    t=0 a starts (dev0 100 B); t=1 a done, c starts (dev0 105 B) and a's transfer starts (dev1
    100 B), taking 0.5 + 100/100 = 1.5 s; t=2 c done (a stays: its copy is not sent yet);
    t=2.5 a arrives, its home copy goes (dev0 5 B), b starts (dev1 110 B); t=4.5 b done."""
    g, model = _two_device_example()
    sim = simulate_timed(g, [0, 1, 0], [0, 1, 2], 2, model)
    assert sim.makespan_s == 4.5
    assert sim.device_peak_bytes.tolist() == [105, 110]
    assert sim.start_s.tolist() == [0.0, 2.5, 1.0] and sim.finish_s.tolist() == [1.0, 4.5, 2.0]
    assert sim.transfer_node.tolist() == [0] and sim.transfer_device.tolist() == [1]
    assert sim.transfer_start_s.tolist() == [1.0] and sim.transfer_finish_s.tolist() == [2.5]


def test_a_link_carries_one_transfer_at_a_time_in_priority_order():
    """Two tensors for device 1 share the link 0 -> 1: the second waits for the first, and the
    transfer order decides which goes first."""
    g = Graph.from_records([
        {"id": "x", "bytes": 50, "resident": True},
        {"id": "y", "bytes": 100, "resident": True},
        {"id": "z", "bytes": 1, "cost": 1.0, "inputs": ["x", "y"]},
    ], name="link")
    model = DeviceModel(bandwidth_bytes_per_s=100.0, latency_s=0.0)
    default = simulate_timed(g, [0, 0, 1], [0, 1, 2], 2, model)  # by producer position: x first
    assert default.transfer_node.tolist() == [0, 1] and default.transfer_finish_s.tolist() == [0.5, 1.5]
    y_first = simulate_timed(g, [0, 0, 1], [0, 1, 2], 2, model, transfers=([1, 0], [1, 1]))
    assert y_first.transfer_node.tolist() == [1, 0] and y_first.transfer_finish_s.tolist() == [1.0, 1.5]
    assert default.makespan_s == y_first.makespan_s == 2.5
    assert default.device_peak_bytes.tolist() == [150, 151]  # both copies from their starts


def test_a_schedules_order_and_transfers_reproduce_it():
    """Simulating a decoded schedule's own dispatch order and transfer order gives it back exactly,
    and so does decoding `encode_timed` of them."""
    for seed in range(150):
        g, d, keys, model = _case(seed)
        placement, sim = decode_timed(g, keys, d, model)
        transfers = (sim.transfer_node, sim.transfer_device)
        again = simulate_timed(g, placement, sim.order, d, model, transfers)
        p2, dec = decode_timed(g, encode_timed(placement, sim.order, d, transfers), d, model)
        for other in (again, dec):
            assert other.makespan_s == sim.makespan_s
            assert other.device_peak_bytes.tolist() == sim.device_peak_bytes.tolist()
            assert other.order.tolist() == sim.order.tolist()
            assert other.start_s.tolist() == sim.start_s.tolist()
        assert p2.tolist() == placement.tolist()


def test_population_evaluation_equals_single_decodes():
    """evaluate_population_timed gives each chromosome's own makespan and excess (parallel kernel)."""
    for seed in range(30):
        g, d, _, model = _case(seed)
        pop = np.random.default_rng(seed).random((9, timed_chromosome_length(g.num_nodes, d)))
        limit = max(1, int(g.bytes.sum()) // 3)
        fit, ms, excess = evaluate_population_timed(g, pop, d, model, limit)
        for i, keys in enumerate(pop):
            _, sim = decode_timed(g, keys, d, model)
            assert ms[i] == sim.makespan_s
            assert excess[i] == int(np.maximum(sim.device_peak_bytes - limit, 0).sum())
            assert (fit[i] == sim.makespan_s) == (excess[i] == 0)


def test_infeasible_schedules_rank_after_every_feasible_one_by_excess():
    """The runtime fitness: feasible by makespan; infeasible above the makespan bound, by excess."""
    g, model = _two_device_example()
    bound = makespan_bound(g, 2, model)
    assert bound >= 4.5
    limits = memory_limits(108, 2)
    fit = runtime_fitness([4.5, bound, 1.0, 1.0, 0.1], [0, 0, 1, 50, 50], bound, limits)
    assert fit[0] == 4.5 and fit[1] == bound
    assert fit[2] > fit[1] and fit[3] > fit[2] and fit[4] == fit[3]
    # split (peaks 105, 110, 4.5 s) fits 112 B; all on device 0 is shorter (4.0 s) but peaks at 115 B
    split = simulate_timed(g, [0, 1, 0], [0, 1, 2], 2, model)
    pop = np.stack([encode_timed([0, 1, 0], split.order, 2), encode_timed([0, 0, 0], [0, 2, 1], 2)])
    fit, ms, excess = evaluate_population_timed(g, pop, 2, model, 112)
    assert ms.tolist() == [4.5, 4.0] and excess.tolist() == [0, 3]
    assert fit[0] == 4.5 and fit[1] > bound


def test_makespan_bound_holds_on_random_schedules():
    """No decoded schedule is longer than `makespan_bound` (some task always runs)."""
    for seed in range(100):
        g, d, keys, model = _case(seed)
        _, sim = decode_timed(g, keys, d, model)
        assert sim.makespan_s <= makespan_bound(g, d, model) * (1 + 1e-12)


@pytest.mark.parametrize("text, value", [("16GiB", 16 * 2**30), ("1.5 GB", 1_500_000_000), ("512M", 512 * 2**20),
                                         ("17179869184", 17179869184), ("2kib", 2048)])
def test_parse_bytes(text, value):
    """Sizes: decimal and binary units, a bare number of bytes."""
    assert parse_bytes(text) == value


def test_parse_rates_and_times():
    """Bandwidths in bytes per second and latencies in seconds, with units."""
    assert parse_rate("100GB/s") == 100e9 and parse_rate("25 GiB/s") == 25 * 2**30 and parse_rate("1e11") == 1e11
    assert parse_seconds("5us") == pytest.approx(5e-6) and parse_seconds("0.01ms") == pytest.approx(1e-5)
    assert parse_seconds("0") == 0.0


@pytest.mark.parametrize("fn, text", [(parse_bytes, "16 GiBs"), (parse_bytes, "-1GB"), (parse_bytes, "0"),
                                      (parse_rate, "fast"), (parse_rate, "0GB/s"), (parse_seconds, "5 weeks"),
                                      (parse_seconds, "-1s")])
def test_bad_sizes_rates_and_times_are_one_line_errors(fn, text):
    """A malformed size, rate or time is a one-line ValueError quoting it."""
    with pytest.raises(ValueError) as e:
        fn(text)
    assert repr(text) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("model, field", [(DeviceModel(bandwidth_bytes_per_s=0), "bandwidth_bytes_per_s"),
                                          (DeviceModel(latency_s=math.nan), "latency_s"),
                                          (DeviceModel(speed=(1.0,)), "speed"),
                                          (DeviceModel(speed=(1.0, -2.0)), "speed[1]")])
def test_bad_device_models_name_the_field(model, field):
    """A device model with a bad field is a one-line ValueError naming it."""
    with pytest.raises(ValueError, match=re.escape(f"device_model.{field} ")):
        model.validate(2)


def test_memory_trace_reaches_the_peaks_and_ends_at_the_makespan():
    """The traced memory over time peaks at each device's peak and its last instant is the makespan."""
    for seed in range(60):
        g, d, keys, model = _case(seed)
        placement, sim = decode_timed(g, keys, d, model)
        traced = simulate_timed(g, placement, sim.order, d, model, (sim.transfer_node, sim.transfer_device),
                                trace=True)
        assert traced.trace_bytes.max(axis=0).tolist() == sim.device_peak_bytes.tolist()
        assert traced.trace_s[-1] == sim.makespan_s and (np.diff(traced.trace_s) >= 0).all()
