"""`FlagshipConfig`: the flagship's settings, typed and immutable, passed in (evosax / optax style).

    config = regal.FlagshipConfig()                              # the adopted settings
    regal.optimize(graph, 2, config=config._replace(anneal_temperature=0.0))

Every field is a setting the flagship (`regal.memetic`, `regal.runtime`) reads; none is a module
global. How each was chosen (values tried, results, commits) is in
experiments/results/INDEX.md, one line per experiment, not here.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from regal.brkga import BrkgaConfig
from regal.graph import Graph

__all__ = ["FlagshipConfig", "as_flagship_config", "anneal_temperature", "polish_share", "check_arguments"]


class FlagshipConfig(NamedTuple):
    """The flagship's adopted settings (module docstring; `regal.memetic` says what each part does).

    brkga: the population's hyper-parameters; its prior_share None means `prior_share` below
        with seeding or polish on, all mutants from the priors otherwise.
    prior_share: share of the mutants drawn from the priors when there are any (the rest uniform).
    directed_share: share of the climb's peak-focused moves that are directed.
    anneal_temperature: the climb's start temperature (a relative peak rise; 0: no annealing).
    anneal_evals_per_node: below this many evaluations per node the start temperature is scaled
        by (budget / (this * nodes)) ** anneal_scale_power; 0: never scaled.
    adaptive_moves: the climb picks its move kinds by their recent success (else fixed shares).
    adaptive_rate: step of a move kind's success estimate (adaptive moves).
    pack_residents: re-home the resident tensors: 0 never, 1 the final best, 2 also every new best.
    packed_seeds: the most devices a "computes on fewer devices" seed computes on (0: none).
    packed_seeds_nodes_per_eval: packed seeds only on graphs of at most this many nodes per
        evaluation of the budget.
    infeasible_share: the runtime objective's climb share while the best schedule is over the
        memory limit.
    restart_stall: the climb restarts when it has found no new best for this share of the
        budget (checked between generations, and every half stall while it climbs from a start
        that computes on fewer devices): from the population's best when that is better than
        the climb's, else from the best start of the other kind (packed / plain) it has not
        climbed from (0: never).
    screen_moves: the climb rejects a device move whose peak is provably higher without
        simulating it (no evaluation spent; `regal._climb.climb`'s `screen`).
    group_moves: share of the climb's device moves of a non-resident node that take its
        neighbours along (`regal.local_search`'s group moves; 0: none).
    group_cap: the most nodes a group move moves (the node itself included).
    group_adaptive: the share of grouped device moves follows the recent success of grouped and
        single ones (within 0.1..0.9, starting at even odds) instead of `group_moves`.
    """
    brkga: BrkgaConfig = BrkgaConfig()
    prior_share: float = 0.5
    directed_share: float = 1.0
    anneal_temperature: float = 0.02
    anneal_evals_per_node: float = 1.0
    anneal_scale_power: float = 3.0
    adaptive_moves: bool = True
    adaptive_rate: float = 0.02
    pack_residents: int = 2
    packed_seeds: int = 1
    packed_seeds_nodes_per_eval: float = 1.0
    infeasible_share: float = 0.5
    restart_stall: float = 0.1
    evaluations_per_member: float = 40.0
    min_population: int = 10
    screen_moves: bool = True
    group_moves: float = 0.5
    group_cap: int = 8
    group_adaptive: bool = True

    def resolved_brkga(self, parts_on: bool) -> BrkgaConfig:
        """The BRKGA config with its prior share filled in (`prior_share` when seeding or polish
        is on, else 1.0), validated."""
        cfg = self.brkga
        if cfg.prior_share is None:
            cfg = cfg._replace(prior_share=self.prior_share if parts_on else 1.0)
        return cfg.validate()

    def population_for(self, budget: int, population_size: int) -> int:
        """The peak-memory flagship's population for `budget` evaluations: population_size, or
        budget / evaluations_per_member members where that is fewer (at least min_population)."""
        if self.evaluations_per_member <= 0:
            return population_size
        if self.min_population < 2:
            raise ValueError(f"min_population must be at least 2, got {self.min_population}")
        per_budget = int(budget // self.evaluations_per_member)
        return min(population_size, max(int(self.min_population), per_budget))


def as_flagship_config(config) -> FlagshipConfig:
    """`config` as a FlagshipConfig: None gives the defaults, a BrkgaConfig the defaults with that
    BRKGA part; TypeError otherwise."""
    if config is None:
        return FlagshipConfig()
    if isinstance(config, FlagshipConfig):
        return config
    if isinstance(config, BrkgaConfig):
        return FlagshipConfig(brkga=config)
    raise TypeError(f"config must be a regal.FlagshipConfig or regal.BrkgaConfig, got {type(config).__name__}")


def anneal_temperature(num_nodes: int, budget: int, config: FlagshipConfig = FlagshipConfig()) -> float:
    """The climb's start temperature: config.anneal_temperature, scaled by min(1, budget /
    (anneal_evals_per_node * num_nodes)) ** anneal_scale_power (no scaling when
    anneal_evals_per_node is 0)."""
    if config.anneal_evals_per_node <= 0:
        return float(config.anneal_temperature)
    scale = min(1.0, budget / (config.anneal_evals_per_node * max(num_nodes, 1)))
    return float(config.anneal_temperature) * scale ** config.anneal_scale_power


def polish_share(num_nodes: int, devices: int = 1) -> float:
    """Share of the evaluations after the initial population that goes to the local-search climb.

    One device: 0.5 up to 300 nodes, rising by 0.2 per factor of 10 in size to 0.95 from ~50K
    nodes on: the larger the graph, the less a BRKGA generation moves, while one local move costs
    one evaluation at any size. Several devices: at least 0.9, because there a generation of
    random-key crossover rarely beats a climb that moves nodes off the peak device.
    """
    share = float(np.clip(0.5 + 0.2 * math.log10(max(num_nodes, 1) / 300.0), 0.5, 0.95))
    return share if devices == 1 else max(share, 0.9)


def check_arguments(graph, budget, config, time_limit_s) -> None:
    """TypeError / ValueError naming the argument, before any work."""
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a regal.Graph (regal.load reads one), got {type(graph).__name__}")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"budget must be an integer number of evaluations, got {budget!r}")
    if budget < 1:
        raise ValueError(f"budget must be at least 1 evaluation, got {budget}")
    if config is not None and not isinstance(config, (BrkgaConfig, FlagshipConfig)):
        raise TypeError(f"config must be a regal.FlagshipConfig or regal.BrkgaConfig, got {type(config).__name__}")
    if time_limit_s is not None and not (isinstance(time_limit_s, (int, float)) and math.isfinite(time_limit_s)
                                         and time_limit_s >= 0):
        raise ValueError(f"time_limit_s must be a finite number of seconds >= 0, got {time_limit_s!r}")
