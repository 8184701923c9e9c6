"""The flagship (regal.optimize, regal.memetic): its switches, budget and guarantees."""

import itertools
import os

import numpy as np
import pytest

import naive
import regal
from randgraph import random_dag
from regal import memetic
from regal.heuristics import heuristic_solutions, packed_solutions
from regal.search import brkga_search
from regal.simulate import simulate


def _g(seed=5, n=60):
    return random_dag(seed, num_nodes=n, resident_fraction=0.15, control_fraction=0.2)


@pytest.mark.parametrize("devices", [1, 2, 3])
def test_everything_off_is_plain_brkga_bit_for_bit(devices):
    """No seeding, no priors, no polish: the same placement, order and peak as plain BRKGA."""
    g = _g(devices)
    a = regal.optimize(g, devices, budget=700, seed=2, policy="none", seeding=False, polish=False)
    b = brkga_search(g, devices, budget=700, seed=2)
    assert a.peak_bytes == b.peak_bytes and a.evaluations == b.evaluations
    np.testing.assert_array_equal(a.placement, b.placement)
    np.testing.assert_array_equal(a.order, b.order)


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_answer_is_never_worse_than_the_best_heuristic_seed(devices, seed):
    """Elitism: the flagship's peak is at most that of every heuristic solution it was seeded with."""
    g = _g(10 + seed, n=80)
    best_seed = min(simulate(g, p, o, devices).peak_bytes for _, p, o in heuristic_solutions(g, devices, seed))
    sol = regal.optimize(g, devices, budget=400, seed=seed)
    assert sol.peak_bytes <= best_seed
    if devices > 1:   # and of every packed start
        packed = [simulate(g, p, o, devices).peak_bytes
                  for _, p, o in packed_solutions(g, devices, seed, memetic.packed_seed_devices(devices))]
        assert packed and sol.peak_bytes <= min(packed)


@pytest.mark.parametrize("budget", [1, 7, 100, 101, 333, 1000])
def test_budget_is_spent_exactly(budget, monkeypatch, local_search_simulations):
    """Seeds, decodes and local moves together spend exactly `budget` evaluations, counted at the
    kernels (every population decode, every local-search simulation and the step traces the
    packed seeds are priced on)."""
    import regal.heuristics as hh
    import regal.problems as pp
    g = _g(3, n=50)
    count = [0]
    real_pop, real_trace = pp.evaluate_population, hh.memory_trace

    def pop(graph, candidates, d):
        count[0] += candidates.shape[0]
        return real_pop(graph, candidates, d)

    def trace(*args):
        count[0] += 1
        return real_trace(*args)

    monkeypatch.setattr(pp, "evaluate_population", pop)
    monkeypatch.setattr(hh, "memory_trace", trace)
    sol = regal.optimize(g, 2, budget=budget, seed=0)
    assert sol.evaluations == budget == count[0] + len(local_search_simulations)
    if budget >= 1000:   # a tenth of the budget covers them: the packed seeds were used
        assert any("/compute-on-" in name for name in sol.info["seeding"])


def test_same_seed_same_answer_on_one_and_two_threads():
    """Thread-count invariance: the population's parallel decode and the sequential climb."""
    g = _g(8, n=90)
    a = regal.optimize(g, 2, budget=900, seed=4, num_threads=1)
    b = regal.optimize(g, 2, budget=900, seed=4, num_threads=2)
    assert a.peak_bytes == b.peak_bytes
    np.testing.assert_array_equal(a.order, b.order)
    np.testing.assert_array_equal(a.placement, b.placement)


def test_info_reports_the_seeds_and_the_polish():
    """The Solution names the flagship, its heuristic seeds (START_NAMES, then the packed starts
    of `packed_solutions`) and the evaluations that went to the local search."""
    from regal.heuristics import START_NAMES, packed_solutions
    from regal.memetic import packed_seed_devices
    g = _g(21, n=200)
    sol = regal.optimize(g, 2, budget=1500, seed=0)
    packed = [name for name, _, _ in packed_solutions(g, 2, 0, packed_seed_devices(2))]
    assert packed and any(name.endswith("/compute-on-1") for name in packed)
    assert sol.method == "regal" and sol.info["seeding"] == list(START_NAMES) + packed
    assert 0 < sol.info["polish_evaluations"] < 1500
    assert regal.optimize(g, 1, budget=300, seed=0).info["seeding"] == list(START_NAMES)
    # more nodes than evaluations: no packed seeds (FlagshipConfig.packed_seeds_nodes_per_eval)
    assert regal.optimize(g, 2, budget=150, seed=0).info["seeding"] == list(START_NAMES)


@pytest.mark.parametrize("kwargs, error, word", [
    ({"graph": None}, TypeError, "graph"),
    ({"budget": 2.5}, TypeError, "budget"),
    ({"budget": 0}, ValueError, "budget"),
    ({"config": {"population_size": 10}}, TypeError, "config"),
    ({"policy": 123}, TypeError, "policy"),
    ({"time_limit_s": float("nan")}, ValueError, "time_limit_s"),
    ({"devices": 0}, ValueError, "devices"),
])
def test_bad_arguments_are_named_errors(kwargs, error, word):
    """The library refuses a bad argument with TypeError/ValueError naming it, before any work."""
    args = {"graph": _g(1, n=10), "devices": 1, "budget": 10} | kwargs
    with pytest.raises(error, match=word):
        regal.optimize(**args)


def test_anneal_temperature_falls_only_past_the_budget():
    """Graphs the budget can visit node by node keep the climb's anneal_temperature; larger ones
    get (budget / nodes) ** anneal_scale_power of it; the kernel's params carry the scaled one."""
    climb = regal.FlagshipConfig().climb
    assert climb.start_temperature(5000, 5000) == climb.start_temperature(10, 5000) == climb.anneal_temperature
    for n in (6000, 20000, 80131):
        want = climb.anneal_temperature * (5000 / n) ** climb.anneal_scale_power
        assert abs(climb.start_temperature(n, 5000) - want) <= 1e-15
        assert climb.params(n, 5000).temperature == climb.start_temperature(n, 5000)
    assert climb.start_temperature(80131, 5000) < climb.start_temperature(20000, 5000)
    assert climb._replace(anneal_evals_per_node=0.0).start_temperature(80131, 5000) == climb.anneal_temperature


def test_flagship_config_replace_sets_the_climbs_fields_by_name():
    """`FlagshipConfig.replace` takes the climb's fields by their one name (nested in `climb`)
    beside its own, and refuses a name of neither."""
    cfg = regal.FlagshipConfig()
    new = cfg.replace(group_moves=0.0, restart_stall=0.2)
    assert new.climb == cfg.climb._replace(group_moves=0.0) and new.restart_stall == 0.2
    assert new.brkga == cfg.brkga and cfg.climb.group_moves == 0.5
    with pytest.raises(TypeError, match="directed"):
        cfg.replace(directed=1.0)


#: The flagship's on/off switches: the two parts `regal.optimize` takes (seeding, polish) and
#: the switches of its `FlagshipConfig` (and of the climb in it), each with the value that turns
#: it off. The climb's `informed` and `group_adaptive` refine `directed_share` and `group_moves`
#: and stay on (2^10 runs, not 2^12: the suite's time).
SWITCHES = {"seeding": False, "polish": False, "packed_seeds": 0, "pack_residents": 0, "restart_stall": 0.0,
            "directed_share": 0.0, "anneal_temperature": 0.0, "adaptive_moves": False, "screen_moves": False,
            "group_moves": 0.0}
_SWITCH_GRAPH = random_dag(77, num_nodes=24, resident_fraction=0.2, control_fraction=0.2, reuse_fraction=0.3)


@pytest.mark.parametrize("off", list(itertools.product((False, True), repeat=len(SWITCHES))),
                         ids=lambda off: "".join("-" if o else "+" for o in off))
def test_every_combination_of_the_switches_is_valid_rescored_and_deterministic(off):
    """Each of the 2^10 products of the flagship's on/off switches (d = 2, a small graph with
    residents, control edges and `reuse`): a valid schedule whose peak the naive twin finds, the
    budget spent exactly, and the same answer twice."""
    settings = {k: v for (k, v), o in zip(SWITCHES.items(), off) if o}
    parts = {k: settings.pop(k, True) for k in ("seeding", "polish")}
    config = regal.FlagshipConfig().replace(**settings)
    g = _SWITCH_GRAPH
    runs = [regal.optimize(g, 2, budget=120, seed=3, policy="none", config=config, num_threads=1, **parts)
            for _ in range(2)]
    sol = runs[0]
    simulate(g, sol.placement, sol.order, 2)   # a valid schedule (ScheduleError otherwise)
    assert sol.peak_bytes == naive.simulate(g, sol.placement.tolist(), sol.order.tolist(), 2)[0]
    assert sol.evaluations == 120
    assert runs[1].peak_bytes == sol.peak_bytes and runs[1].order.tolist() == sol.order.tolist()
    assert runs[1].placement.tolist() == sol.placement.tolist()


def test_config_fields_reach_the_search():
    """A FlagshipConfig passed in changes the search (no packed seeds with packed_seeds=0, no
    annealing at temperature 0), the default config is the default run bit for bit, and a
    BrkgaConfig sets the BRKGA part only."""
    g = _g(21, n=200)
    default = regal.optimize(g, 2, budget=1500, seed=0)
    same = regal.optimize(g, 2, budget=1500, seed=0, config=regal.FlagshipConfig())
    assert default.peak_bytes == same.peak_bytes and default.order.tolist() == same.order.tolist()
    brkga_part = regal.optimize(g, 2, budget=1500, seed=0, config=regal.BrkgaConfig())
    assert brkga_part.peak_bytes == default.peak_bytes and brkga_part.order.tolist() == default.order.tolist()
    unpacked = regal.optimize(g, 2, budget=1500, seed=0, config=regal.FlagshipConfig(packed_seeds=0))
    assert not any("/compute-on-" in name for name in unpacked.info["seeding"])
    assert any("/compute-on-" in name for name in default.info["seeding"])


def test_a_population_too_large_for_memory_is_shrunk_and_said_so(monkeypatch):
    """Where the chromosomes of the population asked for exceed SEARCH_BYTES, the flagship runs
    the largest population that fits (at least 2) and its info names the size asked for."""
    import regal.loop
    g = random_dag(3, num_nodes=60)
    keys = 60 * 3  # d = 2
    monkeypatch.setattr(regal.loop, "SEARCH_BYTES", 10 * keys * 8 * 3)
    sol = regal.optimize(g, 2, budget=4000, seed=0)  # 4,000: the full population asked
    assert sol.info["config"]["population_size"] == 10 and sol.info["population_asked"] == 100
    monkeypatch.setattr(regal.loop, "SEARCH_BYTES", 1)
    assert regal.optimize(g, 2, budget=50, seed=0).info["config"]["population_size"] == 2
    monkeypatch.setattr(regal.loop, "SEARCH_BYTES", 2**40)
    assert "population_asked" not in regal.optimize(g, 2, budget=50, seed=0).info


VIT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "data", "graphs", "real", "vit_l8_d256_b32_fwd_pre.json.gz")


def test_a_stalled_climb_from_a_packed_start_restarts_from_a_plain_one():
    """Issue 33's trap: on this ViT forward graph at d = 2 the best start computes on one device
    and the climb from it cannot spread it again; with `restart_stall` it leaves that start once
    stalled, climbs from the best plain start, and ends lower than without restarts. Every climb
    is reported, and the evaluations are spent exactly."""
    g = regal.load(VIT)
    trapped = regal.optimize(g, 2, budget=1000, seed=0, config=regal.FlagshipConfig(restart_stall=0.0))
    sol = regal.optimize(g, 2, budget=1000, seed=0)
    assert [c["kind"] for c in trapped.info["climbs"]] == ["packed"]
    kinds = [c["kind"] for c in sol.info["climbs"]]
    assert kinds[:2] == ["packed", "plain"]
    assert sol.peak_bytes < trapped.peak_bytes
    assert sol.evaluations == 1000


def test_each_climb_reports_its_group_moves_and_the_baseline_makes_none():
    """`info["climbs"][i]["grouped"]`: the group moves a climb simulated (issues 33, 34); none
    with group moves off, or on one device; the evaluations are spent exactly either way."""
    g = regal.load(VIT)
    sol = regal.optimize(g, 2, budget=1000, seed=0)
    off = regal.optimize(g, 2, budget=1000, seed=0, config=regal.FlagshipConfig().replace(group_moves=0.0))
    one = regal.optimize(g, 1, budget=300, seed=0)
    grouped = [c["grouped"] for c in sol.info["climbs"]]
    assert sum(grouped) > 0 and all(0 <= x <= c["evaluations"] for x, c in zip(grouped, sol.info["climbs"]))
    assert [c["grouped"] for c in off.info["climbs"]] == [0] * len(off.info["climbs"])
    assert [c["grouped"] for c in one.info["climbs"]] == [0] * len(one.info["climbs"])
    assert sol.evaluations == off.evaluations == 1000


@pytest.mark.parametrize("budget", [50, 120, 300])
def test_a_short_budget_returns_at_least_the_best_heuristic_start(budget):
    """Anytime (issue 33): from 50 evaluations up the answer is no worse than every heuristic
    start, packed ones included, and the history of best peaks falls monotonically within the budget."""
    g = regal.load(VIT)
    starts = [simulate(g, p, o, 2).peak_bytes for _, p, o in heuristic_solutions(g, 2, 0)]
    sol = regal.optimize(g, 2, budget=budget, seed=0)
    assert sol.peak_bytes <= min(starts)
    hist = sol.info["history"]
    assert all(a[0] <= b[0] and a[1] > b[1] for a, b in zip(hist, hist[1:]))
    assert hist[-1][0] <= budget and hist[-1][1] == sol.peak_bytes


@pytest.mark.parametrize("seed", [0, 3])
def test_a_deadline_during_the_climb_answers_with_the_climbs_best(seed, monkeypatch):
    """Issue 36: when the deadline passes during a climb, its best is neither re-homed nor
    written back into the population; the answer is still the best schedule seen (the lowest
    peak of the history, the climb's, below the population's), re-simulated."""
    from regal._stop import Deadline
    from regal.local_search import Climb
    g = _g(5 + seed, n=80)
    deadline, real_run, real_best, seen = Deadline(), Climb.run, memetic.Polish.best, []

    def run(self, evaluations, deadline_=None):
        out = real_run(self, evaluations, deadline_)
        deadline.request_stop("time_limit")   # the time is up as the first climb step ends
        return out

    def best(self, state):
        seen.append((self.climber.best_peak < state.best_fitness, self.climber.best_peak, state.best_fitness))
        return real_best(self, state)

    monkeypatch.setattr(Climb, "run", run)
    monkeypatch.setattr(memetic.Polish, "best", best)
    sol = regal.optimize(g, 2, budget=2000, seed=seed, deadline=deadline)
    [(held, climb_peak, population_peak)] = seen
    assert sol.info["stopped"] == "time_limit" and held and climb_peak < population_peak
    assert sol.peak_bytes == climb_peak == min(p for _, p, _ in sol.info["history"])
    assert simulate(g, sol.placement, sol.order, 2).peak_bytes == sol.peak_bytes


def test_a_best_found_by_a_climb_a_restart_ended_is_not_lost():
    """A climb from a packed start that finds a new best and then stalls within one round is
    restarted before the round's write-back: its best is still the answer when nothing later
    beats it (the lowest peak of the history and of every climb is the solution's)."""
    g = regal.load(os.path.join(os.path.dirname(VIT), "..", "layers", "layers_swin_t_train.json.gz"))
    for seed in range(3):   # each of these lost such a best before
        sol = regal.optimize(g, 2, budget=1000, seed=seed)
        lowest = min([c["best_peak_bytes"] for c in sol.info["climbs"]] + [p for _, p, _ in sol.info["history"]])
        assert sol.peak_bytes == lowest


def test_a_short_budget_gets_a_small_population():
    """FlagshipConfig.evaluations_per_member: one member per 40 evaluations, at least 10, at most
    the BRKGA's 100; 0 keeps the 100; plain BRKGA (seeding and polish off) keeps what it asks."""
    g = random_dag(4, num_nodes=40)
    size = lambda budget, **kw: regal.optimize(g, 2, budget=budget, seed=0, **kw).info["config"]["population_size"]
    assert [size(b) for b in (100, 1000, 2000, 4000)] == [10, 25, 50, 100]
    assert size(1000, config=regal.FlagshipConfig(evaluations_per_member=0.0)) == 100
    assert size(300, seeding=False, polish=False, policy=None) == 100
    assert regal.FlagshipConfig().population_for(10**6, 100) == 100
    with pytest.raises(ValueError, match="min_population"):
        regal.FlagshipConfig(min_population=1).population_for(100, 100)
