"""regal.local_search.improve: the polish a memetic search applies to given schedules."""

import time

import numpy as np
import pytest

import naive
from randgraph import random_dag
from regal import local_search
from regal.heuristics import random_solution
from regal.local_search import Evaluator, LocalSearchConfig, improve
from regal.simulate import check_schedule, simulate


def _start(seed: int, num_nodes: int, d: int):
    g = random_dag(seed, num_nodes=num_nodes, resident_fraction=0.2, control_fraction=0.3)
    placement, order = random_solution(g, d, seed)
    return g, placement, order


def _start_score(g, d, placement, order):
    evaluate = Evaluator(g, d)
    return evaluate(placement, order, evaluate.new_trace())


def test_improve_never_returns_worse_than_its_start():
    """The returned score (peak first) is at most the start's, and some start gets better."""
    gains = []
    for seed in range(8):
        d = 1 + seed % 3
        g, placement, order = _start(seed, 20 + 8 * seed, d)
        start = _start_score(g, d, placement, order)
        res = improve(g, d, placement, order, budget=120, rng=np.random.default_rng(seed))
        assert res.score <= start and res.peak_bytes <= start.peak_bytes
        assert res.history[0][:2] == [1, start.peak_bytes]
        gains.append(start.peak_bytes - res.peak_bytes)
    assert max(gains) > 0


def test_improve_spends_at_most_its_budget_and_reports_the_exact_count(local_search_simulations):
    """`evaluations` equals the simulations actually run, never exceeds the budget, and is the
    whole budget unless the search stopped for another reason."""
    calls = local_search_simulations
    for seed, budget in enumerate((1, 2, 7, 60, 150)):
        calls.clear()
        d = 1 + seed % 2
        g, placement, order = _start(seed + 30, 40, d)
        cfg = LocalSearchConfig.resolve(g.num_nodes, budget, patience=10)  # kicks cost one each
        res = improve(g, d, placement, order, budget=budget, rng=np.random.default_rng(seed), config=cfg)
        assert res.evaluations == len(calls) <= budget
        assert res.evaluations == budget or res.stopped != "budget"
        assert budget < 60 or res.kicks > 0


def test_improve_is_deterministic_per_rng_seed():
    """The same rng seed gives the same schedule and counters; another seed another search."""
    g, placement, order = _start(5, 60, 2)
    runs = [improve(g, 2, placement, order, budget=200, rng=np.random.default_rng(s)) for s in (3, 3, 4)]
    a, b, c = runs
    assert a.placement.tolist() == b.placement.tolist() and a.order.tolist() == b.order.tolist()
    assert (a.score, _ep(a.history), a.accepted, a.sideways, a.kicks) == (b.score, _ep(b.history), b.accepted,
                                                                     b.sideways, b.kicks)
    assert (_ep(a.history), a.accepted) != (_ep(c.history), c.accepted)


def test_improve_peak_equals_a_fresh_and_a_naive_simulation():
    """The returned schedule is valid, and its peak is what regal.simulate and the naive
    simulator give for it."""
    for seed in range(10):
        d = 1 + seed % 3
        g, placement, order = _start(seed + 60, 12 + 3 * seed, d)
        res = improve(g, d, placement, order, budget=80, rng=np.random.default_rng(seed))
        check_schedule(g, res.placement, res.order, d)
        assert res.peak_bytes == simulate(g, res.placement, res.order, d).peak_bytes
        assert res.peak_bytes == naive.simulate(g, res.placement.tolist(), res.order.tolist(), d)[0]


def test_improve_scores_reuse_fields_like_the_naive_twin():
    """On graphs with `reuse` (SPEC section 3) the climb's scores are the taking-over peaks: its
    result is the naive twin's peak and never worse than its start."""
    for seed in range(8):
        d = 1 + seed % 3
        g = random_dag(seed + 900, num_nodes=20 + 2 * seed, reuse_fraction=0.7)
        placement, order = random_solution(g, d, seed)
        start = naive.simulate(g, placement.tolist(), order.tolist(), d)[0]
        res = improve(g, d, placement, order, budget=80, rng=np.random.default_rng(seed))
        assert res.peak_bytes == naive.simulate(g, res.placement.tolist(), res.order.tolist(), d)[0] <= start


def test_improve_leaves_its_inputs_unmodified():
    """The caller's placement and order arrays are not written."""
    g, placement, order = _start(9, 50, 3)
    p0, o0 = placement.copy(), order.copy()
    improve(g, 3, placement, order, budget=100, rng=np.random.default_rng(0))
    assert placement.tolist() == p0.tolist() and order.tolist() == o0.tolist()


def test_improve_with_a_past_deadline_returns_the_start_after_one_evaluation():
    """A deadline already passed: one evaluation, stopped 'time_limit', the start unchanged."""
    g, placement, order = _start(11, 40, 2)
    res = improve(g, 2, placement, order, budget=500, rng=np.random.default_rng(0),
                  deadline=time.perf_counter())
    assert (res.evaluations, res.stopped) == (1, "time_limit")
    assert res.placement.tolist() == placement.tolist() and res.order.tolist() == order.tolist()


def test_improve_rejects_invalid_starts_and_budgets():
    """A non-topological order, a device out of range or a zero budget raise ValueError."""
    g, placement, order = _start(12, 30, 2)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="topological"):
        improve(g, 2, placement, order[::-1].copy(), budget=10, rng=rng)
    with pytest.raises(ValueError, match="device"):
        improve(g, 2, placement + 5, order, budget=10, rng=rng)
    with pytest.raises(ValueError, match="budget"):
        improve(g, 2, placement, order, budget=0, rng=rng)


def _ep(history):
    """A history without its clock column: [evaluations, best peak] entries."""
    return [h[:2] for h in history]


def test_live_across_kernel_matches_the_naive_twin():
    """The directed moves' candidates: every tensor held on device k across step t, exactly."""
    from regal.kernels import decode as _kernels
    from regal.simulate import kernel_graph
    for seed in range(12):
        d = 1 + seed % 3
        g, placement, order = _start(seed + 200, 15 + 4 * seed, d)
        pos = np.empty(g.num_nodes, dtype=np.int64)
        pos[order] = np.arange(g.num_nodes)
        cand, last = np.empty(g.num_nodes, dtype=np.int64), np.empty(g.num_nodes, dtype=np.int64)
        for t in range(0, g.num_nodes, 3):
            for k in range(d):
                m = _kernels.live_across(kernel_graph(g), order, pos, placement, t, k, cand, last)
                got = dict(zip(cand[:m].tolist(), last[:m].tolist()))
                assert got == naive.live_across(g, placement.tolist(), order.tolist(), t, k)


def _valid_twin_scored_deterministic(g, d, placement, order, budget, seed, cfg):
    """improve() twice with the same rng: a valid schedule, scored like the naive twin, never
    worse than the start, the same both times. Returns (result, start peak)."""
    res = improve(g, d, placement, order, budget=budget, rng=np.random.default_rng(seed), config=cfg)
    again = improve(g, d, placement, order, budget=budget, rng=np.random.default_rng(seed), config=cfg)
    check_schedule(g, res.placement, res.order, d)
    start = naive.simulate(g, placement.tolist(), order.tolist(), d)[0]
    assert res.peak_bytes == naive.simulate(g, res.placement.tolist(), res.order.tolist(), d)[0] <= start
    assert res.order.tolist() == again.order.tolist() and res.placement.tolist() == again.placement.tolist()
    return res, start


def test_directed_climb_is_valid_scored_like_the_naive_twin_and_deterministic():
    """With every focused move directed (the flagship's climb), the result is a valid schedule,
    its peak is the naive twin's, never worse than the start, and the same rng gives the same
    search."""
    gains = []
    for seed in range(10):
        d = 1 + seed % 3
        g, placement, order = _start(seed + 400, 20 + 4 * seed, d)
        cfg = LocalSearchConfig.resolve(g.num_nodes, 150, informed=True, directed_share=1.0)
        res, start = _valid_twin_scored_deterministic(g, d, placement, order, 150, seed, cfg)
        gains.append(start - res.peak_bytes)
    assert max(gains) > 0


def _check_best_and_determinism(g, d, placement, order, climb, cfg, seed, start, budget):
    """The climb's best is a valid schedule scored like the naive twin and no worse than `start`;
    `improve` with the same config and rng gives the same schedule twice. Returns one result."""
    placement_best, order_best = climb.best
    check_schedule(g, placement_best, order_best, d)
    assert climb.best_peak == naive.simulate(g, placement_best.tolist(), order_best.tolist(), d)[0] <= start
    res = improve(g, d, placement, order, budget=budget, rng=np.random.default_rng(seed), config=cfg)
    again = improve(g, d, placement, order, budget=budget, rng=np.random.default_rng(seed), config=cfg)
    assert res.order.tolist() == again.order.tolist() and res.placement.tolist() == again.placement.tolist()
    return res


def test_annealing_climb_takes_worse_moves_yet_returns_its_best_valid_and_deterministic():
    """With a temperature (the flagship's climb) some accepted moves raise the peak, yet the
    result is a valid schedule scored like the naive twin, never worse than the start, and
    the same rng gives the same search; at temperature 0 no accepted move raises the peak
    (only kicks do)."""
    uphill = {0.0: 0, 0.05: 0}  # by temperature
    for seed in range(8):
        d = 1 + seed % 3
        g, placement, order = _start(seed + 500, 24 + 4 * seed, d)
        start = naive.simulate(g, placement.tolist(), order.tolist(), d)[0]
        for temperature in uphill:
            cfg = LocalSearchConfig.resolve(g.num_nodes, 200, informed=True, directed_share=1.0,
                                            anneal_temperature=temperature)
            climb = local_search.Climb(g, d, np.random.default_rng(seed), cfg)
            climb.start([(placement, order)], 1)
            for _ in range(199):  # one evaluation at a time; a kick's blind moves do not count
                before, kicks = climb.state.score.peak_bytes, climb.state.kicks
                climb.run(1)
                uphill[temperature] += climb.state.kicks == kicks and climb.state.score.peak_bytes > before
            _check_best_and_determinism(g, d, placement, order, climb, cfg, seed, start, budget=200)
    assert uphill[0.0] == 0 and uphill[0.05] > 0


def test_adaptive_climb_leans_on_the_kinds_that_pay_and_stays_valid_and_deterministic():
    """With adaptive move kinds the result is valid, scored like the naive twin, never worse than
    the start and the same per rng; the kinds' success estimates move as rates."""
    for seed in range(6):
        d = 1 + seed % 3
        g, placement, order = _start(seed + 600, 24 + 4 * seed, d)
        cfg = LocalSearchConfig.resolve(g.num_nodes, 200, informed=True, directed_share=1.0, anneal_temperature=0.02,
                                        adaptive_moves=True)
        _valid_twin_scored_deterministic(g, d, placement, order, 200, seed, cfg)
    g, placement, order = _start(700, 60, 2)
    cfg = LocalSearchConfig.resolve(g.num_nodes, 400, informed=True, directed_share=1.0, adaptive_moves=True)
    climb = local_search.Climb(g, 2, np.random.default_rng(0), cfg)
    climb.start([(placement, order)], 1)
    climb.run(399)
    quality = climb.state.arrays.quality  # each kind's success estimate: moved off its start, a rate
    assert np.all((quality > 0.0) & (quality < 1.0)) and not np.allclose(quality, 0.1)


def test_climb_helper_kernels_match_their_numpy_twins():
    """The climb's helpers (steps at the peak, peak entries, feasible window, shifting a node)
    agree with the plain NumPy expressions they replace, on random DAGs and schedules."""
    from regal.kernels import decode as _kernels
    rng = np.random.default_rng(7)
    for seed in range(10):
        d = 1 + seed % 3
        g, placement, order = _start(seed + 300, 12 + 5 * seed, d)
        n = g.num_nodes
        trace = rng.integers(0, 4, size=(n, d)).astype(np.int64)
        peak = int(trace.max())
        want = int(np.count_nonzero((trace == peak)[~g.resident[order]]))
        assert _kernels.steps_at_peak(trace, order, g.resident, peak) == want
        hits = np.empty((n * d, 2), dtype=np.int64)
        m = _kernels.peak_hits(trace, peak, hits)
        assert hits[:m].tolist() == np.argwhere(trace == peak).tolist()
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        for v in range(n):
            p = g.pred_idx[g.pred_ptr[v]:g.pred_ptr[v + 1]]
            s = g.succ_idx[g.succ_ptr[v]:g.succ_ptr[v + 1]]
            want = (int(pos[p].max()) + 1 if p.size else 0, int(pos[s].min()) - 1 if s.size else n - 1)
            assert _kernels.feasible_window(g.pred_ptr, g.pred_idx, g.succ_ptr, g.succ_idx, pos, v, n) == want
        for _ in range(20):
            p, q = (int(x) for x in rng.integers(n, size=2))
            expect = order.tolist()
            expect.insert(q, expect.pop(p))
            _kernels.shift_node(order, pos, p, q)
            assert order.tolist() == expect
            assert (pos[order] == np.arange(n)).all()


def test_climb_pack_rehomes_the_best_counts_its_evaluations_and_never_loses_it(local_search_simulations):
    """`Climb.pack` re-homes the best schedule's resident tensors: the best never gets worse, its
    peak is the naive twin's, every simulation is counted, and it pays on some graph."""
    gains = []
    for seed in range(12):
        d = 2 + seed % 2
        g, placement, order = _start(seed + 700, 30 + 3 * seed, d)
        climb = local_search.Climb(g, d, np.random.default_rng(seed),
                                   LocalSearchConfig.resolve(g.num_nodes, 200, informed=True, directed_share=1.0))
        climb.start([(placement, order)], 1)
        climb.run(20 * (seed % 3))   # the current schedule is the best, or is not
        local_search_simulations.clear()
        before = climb.state.best_score
        improved = climb.pack(2)
        after = climb.state.best_score
        assert climb.evaluations == 1 + 20 * (seed % 3) + len(local_search_simulations)
        assert len(local_search_simulations) <= 2 and after <= before and improved == (after < before)
        best_placement, best_order = climb.best
        check_schedule(g, best_placement, best_order, d)
        assert after.peak_bytes == naive.simulate(g, best_placement.tolist(), best_order.tolist(), d)[0]
        assert climb.state.score == after or not improved   # the climb goes on from the packed schedule
        gains.append(before.peak_bytes - after.peak_bytes)
    assert max(gains) > 0


def _screen_start(seed: int, num_nodes: int, d: int):
    g = random_dag(seed, num_nodes=num_nodes, resident_fraction=0.2, control_fraction=0.3, reuse_fraction=0.5)
    placement, order = random_solution(g, d, seed)
    return g, placement, order


def test_screened_moves_bound_is_never_above_the_simulated_peak():
    """Audit (`screen_moves` 2: every move simulated): a device move's lower bound on its new device's
    bytes never exceeds the peak its simulation finds, on graphs with resident tensors, control
    edges, temp and `reuse`, d = 2, 3, 4, with and without annealing; and it does find moves."""
    screened = 0
    for seed in range(12):
        d = 2 + seed % 3
        g, placement, order = _screen_start(seed + 900, 30 + 5 * seed, d)
        for temperature in (0.0, 0.05):
            cfg = LocalSearchConfig.resolve(g.num_nodes, 300, informed=True, directed_share=1.0,
                                            anneal_temperature=temperature,
                                            adaptive_moves=True, screen_moves=2)
            climb = local_search.Climb(g, d, np.random.default_rng(seed), cfg)
            climb.start([(placement, order)], 1)
            climb.run(299)
            assert climb.state.missed == 0
            screened += climb.state.screened
    assert screened > 100


def test_screening_changes_no_decision_only_saves_simulations():
    """Without annealing a screened climb makes the moves the unscreened one makes and accepts
    the same: given B evaluations, of which the audit finds S screenable, the screened climb
    reaches the same best schedule in B - S. With annealing it is valid, scored like the naive
    twin, deterministic, and spends at most its budget."""
    for seed in range(8):
        d = 2 + seed % 3
        g, placement, order = _screen_start(seed + 950, 30 + 6 * seed, d)
        cfg = LocalSearchConfig.resolve(g.num_nodes, 400, informed=True, directed_share=1.0, screen_moves=2)
        audit = local_search.Climb(g, d, np.random.default_rng(seed), cfg)
        audit.start([(placement, order)], 1)
        audit.run(399)
        s = audit.state.screened
        screened = local_search.Climb(g, d, np.random.default_rng(seed), cfg._replace(screen_moves=1))
        screened.start([(placement, order)], 1)
        screened.run(399 - s)
        # the audit's last screenable moves may come after its last other one: not reached
        assert screened.evaluations == 400 - s and screened.state.screened <= s
        assert screened.best_peak == audit.best_peak
        assert [a.tolist() for a in screened.best] == [a.tolist() for a in audit.best]
        annealed = LocalSearchConfig.resolve(g.num_nodes, 200, informed=True, directed_share=1.0,
                                             anneal_temperature=0.05,
                                             adaptive_moves=True, screen_moves=1)
        res, _ = _valid_twin_scored_deterministic(g, d, placement, order, 200, seed, annealed)
        assert res.evaluations <= 200


def test_group_move_moves_connected_neighbours_and_undoes_exactly():
    """`_grow_group` extends a device move of v to non-resident nodes that were on v's old device,
    each reached over a data edge from the group, at most the cap; `_undo` puts every one back."""
    from regal.kernels import climb as _climb
    from regal.simulate import kernel_graph
    grown = 0
    for seed in range(20):
        d = 2 + seed % 3
        g, placement, _ = _screen_start(seed + 1200, 40 + 3 * seed, d)
        kg = kernel_graph(g)
        rng = np.random.default_rng(seed)
        for v in rng.choice(np.flatnonzero(~g.resident), 10, replace=False):
            cap = int(rng.integers(2, 12))
            before = placement.copy()
            old = int(placement[v])
            placement[v] = (old + 1 + int(rng.integers(0, d - 1))) % d
            new = int(placement[v])
            mv = np.array([0, v, old], dtype=np.int64)
            grp = np.empty(cap, dtype=np.int64)
            _climb._grow_group(kg, placement, mv, grp, cap)
            if mv[0] == 0:   # nothing to grow: still the one device move
                assert mv.tolist() == [0, v, old] and (placement != before).sum() == 1
            else:
                grown += 1
                members = grp[:mv[1]].tolist()
                assert mv[0] == 2 and mv[2] == old and 2 <= mv[1] <= cap and members[0] == v
                assert len(set(members)) == len(members)
                assert sorted(np.flatnonzero(placement != before).tolist()) == sorted(members)
                for w in members:
                    assert before[w] == old and placement[w] == new and not g.resident[w]
                for i, w in enumerate(members[1:], 1):   # each reached from an earlier member
                    near = set(kg.out_idx[kg.out_ptr[w]:kg.out_ptr[w + 1]]) | set(kg.in_idx[kg.in_ptr[w]:kg.in_ptr[w + 1]])
                    assert near & set(members[:i])
            _climb._undo(np.arange(g.num_nodes, dtype=np.int32), np.arange(g.num_nodes), placement, mv, grp)
            assert placement.tolist() == before.tolist()
    assert grown > 50


def test_group_moves_climb_is_valid_scored_like_the_naive_twin_and_deterministic():
    """With group moves (every device move grown), with and without annealing and screening, the
    climb's answer is a valid schedule scored like the naive twin, no worse than its start, and
    the same rng gives the same search; with group moves off nothing is drawn for them."""
    for seed in range(8):
        d = 2 + seed % 3
        g, placement, order = _screen_start(seed + 1300, 30 + 5 * seed, d)
        for temperature, screen, share, adaptive in ((0.0, 0, 1.0, False), (0.05, 1, 0.5, True)):
            cfg = LocalSearchConfig.resolve(g.num_nodes, 200, informed=True, directed_share=1.0,
                                            anneal_temperature=temperature,
                                            adaptive_moves=True, screen_moves=screen, group_moves=share, group_cap=6,
                                            group_adaptive=adaptive)
            _valid_twin_scored_deterministic(g, d, placement, order, 200, seed, cfg)


def test_group_move_settings_are_checked():
    with pytest.raises(ValueError, match="group_cap"):
        LocalSearchConfig.resolve(10, 100, group_moves=0.5, group_cap=1)
    with pytest.raises(ValueError, match="group"):
        LocalSearchConfig.resolve(10, 100, group_moves=1.5)
