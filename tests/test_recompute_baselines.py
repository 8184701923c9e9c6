"""The recomputation baselines (issue 53 item 3): Moccasin (CP-SAT over a fixed order), Chen et
al.'s sqrt(n) checkpoints, recomputing pointwise ops, and the traced order as is; every one
through the registry, its Solution re-simulated (SPEC.md section 3b)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import regal
import regal.methods
from randgraph import random_dag
from regal.graph import Graph
from regal.recompute import SequenceError, check_sequence, op_costs
from regal.simulate import check_any, simulate
from regal.recompute_search import recompute_sequence
from regal_baselines.moccasin import MoccasinModel, insertion_points
from regal_baselines.recompute import (candidates, is_pointwise, pointwise_nodes, sqrt_checkpoints,
                                       traced_order)

RESNET = "data/graphs/torch/torch_resnet18_train.json.gz"
RECOMPUTE_METHODS = ("moccasin", "checkpoint-sqrt", "recompute-pointwise", "traced-order")


def _solve(name, g, **options):
    if name == "moccasin":
        options.setdefault("memory_limit_bytes", _limit_between(g))
        options.setdefault("time_limit_s", 5)
    return regal.methods.solve(name, g, 1, **options)


def _limit_between(g: Graph) -> int:
    """A limit halfway between the lower bound and the traced order's peak."""
    order, _ = traced_order(g)
    peak = simulate(g, np.zeros(g.num_nodes, dtype=np.int32), order, 1).peak_bytes
    return max(1, (int(g.lower_bound(1)) + int(peak)) // 2)


def _check_valid(g: Graph, sol, name: str):
    placement, seq = check_any(g, sol.placement, sol.order, 1)
    fresh = simulate(g, placement, seq, 1)
    assert sol.peak_bytes == fresh.peak_bytes
    assert sol.method == name and sol.num_devices == 1
    rec = sol.info["recompute"]
    assert rec["count"] == len(seq) - g.num_nodes
    assert rec["extra_fraction"] >= 0.0 and set(rec) >= {"count", "extra_cost", "extra_fraction", "cost_model"}


def _sequence(order: np.ndarray, at: dict) -> list[int]:
    """The order with node v run again before position at[v] (several before one position in the
    order's order), as the model decodes."""
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    seq = []
    for t, v in enumerate(order.tolist()):
        seq.extend(sorted((u for u, p in at.items() if p == t), key=lambda u: pos[u]))
        seq.append(v)
    return seq


def _brute_force(g: Graph, order: np.ndarray) -> dict[int, float]:
    """{peak: least extra cost} over every valid sequence that is `order` with at most one more run of
    each node that may run again (SPEC.md 3b), inserted before any later position."""
    n = g.num_nodes
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    may = [v for v in range(n) if not (g.kept[v] or g.no_recompute[v])]
    cost, _ = op_costs(g)
    zeros = np.zeros(n, dtype=np.int32)
    best: dict[int, float] = {}
    for choice in itertools.product(*[[None] + list(range(int(pos[v]) + 1, n)) for v in may]):
        at = {v: t for v, t in zip(may, choice) if t is not None}
        seq = _sequence(order, at)
        try:
            check_sequence(g, zeros, seq, 1)
        except SequenceError:
            continue
        peak = simulate(g, zeros, seq, 1).peak_bytes
        extra = float(sum(cost[v] for v in at))
        best[peak] = min(best.get(peak, math.inf), extra)
    return best


def _cheapest_within(frontier: dict[int, float], limit: int) -> float | None:
    fits = [c for p, c in frontier.items() if p <= limit]
    return min(fits) if fits else None


# -------------------------------------------------------------------------------------- registry

def test_registered_with_their_objectives():
    assert regal.methods.get("moccasin").objective == "runtime"
    for name in RECOMPUTE_METHODS[1:]:
        assert regal.methods.get(name).objective == "memory"
    for name in RECOMPUTE_METHODS:
        spec = regal.methods.get(name)
        assert spec.origin == "baselines" and not spec.takes_budget


@pytest.mark.parametrize("name", RECOMPUTE_METHODS)
@pytest.mark.parametrize("seed", range(4))
def test_valid_solution_on_random_graphs(name, seed):
    g = random_dag(seed, num_nodes=14 + seed, resident_fraction=0.2, control_fraction=0.3,
                   reuse_fraction=0.3 if seed % 2 else 0.0, output_fraction=0.1 if seed == 3 else 0.0)
    _check_valid(g, _solve(name, g), name)


@pytest.mark.parametrize("name", RECOMPUTE_METHODS)
def test_valid_solution_on_a_training_graph(name):
    g = regal.load(RESNET)
    sol = _solve(name, g)
    _check_valid(g, sol, name)
    if name == "moccasin" and sol.info["feasible"]:
        assert sol.peak_bytes <= sol.info["memory_limit_bytes"]


@pytest.mark.parametrize("name", RECOMPUTE_METHODS)
def test_one_device_only_and_bad_order_are_one_line_errors(name):
    g = random_dag(1, num_nodes=10)
    extra = {"memory_limit_bytes": 10**6} if name == "moccasin" else {}
    with pytest.raises(ValueError, match="one device") as err:
        regal.methods.solve(name, g, 2, **extra)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="order") as err:
        regal.methods.solve(name, g, 1, order=list(range(9)), **extra)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="n99"):
        regal.methods.solve(name, g, 1, order=["n99"] * 10, **extra)


def test_moccasin_refuses_without_a_memory_limit():
    g = random_dag(1, num_nodes=10)
    with pytest.raises(ValueError, match="memory_limit_bytes") as err:
        regal.methods.solve("moccasin", g, 1)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="memory_limit_bytes"):
        regal.methods.solve("moccasin", g, 1, memory_limit_bytes=-5)


def test_traced_order_is_node_order_when_topological():
    g = random_dag(2, num_nodes=12)
    order, source = traced_order(g)
    assert source == "graph" and order.tolist() == list(range(12))
    recs = g.to_records()
    shuffled = Graph.from_records(recs[::-1], name="reversed")
    order, source = traced_order(shuffled)
    assert source == "topological"
    sol = regal.methods.solve("traced-order", shuffled, 1)
    assert sol.order.tolist() == order.tolist() and sol.info["order_source"] == "topological"


def test_a_given_order_is_run():
    g = random_dag(5, num_nodes=12)
    order = g.topological_order()[::1].tolist()
    ids = [g.ids[v] for v in order]
    assert regal.methods.solve("traced-order", g, 1, order=ids).order.tolist() == order


# -------------------------------------------------------------------------------------- Moccasin

def _spec_example() -> Graph:
    """SPEC.md section 3b's worked example, every op costing 1."""
    recs = [{"id": "x", "bytes": 4, "resident": True},
            {"id": "a", "bytes": 8, "inputs": ["x"], "cost": 1.0},
            {"id": "b", "bytes": 1, "inputs": ["a"], "cost": 1.0},
            {"id": "c", "bytes": 8, "inputs": ["b"], "cost": 1.0},
            {"id": "y", "bytes": 1, "inputs": ["c"], "cost": 1.0},
            {"id": "z", "bytes": 1, "inputs": ["a", "y"], "cost": 1.0}]
    return Graph.from_records(recs, name="spec3b")


def test_moccasin_on_spec_example():
    """Order x a b c y z holds 21 bytes; recomputing a before z holds 14 (SPEC.md 3b)."""
    g = _spec_example()
    sol = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=20)
    assert [g.ids[v] for v in sol.order] == ["x", "a", "b", "c", "y", "a", "z"]
    assert sol.peak_bytes == 14 and sol.info["status"] == "OPTIMAL" and sol.info["feasible"]
    assert sol.info["objective"] == pytest.approx(1.0) and sol.info["recompute"]["extra_cost"] == 1.0
    assert sol.info["timed"]["feasible"] and sol.info["timed"]["makespan_s"] == pytest.approx(6.0)
    fits = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=21)
    assert fits.info["recompute"]["count"] == 0 and fits.info["feasible"]
    none = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=13)
    assert none.info["status"] == "INFEASIBLE" and none.info["feasible"] is False
    assert none.peak_bytes == 21 and none.info["recompute"]["count"] == 0


def _tiny_train(seed: int, k: int = 3) -> Graph:
    """A tiny training-like graph: a resident input x, forward f1..fk (each reading the one before,
    sometimes an earlier one too), backward gk..g1 (each reading the forward value before its
    layer and the gradient after it, sometimes its own layer's output); random bytes, temps and
    costs. 2k + 1 nodes, 2k - 1 of which may run again: small enough for a brute force."""
    rng = np.random.default_rng(seed)
    recs = [{"id": "x", "bytes": int(rng.integers(1, 20)), "resident": True}]
    f = ["x"]
    for i in range(1, k + 1):
        ins = [f[-1]] + ([f[int(rng.integers(0, len(f) - 1))]] if len(f) > 1 and rng.random() < 0.4 else [])
        recs.append({"id": f"f{i}", "bytes": int(rng.integers(1, 50)), "inputs": sorted(set(ins)),
                     "cost": float(rng.random())})
        f.append(f"f{i}")
    prev = f[k]
    for i in range(k, 0, -1):
        ins = [f[i - 1], prev] + ([f[i]] if i < k and rng.random() < 0.5 else [])
        recs.append({"id": f"g{i}", "bytes": int(rng.integers(1, 50)), "inputs": sorted(set(ins)),
                     "cost": float(rng.random())})
        prev = f"g{i}"
    for rec in recs[1:]:
        if rng.random() < 0.3:
            rec["temp_bytes"] = int(rng.integers(1, 20))
        if rng.random() < 0.15:
            rec["recompute"] = False
    return Graph.from_records(recs, name=f"tiny_train{seed}")


def _tiny(kind: str, seed: int) -> Graph:
    """`_tiny_train`, or a 7-node random DAG (control edges, outputs, a node pinned now and then)."""
    if kind == "train":
        return _tiny_train(seed)
    recs = random_dag(seed, num_nodes=7, control_fraction=0.3, output_fraction=0.2).to_records()
    rng = np.random.default_rng([seed, 3])
    for rec in recs:
        if not rec.get("resident") and rng.random() < 0.15:
            rec["recompute"] = False
    return Graph.from_records(recs, name=f"tiny_random{seed}")


TINY = [("train", seed) for seed in range(12)] + [("random", seed) for seed in range(6)]


@pytest.mark.parametrize("kind, seed, hint", [k + (True,) for k in TINY] + [k + (False,) for k in TINY[::3]])
def test_moccasin_optimum_equals_brute_force(kind, seed, hint):
    """On tiny graphs without `reuse` (where the model is exact), at every limit between the least
    peak any such sequence reaches and the order's own peak, CP-SAT's proven optimum costs what a
    brute force over every recompute choice and insertion point costs, and its sequence fits;
    below the least peak both find nothing. With or without the hint."""
    g = _tiny(kind, seed)
    order, _ = traced_order(g)
    frontier = _brute_force(g, order)
    plain = simulate(g, np.zeros(g.num_nodes, dtype=np.int32), order, 1).peak_bytes
    least = min(frontier)
    total = float(op_costs(g)[0].sum())
    for limit in sorted({least, (least + plain) // 2, plain - 1} | set(p for p in frontier if p < plain)):
        if limit < 1:
            continue
        sol = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=int(limit), time_limit_s=10, hint=hint)
        want = _cheapest_within(frontier, limit)
        if want is None:
            assert sol.info["status"] == "INFEASIBLE" and not sol.info["feasible"], (limit, sol.info)
            continue
        assert sol.info["status"] == "OPTIMAL", (limit, sol.info)
        assert sol.peak_bytes <= limit and sol.info["model_peak_bytes"] == sol.peak_bytes
        # the model's weights are the costs rounded to 1e-6 of the largest: equal up to that
        assert sol.info["recompute"]["extra_cost"] == pytest.approx(want, abs=1e-5 * total), (limit, sol.info)


def test_moccasin_makes_a_chain_again_input_first():
    """z reads a, b and e: a limit of 23 needs a and b made again before z, a first (b reads the
    new a: the peak, 23, is at b's second step, with its temp); 27 needs one of them; 22 is out of
    reach."""
    recs = [{"id": "x", "bytes": 2, "resident": True},
            {"id": "a", "bytes": 8, "inputs": ["x"], "cost": 1.0},
            {"id": "b", "bytes": 8, "inputs": ["a"], "cost": 1.0, "temp_bytes": 4},
            {"id": "c", "bytes": 1, "inputs": ["b"], "cost": 1.0},
            {"id": "d", "bytes": 16, "inputs": ["c"], "cost": 1.0},
            {"id": "e", "bytes": 1, "inputs": ["d"], "cost": 1.0},
            {"id": "z", "bytes": 1, "inputs": ["a", "b", "e"], "cost": 1.0}]
    g = Graph.from_records(recs, name="chain2")
    assert _brute_force(g, np.arange(7)) == {35: 0.0, 38: 1.0, 27: 1.0, 23: 2.0}
    sol = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=23)
    assert [g.ids[v] for v in sol.order] == ["x", "a", "b", "c", "d", "e", "a", "b", "z"]
    assert sol.peak_bytes == 23 and sol.info["status"] == "OPTIMAL"
    sol = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=30)
    assert sol.info["recompute"]["extra_cost"] == 1.0 and sol.peak_bytes == 27
    assert regal.methods.solve("moccasin", g, 1, memory_limit_bytes=22).info["status"] == "INFEASIBLE"


def test_moccasin_keeps_a_pinned_input_for_the_recomputation():
    """p runs once (`recompute: false`): making w again before z keeps p alive until then (23 bytes
    at d); nothing reaches 22."""
    recs = [{"id": "x", "bytes": 2, "resident": True},
            {"id": "p", "bytes": 4, "inputs": ["x"], "cost": 1.0, "recompute": False},
            {"id": "w", "bytes": 8, "inputs": ["p"], "cost": 1.0},
            {"id": "c", "bytes": 1, "inputs": ["w"], "cost": 1.0},
            {"id": "d", "bytes": 16, "inputs": ["c"], "cost": 1.0},
            {"id": "e", "bytes": 1, "inputs": ["d"], "cost": 1.0},
            {"id": "z", "bytes": 1, "inputs": ["w", "e"], "cost": 1.0}]
    g = Graph.from_records(recs, name="pinned")
    assert _brute_force(g, np.arange(7)) == {27: 0.0, 30: 1.0, 23: 1.0}
    sol = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=26)
    assert [g.ids[v] for v in sol.order] == ["x", "p", "w", "c", "d", "e", "w", "z"] and sol.peak_bytes == 23
    assert regal.methods.solve("moccasin", g, 1, memory_limit_bytes=22).info["status"] == "INFEASIBLE"


def _fits(g: Graph, order: np.ndarray, limit: int, at: dict) -> bool:
    """Whether the model, its recomputations fixed to `at` (node -> position; the rest none), has a
    solution within `limit`."""
    from ortools.sat.python import cp_model
    built = MoccasinModel(g, order, limit, op_costs(g)[0])
    for v, t in built.t.items():
        built.m.add(t == at.get(v, g.num_nodes))
    if any(not built.may[v] for v in at):
        return False
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 10
    status = solver.solve(built.m)
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.INFEASIBLE)
    return status != cp_model.INFEASIBLE


@pytest.mark.parametrize("kind, seed", TINY[::2])
def test_moccasin_model_counts_what_spec_counts_for_any_choice(kind, seed):
    """For random choices of what runs again and where (valid or not under SPEC.md 3b), the model
    with those fixed is feasible exactly when the sequence is valid, and then its least capacity is
    the sequence's peak (graphs without `reuse`)."""
    g = _tiny(kind, seed)
    order, _ = traced_order(g)
    n = g.num_nodes
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    may = [v for v in range(n) if not (g.kept[v] or g.no_recompute[v]) and g.bytes[v] > 0]
    zeros = np.zeros(n, dtype=np.int32)
    rng = np.random.default_rng(seed)
    big = int(g.bytes.sum() + g.temp_bytes.sum()) + 1
    for _ in range(12):
        at = {v: int(rng.integers(pos[v] + 1, n)) for v in may if pos[v] + 1 < n and rng.random() < 0.6}
        seq = _sequence(order, at)
        try:
            check_sequence(g, zeros, seq, 1)
        except SequenceError:
            assert not _fits(g, order, big, at), at
            continue
        peak = simulate(g, zeros, seq, 1).peak_bytes
        assert _fits(g, order, peak, at), at
        assert not _fits(g, order, peak - 1, at), at


@pytest.mark.parametrize("seed", range(6))
def test_moccasin_below_the_lower_bound_is_infeasible(seed):
    g = random_dag(seed, num_nodes=16, resident_fraction=0.2, reuse_fraction=0.3)
    limit = int(g.lower_bound(1)) - 1
    if limit < 1:
        pytest.skip("no positive limit below the bound")
    sol = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=limit, time_limit_s=10)
    assert sol.info["status"] == "INFEASIBLE" and sol.info["feasible"] is False
    order, _ = traced_order(g)
    assert sol.order.tolist() == order.tolist()
    assert sol.peak_bytes == simulate(g, np.zeros(g.num_nodes, dtype=np.int32), order, 1).peak_bytes


@pytest.mark.parametrize("seed", range(6))
def test_moccasin_with_reuse_fits_the_limit(seed):
    """With `reuse` the model counts no fewer bytes than SPEC: a solution it finds fits."""
    g = random_dag(seed, num_nodes=16, resident_fraction=0.2, reuse_fraction=0.5)
    sol = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=_limit_between(g), time_limit_s=5)
    if sol.info["feasible"]:
        assert sol.peak_bytes <= sol.info["memory_limit_bytes"]
    if sol.info.get("source") == "cpsat":
        assert sol.peak_bytes <= sol.info["model_peak_bytes"] <= sol.info["memory_limit_bytes"]


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_moccasin_is_never_costlier_than_a_simple_baseline_that_fits(seed):
    """At the real peak of checkpoint-sqrt's (or recompute-pointwise's) sequence, Moccasin returns
    something no costlier; on graph 11 the model over-counts the cheapest fitting sequence (its
    `reuse`), and a simple baseline's sequence is what comes back (source "hint")."""
    g = random_dag(seed, num_nodes=12, resident_fraction=0.1, reuse_fraction=0.7)
    for name in ("checkpoint-sqrt", "recompute-pointwise"):
        simple = regal.methods.solve(name, g, 1)
        if simple.info["recompute"]["count"] == 0:
            continue
        sol = regal.methods.solve("moccasin", g, 1, memory_limit_bytes=int(simple.peak_bytes), time_limit_s=5)
        assert sol.info["feasible"] and sol.peak_bytes <= simple.peak_bytes
        assert sol.info["recompute"]["extra_cost"] <= simple.info["recompute"]["extra_cost"] + 1e-12
        if seed == 11 and name == "checkpoint-sqrt":
            assert sol.info["source"] == "hint" and sol.info["model_peak_bytes"] > sol.info["memory_limit_bytes"]


@pytest.mark.parametrize("seed", range(10))
def test_section_5b_sequences_are_of_the_models_form(seed):
    """recompute_sequence's sequences (the hints) are the order with recomputations inserted
    before positions, several before one in the order's order: what the model decodes."""
    g = random_dag(seed, num_nodes=25, resident_fraction=0.1, control_fraction=0.2)
    rng = np.random.default_rng(seed)
    order = g.topological_order().astype(np.int32)
    pos = np.empty(g.num_nodes, dtype=np.int64)
    pos[order] = np.arange(g.num_nodes)
    seq = recompute_sequence(g, order, rng.random(g.num_nodes) < 0.6)
    at = insertion_points(order, pos, seq)
    assert _sequence(order, at) == seq.tolist()


def test_moccasin_model_leaves_out_what_cannot_run_again():
    """Outputs, resident nodes, `recompute: false` nodes, nodes without bytes and nodes without two
    readers far enough apart get no second interval."""
    recs = [{"id": "x", "bytes": 4, "resident": True},
            {"id": "a", "bytes": 8, "inputs": ["x"]},
            {"id": "p", "bytes": 8, "inputs": ["x"], "recompute": False},
            {"id": "z0", "bytes": 0, "inputs": ["x"]},
            {"id": "b", "bytes": 1, "inputs": ["a", "p", "z0"]},
            {"id": "c", "bytes": 8, "inputs": ["b"], "output": True},
            {"id": "y", "bytes": 1, "inputs": ["c"]},
            {"id": "z", "bytes": 1, "inputs": ["a", "p", "z0", "y"]}]
    g = Graph.from_records(recs)
    built = MoccasinModel(g, np.arange(g.num_nodes), 100, op_costs(g)[0])
    assert [g.ids[v] for v in np.flatnonzero(built.may)] == ["a"]


# -------------------------------------------------------------------------------------- sqrt(n)

def _train_chain(k: int, size: int = 10) -> Graph:
    """A k-layer forward chain f1..fk and its backward gk..g1, g_i reading f_{i-1} (f0: the input)
    and g_{i+1}: every forward value is read by the next layer and again by the backward."""
    recs = [{"id": "f0", "bytes": size, "resident": True}]
    for i in range(1, k + 1):
        recs.append({"id": f"f{i}", "bytes": size, "inputs": [f"f{i - 1}"], "cost": 1.0})
    recs.append({"id": f"g{k + 1}", "bytes": 1, "inputs": [f"f{k}"], "cost": 1.0})
    for i in range(k, 0, -1):
        recs.append({"id": f"g{i}", "bytes": size, "inputs": [f"f{i - 1}", f"g{i + 1}"], "cost": 1.0})
    return Graph.from_records(recs, name=f"chain{k}")


def test_sqrt_checkpoints_keep_every_ceil_sqrt_k_th_candidate():
    g = _train_chain(16)
    order, _ = traced_order(g)
    keep, cand = sqrt_checkpoints(g, order)
    # f1..f15 are read by the next layer and by the backward; f16 only by g17, right after it
    assert [g.ids[v] for v in cand] == [f"f{i}" for i in range(1, 16)]
    assert [g.ids[v] for v in np.flatnonzero(keep)] == ["f4", "f8", "f12"]  # ceil(sqrt(15)) = 4


def test_sqrt_checkpointing_lowers_a_chain_to_about_sqrt_n():
    """On a 16-layer chain the traced order holds every layer at the turn; sqrt(n) checkpointing
    holds the checkpoints and one segment, each segment recomputed once (about one forward)."""
    g = _train_chain(16)
    plain = regal.methods.solve("traced-order", g, 1)
    sol = regal.methods.solve("checkpoint-sqrt", g, 1)
    _check_valid(g, sol, "checkpoint-sqrt")
    assert sol.info["checkpoints"] == 3 and sol.info["stride"] == 4 and sol.info["candidates"] == 15
    assert plain.peak_bytes >= 160 and sol.peak_bytes <= 100
    assert 0 < sol.info["recompute"]["count"] <= 16
    assert sol.info["recompute"]["extra_fraction"] == pytest.approx(sol.info["recompute"]["count"] / 33)


def test_candidates_need_a_gap_between_readers():
    g = _spec_example()
    assert [g.ids[v] for v in candidates(g, np.arange(g.num_nodes))] == ["a"]


# -------------------------------------------------------------------------------------- pointwise

def test_pointwise_classification():
    for op in ("aten.relu.default", "aten.relu_.default", "aten.add.Tensor", "aten.mul_.Tensor",
               "aten.threshold_backward.default", "aten.gelu.default", "aten.sigmoid.default",
               "fusion:kLoop", "add", "multiply", "Relu", "Add", "Sigmoid", "Mul"):
        assert is_pointwise(op), op
    for op in ("aten.convolution.default", "aten.mm.default", "aten.native_batch_norm.default",
               "aten.bernoulli_.float", "aten.sum.dim_IntList", "fusion:kCustom", "fusion:kInput",
               "convolution", "dot", "reduce", "Conv", "MatMul", "Softmax", "parameter", "op", "aten."):
        assert not is_pointwise(op), op


def test_pointwise_leaves_writes_into_state_alone():
    """An in-place ATen op writing into a resident tensor (an optimizer's update), or into such a
    write, runs once; the same op on an activation may run again."""
    recs = [{"id": "w", "bytes": 8, "resident": True, "op": "parameter"},
            {"id": "x", "bytes": 8, "op": "aten.mm.default", "inputs": ["w"]},
            {"id": "r", "bytes": 8, "op": "aten.relu_.default", "inputs": ["x"]},
            {"id": "m", "bytes": 8, "op": "aten.mul_.Tensor", "inputs": ["w"]},
            {"id": "u", "bytes": 8, "op": "aten.add_.Tensor", "inputs": ["m", "r"]},
            {"id": "s", "bytes": 8, "op": "aten.sigmoid.default", "inputs": ["r"]}]
    g = Graph.from_records(recs)
    chosen = pointwise_nodes(g, np.arange(g.num_nodes))
    assert [g.ids[v] for v in np.flatnonzero(chosen)] == ["r", "s"]


def test_pointwise_recomputes_only_pointwise_nodes():
    g = regal.load(RESNET)
    sol = regal.methods.solve("recompute-pointwise", g, 1)
    counts = np.bincount(sol.order, minlength=g.num_nodes)
    again = np.flatnonzero(counts > 1)
    assert again.size > 0 and all(is_pointwise(g.ops[v]) for v in again)
    assert sol.info["recompute"]["count"] == again.size


def test_moccasin_never_places_a_recomputation_after_a_control_successor():
    """Every node's recomputation window in the model ends at its first control successor (SPEC
    3b: every instance of u runs before a control successor), so no solution the solver returns,
    whatever its time limit, is an invalid sequence."""
    g = regal.load(RESNET)
    order = g.topological_order()
    model = MoccasinModel(g, order, 10**12, op_costs(g)[0])
    pos = np.empty(g.num_nodes, dtype=np.int64)
    pos[np.asarray(order)] = np.arange(g.num_nodes)
    checked = 0
    for v, t in model.t.items():
        succ = g.ctrl_out_idx[g.ctrl_out_ptr[v]:g.ctrl_out_ptr[v + 1]]
        if succ.size:
            hi = max(d for d in t.proto.domain if d < g.num_nodes)
            assert hi <= pos[succ].min(), (g.ids[v], hi)
            checked += 1
    assert checked > 0
