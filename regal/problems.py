"""The objectives as problem objects: what the search loop (`regal.loop`) needs of each.

A problem knows its chromosome's width (`num_keys`), scores a population (`evaluate`: float64[m],
lower is better) and decodes a chromosome (`decode`). A new objective is a new class here plus
the improver its flagship hands the loop.

- `MemoryProblem`: peak memory (SPEC.md section 3) of the chromosome of section 5, n (d + 1) keys.
- `RuntimeProblem`: the runtime objective's fitness (section 4, `regal.timed.runtime_fitness`)
  of the timed chromosome, n (2d + 1) keys.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regal.decode import chromosome_length, decode, evaluate_population
from regal.graph import Graph
from regal.timed import (DeviceModel, TimedSimulation, decode_timed, evaluate_population_timed, makespan_bound,
                         simulation_fitness, timed_chromosome_length)

__all__ = ["MemoryProblem", "RuntimeProblem"]


class MemoryProblem(NamedTuple):
    """Peak memory of `graph` on `devices` devices."""
    graph: Graph
    devices: int

    @property
    def num_keys(self) -> int:
        return chromosome_length(self.graph.num_nodes, self.devices)

    def evaluate(self, population: np.ndarray) -> np.ndarray:
        """float64[m]: the peak of each chromosome of float64[m, num_keys] (decoded in parallel)."""
        return evaluate_population(self.graph, population, self.devices)

    def decode(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(placement int32[n], order int32[n]) of one chromosome."""
        return decode(self.graph, keys, self.devices)


class RuntimeProblem(NamedTuple):
    """Makespan under memory limits of `graph` on `devices` devices of `model`."""
    graph: Graph
    devices: int
    model: DeviceModel
    memory_limit_bytes: object  # None, an int, or one int per device
    limits: np.ndarray          # int64[d], -1: none

    @property
    def num_keys(self) -> int:
        return timed_chromosome_length(self.graph.num_nodes, self.devices)

    def evaluate(self, population: np.ndarray) -> np.ndarray:
        return evaluate_population_timed(self.graph, population, self.devices, self.model,
                                         self.memory_limit_bytes)[0]

    def decode(self, keys: np.ndarray) -> tuple[np.ndarray, TimedSimulation]:
        """(placement int32[n], the timed simulation) of one timed chromosome."""
        return decode_timed(self.graph, keys, self.devices, self.model)

    @property
    def bound(self) -> float:
        """The makespan bound: a fitness above it is a schedule over the limit (`runtime_fitness`)."""
        return self.graph.cached(("makespan_bound", self.devices, self.model),
                                 lambda: makespan_bound(self.graph, self.devices, self.model))

    def fitness(self, sim: TimedSimulation) -> float:
        return simulation_fitness(sim, self.bound, self.limits)
