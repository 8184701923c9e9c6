"""Stopping early (issue 37): `regal._stop.Deadline` polled by the seeds, the population's
evaluation and the climb; the command line's signals and time limits end every phase within a
second, write the best solution so far and exit with status 3."""

import json
import time

import numpy as np
import pytest

from randgraph import random_dag
from regal import heuristics, local_search
from regal._stop import Deadline, Stopped, as_deadline, expired, interruptible
from regal.decode import chromosome_length, evaluate_population, evaluated
from regal.graph import Graph


def test_deadline_expires_by_request_or_by_clock():
    """A stop request expires a deadline at once with its reason; a time limit by the clock."""
    d = Deadline()
    assert not d.expired() and d.remaining_s() is None
    d.request_stop("interrupted (SIGTERM)")
    d.request_stop("interrupted (SIGINT)")
    assert d.expired() and d.reason == "interrupted (SIGTERM)" and d.requests == 2 and d.stop_requested
    t = Deadline(0.0)
    assert t.expired() and t.reason == "time_limit" and not t.stop_requested
    with pytest.raises(Stopped):
        t.check()


def test_expired_reads_every_accepted_form():
    """None never expires, a perf_counter() value by the clock, a Deadline by itself; as_deadline
    keeps a Deadline object (a stop request still reaches its holders) and takes the earlier limit."""
    assert not expired(None)
    assert expired(time.perf_counter() - 1) and not expired(time.perf_counter() + 60)
    d = Deadline(60)
    assert as_deadline(d, 0.0) is d and d.expired()
    assert as_deadline(time.perf_counter() + 60, None).at is not None


def test_interruptible_returns_control_while_a_call_goes_on():
    """A call that never polls (a 5 s sleep) is left behind within a poll interval of the stop."""
    d = Deadline(0.2)
    t = time.perf_counter()
    with pytest.raises(Stopped):
        interruptible(time.sleep, d, 5.0)
    assert time.perf_counter() - t < 4.5  # left behind before the 5 s call ends, whatever the load
    assert interruptible(sum, Deadline(60), [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        interruptible(lambda: 1 / 0, Deadline(60))


def test_heuristic_starts_stop_at_the_deadline(monkeypatch):
    """An expired deadline yields no start; a stop request while the first start is computed ends
    the list after it; under a deadline that does not expire, the same starts as without one."""
    g = random_dag(3, num_nodes=40)
    assert list(heuristics.heuristic_solutions(g, 2, 0, deadline=Deadline(0.0))) == []
    free = [(n, p.tolist(), o.tolist()) for n, p, o in heuristics.heuristic_solutions(g, 2, 0)]
    assert [(n, p.tolist(), o.tolist()) for n, p, o in heuristics.heuristic_solutions(g, 2, 0, deadline=Deadline())] \
        == free and [n for n, _, _ in free] == list(heuristics.START_NAMES)
    d = Deadline()
    order = heuristics._compiler_order

    def then_stop(*args):
        d.request_stop("test")
        return order(*args)
    monkeypatch.setattr(heuristics, "_compiler_order", then_stop)
    assert [n for n, _, _ in heuristics.heuristic_solutions(g, 2, 0, deadline=d)] == ["gp-dfs"]


def test_greedy_gives_up_when_its_progress_says_it_would_finish_late():
    """greedy_schedule with `finish_by` raises Stopped at once when that has passed, soon when its
    rate cannot make it, and returns the schedule it gives without one when it can."""
    g = random_dag(4, num_nodes=3000)
    free = heuristics.greedy_schedule(g, 2)
    with pytest.raises(Stopped):
        heuristics.greedy_schedule(g, 2, deadline=Deadline(60), finish_by=time.perf_counter())
    stop = np.zeros(2, dtype=np.int64)
    stop[1] = 1   # one of a million steps done in UNTIL_SETTLE_S: a million times that is late
    assert heuristics._late(time.perf_counter() - 2 * heuristics.UNTIL_SETTLE_S, stop, 10**6,
                            time.perf_counter() + 60)
    assert not heuristics._late(time.perf_counter() - 2 * heuristics.UNTIL_SETTLE_S, stop, 2,
                                time.perf_counter() + 60)
    timed = heuristics.greedy_schedule(g, 2, deadline=Deadline(600), finish_by=time.perf_counter() + 600)
    assert timed[0].tolist() == free[0].tolist() and timed[1].tolist() == free[1].tolist()


def test_population_evaluation_stops_after_its_first_slice(monkeypatch):
    """Past the deadline, only the first slice of a population is decoded; the rest score +inf."""
    import regal.decode
    monkeypatch.setattr(regal.decode, "POLL_NODES", 300)  # slices of 10 chromosomes
    g = random_dag(5, num_nodes=30)
    pop = np.random.default_rng(0).random((50, chromosome_length(g.num_nodes, 2)))
    full = evaluate_population(g, pop, 2)
    cut = evaluate_population(g, pop, 2, Deadline(0.0))
    assert evaluated(full) == 50 and evaluated(cut) == 10
    k = evaluated(cut)
    assert np.array_equal(cut[:k], full[:k]) and np.all(np.isinf(cut[k:]))
    assert np.array_equal(evaluate_population(g, pop, 2, Deadline(60)), full)


def test_local_search_stopped_before_its_starts_returns_a_valid_schedule():
    """A local search whose deadline has expired still returns a valid solution (the fallback
    schedule: every node on device 0 in XLA's post-order), with the stop's reason."""
    g = random_dag(7, num_nodes=40)
    d = Deadline()
    d.request_stop("interrupted (SIGTERM)")
    sol = local_search.solve(g, 2, budget=500, deadline=d)
    assert sol.info["stopped"] == "interrupted (SIGTERM)" and sol.info["start"] == "xla-post-order/device-0"
    assert sol.evaluations == 1 and set(sol.placement.tolist()) == {0}


def test_greedy_window_keeps_small_graphs_schedules():
    """A graph with fewer ready nodes than the window gets the full scan's schedule."""
    g = Graph.from_records([{"id": f"v{i}", "bytes": 1 + (i * 37) % 11} for i in range(300)], name="flat")
    a = heuristics.greedy_schedule(g, 2, window=300)
    b = heuristics.greedy_schedule(g, 2)
    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
    c = heuristics.greedy_schedule(g, 2, window=4)
    assert sorted(c[1].tolist()) == list(range(300))


# ------------------------------------------------------------------ strict input (issue 37, item 6)
def _doc(g, **over):
    from regal.heuristics import fallback_solution
    from regal.solution import make_solution
    _, placement, order = fallback_solution(g)
    doc = make_solution(g, placement, order, 1, method="x").to_json()
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not None}


def test_a_solution_must_claim_an_integer_peak():
    """A solution without `peak_bytes`, or with one that is not an integer, is refused in one line."""
    from regal.solution import SolutionError, solution_from_json
    g = random_dag(2, num_nodes=12)
    solution_from_json(g, _doc(g))
    with pytest.raises(SolutionError, match="'peak_bytes' is missing"):
        solution_from_json(g, {k: v for k, v in _doc(g).items() if k != "peak_bytes"})
    for bad in ("12", 1.5, True, -1, [1]):
        with pytest.raises(SolutionError, match="'peak_bytes' must be a non-negative integer") as e:
            solution_from_json(g, _doc(g, peak_bytes=bad))
        assert "\n" not in str(e.value)


def test_a_lone_surrogate_in_a_name_or_id_is_refused_when_read(tmp_path):
    """A graph name or node id that cannot be written as UTF-8 is refused when the graph is read,
    naming the file, not after a search when the solution is written."""
    from regal.graph import GraphError, load
    for name, ids in (("\ud800x", ["a", "b"]), ("ok", ["a", "\udfffb"])):
        p = tmp_path / "g.json"
        p.write_text(json.dumps({"format": "regal-graph/1", "name": name,
                                 "nodes": [{"id": ids[0], "bytes": 1}, {"id": ids[1], "bytes": 1, "inputs": [ids[0]]}]}))
        with pytest.raises(GraphError, match="lone surrogate") as e:
            load(p)
        assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_error_messages_stay_on_one_line_with_a_newline_in_an_id():
    """A node id holding a newline is quoted with escapes in every message that names it."""
    from regal.graph import GraphError
    from regal.solution import SolutionError, solution_from_json
    with pytest.raises(GraphError) as e:
        Graph.from_records([{"id": "a\nb", "bytes": 1, "inputs": ["a\nb"]}])
    assert "\n" not in str(e.value) and "a\\nb" in str(e.value)
    g = Graph.from_records([{"id": "a\nb", "bytes": 1}, {"id": "c", "bytes": 1, "inputs": ["a\nb"]}])
    doc = _doc(g)
    doc["order"] = ["c", "a\nb"]
    doc["placement"]["zz\nzz"] = 0
    with pytest.raises(SolutionError) as e:
        solution_from_json(g, doc)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ a newcomer's frictions (item 7)
def test_solution_ids_and_each_devices_order():
    """`Solution.ids` is `Graph.ids` (node_ids stays); `device_orders()` splits the order by device."""
    import regal
    g = random_dag(4, num_nodes=20)
    sol = regal.optimize(g, devices=2, budget=60, seed=0)
    assert sol.ids == g.ids == sol.node_ids
    orders = sol.device_orders()
    assert sorted(sum(orders, [])) == sorted(g.ids)
    for k, ids in enumerate(orders):
        assert [sol.ids[v] for v in sol.order if sol.placement[v] == k] == ids


def test_load_solution_takes_its_arguments_in_either_order(tmp_path):
    """load_solution(path, graph) and load_solution(graph, path) read the same; anything else is
    a TypeError that says what it takes."""
    from regal.solution import load_solution, make_solution
    g = random_dag(6, num_nodes=15)
    _, placement, order = heuristics.fallback_solution(g)
    make_solution(g, placement, order, 1, method="x").save(tmp_path / "s.json")
    a = load_solution(tmp_path / "s.json", g)
    b = load_solution(g, str(tmp_path / "s.json"))
    assert a.peak_bytes == b.peak_bytes and a.order.tolist() == b.order.tolist()
    with pytest.raises(TypeError, match="either order"):
        load_solution(g, g)


def test_a_stopped_flagship_returns_its_best_so_far():
    """regal.optimize with a Deadline that a stop request expires mid-search returns a valid
    solution no worse than its seeds, with the request's reason; an already-expired one still
    evaluates a first slice (memory and runtime objectives)."""
    import regal
    g = random_dag(8, num_nodes=60)
    full = regal.optimize(g, devices=2, budget=3000, seed=1)
    d = Deadline()
    calls = []

    def callback(p):
        calls.append(p.evaluations)
        if len(calls) == 2:
            d.request_stop("interrupted (SIGTERM)")

    sol = regal.optimize(g, devices=2, budget=3000, seed=1, deadline=d, callback=callback)
    assert sol.info["stopped"] == "interrupted (SIGTERM)" and len(calls) == 2
    assert sol.evaluations < full.evaluations and sol.peak_bytes >= full.peak_bytes
    gone = Deadline()
    gone.request_stop("interrupted (SIGINT)")
    for objective in ("memory", "runtime"):
        early = regal.optimize(g, devices=2, budget=400, seed=1, deadline=gone, objective=objective)
        assert early.info["stopped"] == "interrupted (SIGINT)" and 1 <= early.evaluations < 400
        assert early.info.get("seeding", []) == [] or objective == "runtime"


def test_a_flagship_stopped_during_its_seeds_evaluates_only_the_seeds(monkeypatch):
    """Stopped while the seeds are computed, the search evaluates the seeds it has and no random
    chromosomes (their drawing and decoding took a second on 60,000 nodes): the best seed comes back."""
    import regal
    import regal.memetic
    g = random_dag(12, num_nodes=80)
    d = Deadline()
    real = regal.memetic._seed_solutions
    seen = []

    def seeds_then_stop(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.extend(out[0])
        d.request_stop("interrupted (SIGTERM)")
        return out

    monkeypatch.setattr(regal.memetic, "_seed_solutions", seeds_then_stop)
    sol = regal.optimize(g, devices=2, budget=5000, seed=0, deadline=d, policy="none")
    assert sol.info["stopped"] == "interrupted (SIGTERM)" and len(seen) > 1
    # the seeds, and the simulations the packed seeds cost beyond them: not a population of 100
    assert len(seen) <= sol.evaluations <= 2 * len(seen) < 100
    from regal.simulate import simulate
    assert sol.peak_bytes == min(simulate(g, p, o, 2).peak_bytes for _, p, o in seen)
