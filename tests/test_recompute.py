"""Recomputation (SPEC.md sections 3b, 5b): the instance simulator against its naive twin, the
sequence checks, the solution file, the search's contract (`recompute_budget`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import regal
from regal import _remat
from regal.decode import order_by_priority
from regal.graph import Graph
from regal.recompute import check_sequence, instance_graph, op_costs, recompute_stats, STAND_IN
from regal.recompute_search import recompute_sequence
from regal.simulate import ScheduleError, kernel_graph, memory_trace, simulate
from regal.solution import load_solution

import naive
from randgraph import random_dag


def _random_sequence(g: Graph, rng, share=0.6):
    n = g.num_nodes
    order = order_by_priority(g, rng.random(n))
    chosen = rng.random(n) < share
    return order, recompute_sequence(g, order, chosen)


@pytest.mark.parametrize("seed", range(120))
def test_instance_peak_equals_naive(seed):
    g = random_dag(seed, reuse_fraction=0.4, output_fraction=0.1)
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    placement = rng.integers(0, d, g.num_nodes).astype(np.int32)
    _, seq = _random_sequence(g, rng)
    sim, trace = memory_trace(g, placement, seq, d)
    want, want_dev = naive.simulate_sequence(g, placement.tolist(), seq.tolist(), d)
    assert sim.peak_bytes == want
    assert sim.device_peak_bytes.tolist() == list(want_dev)
    assert trace.shape == (seq.shape[0], d) and trace.max() == want


@pytest.mark.parametrize("seed", range(40))
def test_without_repeats_the_instance_simulator_is_section_3(seed):
    g = random_dag(seed, reuse_fraction=0.4, output_fraction=0.1)
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    placement = rng.integers(0, d, g.num_nodes).astype(np.int32)
    order = order_by_priority(g, rng.random(g.num_nodes))
    dp = np.zeros(d, dtype=np.int64)
    tr = np.zeros((g.num_nodes, d), dtype=np.int64)
    peak = _remat.instance_peak(kernel_graph(g), order, placement, d, dp, tr)
    sim, trace = memory_trace(g, placement, order, d)
    assert peak == sim.peak_bytes and dp.tolist() == sim.device_peak_bytes.tolist()
    assert np.array_equal(tr, trace)


@pytest.mark.parametrize("seed", range(40))
def test_decoded_sequences_are_valid(seed):
    g = random_dag(seed, reuse_fraction=0.3, output_fraction=0.1)
    rng = np.random.default_rng(seed)
    _, seq = _random_sequence(g, rng, share=0.9)
    check_sequence(g, np.zeros(g.num_nodes, dtype=np.int32), seq, 1)
    counts = np.bincount(seq, minlength=g.num_nodes)
    assert not (counts[g.kept] > 1).any()


def _spec_example() -> Graph:
    return Graph.from_records([
        {"id": "x", "bytes": 4, "resident": True}, {"id": "a", "bytes": 8, "inputs": ["x"]},
        {"id": "b", "bytes": 1, "inputs": ["a"]}, {"id": "c", "bytes": 8, "inputs": ["b"]},
        {"id": "y", "bytes": 1, "inputs": ["c"]}, {"id": "z", "bytes": 1, "inputs": ["a", "y"]}], name="spec3b")


def test_spec_worked_example():
    g = _spec_example()
    ix = g.index
    assert simulate(g, [0] * 6, [ix[k] for k in "xabcyz"], 1).peak_bytes == 21
    assert simulate(g, [0] * 6, [ix[k] for k in "xabcyaz"], 1).peak_bytes == 14
    assert naive.simulate_sequence(g, [0] * 6, [ix[k] for k in "xabcyaz"], 1)[0] == 14


@pytest.mark.parametrize("seq, message", [
    ("xabcyzz", "graph output"),
    ("xxabcyz", "resident node"),
    ("xabacyz", None),
    ("xaabcyz", "no later entry reads it"),
    ("xabcyaa", "misses node 'z'"),
    ("xbaacyz", "not topological"),
])
def test_sequence_checks(seq, message):
    g = _spec_example()
    ix = g.index
    order = [ix[k] for k in seq]
    if message is None:
        simulate(g, [0] * 6, order, 1)
        return
    with pytest.raises(ScheduleError, match=message):
        simulate(g, [0] * 6, order, 1)


def test_recompute_false_is_never_repeated():
    recs = [{"id": "x", "bytes": 4, "resident": True}, {"id": "a", "bytes": 8, "inputs": ["x"], "recompute": False},
            {"id": "b", "bytes": 1, "inputs": ["a"]}, {"id": "c", "bytes": 8, "inputs": ["b"]},
            {"id": "y", "bytes": 1, "inputs": ["c"]}, {"id": "z", "bytes": 1, "inputs": ["a", "y"]}]
    g = Graph.from_records(recs, name="pinned")
    assert g.no_recompute.tolist() == [False, True, False, False, False, False]
    assert Graph.from_records(g.to_records()).no_recompute.tolist() == g.no_recompute.tolist()
    with pytest.raises(ScheduleError, match="recompute"):
        simulate(g, [0] * 6, [g.index[k] for k in "xabcyaz"], 1)
    sol = regal.optimize(g, 1, budget=200, recompute_budget=10.0)
    assert sol.order.shape[0] == g.num_nodes and sol.peak_bytes == 21
    with pytest.raises(Exception, match="'recompute' must be true or false"):
        Graph.from_records([{"id": "a", "bytes": 1, "recompute": "no"}])


def test_instance_graph_ids_and_reads():
    g = _spec_example()
    ix = g.index
    inst, nodes = instance_graph(g, [ix[k] for k in "xabcyaz"])
    assert inst.ids == ("x", "a", "b", "c", "y", "a#2", "z")
    assert [inst.ids[u] for u in inst.inputs(inst.index["z"])] == ["a#2", "y"]
    assert [inst.ids[u] for u in inst.inputs(inst.index["b"])] == ["a"]
    assert nodes.tolist() == [ix[k] for k in "xabcyaz"]


def test_costs_and_stand_in():
    g = _spec_example()
    cost, model = op_costs(g)
    assert model == STAND_IN  # no costs in the file: bytes read and written
    assert cost.tolist() == [0.0, 8 + 4, 1 + 8, 8 + 1, 1 + 8, 1 + 8 + 1]
    stats = recompute_stats(g, [g.index[k] for k in "xabcyaz"])
    assert stats.count == 1 and stats.extra_cost == 12.0
    assert stats.extra_fraction == pytest.approx(12.0 / sum(cost))


def test_solution_file_round_trip(tmp_path):
    g = _spec_example()
    sol = regal.optimize(g, 1, budget=300, recompute_budget=1.0)
    assert sol.peak_bytes == 14 and sol.recomputes
    assert sol.info["recompute"]["count"] == 1
    path = tmp_path / "s.json"
    sol.save(path)
    doc = json.loads(path.read_text())
    assert doc["order"].count("a") == 2 and doc["info"]["recompute"]["count"] == 1
    back = load_solution(path, g)
    assert back.peak_bytes == 14 and back.order.tolist() == sol.order.tolist()
    doc["peak_bytes"] = 21
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="claims peak_bytes 21"):
        load_solution(path, g)


def test_zero_budget_is_todays_search_bit_for_bit():
    g = random_dag(7, num_nodes=40, reuse_fraction=0.3)
    a = regal.optimize(g, 2, budget=400, seed=3)
    b = regal.optimize(g, 2, budget=400, seed=3, recompute_budget=0)
    assert a.peak_bytes == b.peak_bytes
    assert a.order.tolist() == b.order.tolist() and a.placement.tolist() == b.placement.tolist()


@pytest.mark.parametrize("devices", [1, 2])
def test_recompute_budget_is_kept_and_never_worse(devices):
    g = regal.load("data/graphs/torch/torch_resnet18_train.json.gz")
    base = regal.optimize(g, devices, budget=600)
    sol = regal.optimize(g, devices, budget=600, recompute_budget=0.1)
    assert sol.peak_bytes <= base.peak_bytes
    assert sol.info["recompute"]["extra_fraction"] <= 0.1 + 1e-12
    assert sol.evaluations <= 600
    assert simulate(g, sol.placement, sol.order, devices).peak_bytes == sol.peak_bytes


def test_runtime_objective_under_a_memory_limit():
    g = regal.load("data/graphs/torch/torch_resnet18_train.json.gz")
    base = regal.optimize(g, 1, budget=400)
    limit = int(base.peak_bytes * 0.95)
    sol = regal.optimize(g, 1, budget=800, objective="runtime", memory_limit_bytes=limit, recompute_budget=1.0)
    assert sol.peak_bytes <= limit
    assert sol.info["timed"]["feasible"]
    cost, _ = op_costs(g)
    counts = np.bincount(sol.order, minlength=g.num_nodes)
    assert sol.info["timed"]["makespan_s"] == pytest.approx(float((counts * cost).sum()), rel=1e-9)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.1", True])
def test_bad_budget_is_one_line(bad):
    g = _spec_example()
    with pytest.raises(ValueError, match="recompute_budget must be"):
        regal.optimize(g, 1, budget=50, recompute_budget=bad)


def test_control_edges_order_every_instance():
    g = Graph.from_records([
        {"id": "x", "bytes": 4, "resident": True}, {"id": "a", "bytes": 8, "inputs": ["x"]},
        {"id": "b", "bytes": 1, "inputs": ["a"]}, {"id": "w", "bytes": 0, "inputs": ["x"], "control_inputs": ["a"]},
        {"id": "c", "bytes": 1, "inputs": ["b", "a"]}], name="ctrl")
    ix = g.index
    simulate(g, [0] * 5, [ix[k] for k in "xabawc"], 1)            # a again before w: valid
    with pytest.raises(ScheduleError, match="control input"):
        simulate(g, [0] * 5, [ix[k] for k in "xabwac"], 1)       # a again after w: a write overtook a read
    inst, _ = instance_graph(g, [ix[k] for k in "xabawc"])
    assert [inst.ids[u] for u in inst.control_inputs(inst.index["w"])] == ["a", "a#2"]
    # the decoder never puts a recomputation after a control successor: one inside the gap (w,
    # between a's readers b and c) moves it back before w; one before the gap keeps a from running again
    order = np.array([ix[k] for k in "xabwc"], dtype=np.int32)
    assert recompute_sequence(g, order, np.ones(5, dtype=bool)).tolist() == [ix[k] for k in "xabawc"]
    g2 = Graph.from_records([
        {"id": "x", "bytes": 4, "resident": True}, {"id": "a", "bytes": 8, "inputs": ["x"]},
        {"id": "w", "bytes": 0, "inputs": ["x"], "control_inputs": ["a"]}, {"id": "b", "bytes": 1, "inputs": ["a"]},
        {"id": "e", "bytes": 1, "inputs": ["x"]}, {"id": "c", "bytes": 1, "inputs": ["b", "a", "e"]}], name="ctrl2")
    order = np.array([g2.index[k] for k in "xawbec"], dtype=np.int32)
    assert recompute_sequence(g2, order, np.ones(6, dtype=bool)).tolist() == order.tolist()
    order = np.array([g2.index[k] for k in "xabwec"], dtype=np.int32)   # w inside a's gap (b .. c)
    assert recompute_sequence(g2, order, np.ones(6, dtype=bool)).tolist() == [g2.index[k] for k in "xabawec"]


def test_torch_importer_pins_what_a_second_run_would_change():
    torch = pytest.importorskip("torch")
    from torch import nn
    from regal.torch import from_module
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.Dropout(0.1),
                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10))
    g = from_module(m, (torch.randn(4, 3, 16, 16),), training=True, optimizer="sgd")
    pinned = {g.ops[v] for v in np.flatnonzero(g.no_recompute)}
    # in-place writes, BatchNorm (it updates its running statistics), the random draw, and what they overwrite
    assert {"aten.relu_.default", "aten.native_batch_norm.default", "aten.bernoulli_.float", "aten.add_.Tensor"} <= pinned
    assert "aten.convolution.default" not in pinned and "aten.relu.default" not in pinned
    sol = regal.optimize(g, 1, budget=300, recompute_budget=0.5)
    counts = np.bincount(sol.order, minlength=g.num_nodes)
    assert not (counts[g.no_recompute] > 1).any()


def test_cli_recompute_budget_json_and_evaluate(tmp_path):
    from click.testing import CliRunner
    from regal.cli import main
    graph = "data/graphs/torch/torch_resnet18_train.json.gz"
    out = tmp_path / "s.json"
    r = CliRunner().invoke(main, ["optimize", graph, "--budget", "600", "--recompute-budget", "0.1", "--json",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc["recompute"]) == {"count", "extra_cost", "extra_fraction"}
    assert doc["recompute"]["count"] > 0 and doc["recompute"]["extra_fraction"] <= 0.1
    r = CliRunner().invoke(main, ["evaluate", graph, str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["peak_bytes"] == doc["peak_bytes"]
    r = CliRunner().invoke(main, ["optimize", graph, "--budget", "50", "--recompute-budget", "-1"])
    assert r.exit_code != 0 and "recompute-budget" in r.output
    r = CliRunner().invoke(main, ["optimize", graph, "--budget", "300", "--json"])
    assert json.loads(r.output)["recompute"] == {"count": 0, "extra_cost": 0.0, "extra_fraction": 0.0}


def test_a_recomputing_plan_runs_in_pytorch():
    torch = pytest.importorskip("torch")
    from torch import nn
    from regal.torch import plan
    # the nominal roofline (tests/conftest.py sets REGAL_COST_MODEL=nominal): the same plan on
    # every machine (under the costs measured on the development VM another plan recomputed a
    # LayerNorm and held it 17,408 B too long: test_a_recomputed_op_is_not_made_again_at_the_end)

    class Block(nn.Module):
        def __init__(self, d=32, h=4):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = nn.MultiheadAttention(d, h, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            y = self.ln1(x)
            x = x + self.att(y, y, y, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block(), nn.Linear(32, 10))
    traced = plan.trace_for(model, (torch.randn(4, 32, 32),), "adam")
    traced = plan.calibrate(traced, plan.measure_nodes(traced))   # the ops' scratch, as planned steps book it
    base = regal.optimize(traced.graph, 1, budget=800)
    sol = regal.optimize(traced.graph, 1, budget=800, recompute_budget=0.3)
    assert sol.recomputes and sol.peak_bytes < base.peak_bytes
    run, _ = plan.run_plan(traced, sol)
    assert run.outputs_match   # the same numbers as PyTorch's own order
    # exact with the scratch calibrated (without it, a recomputed LayerNorm's scratch at the peak: +2.6 %)
    assert abs(run.measured_peak_bytes[0] - run.predicted_peak_bytes[0]) <= 0.02 * run.predicted_peak_bytes[0]


def test_a_recomputed_op_is_not_made_again_at_the_end():
    """A recomputation drops the old copy's views from the program being built (they follow the
    new copy); the last sweep, which makes the folded nodes nothing asked for, must not make them
    again from the new copy: that held a recomputed LayerNorm (its output, mean and rstd) from its
    one reader to the program's end, 17,408 B over the prediction (+2.5 %) on this block."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from regal.solution import make_solution
    from regal.torch import plan

    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))
    traced = plan.trace_for(model, (torch.randn(8, 16, 32),), "adam")
    traced = plan.calibrate(traced, plan.measure_nodes(traced))   # the ops' scratch, as planned steps book it
    g = traced.graph
    order = plan.own_order(traced).tolist()
    ln = g.index["native_layer_norm_1"]
    back = next(v for v in order if g.ops[v].startswith("aten.native_layer_norm_backward") and ln in g.inputs(v))
    seq = order[:order.index(back)] + [ln] + order[order.index(back):]   # run again just before its backward
    sol = make_solution(g, np.zeros(g.num_nodes, dtype=np.int32), np.array(seq, dtype=np.int32), 1, "test")
    program = plan.plan_program(traced, sol)
    nodes = list(program.graph.nodes)
    copies = [n for n in nodes if n.op == "call_function" and n.target == torch.ops.aten.native_layer_norm.default]
    again = copies[-1]   # the recomputation: made last
    backward = next(n for n in nodes if n.op == "call_function"
                    and n.target == torch.ops.aten.native_layer_norm_backward.default
                    and any(again in a.all_input_nodes for a in n.all_input_nodes))
    # every node made from the new copy runs by its backward: nothing holds it past it
    made_from = {again}
    for n in nodes[nodes.index(again):]:
        if any(a in made_from for a in n.all_input_nodes) and n.target is __import__("operator").getitem:
            made_from.add(n)
    assert all(nodes.index(n) <= nodes.index(backward) for n in made_from), \
        [(n.name, nodes.index(n)) for n in made_from]
    run, _ = plan.run_plan(traced, sol)
    assert run.outputs_match


def test_planned_step_recomputes_what_the_search_chose_and_trains_as_eager():
    torch = pytest.importorskip("torch")
    from torch import nn
    import torch.nn.functional as F
    import regal.torch as rt

    class Block(nn.Module):
        def __init__(self, d=32):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            return x + self.mlp(self.ln(x))

    def make():
        torch.manual_seed(0)
        m = nn.Sequential(Block(), Block(), Block(), nn.Linear(32, 10))
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(64, 32, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(3)]
    loss = lambda out, x, y: F.cross_entropy(out, y)   # noqa: E731
    m0, o0 = make()
    eager = []
    for x, y in data:
        o0.zero_grad(set_to_none=True)
        out = loss(m0(x), x, y)
        out.backward()
        o0.step()
        eager.append(float(out))
    m1, o1 = make()
    plain = rt.planned_step(m1, o1, data[0], loss_fn=loss, budget=600, recompute=False)
    m2, o2 = make()
    step = rt.planned_step(m2, o2, data[0], loss_fn=loss, budget=600)   # the default: recompute=0.1
    assert step.solution.recomputes and step.predicted_peak_bytes < plain.predicted_peak_bytes
    assert 0 < step.solution.info["recompute"]["extra_fraction"] <= 0.1
    losses = [float(step(x, y)) for x, y in data]
    assert losses == pytest.approx(eager, rel=1e-5)
    for a, b in zip(m0.state_dict().values(), m2.state_dict().values()):
        # the search's recomputations run the same kernels on the same values: bit for bit, unless
        # the normalizations' rewrite won (step.recomputed): then to rounding
        assert torch.equal(a, b) if not step.recomputed else torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    # the step's own tensors (what the prediction books) + the allocator's high mark while it runs:
    # the process's other tensors (other tests') are not this step's
    from regal.torch.eager import storages_of
    from regal.torch.plan import peak_during
    own = [*m2.parameters(), *m2.buffers(), *[t for st in o2.state.values() for t in st.values()], *data[0]]
    step(*data[0])
    measured = sum(b for b, _ in storages_of(own).values()) + peak_during(lambda: step(*data[0]))[0]
    assert abs(measured - step.predicted_peak_bytes) <= 0.02 * measured
    assert "the search recomputes" in step.explain()


def test_the_device_cost_model_is_measured_in_powers_of_two(monkeypatch):
    """Without REGAL_COST_MODEL=nominal a torch step's costs come from the device's measured
    matmul rate and copy bandwidth, each a power of two (the same plan run after run)."""
    torch = pytest.importorskip("torch")
    import math
    from regal.torch import _ops
    monkeypatch.delenv("REGAL_COST_MODEL")
    monkeypatch.setattr(_ops, "_DEVICE_COSTS", {})
    model = _ops.device_cost_model("cpu")
    for key in ("peak_flops_per_s", "bandwidth_bytes_per_s"):
        assert model[key] > 0 and math.log2(model[key]) == round(math.log2(model[key]))
    assert _ops.device_cost_model(torch.device("cpu")) is model   # cached
    monkeypatch.setenv("REGAL_COST_MODEL", "nominal")
    from regal._ops import COST_MODEL
    assert _ops.device_cost_model("cpu")["peak_flops_per_s"] == COST_MODEL["peak_flops_per_s"]
