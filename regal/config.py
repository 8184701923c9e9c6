"""`FlagshipConfig`: the flagship's settings, typed and immutable, passed in (evosax / optax style).

    config = regal.FlagshipConfig()                              # the adopted settings
    regal.optimize(graph, 2, config=config._replace(climb=config.climb._replace(anneal_temperature=0.0)))
    regal.optimize(graph, 2, config=config.replace(anneal_temperature=0.0))   # the same, by name

Every field is a setting the flagship (`regal.memetic`, `regal.runtime`) reads; none is a module
global. Two parts are configs of their own, nested as fields: `brkga` (`regal.BrkgaConfig`, the
population) and `climb` (`regal.climb.LocalSearchConfig`, the local-search climb; each knob
has one name, the same in the climb's kernel, `regal.kernels.structs.ClimbParams`). How each was
chosen (values tried, results, commits) is in experiments/results/INDEX.md, one line per
experiment, not here.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from regal.brkga import BrkgaConfig
from regal.graph import Graph
from regal.climb import FLAGSHIP_CLIMB, LocalSearchConfig

__all__ = ["FlagshipConfig", "as_flagship_config", "polish_share", "check_arguments"]


class FlagshipConfig(NamedTuple):
    """The flagship's adopted settings (module docstring; `regal.memetic` says what each part does).

    brkga: the population's hyper-parameters; its prior_share None means `prior_share` below
        with seeding or polish on, all mutants from the priors otherwise.
    climb: the local-search climb's settings (`regal.climb.FLAGSHIP_CLIMB`: informed,
        directed and adaptive moves, annealing, screened and grouped device moves; the fields of
        `LocalSearchConfig` say what each does).
    prior_share: share of the mutants drawn from the priors when there are any (the rest uniform).
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
    """
    brkga: BrkgaConfig = BrkgaConfig()
    climb: LocalSearchConfig = FLAGSHIP_CLIMB
    prior_share: float = 0.5
    pack_residents: int = 2
    packed_seeds: int = 1
    packed_seeds_nodes_per_eval: float = 1.0
    infeasible_share: float = 0.5
    restart_stall: float = 0.1
    evaluations_per_member: float = 40.0
    min_population: int = 10

    def replace(self, **changes) -> FlagshipConfig:
        """`_replace` that also takes the climb's fields by name (`replace(group_moves=0.0)` sets
        `climb.group_moves`); TypeError on a name of neither."""
        climb = {k: changes.pop(k) for k in list(changes) if k in LocalSearchConfig._fields}
        unknown = sorted(set(changes) - set(self._fields))
        if unknown:
            raise TypeError(f"FlagshipConfig has no field {unknown[0]!r}")
        return self._replace(**changes, **({"climb": self.climb._replace(**climb)} if climb else {}))

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
