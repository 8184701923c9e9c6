"""Biased random-key genetic algorithm, after Goncalves and Resende (J. Heuristics, 2011).

An ask/tell optimizer over chromosomes of random keys in [0, 1). It sees keys and fitness
(lower is better), never graphs: the caller decodes. Static hyper-parameters live in
`BrkgaConfig`, the evolving population in `BrkgaState`, and REGAL's learned priors
(`regal.priors.Priors`) are passed per call.

One generation: the elite (the best `num_elites` chromosomes) survives unchanged and keeps its
fitness; `num_mutants` new chromosomes are drawn from the priors; the rest are children of one
elite and one non-elite parent, each gene taken from the elite parent with the elite-inheritance
probability (drawn as a 16-bit coin: the probability is rounded to a multiple of 1/65536, which
costs a quarter of a float64 draw per gene). Only mutants and children are evaluated, so a
generation costs
`population_size - num_elites` evaluations. A fitness that is NaN (a failed evaluation) counts
as +inf and can never become the best.

    state = brkga.init(num_keys, config, seed)
    while ...:
        candidates, state = brkga.ask(state, config, priors)
        state = brkga.tell(state, candidates, fitness_of(candidates), config)
"""

from __future__ import annotations

import copy
import sys
from typing import NamedTuple

import numpy as np

from regal.kernels import decode as _kernels
from regal.priors import Priors, sample_keys

__all__ = ["BrkgaConfig", "BrkgaState", "init", "ask", "tell", "coins"]


class BrkgaConfig(NamedTuple):
    """Static hyper-parameters. Defaults: REGAL-NOTES.md (Goncalves and Resende's ranges)."""
    population_size: int = 100
    elite_fraction: float = 0.2
    mutant_fraction: float = 0.1
    elite_inheritance: float = 0.7
    prior_share: float | None = None  # share of mutants (and of the initial population) drawn
                                      # from the priors, the rest uniform (a hedge against a wrong
                                      # prior); None: the method's own (all here, half in the flagship)

    @property
    def num_elites(self) -> int:
        return max(1, int(round(self.population_size * self.elite_fraction)))

    @property
    def num_mutants(self) -> int:
        return int(round(self.population_size * self.mutant_fraction))

    @property
    def num_offspring(self) -> int:
        return self.population_size - self.num_elites - self.num_mutants

    def validate(self) -> "BrkgaConfig":
        if self.population_size < 2:
            raise ValueError(f"population_size must be at least 2, got {self.population_size}")
        if not (0 < self.elite_fraction < 1 and 0 <= self.mutant_fraction < 1):
            raise ValueError("elite_fraction must be in (0, 1) and mutant_fraction in [0, 1)")
        if self.num_offspring < 0 or self.num_elites >= self.population_size:
            raise ValueError("elites and mutants leave no room in the population")
        if not 0 <= self.elite_inheritance <= 1:
            raise ValueError(f"elite_inheritance must be in [0, 1], got {self.elite_inheritance}")
        if self.prior_share is not None and not 0 <= self.prior_share <= 1:
            raise ValueError(f"prior_share must be in [0, 1], got {self.prior_share}")
        return self

    def num_prior(self, rows: int) -> int:
        """How many of `rows` mutants are drawn from the priors (the first ones)."""
        if self.prior_share is None or self.prior_share >= 1:
            return rows
        return int(round(rows * self.prior_share))


class BrkgaState(NamedTuple):
    """The evolving search state (P = population size, L = number of keys).

    population: float64[P, L], sorted best first (empty before the first `tell`)
    fitness: float64[P], ascending
    generation: int (0 until the initial population has been told)
    evaluations: int, chromosomes evaluated so far (elites are never re-evaluated)
    rng: numpy Generator, the state's only source of randomness; `ask` copies it, never
        advances the one inside a state it was given
    """
    population: np.ndarray
    fitness: np.ndarray
    generation: int
    evaluations: int
    rng: np.random.Generator

    @property
    def best_keys(self) -> np.ndarray:
        return self.population[0]

    @property
    def best_fitness(self) -> float:
        return float(self.fitness[0]) if self.fitness.size else float("inf")


def init(num_keys: int, config: BrkgaConfig, seed: int) -> BrkgaState:
    """A state with no population yet; the first `ask` returns the initial population."""
    config.validate()
    return BrkgaState(population=np.empty((0, num_keys)), fitness=np.empty(0), generation=0,
                      evaluations=0, rng=np.random.default_rng(seed))


def ask(state: BrkgaState, config: BrkgaConfig, priors: Priors | None = None,
        out: np.ndarray | None = None) -> tuple[np.ndarray, BrkgaState]:
    """Chromosomes to evaluate next: the initial population, or a generation's mutants + children.

    Returns float64[m, L] with m = population_size at first, population_size - num_elites after.
    Pure in `state`: its generator is copied, advanced, and returned in the new state, so asking
    twice with the same state gives the same candidates (evosax's explicit state).
    Random numbers are drawn in a fixed order (mutant uniforms, parents, coins), the same with
    or without priors, so uniform priors give plain BRKGA's trajectory exactly.
    out: float64 memory of at least m rows of L to draw a generation's candidates into, which is
    then returned (after the first generation; the same numbers as without it): a search reuses
    the last generation's, as a fresh P x L array is slow to fault in (seconds at 300K nodes).
    """
    rng = copy.deepcopy(state.rng)  # `state` is never changed: asking twice gives the same candidates
    state = state._replace(rng=rng)
    L = state.population.shape[1]
    if state.generation == 0:
        keys = rng.random((config.population_size, L))
        sample_keys(priors, keys[:config.num_prior(config.population_size)])
        return keys, state
    P, E, M = state.population.shape[0], config.num_elites, config.num_mutants
    num_children = P - E - M
    m = M + num_children
    usable = out is not None and out.ndim == 2 and out.shape[0] >= m and out.shape[1] == L \
        and out.dtype == np.float64 and out.flags.c_contiguous
    candidates = out[:m] if usable else np.empty((m, L))
    rng.random(out=candidates[:M])
    sample_keys(priors, candidates[:config.num_prior(M)])
    elite_parent = rng.integers(0, E, size=num_children)
    other_parent = rng.integers(E, P, size=num_children)
    coin = coins(rng, (num_children, L))
    rho = (priors.gene_inheritance(config.elite_inheritance) if priors is not None
           and priors.elite_inheritance is not None else np.full(L, config.elite_inheritance))
    inherit = np.rint(rho * 65536).astype(np.int32)
    # the keys' bits: the kernel picks each gene with a mask (same float64 values, bit for bit)
    _kernels.biased_crossover(state.population.view(np.uint64), elite_parent, other_parent, coin, inherit,
                              candidates[M:].view(np.uint64))
    return candidates, state


def coins(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """`rng.integers(0, 65536, size=shape, dtype=np.uint16)`: the same numbers, and `rng` left in
    the same state, drawn 4x faster as raw 64-bit words where its bit generator is PCG64
    (`default_rng`'s): NumPy draws such an integer 16 bits at a time from the generator's 32-bit
    stream (its `buffered_uint16`: low half first), and PCG64's 32-bit stream is each 64-bit
    output's low half then its high half (a half left over is kept in the state's `has_uint32`
    / `uinteger`), which is the 64-bit words' own little-endian byte order. Other bit generators:
    `rng.integers` itself."""
    count = int(np.prod(shape))
    bitgen = rng.bit_generator
    if type(bitgen) is not np.random.PCG64 or count == 0 or sys.byteorder != "little":
        return rng.integers(0, 65536, size=shape, dtype=np.uint16)
    carried = int(bitgen.state["has_uint32"])
    fresh = (count + 1) // 2 - carried              # 32-bit words from new outputs
    words = bitgen.random_raw((fresh + 1) // 2) if fresh > 0 else np.empty(0, dtype=np.uint64)
    state = bitgen.state
    if carried:
        out = np.empty(count, dtype=np.uint16)
        left = int(state["uinteger"])
        out[:2] = (left & 0xFFFF, left >> 16)[:count]
        out[2:] = words.view(np.uint16)[:count - 2]
    else:
        out = words.view(np.uint16)[:count]
    state["has_uint32"] = fresh % 2
    if words.size:
        state["uinteger"] = int(words[-1] >> np.uint64(32))
    bitgen.state = state
    return out.reshape(shape)


def tell(state: BrkgaState, candidates: np.ndarray, fitness: np.ndarray, config: BrkgaConfig, *,
         overwrite: bool = False) -> BrkgaState:
    """Merge evaluated candidates into the population and sort it, best first.

    The elite keeps its stored fitness. Normally `candidates` is everything `ask` returned and
    the old non-elite is replaced; when fewer come back (the budget ran out mid-generation) the
    best of the old non-elite fill the population up to its size. NaN fitness counts as +inf.
    overwrite: the caller keeps neither `candidates` nor `state.population`, so the new
    population is sorted into their memory (the first generation into `candidates`, a later one
    into the old population) instead of a new P x L array: the same population, at the cost of
    moving rows (a fresh 720 MB array took 1.5-3 s to fault in at 300K nodes, after a time
    limit: issue 36).
    """
    fitness = np.asarray(fitness, dtype=np.float64)
    if candidates.shape[0] != fitness.shape[0]:
        raise ValueError("one fitness value per candidate is required")
    fitness = np.where(np.isnan(fitness), np.inf, fitness)
    if state.generation == 0:
        keep = np.argsort(fitness, kind="stable")[:config.population_size]
        population = _sort_rows(candidates, keep) if overwrite else candidates[keep]
        return BrkgaState(population=population, fitness=fitness[keep], generation=1,
                          evaluations=candidates.shape[0], rng=state.rng)
    # pool = elites, then candidates, then (only when candidates fall short) the best non-elites
    E, m = config.num_elites, candidates.shape[0]
    fill = max(0, state.population.shape[0] - E - m)
    pool_fit = np.concatenate([state.fitness[:E], fitness, state.fitness[E:E + fill]])
    keep = np.argsort(pool_fit, kind="stable")[:config.population_size]
    from_cand = (keep >= E) & (keep < E + m)
    source = np.where(from_cand, keep - E, np.where(keep < E, keep, keep - m))  # row in candidates / population
    if overwrite and _merge_in_place(state.population, candidates, from_cand, source):
        population = state.population
    else:
        population = np.empty((keep.shape[0], candidates.shape[1]))
        population[from_cand] = candidates[source[from_cand]]
        population[~from_cand] = state.population[source[~from_cand]]
    return BrkgaState(population=population, fitness=pool_fit[keep], generation=state.generation + 1,
                      evaluations=state.evaluations + m, rng=state.rng)


def _sort_rows(rows: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """rows[keep] (distinct row indices), built in `rows`' own memory: its first len(keep) rows,
    returned as a view. Each row is moved once along the cycles of the permutation that puts
    `keep` first (the rows left out after it, in order), through one row's buffer."""
    k, m = keep.shape[0], rows.shape[0]
    perm = np.empty(m, dtype=np.int64)
    perm[:k] = keep
    rest = np.ones(m, dtype=bool)
    rest[keep] = False
    perm[k:] = np.flatnonzero(rest)
    done = perm == np.arange(m)
    buffer = np.empty(rows.shape[1:], dtype=rows.dtype)
    for start in np.flatnonzero(~done):
        if done[start]:
            continue
        buffer[...] = rows[start]
        j = start
        while perm[j] != start:   # position j takes the row now at perm[j]
            rows[j] = rows[perm[j]]
            done[j] = True
            j = perm[j]
        rows[j] = buffer
        done[j] = True
    return rows[:k]


def _merge_in_place(population: np.ndarray, candidates: np.ndarray, from_cand: np.ndarray,
                    source: np.ndarray) -> bool:
    """Write the merged population (row r: candidates[source[r]] where from_cand[r], else
    population[source[r]]) into `population` itself; False, touching nothing, where that cannot
    be done in place. The kept old members come from a sorted population in their old order, so
    each moves down or stays (source <= r); filling from the last row up, no row is overwritten
    before it has been read."""
    old = ~from_cand
    if source.shape[0] != population.shape[0] or np.any(source[old] > np.flatnonzero(old)):
        return False
    for r in range(source.shape[0] - 1, -1, -1):
        if from_cand[r]:
            population[r] = candidates[source[r]]
        elif source[r] != r:
            population[r] = population[source[r]]
    return True
