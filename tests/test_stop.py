"""Stopping early (issue 37): `regal._stop.Deadline` polled by the seeds, the population's
evaluation and the climb; the command line's signals and time limits end every phase within a
second, write the best solution so far and exit with status 3."""

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
    assert time.perf_counter() - t < 1.0
    assert interruptible(sum, Deadline(60), [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        interruptible(lambda: 1 / 0, Deadline(60))


def test_heuristic_starts_stop_at_the_deadline():
    """An expired deadline yields no start; a stop request after the first start ends the list."""
    g = random_dag(3, num_nodes=40)
    assert list(heuristics.heuristic_solutions(g, 2, 0, deadline=Deadline(0.0))) == []
    d = Deadline()
    names = []
    for name, _, _ in heuristics.heuristic_solutions(g, 2, 0, deadline=d):
        names.append(name)
        d.request_stop("test")
    assert names == ["gp-dfs"]
    assert [n for n, _, _ in heuristics.heuristic_solutions(g, 2, 0, deadline=Deadline())] == list(heuristics.START_NAMES)


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
