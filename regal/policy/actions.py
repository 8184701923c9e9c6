"""The policy's discrete actions and how they become BRKGA priors (NumPy only).

Per node, one action for each gene group (REGAL, section 3.2 and Table 3):
    placement:  one Beta for each of the node's d device-affinity genes (BETA_ACTIONS)
    scheduling: one Beta for the node's scheduling-priority gene (BETA_ACTIONS)
    elite bias: the node's elite-inheritance probability (ELITE_ACTIONS)
Action 0 of every set is plain BRKGA's choice (Beta(1, 1); the config's inheritance 0.7), so
the all-zero action reproduces plain BRKGA exactly and the policy can always fall back to it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regal.priors import Priors

__all__ = ["BETA_ACTIONS", "ELITE_ACTIONS", "Actions", "to_priors"]

BETA_ACTIONS = ((1.0, 1.0), (0.5, 0.5), (2.0, 2.0), (5.0, 1.0), (1.0, 5.0), (2.0, 5.0), (5.0, 2.0))
ELITE_ACTIONS = (0.7, 0.5, 0.6, 0.8, 0.9)


class Actions(NamedTuple):
    """Chosen action indices; None for a head that is switched off (plain BRKGA's choice).

    placement: int[n, d]; scheduling: int[n]; elite: int[n].
    """
    placement: np.ndarray | None
    scheduling: np.ndarray | None
    elite: np.ndarray | None


def to_priors(actions: Actions, num_nodes: int, devices: int) -> Priors:
    """The Priors (per-gene Beta, per-node elite inheritance) that `actions` select."""
    table = np.asarray(BETA_ACTIONS)
    ab = np.ones((num_nodes, devices + 1, 2))
    if actions.placement is not None:
        ab[:, :devices] = table[np.asarray(actions.placement)[:, :devices]]
    if actions.scheduling is not None:
        ab[:, devices] = table[np.asarray(actions.scheduling)]
    inherit = None
    if actions.elite is not None:
        inherit = np.asarray(ELITE_ACTIONS)[np.asarray(actions.elite)]
    return Priors(ab[:, :, 0].reshape(-1), ab[:, :, 1].reshape(-1), inherit)
