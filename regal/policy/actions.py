"""The policy's discrete actions and how they become BRKGA priors (NumPy only).

Per node, one action for each gene group (REGAL, section 3.2 and Table 3):
    placement:  one Beta for each of the node's d device-affinity genes (BETA_ACTIONS)
    scheduling: one Beta for the node's scheduling-priority gene (BETA_ACTIONS)
    elite bias: the node's elite-inheritance probability (ELITE_ACTIONS)
    transfer priority: one Beta for the node's d transfer-priority genes (BETA_ACTIONS), in the
        runtime objective's chromosome only (SPEC.md section 5)
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

    placement: int[n, d]; scheduling: int[n]; elite: int[n]; transfer_priority: int[n].
    """
    placement: np.ndarray | None
    scheduling: np.ndarray | None
    elite: np.ndarray | None
    transfer_priority: np.ndarray | None = None


def to_priors(actions: Actions, num_nodes: int, devices: int, objective: str = "memory") -> Priors:
    """The Priors (per-gene Beta, per-node elite inheritance) that `actions` select, for the
    chromosome of `objective`: "memory" (d affinities and a priority per node) or "runtime" (the
    timed one: also d transfer priorities per node, SPEC.md section 5)."""
    if objective not in ("memory", "runtime"):
        raise ValueError(f"objective must be 'memory' or 'runtime', got {objective!r}")
    table = np.asarray(BETA_ACTIONS)
    width = devices + 1 if objective == "memory" else 2 * devices + 1
    ab = np.ones((num_nodes, width, 2))
    if actions.placement is not None:
        ab[:, :devices] = table[np.asarray(actions.placement)[:, :devices]]
    if actions.scheduling is not None:
        ab[:, devices] = table[np.asarray(actions.scheduling)]
    if objective == "runtime" and actions.transfer_priority is not None:
        ab[:, devices + 1:] = table[np.asarray(actions.transfer_priority)][:, None, :]
    inherit = None
    if actions.elite is not None:
        inherit = np.asarray(ELITE_ACTIONS)[np.asarray(actions.elite)]
    return Priors(ab[:, :, 0].reshape(-1), ab[:, :, 1].reshape(-1), inherit)
