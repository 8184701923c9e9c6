"""A structural teacher for the policy's warm start (NumPy only).

The teacher's actions are a fixed function of two structural features the policy also sees:
scheduling priors by the node's position in a depth-first schedule (earlier fifth: Beta(5, 1),
then Beta(5, 2), Beta(2, 2), Beta(2, 5), last fifth: Beta(1, 5)), and, with several devices,
placement priors that favour the node's METIS part (Beta(5, 1) on that device's affinity,
Beta(1, 5) on the others). Imitating it gives REINFORCE a starting point that already encodes
"schedule like a DFS, place like a partitioner"; REINFORCE then learns where to depart from it.
This warm start is our addition; REGAL trains from scratch.
"""

from __future__ import annotations

import numpy as np

from regal.graph import Graph
from regal.policy.actions import BETA_ACTIONS, Actions
from regal.structure import dfs_order, metis_placement

__all__ = ["teacher_actions", "QUINTILE_ACTIONS"]

QUINTILE_ACTIONS = tuple(BETA_ACTIONS.index(ab) for ab in ((5.0, 1.0), (5.0, 2.0), (2.0, 2.0), (2.0, 5.0), (1.0, 5.0)))
_HIGH, _LOW = BETA_ACTIONS.index((5.0, 1.0)), BETA_ACTIONS.index((1.0, 5.0))


def teacher_actions(graph: Graph, devices: int) -> Actions:
    n = graph.num_nodes
    pos = np.empty(n)
    pos[dfs_order(graph)] = np.arange(n) / n
    sched = np.asarray(QUINTILE_ACTIONS)[np.minimum(4, (pos * 5).astype(int))]
    place = np.zeros((n, devices), dtype=np.int64)
    if devices > 1:
        part = metis_placement(graph, devices, seed=0)
        place[:] = _LOW
        place[np.arange(n), part] = _HIGH
    return Actions(place, sched, None)
