"""regal.brkga, regal.priors and regal.search (regal.optimize): the BRKGA's invariants."""

import numpy as np
import pytest

from randgraph import random_dag
from regal import brkga
from regal.brkga import BrkgaConfig
from regal.decode import chromosome_length
from regal.search import brkga_search as optimize
from regal.priors import Priors, sample_keys, uniform_priors

CFG = BrkgaConfig(population_size=20, elite_fraction=0.2, mutant_fraction=0.15, elite_inheritance=0.7)


def _sphere(x):
    return ((x - 0.3) ** 2).sum(axis=1)


def _run(fitness_fn, generations, seed=0, priors=None, L=12, config=CFG):
    state = brkga.init(L, config, seed)
    states = []
    for _ in range(generations):
        cand, state = brkga.ask(state, config, priors)
        state = brkga.tell(state, cand, fitness_fn(cand), config)
        states.append(state)
    return states


def test_elites_survive_with_their_fitness():
    """Each generation's elite reappears in the next population, keys and fitness unchanged."""
    states = _run(_sphere, 15)
    E = CFG.num_elites
    for prev, cur in zip(states, states[1:]):
        for i in range(E):
            j = np.flatnonzero((cur.population == prev.population[i]).all(axis=1))
            assert j.size >= 1 and cur.fitness[j[0]] == prev.fitness[i]


def test_best_never_worsens_and_population_is_sorted():
    """best_fitness is non-increasing and fitness is sorted ascending after every tell."""
    states = _run(_sphere, 30)
    best = [s.best_fitness for s in states]
    assert all(b2 <= b1 for b1, b2 in zip(best, best[1:])) and best[-1] < best[0]
    assert all(np.all(np.diff(s.fitness) >= 0) for s in states)


def test_failed_evaluation_never_becomes_best():
    """NaN (failed) and +inf (infeasible) fitness sort last and are never the best."""
    def flaky(x):
        f = _sphere(x)
        f[::2] = np.nan
        f[1::4] = np.inf
        return f
    for s in _run(flaky, 10):
        assert np.isfinite(s.best_fitness)
        assert not np.isnan(s.fitness).any()


def test_same_seed_same_trajectory():
    """Two runs with one seed produce identical populations at every generation."""
    a, b = _run(_sphere, 10, seed=5), _run(_sphere, 10, seed=5)
    assert all(np.array_equal(x.population, y.population) for x, y in zip(a, b))
    c = _run(_sphere, 10, seed=6)
    assert not np.array_equal(a[-1].population, c[-1].population)


def test_uniform_priors_reproduce_plain_brkga_exactly():
    """Beta(1,1) priors with the config's inheritance give plain BRKGA's trajectory bit for bit."""
    L = 12
    plain = _run(_sphere, 12, seed=3, L=L)
    uniform = _run(_sphere, 12, seed=3, L=L, priors=uniform_priors(4, 2))
    explicit = _run(_sphere, 12, seed=3, L=L,
                    priors=Priors(np.ones(L), np.ones(L), np.full(4, CFG.elite_inheritance)))
    for a, b, c in zip(plain, uniform, explicit):
        assert np.array_equal(a.population, b.population) and np.array_equal(a.population, c.population)


def test_generation_costs_population_minus_elites():
    """The initial population costs P evaluations, each later generation P - E."""
    states = _run(_sphere, 4)
    assert [s.evaluations for s in states] == [20, 36, 52, 68]


def test_priors_draw_beta_distributed_mutants():
    """sample_keys maps uniforms through each gene's Beta quantile: moments match Beta(a, b)."""
    L = 4
    pri = Priors(np.array([1.0, 0.5, 2.0, 5.0]), np.array([1.0, 0.5, 5.0, 1.0]))
    u = np.random.default_rng(0).random((200_000, L))
    x = sample_keys(pri, u.copy())
    a, b = pri.alpha, pri.beta
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert np.allclose(x.mean(axis=0), mean, atol=3e-3)
    assert np.allclose(x.var(axis=0), var, atol=3e-3)
    assert np.array_equal(x[:, 0], u[:, 0])  # Beta(1,1) is the uniform itself
    assert x.min() >= 0 and x.max() < 1


def test_per_node_elite_inheritance_is_respected():
    """With inheritance 1 for a node, children copy that node's genes from the elite parent."""
    n, d = 3, 1
    L = chromosome_length(n, d)
    pri = Priors(np.ones(L), np.ones(L), np.array([1.0, 0.0, 0.5]))
    state = brkga.init(L, CFG, 0)
    cand, state = brkga.ask(state, CFG, pri)
    state = brkga.tell(state, cand, _sphere(cand), CFG)
    children, _ = brkga.ask(state, CFG, pri)
    children = children[CFG.num_mutants:]
    elite_rows = {tuple(r[:2]) for r in state.population[:CFG.num_elites]}
    nonelite_rows = {tuple(r[2:4]) for r in state.population[CFG.num_elites:]}
    assert all(tuple(c[:2]) in elite_rows for c in children)
    assert all(tuple(c[2:4]) in nonelite_rows for c in children)


def test_config_validation():
    """A config that leaves no room for children is refused."""
    with pytest.raises(ValueError):
        BrkgaConfig(population_size=10, elite_fraction=0.6, mutant_fraction=0.5).validate()
    with pytest.raises(ValueError):
        BrkgaConfig(elite_inheritance=1.5).validate()


# ---------------------------------------------------------------- optimize on graphs
def test_optimize_spends_exactly_the_budget():
    """optimize evaluates exactly `budget` chromosomes (the last generation cut short)."""
    g = random_dag(1, num_nodes=40)
    for budget in (1, 57, 100, 517):
        sol = optimize(g, devices=2, budget=budget, config=CFG)
        assert sol.evaluations == budget


def test_optimize_is_thread_count_invariant():
    """The same seed gives the same solution on 1 and 2 Numba threads."""
    g = random_dag(7, num_nodes=80)
    a = optimize(g, devices=2, budget=600, seed=1, num_threads=1)
    b = optimize(g, devices=2, budget=600, seed=1, num_threads=2)
    assert a.peak_bytes == b.peak_bytes
    assert np.array_equal(a.order, b.order) and np.array_equal(a.placement, b.placement)
    assert [h[:2] for h in a.info["history"]] == [h[:2] for h in b.info["history"]]


def test_optimize_improves_on_its_initial_population():
    """The best after 2,000 evaluations is no worse than the best of the first generation."""
    g = random_dag(11, num_nodes=120)
    sol = optimize(g, devices=2, budget=2000, seed=0)
    hist = sol.info["history"]
    assert hist[0][0] == 100 and hist[-1][1] == sol.peak_bytes and sol.peak_bytes <= hist[0][1]
    assert sol.peak_bytes >= g.lower_bound(2)


def test_callback_can_stop_the_search_and_time_limit_stops_it():
    """A callback returning True stops after that generation; a zero time limit after the first."""
    g = random_dag(2, num_nodes=50)
    seen = []
    sol = optimize(g, devices=1, budget=5000, callback=lambda p: seen.append(p) or len(seen) == 3)
    assert sol.info["stopped"] == "callback" and sol.evaluations == 100 + 2 * 80
    sol = optimize(g, devices=1, budget=5000, time_limit_s=0)
    assert sol.info["stopped"] == "time_limit" and sol.evaluations == 100


def test_initial_chromosomes_seed_the_population():
    """A heuristic solution passed as `initial` bounds the result from above."""
    from regal.decode import encode
    from regal.simulate import simulate
    g = random_dag(4, num_nodes=60)
    order = g.topological_order()
    placement = np.zeros(g.num_nodes, dtype=np.int64)
    hint_peak = simulate(g, placement, order, 2).peak_bytes
    sol = optimize(g, devices=2, budget=100, initial=[encode(placement, order, 2)])
    assert sol.peak_bytes <= hint_peak


def test_priors_of_the_wrong_length_are_refused():
    """Priors must have one Beta per gene of this graph and device count."""
    g = random_dag(4, num_nodes=10)
    with pytest.raises(ValueError, match="genes"):
        optimize(g, devices=2, budget=10, priors=uniform_priors(10, 3))


def test_ask_is_pure_in_its_state():
    """Asking twice with the same state gives the same candidates; the state is never changed."""
    config = BrkgaConfig(population_size=10)
    state = brkga.init(12, config, seed=3)
    first, s1 = brkga.ask(state, config)
    again, _ = brkga.ask(state, config)
    np.testing.assert_array_equal(first, again)
    state = brkga.tell(s1, first, first.sum(axis=1), config)
    a, _ = brkga.ask(state, config)
    b, _ = brkga.ask(state, config)
    np.testing.assert_array_equal(a, b)


def _random_state(rng, generation, P=12, L=7):
    """A sorted population with ties and +inf among its fitness values."""
    fit = np.sort(rng.choice([0.5, 1.0, 1.0, 2.0, 3.0, np.inf], size=P))
    return brkga.BrkgaState(rng.random((P, L)), fit, generation, 10 * generation, np.random.default_rng(0))


@pytest.mark.parametrize("seed", range(40))
def test_tell_in_place_builds_the_same_population_as_a_copy(seed):
    """tell(overwrite=True), which sorts into the candidates' or the old population's memory,
    gives the same population and fitness as the copying tell: the first generation, a later one,
    and one cut short (fewer candidates: the old non-elite fill up), with ties, inf and NaN."""
    rng = np.random.default_rng(seed)
    config = BrkgaConfig(population_size=12, elite_fraction=0.25, mutant_fraction=0.17)
    for generation in (0, 3):
        state = _random_state(rng, generation)
        m = int(rng.integers(1, 13)) if generation else 12
        candidates = rng.random((m, 7))
        fitness = rng.choice([0.25, 1.0, 2.0, 2.5, np.inf, np.nan], size=m)
        copied = brkga.tell(state, candidates.copy(), fitness, config)
        given = state._replace(population=state.population.copy())
        moved = brkga.tell(given, candidates, fitness, config, overwrite=True)
        assert np.shares_memory(moved.population, candidates if generation == 0 else given.population)
        np.testing.assert_array_equal(moved.population, copied.population)
        np.testing.assert_array_equal(moved.fitness, copied.fitness)
        assert moved.evaluations == copied.evaluations and moved.generation == copied.generation


def test_ask_into_a_spare_array_draws_the_same_candidates():
    """ask(out=...) returns the same candidates as without it, in the spare array's memory."""
    state = _run(_sphere, 2)[-1]
    plain, _ = brkga.ask(state, CFG)
    spare = np.full((CFG.population_size, 12), -1.0)
    into, _ = brkga.ask(state, CFG, out=spare)
    np.testing.assert_array_equal(into, plain)
    assert np.shares_memory(into, spare)


@pytest.mark.parametrize("seed", range(20))
def test_write_back_in_place_is_the_same_as_a_copy(seed):
    """regal.loop.write_back(overwrite=True), which moves the members below the new one down a
    row in place, gives the same population as the copying write-back (ties, inf included)."""
    from regal.loop import write_back
    rng = np.random.default_rng(seed)
    state = _random_state(rng, 2)
    keys = rng.random(7)
    fitness = float(rng.choice([0.25, 0.75, 1.5, 2.0, 2.5, 4.0]))
    copied = write_back(state, lambda: keys, fitness)
    moved = write_back(state._replace(population=state.population.copy()), lambda: keys, fitness, overwrite=True)
    np.testing.assert_array_equal(moved.population, copied.population)
    np.testing.assert_array_equal(moved.fitness, copied.fitness)


def test_coins_are_numpys_16_bit_integers_and_leave_the_same_state():
    """brkga.coins draws rng.integers(0, 65536, dtype=uint16)'s numbers from raw 64-bit words:
    the same numbers and the same generator state after, whatever half-word PCG64 holds over
    from the draws before (odd and even counts, empty shapes)."""
    plan = np.random.default_rng(7)
    for trial in range(400):
        a, b = np.random.default_rng(trial), np.random.default_rng(trial)
        for _ in range(int(plan.integers(0, 4))):   # earlier draws of other kinds and lengths
            kind, k = int(plan.integers(0, 3)), int(plan.integers(0, 7))
            for g in (a, b):
                (g.integers(0, 5, size=k) if kind == 0 else g.random(k) if kind == 1
                 else g.integers(0, 65536, size=k, dtype=np.uint16))
        shape = (int(plan.integers(0, 5)), int(plan.integers(0, 9)))
        want, got = a.integers(0, 65536, size=shape, dtype=np.uint16), brkga.coins(b, shape)
        assert got.dtype == np.uint16 and got.shape == shape and np.array_equal(want, got)
        assert a.bit_generator.state == b.bit_generator.state
        assert np.array_equal(a.random(3), b.random(3))


def test_crossover_takes_each_gene_bit_for_bit_from_its_parent():
    """The crossover kernel picks whole float64 values (by their bits): every child gene is one
    of its two parents' genes at that position, elite where coin < inherit, exactly."""
    from regal.kernels import decode as _kernels
    rng = np.random.default_rng(3)
    pop = rng.random((6, 50)) * np.array([1.0, -0.0, np.nan, 1e-310, np.inf] * 10)
    coin = rng.integers(0, 65536, size=(4, 50), dtype=np.uint16)
    inherit = np.full(50, 45875, dtype=np.int32)
    elite, other = np.array([0, 1, 0, 2]), np.array([3, 4, 5, 3])
    children = np.empty((4, 50))
    _kernels.biased_crossover(pop.view(np.uint64), elite, other, coin, inherit, children.view(np.uint64))
    want = np.where(coin < inherit, pop[elite], pop[other])
    assert np.array_equal(children.view(np.uint64), want.view(np.uint64))
