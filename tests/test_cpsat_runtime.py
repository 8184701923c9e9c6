"""The runtime objective's CP-SAT baseline (baselines/cpsat_runtime.py): a sound model, a valid
replayed solution, never worse than its HEFT hint."""

import numpy as np
import pytest

import regal.methods
from randgraph import random_dag
from regal.graph import Graph
from regal.solution import solution_from_json
from regal.timed import DeviceModel, simulate_timed
from regal.timed_heuristics import heft_schedule
from regal_baselines import cpsat_runtime

MODEL = DeviceModel(bandwidth_bytes_per_s=1e9, latency_s=1e-6)


def _graph(seed, n=18, output_fraction=0.0):
    return random_dag(seed, num_nodes=n, resident_fraction=0.2, control_fraction=0.2,
                      output_fraction=output_fraction)


@pytest.mark.parametrize("seed, d, outputs", [(0, 2, 0.0), (1, 3, 0.0), (2, 2, 0.0), (3, 4, 0.0),
                                              (4, 2, 0.3), (5, 3, 0.3), (6, 2, 0.3)])
def test_every_timed_schedule_is_a_solution_of_the_model(seed, d, outputs):
    """Soundness of the bound: HEFT's timed schedule (placement, start times, transfers), fixed in
    the model whose memory limit is that schedule's own timed peaks, is feasible; so CP-SAT's
    optimum is a lower bound on every schedule's makespan. Also with graph outputs (`output`),
    whose home copies the model holds to the end."""
    from ortools.sat.python import cp_model
    g = _graph(seed, output_fraction=outputs)
    placement, sim = heft_schedule(g, d, MODEL)
    built = cpsat_runtime._Model(g, d, MODEL, np.asarray(sim.device_peak_bytes, dtype=np.int64))
    m, tick = built.m, built.tick
    for v in range(g.num_nodes):
        m.add(built.x[v][int(placement[v])] == 1)
        if not g.resident[v]:
            m.add(built.s[v] == int(sim.start_s[v] // tick))
    sent = {(int(u), int(q)): t for u, q, t in zip(sim.transfer_node, sim.transfer_device, sim.transfer_start_s)}
    for (u, q), y in built.y.items():
        m.add(y == int((u, q) in sent))
        if (u, q) in sent:
            m.add(built.t[u, q] == int(sent[u, q] // tick))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 20
    solver.parameters.num_workers = 1
    assert solver.solve(m) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert solver.objective_value * tick <= sim.makespan_s * (1 + 1e-9)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_solve_returns_a_checked_runtime_solution_no_worse_than_heft(d):
    """The result is a runtime solution whose timed values re-simulate (solution_from_json checks
    them), at most HEFT's makespan, at least the proven bound; d = 1 is the sum of the costs."""
    g = _graph(7 + d, n=20)
    sol = regal.methods.solve("cpsat-runtime", g, d, time_limit_s=5, device_model=MODEL)
    timed, info = sol.info["timed"], sol.info
    assert sol.method == "cpsat-runtime" and info["objective"] == "runtime"
    solution_from_json(g, sol.to_json())  # checks makespan, timed peaks and feasibility
    heft = regal.methods.solve("heft", g, d, device_model=MODEL).info["timed"]["makespan_s"]
    assert timed["makespan_s"] <= heft * (1 + 1e-12)
    assert info["bound_s"] is not None and info["bound_s"] <= timed["makespan_s"] * (1 + 1e-9)
    if d == 1:
        assert timed["makespan_s"] == pytest.approx(float(g.cost[~g.resident].sum()))
        assert info["optimal"]


def test_a_memory_limit_is_met_when_cpsat_finds_a_schedule_within_it():
    """Under a limit that HEFT's schedule breaks, a schedule CP-SAT returns fits it (the replay
    by the timed model checked), or the HEFT hint comes back marked infeasible."""
    g = _graph(21, n=16)
    _, sim = heft_schedule(g, 2, MODEL)
    limit = int(sim.peak_bytes * 0.9)
    sol = regal.methods.solve("cpsat-runtime", g, 2, time_limit_s=10, device_model=MODEL, memory_limit_bytes=limit)
    timed = sol.info["timed"]
    again = simulate_timed(g, sol.placement, sol.order, 2, MODEL,
                           transfers=(np.array([g.index[u] for u, _ in timed["transfers"]], dtype=np.int64),
                                      np.array([q for _, q in timed["transfers"]], dtype=np.int64)))
    assert again.makespan_s == timed["makespan_s"] and int(again.peak_bytes) == timed["peak_bytes"]
    if sol.info["source"] == "cpsat":
        assert timed["feasible"] and timed["peak_bytes"] <= limit
    else:
        assert not timed["feasible"]


def test_an_outputs_home_copy_lasts_to_the_end_in_the_model():
    """a (output, 10) -> b (1) -> c (10): on one device a's home copy is still there when c runs
    (21 bytes), so a limit of 15 has no schedule; without the flag (peak 11) or on two devices
    (c away from a: 11 each) it has one."""
    from ortools.sat.python import cp_model
    recs = [{"id": "a", "bytes": 10, "cost": 1.0, "output": True},
            {"id": "b", "bytes": 1, "cost": 1.0, "inputs": ["a"]},
            {"id": "c", "bytes": 10, "cost": 1.0, "inputs": ["b"]}]
    plain = [{k: v for k, v in r.items() if k != "output"} for r in recs]

    def status(records, d):
        built = cpsat_runtime._Model(Graph.from_records(records, name="kept"), d, MODEL,
                                     np.full(d, 15, dtype=np.int64))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = 20
        solver.parameters.num_workers = 1
        return solver.solve(built.m)

    assert status(recs, 1) == cp_model.INFEASIBLE
    assert status(plain, 1) == cp_model.OPTIMAL
    assert status(recs, 2) == cp_model.OPTIMAL
    assert simulate_timed(Graph.from_records(recs), [0, 0, 0], [0, 1, 2], 1, MODEL).peak_bytes == 21


@pytest.mark.parametrize("seed", [105, 107, 110])
def test_a_schedule_whose_replay_breaks_the_limit_is_never_returned_as_within_it(seed):
    """The model/replay difference behind the flaky test above: on these graphs CP-SAT's
    schedule (OPTIMAL in the model, whatever its time) replayed by the timed model (non-delay:
    tasks start earlier, values live at other times) broke the limit and came back as "cpsat".
    Every schedule CP-SAT finds is replayed now: "cpsat" is a replay within the limit; the least
    excess, when none is, is "cpsat-over-limit" and says it is not feasible."""
    g = random_dag(seed, num_nodes=16, resident_fraction=0.2, control_fraction=0.2, output_fraction=0.0)
    _, sim = heft_schedule(g, 2, MODEL)
    limit = int(sim.peak_bytes * 0.9)
    sol = regal.methods.solve("cpsat-runtime", g, 2, time_limit_s=2, device_model=MODEL, memory_limit_bytes=limit)
    timed, info = sol.info["timed"], sol.info
    assert info["source"] in ("cpsat", "cpsat-over-limit", "hint")
    assert info["replays"] >= info["replays_within_limit"] >= 0
    again = simulate_timed(g, sol.placement, sol.order, 2, MODEL,
                           transfers=(np.array([g.index[u] for u, _ in timed["transfers"]], dtype=np.int64),
                                      np.array([q for _, q in timed["transfers"]], dtype=np.int64)))
    fits = all(int(p) <= limit for p in again.device_peak_bytes)
    assert timed["feasible"] == fits
    if info["source"] == "cpsat":
        assert fits and info["replays_within_limit"] >= 1
    else:
        assert not fits and not info["optimal"]
