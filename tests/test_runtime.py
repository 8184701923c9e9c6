"""The runtime objective (issue 16): the flagship on the timed chromosome, its baselines, solution
files that carry the timed model's values, and the command line."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import regal
import regal.methods
from randgraph import random_dag
from regal.cli import main
from regal.graph import Graph, save
from regal.solution import SolutionError, load_solution, solution_from_json
from regal.timed import DeviceModel, resimulate
from regal.timed import excess_bytes, makespan_bound, memory_limits, runtime_fitness
from regal.timed_heuristics import heft_mem_schedule, heft_schedule, one_device_schedule, timed_starts

MODEL = DeviceModel(bandwidth_bytes_per_s=1e7, latency_s=1e-6)  # transfers comparable to the costs


def _graph(seed, n=40):
    return random_dag(seed, num_nodes=n, resident_fraction=0.1)


def _check_timed_solution(g, sol, model=MODEL):
    """The solution's info["timed"] is what the timed model gives for its own files' fields."""
    sim = resimulate(g, sol)
    timed = sol.info["timed"]
    assert timed["makespan_s"] == sim.makespan_s
    assert timed["device_peak_bytes"] == sim.device_peak_bytes.tolist()
    assert timed["device_model"] == model.to_json(sol.num_devices)
    return sim


@pytest.mark.parametrize("devices", [1, 2, 3])
def test_runtime_flagship_is_never_worse_than_its_best_seed(devices):
    """Elitism: the flagship's fitness is at most every seed's (here without a limit: makespan)."""
    for seed in range(3):
        g = _graph(seed)
        sol = regal.optimize(g, devices, budget=400, seed=seed, objective="runtime", device_model=MODEL)
        sim = _check_timed_solution(g, sol)
        assert sol.info["objective"] == "runtime" and sol.evaluations == 400
        best_seed = min(s.makespan_s for _, _, s in timed_starts(g, devices, MODEL, seed))
        assert sim.makespan_s <= best_seed


def test_runtime_flagship_is_feasible_when_a_seed_is():
    """With the limit at one device's peak, the one-device seed fits, so the answer fits too."""
    for seed in range(3):
        g = _graph(seed)
        _, one = one_device_schedule(g, 2, MODEL, seed)
        sol = regal.optimize(g, 2, budget=300, seed=seed, objective="runtime", device_model=MODEL,
                             memory_limit_bytes=int(one.peak_bytes))
        assert sol.info["timed"]["feasible"]
        assert max(sol.info["timed"]["device_peak_bytes"]) <= one.peak_bytes
        assert sol.info["timed"]["makespan_s"] <= one.makespan_s


def test_an_unmeetable_limit_gives_an_infeasible_solution_closest_to_it():
    """A limit below the lower bound: the answer says infeasible, and is no further over than the seeds."""
    g = _graph(1)
    limit = max(1, g.lower_bound(2) // 4)
    sol = regal.optimize(g, 2, budget=300, objective="runtime", device_model=MODEL, memory_limit_bytes=limit)
    excess = lambda peaks: int(np.maximum(np.asarray(peaks) - limit, 0).sum())  # noqa: E731
    assert not sol.info["timed"]["feasible"]
    assert all(excess(sol.info["timed"]["device_peak_bytes"]) <= excess(s.device_peak_bytes)
               for _, _, s in timed_starts(g, 2, MODEL))


def test_while_over_the_limit_the_climb_takes_at_most_its_infeasible_share():
    """A limit nothing meets: the climb gets at most FlagshipConfig.infeasible_share of the
    evaluations (the population's search gets the rest); without a limit it gets its usual share."""
    from regal.config import polish_share
    INFEASIBLE_SHARE = regal.FlagshipConfig().infeasible_share
    g = _graph(1, n=80)
    budget = 1000
    sol = regal.optimize(g, 2, budget=budget, objective="runtime", device_model=MODEL,
                         memory_limit_bytes=max(1, g.lower_bound(2) // 4))
    assert not sol.info["timed"]["feasible"] and sol.evaluations == budget
    assert sol.info["polish_evaluations"] <= INFEASIBLE_SHARE * budget + 64
    free = regal.optimize(g, 2, budget=budget, objective="runtime", device_model=MODEL)
    assert polish_share(80, 2) > INFEASIBLE_SHARE
    assert free.info["polish_evaluations"] > INFEASIBLE_SHARE * budget + 64


def test_runtime_search_is_deterministic_and_thread_invariant():
    """The same seed gives the same schedule on 1 or 2 Numba threads."""
    g = _graph(4)
    a = regal.optimize(g, 2, budget=300, seed=3, objective="runtime", device_model=MODEL, num_threads=1)
    b = regal.optimize(g, 2, budget=300, seed=3, objective="runtime", device_model=MODEL, num_threads=2)
    assert a.placement.tolist() == b.placement.tolist() and a.order.tolist() == b.order.tolist()
    assert a.info["timed"] == b.info["timed"]


def test_the_peak_memory_objective_is_unchanged():
    """objective='memory' is the default path, bit for bit; runtime options there are refused."""
    g = _graph(2)
    a = regal.optimize(g, 2, budget=300, seed=1)
    b = regal.optimize(g, 2, budget=300, seed=1, objective="memory")
    assert a.placement.tolist() == b.placement.tolist() and a.order.tolist() == b.order.tolist()
    assert a.peak_bytes == b.peak_bytes and "timed" not in a.info
    with pytest.raises(ValueError, match="objective='runtime'"):
        regal.optimize(g, 2, budget=10, memory_limit_bytes=100)
    with pytest.raises(ValueError, match="objective must be"):
        regal.optimize(g, 2, budget=10, objective="speed")
    with pytest.raises(ValueError, match="memory_limit_bytes must be a positive integer"):
        regal.optimize(g, 2, budget=10, objective="runtime", memory_limit_bytes=-5)


@pytest.mark.parametrize("name", ["heft", "heft-mem", "critical-path", "one-device", "brkga-runtime"])
def test_runtime_baselines_carry_their_timed_values(name):
    """Each runtime baseline's solution re-simulates to the timed values it carries."""
    g = _graph(5)
    opts = {"budget": 200} if regal.methods.get(name).takes_budget else {}
    sol = regal.methods.solve(name, g, 2, device_model=MODEL, memory_limit_bytes=10**9, **opts)
    _check_timed_solution(g, sol)
    assert sol.method == name and sol.info["timed"]["memory_limit_bytes"] == [10**9, 10**9]


def test_one_device_takes_the_sum_of_the_costs_on_the_fastest_device():
    """'one-device' runs everything on the fastest device: makespan = sum of costs / its speed."""
    g = _graph(6)
    model = DeviceModel(speed=(1.0, 4.0, 2.0))
    placement, sim = one_device_schedule(g, 3, model)
    assert set(placement.tolist()) == {1}
    assert sim.makespan_s == pytest.approx(g.cost[~g.resident].sum() / 4.0, rel=1e-12)


def test_heft_splits_a_fork_when_transfers_are_cheap_and_not_when_dear():
    """Two independent 1 s branches after a tiny root: HEFT runs them side by side (2 s) when a
    transfer takes 0.01 s, and on one device (3 s) when it takes 10 s."""
    g = Graph.from_records([
        {"id": "r", "bytes": 1, "cost": 0.0},
        {"id": "a", "bytes": 1, "cost": 1.0, "inputs": ["r"]},
        {"id": "b", "bytes": 1, "cost": 1.0, "inputs": ["r"]},
        {"id": "j", "bytes": 1, "cost": 1.0, "inputs": ["a", "b"]},
    ], name="fork")
    cheap = DeviceModel(bandwidth_bytes_per_s=1e3, latency_s=0.01)
    placement, sim = heft_schedule(g, 2, cheap)
    assert placement[1] != placement[2] and sim.makespan_s == pytest.approx(2.011)
    dear = DeviceModel(bandwidth_bytes_per_s=1.0, latency_s=10.0)
    placement, sim = heft_schedule(g, 2, dear)
    assert len(set(placement.tolist())) == 1 and sim.makespan_s == 3.0


def _two_weights():
    """Two independent nodes, each reading its own 100-byte weight; device 0 is four times faster."""
    g = Graph.from_records([
        {"id": "w1", "bytes": 100, "resident": True},
        {"id": "w2", "bytes": 100, "resident": True},
        {"id": "a", "bytes": 1, "cost": 1.0, "inputs": ["w1"]},
        {"id": "b", "bytes": 1, "cost": 1.0, "inputs": ["w2"]},
    ], name="two-weights")
    return g, DeviceModel(speed=(4.0, 1.0))


def test_memory_aware_heft_splits_what_heft_puts_on_the_fast_device():
    """HEFT runs both nodes on the fast device (0.5 s) with both weights (202 bytes); under a
    150-byte limit memory-aware HEFT books the second weight elsewhere: 1 s, 101 bytes a device."""
    g, model = _two_weights()
    placement, sim = heft_schedule(g, 2, model)
    assert set(placement.tolist()) == {0} and sim.peak_bytes == 202 and sim.makespan_s == 0.5
    placement, sim = heft_mem_schedule(g, 2, model, 150)
    assert placement[2] != placement[3] and placement[0] == placement[2] and placement[1] == placement[3]
    assert sim.device_peak_bytes.tolist() == [101, 101] and sim.makespan_s == 1.0
    # the runtime flagship takes it as a seed when it fits, and only then
    sol = regal.optimize(g, 2, budget=100, objective="runtime", device_model=model, memory_limit_bytes=150)
    assert "heft-mem" in sol.info["seeding"] and sol.info["timed"]["feasible"]
    assert sol.info["timed"]["makespan_s"] == 1.0
    sol = regal.optimize(g, 2, budget=100, objective="runtime", device_model=model, memory_limit_bytes=50)
    assert "heft-mem" not in sol.info["seeding"] and not sol.info["timed"]["feasible"]
    sol = regal.optimize(g, 2, budget=100, objective="runtime", device_model=model)
    assert "heft-mem" not in sol.info["seeding"] and sol.info["timed"]["makespan_s"] == 0.5


@pytest.mark.parametrize("devices", [2, 3])
def test_memory_aware_heft_is_heft_without_a_limit_and_never_ranks_below_it(devices):
    """No limit: HEFT's schedule exactly. Under limits from a quarter of HEFT's peak to above it,
    its runtime fitness is at most HEFT's (HEFT is one of the schedules it picks from)."""
    for seed in range(4):
        g = _graph(seed, n=60)
        p0, s0 = heft_schedule(g, devices, MODEL)
        p1, s1 = heft_mem_schedule(g, devices, MODEL)
        assert p0.tolist() == p1.tolist() and s0.makespan_s == s1.makespan_s
        bound = makespan_bound(g, devices, MODEL)
        for frac in (0.25, 0.5, 0.75, 1.0, 1.5):
            limits = memory_limits(max(1, int(frac * s0.peak_bytes)), devices)
            fit = lambda sim: runtime_fitness(sim.makespan_s, excess_bytes(sim.device_peak_bytes, limits),  # noqa: E731
                                              bound, limits)
            _, sm = heft_mem_schedule(g, devices, MODEL, int(limits[0]))
            assert fit(sm) <= fit(s0)


def test_a_tampered_makespan_is_rejected_when_loading(tmp_path):
    """load_solution re-runs the timed model: a wrong makespan or feasibility claim is refused."""
    g = _graph(7)
    sol = regal.optimize(g, 2, budget=200, objective="runtime", device_model=MODEL, memory_limit_bytes=10**9)
    doc = sol.to_json()
    again = solution_from_json(g, json.loads(json.dumps(doc)))
    assert again.info["timed"]["makespan_s"] == sol.info["timed"]["makespan_s"]
    doc["info"]["timed"]["makespan_s"] *= 0.5
    with pytest.raises(SolutionError, match="claims makespan_s"):
        solution_from_json(g, doc)
    doc = sol.to_json()
    doc["info"]["timed"]["feasible"] = False
    with pytest.raises(SolutionError, match="claims feasible"):
        solution_from_json(g, doc)


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_optimize_runtime_writes_a_checked_solution(tmp_path):
    """regal optimize --objective runtime --memory-limit --bandwidth prints the makespan, the
    limit and the device model, and writes a file whose timed values load_solution checks."""
    g = _graph(8, n=60)
    p, out = tmp_path / "g.json.gz", tmp_path / "sol.json"
    save(g, p)
    r = _invoke("optimize", p, "-d", 2, "-n", 300, "--objective", "runtime", "--memory-limit", "16GiB",
                "--bandwidth", "10MB/s", "--latency", "1us", "-o", out)
    assert r.exit_code == 0, r.output
    sol = load_solution(out, g)
    timed = sol.info["timed"]
    assert timed["memory_limit_bytes"] == [16 * 2**30] * 2 and timed["feasible"]
    assert timed["device_model"]["bandwidth_bytes_per_s"] == 1e7 and timed["device_model"]["latency_s"] == 1e-6
    assert f"{timed['makespan_s'] * 1e3:,.4f} ms" in r.output and "16.00 GiB per device: fits" in r.output
    assert "10 GB/s" not in r.output and "0.01 GB/s links, 1 us latency" in r.output


@pytest.mark.parametrize("args, message", [
    (["--objective", "runtime", "--memory-limit", "16 GiBs"], "Invalid value for --memory-limit: '16 GiBs' is not a size"),
    (["--objective", "runtime", "--bandwidth", "fast"], "Invalid value for --bandwidth: 'fast' is not a bandwidth"),
    (["--objective", "runtime", "--latency", "soon"], "Invalid value for --latency: 'soon' is not a time"),
    (["--objective", "runtime", "--speed", "1,2,3"], "device_model.speed has 3 entries for 2 devices"),
    (["--memory-limit", "1GiB"], "--memory-limit needs --objective runtime"),
])
def test_cli_runtime_options_fail_in_one_line(tmp_path, args, message):
    """A malformed size, rate, time or speed list, or a runtime option without the objective, is a
    one-line error naming the option, before any search."""
    p = tmp_path / "g.json.gz"
    save(_graph(9, n=10), p)
    r = _invoke("optimize", p, "-d", 2, "-n", 50, *args)
    assert r.exit_code == 2 and message in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("method", ["heft", "heft-mem", "critical-path", "one-device", "brkga-runtime"])
def test_cli_solve_runs_a_runtime_method_with_the_limit_and_device_model(tmp_path, method):
    """regal solve METHOD takes the runtime options for the runtime methods, passes them on, and
    reports the makespan and the timed peaks against the limit (what the solution file holds)."""
    g = _graph(11, n=40)
    p, out = tmp_path / "g.json.gz", tmp_path / "sol.json"
    save(g, p)
    budget = ["-n", 200] if method == "brkga-runtime" else []
    r = _invoke("solve", method, p, "-d", 2, *budget, "--memory-limit", "1GiB", "--bandwidth", "10MB/s",
                "--latency", "2us", "--speed", "1,0.5", "-o", out)
    assert r.exit_code == 0, r.output
    timed = load_solution(out, g).info["timed"]
    assert timed["memory_limit_bytes"] == [2**30] * 2 and timed["device_model"]["speed"] == [1.0, 0.5]
    assert timed["device_model"]["bandwidth_bytes_per_s"] == 1e7 and timed["device_model"]["latency_s"] == 2e-6
    assert f"makespan  {timed['makespan_s'] * 1e3:,.4f} ms" in r.output and "1.00 GiB per device" in r.output


def test_cli_solve_refuses_runtime_options_for_a_memory_method(tmp_path):
    """A runtime option given to a peak-memory method is a one-line usage error naming both."""
    p = tmp_path / "g.json.gz"
    save(_graph(12, n=10), p)
    r = _invoke("solve", "gp-dfs", p, "-d", 2, "--bandwidth", "1GB/s")
    assert r.exit_code == 2 and "--bandwidth belongs to the runtime methods" in r.output and "'gp-dfs'" in r.output
    assert "Traceback" not in r.output


def test_plot_draws_a_runtime_solution_as_a_gantt_chart(tmp_path):
    """plot_solution on a runtime solution draws the Gantt layout: one row per device and per busy
    link above the memory curves (the figure's height grows with the rows)."""
    import matplotlib.image
    from regal.plot import plot_solution
    g = _graph(10, n=30)
    sol = regal.methods.solve("critical-path", g, 2, device_model=MODEL, memory_limit_bytes=10**6)
    links = {(int(sol.placement[g.index[u]]), q) for u, q in sol.info["timed"]["transfers"]}
    out = plot_solution(g, sol, str(tmp_path / "gantt.png"))
    height = matplotlib.image.imread(out).shape[0]
    assert height == round((2.2 + 0.35 * (2 + len(links)) + 2.5) * 120)
