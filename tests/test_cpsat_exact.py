"""baselines.cpsat and baselines.exact: proven optima against brute force, and their contracts."""

import functools

import numpy as np
import pytest

import naive
from randgraph import random_dag
import regal.methods
from regal_baselines import cpsat, exact
from regal.decode import chromosome_length, decode
from regal.graph import Graph
from regal.simulate import check_schedule, simulate
from regal.solution import make_solution

# Brute-forceable graphs: 9 nodes on one device, 7 on two (seeds fixed).
ONE_DEVICE = [(seed, 9) for seed in range(30)]
TWO_DEVICES = [(500 + seed, 7) for seed in range(15)]


@functools.lru_cache(maxsize=None)
def _graph(seed, n):
    return random_dag(seed, num_nodes=n)


@functools.lru_cache(maxsize=None)
def _brute_force(seed, n, d):
    return naive.brute_force_peak(_graph(seed, n), d)


def _poor_hint(g, d):
    """Index-order topological schedule, round-robin placement: CP-SAT must do the work itself."""
    return make_solution(g, np.arange(g.num_nodes) % d, g.topological_order(), d, method="topo")


def test_cases_cover_every_rule():
    """The brute-force graphs include resident nodes, temp bytes, control edges and outputs."""
    graphs = [_graph(s, n) for s, n in ONE_DEVICE + TWO_DEVICES]
    assert sum(int(g.resident.sum()) for g in graphs) >= 10
    assert sum(int((g.temp_bytes > 0).sum()) for g in graphs) >= 30
    assert sum(g.num_control_edges for g in graphs) >= 5
    assert all(any(g.consumers(v).size == 0 for v in range(g.num_nodes)) for g in graphs)


@pytest.mark.slow  # 30 CP-SAT proofs: about 9 s
def test_cpsat_proves_brute_force_optimum_on_one_device():
    """On 30 random 9-node DAGs, d = 1, CP-SAT from a poor hint reaches the brute-force optimum, proven."""
    got = []
    for seed, n in ONE_DEVICE:
        sol = cpsat.solve(_graph(seed, n), 1, hint=_poor_hint(_graph(seed, n), 1), time_limit_s=20)
        got.append((seed, sol.peak_bytes, sol.info["optimal"], sol.info["bound_bytes"]))
    want = [(seed, _brute_force(seed, n, 1), True, _brute_force(seed, n, 1)) for seed, n in ONE_DEVICE]
    assert got == want


@pytest.mark.slow  # 15 CP-SAT proofs: about 8 s
def test_cpsat_proves_brute_force_optimum_on_two_devices():
    """On 15 random 7-node DAGs, d = 2, CP-SAT from a poor hint reaches the brute-force optimum, proven."""
    got = []
    for seed, n in TWO_DEVICES:
        sol = cpsat.solve(_graph(seed, n), 2, hint=_poor_hint(_graph(seed, n), 2), time_limit_s=20)
        got.append((seed, sol.peak_bytes, sol.info["optimal"]))
    want = [(seed, _brute_force(seed, n, 2), True) for seed, n in TWO_DEVICES]
    assert got == want


@pytest.mark.slow  # the DP against brute force on 30 DAGs: about 18 s under load
def test_exact_matches_brute_force_on_one_device():
    """On the same 30 DAGs the DP, plain and with all reductions, returns the brute-force optimum."""
    got, num_lazy = [], 0
    for seed, n in ONE_DEVICE:
        g = _graph(seed, n)
        reduced = exact.solve(g, 1, hint=_poor_hint(g, 1))
        num_lazy += reduced.info["num_lazy"]
        got.append((seed, exact.solve(g, 1, prune=False, dominance=False).peak_bytes, reduced.peak_bytes))
    assert got == [(seed, _brute_force(seed, n, 1), _brute_force(seed, n, 1)) for seed, n in ONE_DEVICE]
    assert num_lazy >= 10  # the lazy-node reduction is exercised


@pytest.mark.slow  # 12 CP-SAT proofs: about 7 s
def test_exact_and_cpsat_agree_on_larger_graphs():
    """On 12 random DAGs of 14-22 nodes (too big to brute-force), plain DP, reduced DP and CP-SAT agree."""
    got, want = [], []
    for seed in range(12):
        g = random_dag(2000 + seed, num_nodes=14 + seed % 9)
        sol = cpsat.solve(g, 1, time_limit_s=20)
        assert sol.info["optimal"], f"CP-SAT did not prove graph {seed} in 20 s"
        plain = exact.solve(g, 1, prune=False, dominance=False).peak_bytes
        got.append((sol.peak_bytes, exact.solve(g, 1).peak_bytes))
        want.append((plain, plain))
    assert got == want


def _fixed_schedule_objective(g, d, seed):
    """(the CP-SAT model's optimum with a random schedule fixed, or None; its SPEC peak)."""
    keys = np.random.default_rng(seed).random(chromosome_length(g.num_nodes, d))
    placement, order = decode(g, keys, d)
    built = cpsat.build_model(g, d)
    built.add_hint(placement, order, fix=True)
    solver = cpsat.cp_model.CpSolver()
    solver.parameters.num_workers = 2
    solver.parameters.max_time_in_seconds = 20
    status = solver.solve(built.model)
    want = simulate(g, cpsat._canonical_devices(np.asarray(placement), d), order, d).peak_bytes
    return (int(solver.objective_value) if status == cpsat.cp_model.OPTIMAL else None), want


def test_model_objective_equals_simulation_for_fixed_schedules():
    """With placement and order fixed, the CP-SAT model's optimum is the SPEC simulation, d = 1..3."""
    mismatches = []
    for seed in range(36):
        d = 1 + seed % 3
        g = random_dag(3000 + seed, num_nodes=10 + seed % 25)
        got, want = _fixed_schedule_objective(g, d, seed)
        if got != want:
            mismatches.append((seed, d, got, want))
    assert mismatches == []


@pytest.mark.parametrize("name,d", [("cpsat", 1), ("cpsat", 2), ("exact", 1)])
def test_solution_peak_is_fresh_simulation_and_bounds_hold(name, d):
    """Registry solvers return valid schedules: peak = fresh simulation >= lower bound >= ... bound <= peak."""
    for seed in range(6):
        g = random_dag(4000 + seed, num_nodes=10 + 2 * seed)
        sol = regal.methods.solve(name, g, d, time_limit_s=2, seed=seed)
        check_schedule(g, sol.placement, sol.order, d)
        assert sol.method == name
        assert sol.peak_bytes == simulate(g, sol.placement, sol.order, d).peak_bytes
        assert sol.peak_bytes >= g.lower_bound(d)
        assert g.lower_bound(d) <= sol.info["bound_bytes"] <= sol.peak_bytes
        if sol.info["optimal"]:
            assert sol.info["bound_bytes"] == sol.peak_bytes


@pytest.mark.slow  # two 5 s CP-SAT runs: about 10 s
def test_cpsat_never_returns_worse_than_its_hint_on_a_large_graph():
    """On a 150-node DAG with a 5 s limit, CP-SAT returns a valid schedule no worse than its hint, d = 1, 2."""
    g = random_dag(77, num_nodes=150)
    for d in (1, 2):
        hint = make_solution(g, np.arange(g.num_nodes) % d, g.topological_order(), d, method="topo")
        sol = cpsat.solve(g, d, hint=hint, time_limit_s=5)
        check_schedule(g, sol.placement, sol.order, d)
        assert sol.info["hint_peak_bytes"] == hint.peak_bytes
        assert sol.peak_bytes <= hint.peak_bytes
        assert sol.peak_bytes == simulate(g, sol.placement, sol.order, d).peak_bytes
        assert sol.info["bound_bytes"] <= sol.peak_bytes
        assert sol.seconds < 5 + 60  # the limit is kept (a hang bound: load moves the rest)


def test_exact_refuses_a_too_wide_graph_by_name():
    """40 independent consumers of one root have C(40, k) executable sets: the DP refuses, naming the graph."""
    g = Graph.from_records([{"id": "root", "bytes": 7}]
                           + [{"id": f"v{i}", "bytes": 1 + i, "inputs": ["root"]} for i in range(40)],
                           name="wide40")
    with pytest.raises(ValueError, match=r"exact: graph 'wide40' has more than 10,000 executable sets"):
        exact.solve(g, 1, max_states=10_000, prune=False)


def test_exact_refuses_more_than_one_device_by_name():
    """The DP orders one device; d = 2 is refused with a message naming the graph."""
    g = random_dag(1, num_nodes=5)
    with pytest.raises(ValueError, match=r"exact: graph 'random1' asks for 2 devices"):
        exact.solve(g, 2)


def test_exact_keeps_resident_nodes_first_and_all_on_device_zero():
    """The DP's order starts with the resident nodes and its placement is all device 0."""
    g = random_dag(11, num_nodes=14)
    sol = exact.solve(g, 1)
    num_resident = int(g.resident.sum())
    assert num_resident > 0
    assert sorted(sol.order[:num_resident].tolist()) == np.flatnonzero(g.resident).tolist()
    assert sol.placement.tolist() == [0] * g.num_nodes


def test_spec_worked_example_chain_is_solved_exactly():
    """SPEC section 3: chain a(4) -> b(2) -> c(1) has optimum 6 on one device for both solvers."""
    g = Graph.from_records([{"id": "a", "bytes": 4}, {"id": "b", "bytes": 2, "inputs": ["a"]},
                            {"id": "c", "bytes": 1, "inputs": ["b"]}], name="chain")
    assert exact.solve(g, 1).peak_bytes == 6
    sol = cpsat.solve(g, 1)
    assert (sol.peak_bytes, sol.info["optimal"]) == (6, True)


@pytest.mark.slow
def test_cpsat_and_exact_match_brute_force_on_bigger_graphs():
    """Slow: 10-node DAGs on one device and 7-node DAGs on two, against brute force."""
    for seed in range(20):
        g = random_dag(6000 + seed, num_nodes=10)
        want = naive.brute_force_peak(g, 1)
        sol = cpsat.solve(g, 1, hint=_poor_hint(g, 1), time_limit_s=30)
        assert (sol.peak_bytes, sol.info["optimal"]) == (want, True)
        assert exact.solve(g, 1, prune=False, dominance=False).peak_bytes == want
        assert exact.solve(g, 1).peak_bytes == want
    for seed in range(15):
        g = random_dag(7000 + seed, num_nodes=7)
        want = naive.brute_force_peak(g, 2)
        sol = cpsat.solve(g, 2, hint=_poor_hint(g, 2), time_limit_s=30)
        assert (sol.peak_bytes, sol.info["optimal"]) == (want, True)


def test_cpsat_hint_is_a_solution_when_the_last_node_has_consumers():
    """Every hinted value, fixed, is a solution scored as the simulation scores it, d = 2, 3.

    Records in reverse topological order put a node with consumers last; the hint of the home
    copies' sizes once read that last node's consumers for every node (a closure bound late) and
    raised `max() arg is an empty sequence` at d >= 2.
    """
    bad = []
    for seed in range(12):
        d = 2 + seed % 2
        g = Graph.from_records(list(reversed(random_dag(5000 + seed, num_nodes=12 + seed).to_records())))
        keys = np.random.default_rng(seed).random(chromosome_length(g.num_nodes, d))
        placement, order = decode(g, keys, d)
        built = cpsat.build_model(g, d)
        built.add_hint(placement, order)
        m = built.model
        for v, val in zip(m.proto.solution_hint.vars, m.proto.solution_hint.values):
            m.add(m.get_int_var_from_proto_index(v) == val)
        solver = cpsat.cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_time_in_seconds = 20
        status = solver.solve(m)
        want = simulate(g, cpsat._canonical_devices(np.asarray(placement), d), order, d).peak_bytes
        got = int(solver.objective_value) if status == cpsat.cp_model.OPTIMAL else None
        if got != want:
            bad.append((seed, d, solver.status_name(status), got, want))
    assert bad == []


# ---------------------------------------------------------------------------- in-place reuse
@pytest.mark.slow  # 20 CP-SAT proofs and brute force: about 8 s
def test_exact_and_cpsat_match_brute_force_with_reuse_fields():
    """With `reuse` fields (SPEC section 3), d = 1: plain DP, reduced DP and CP-SAT (which models
    taking over exactly) reach the brute-force optimum on 20 random 9-node DAGs, proven."""
    got, want = [], []
    for seed in range(20):
        g = random_dag(seed, num_nodes=9, reuse_fraction=0.7)
        bf = naive.brute_force_peak(g, 1)
        sol = cpsat.solve(g, 1, hint=_poor_hint(g, 1), time_limit_s=20)
        got.append((exact.solve(g, 1, prune=False, dominance=False).peak_bytes,
                     exact.solve(g, 1, hint=_poor_hint(g, 1)).peak_bytes, sol.peak_bytes,
                     sol.info["optimal"], sol.info["reuse"]))
        want.append((bf, bf, bf, True, "modelled" if g.has_reuse else "none"))
    assert got == want


def test_model_objective_equals_simulation_with_reuse_fields():
    """d = 1 with placement and order fixed: the model's optimum is the SPEC peak with `reuse`;
    d = 2 ignores the field, so its optimum bounds the simulated peak from above."""
    mismatches = []
    for seed in range(24):
        d = 1 + seed % 2
        g = random_dag(3000 + seed, num_nodes=10 + seed % 20, reuse_fraction=0.7)
        got, want = _fixed_schedule_objective(g, d, seed)
        if got is None or (got != want if d == 1 else got < want):
            mismatches.append((seed, d, got, want))
    assert mismatches == []


def test_cpsat_on_two_devices_ignores_reuse_with_a_valid_bound():
    """d = 2 and `reuse`: the reported bound is the graph's lower bound (not CP-SAT's bound of the
    model without reuse), never above the brute-force optimum; 'optimal' only when it is met."""
    for seed in range(8):
        g = random_dag(500 + seed, num_nodes=7, reuse_fraction=0.8)
        bf = naive.brute_force_peak(g, 2)
        sol = cpsat.solve(g, 2, time_limit_s=5)
        assert sol.peak_bytes >= bf and sol.info["bound_bytes"] <= bf
        assert sol.info["optimal"] == (sol.info["bound_bytes"] >= sol.peak_bytes)
        assert sol.info["reuse"] == ("ignored" if g.has_reuse else "none")


# ---------------------------------------------------------------------------- graph outputs
@functools.lru_cache(maxsize=None)
def _with_outputs(seed, n, reuse=False):
    """A random DAG with graph outputs (`output`, SPEC section 3: their home copy is never freed)."""
    return random_dag(seed, num_nodes=n, output_fraction=0.3, reuse_fraction=0.7 if reuse else 0.0)


def _without_outputs(g):
    recs = g.to_records()
    for r in recs:
        r.pop("output", None)
    return Graph.from_records(recs, name=g.name)


@functools.lru_cache(maxsize=None)
def _brute_force_one_device(g):
    """The minimum over every topological order of tests/naive.py's simulation, one device."""
    return min(naive.simulate(g, [0] * g.num_nodes, order, 1)[0] for order in naive.all_topological_orders(g))


@pytest.mark.slow  # brute force over every order of 20 graphs: about 11 s
def test_outputs_cases_have_read_outputs():
    """The graphs below mark outputs that have consumers, and the flag raises the optimum of some."""
    graphs = [_with_outputs(seed, 9, seed % 2 == 1) for seed in range(20)]
    assert sum(int((g.output & ~g.resident & (np.diff(g.out_ptr) > 0)).sum()) for g in graphs) >= 20
    raised = [_brute_force_one_device(g) > naive.brute_force_peak(_without_outputs(g), 1) for g in graphs]
    assert sum(raised) >= 5


def test_exact_and_cpsat_match_brute_force_with_outputs():
    """With graph outputs, d = 1, with and without `reuse`: plain DP, reduced DP and CP-SAT reach
    the brute-force optimum (min over every topological order of tests/naive.py's simulation) on
    20 random 9-node DAGs, and each returned order simulates (naive and kernel) to that peak."""
    got, want = [], []
    for seed in range(20):
        g = _with_outputs(seed, 9, seed % 2 == 1)
        bf = _brute_force_one_device(g)
        sols = [exact.solve(g, 1, prune=False, dominance=False), exact.solve(g, 1, hint=_poor_hint(g, 1)),
                cpsat.solve(g, 1, hint=_poor_hint(g, 1), time_limit_s=20)]
        for sol in sols:
            assert sol.peak_bytes == simulate(g, sol.placement, sol.order, 1).peak_bytes
            assert sol.peak_bytes == naive.simulate(g, sol.placement.tolist(), sol.order.tolist(), 1)[0]
        got.append((seed, *(s.peak_bytes for s in sols), sols[0].info["bound_bytes"], sols[2].info["optimal"]))
        want.append((seed, bf, bf, bf, bf, True))
    assert got == want


def test_cpsat_matches_brute_force_with_outputs_on_two_devices():
    """With graph outputs, d = 2 (an output's copies on other devices go, its home copy stays):
    CP-SAT from a poor hint reaches the brute-force optimum, proven, on 8 random 7-node DAGs."""
    got, want = [], []
    for seed in range(8):
        g = _with_outputs(500 + seed, 7)
        sol = cpsat.solve(g, 2, hint=_poor_hint(g, 2), time_limit_s=20)
        assert sol.peak_bytes == naive.simulate(g, sol.placement.tolist(), sol.order.tolist(), 2)[0]
        got.append((seed, sol.peak_bytes, sol.info["optimal"]))
        want.append((seed, naive.brute_force_peak(g, 2), True))
    assert got == want


def test_model_objective_equals_simulation_with_outputs():
    """With graph outputs and placement and order fixed, the model's optimum is the SPEC peak,
    d = 1..3; with `reuse` at d > 1 (ignored there) it bounds the simulated peak from above."""
    mismatches = []
    for seed in range(24):
        d = 1 + seed % 3
        g = _with_outputs(3000 + seed, 10 + seed % 20, reuse=seed % 4 >= 2)
        got, want = _fixed_schedule_objective(g, d, seed)
        if got is None or (got < want if d > 1 and g.has_reuse else got != want):
            mismatches.append((seed, d, got, want))
    assert mismatches == []


def test_an_output_read_by_a_chain_is_held_to_the_end():
    """a (output, 10) -> b (1) -> c (10): a's home copy stays, so c runs beside it (peak 21 on one
    device, 11 without the flag); both solvers say so."""
    recs = [{"id": "a", "bytes": 10, "output": True}, {"id": "b", "bytes": 1, "inputs": ["a"]},
            {"id": "c", "bytes": 10, "inputs": ["b"]}]
    g = Graph.from_records(recs, name="kept")
    assert exact.solve(g, 1).peak_bytes == 21 and cpsat.solve(g, 1).peak_bytes == 21
    assert exact.solve(_without_outputs(g), 1).peak_bytes == 11
