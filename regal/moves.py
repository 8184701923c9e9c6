"""A move policy for the flagship's climb (issue 47): which node a move picks, and whether a
device move takes the node's neighbours along, from per-node distributions a trained network
gives (`regal.policy`, a policy with a moves head: `PolicyConfig.moves`).

The climb (`regal.kernels.climb`) picks the node of each move from a pool (the nodes near a step at the
peak, the tensors held across it, or all nodes), uniformly or by bytes; with a move policy, a
share `mix` of those picks follows the policy's weights instead (a categorical over the pool,
weight exp(logit) per node), and a device move of a non-resident node takes its neighbours along
with probability mix x sigmoid(group logit) + (1 - mix) x the climb's adaptive share. The other
draws (which kind of move, which device, which position) stay the climb's.

`MoveProposals` holds one graph's arrays. Made with `learn=True`, the climb also sums, over its
moves, REINFORCE's gradient of the log-probability of each pick with respect to the logits,
times the move's advantage (reward 1 when the move improved the score, else 0, less its running
mean): `gradient()` returns it per node, and `regal.training.moves` backpropagates it into the
network. Made with `stats=True` it counts per node the picks and improvements (the imitation
data). With mix 0 the climb makes exactly its own draws: the flagship without a policy, bit for
bit.
"""

from __future__ import annotations

import numpy as np

from regal.kernels.climb_picks import GLOB_ANY, GLOB_MOVABLE, LOGIT_NODE, LOGITS, PICK_FIELDS, STATS

__all__ = ["MoveProposals", "LOGIT_LIMIT", "DEFAULT_MIX"]

#: Node and group logits are clipped to +- this (weights within e^8 of each other): every node
#: keeps a share of the picks the policy makes.
LOGIT_LIMIT = 4.0
#: The mix, the share of the picks a policy makes, when its file does not say (`Policy.meta["mix"]`).
DEFAULT_MIX = 0.5


class MoveProposals:
    """One graph's move policy: node logits (float[n]: a pick's weight is exp(logit)), group
    logits (float[n]: the probability a device move of the node is grouped is their sigmoid) and
    the share `mix` of the picks they make."""

    def __init__(self, node_logits, group_logits, mix: float = DEFAULT_MIX, *, learn: bool = False,
                 stats: bool = False):
        node, group = np.asarray(node_logits, dtype=np.float64), np.asarray(group_logits, dtype=np.float64)
        if node.ndim != 1 or group.shape != node.shape or not np.isfinite(node).all() or not np.isfinite(group).all():
            raise ValueError("move policy: node and group logits must be finite, one of each per node")
        self.clipped = np.stack([np.abs(node) > LOGIT_LIMIT, np.abs(group) > LOGIT_LIMIT], axis=1)
        node, group = np.clip(node, -LOGIT_LIMIT, LOGIT_LIMIT), np.clip(group, -LOGIT_LIMIT, LOGIT_LIMIT)
        if not 0.0 <= float(mix) <= 1.0:
            raise ValueError(f"move policy: mix must be in [0, 1], got {mix!r}")
        n = node.shape[0]
        self.mix = float(mix)
        self.weight = np.exp(node - node.max(initial=0.0))
        self.group = 1.0 / (1.0 + np.exp(-group))
        self.cum = np.cumsum(self.weight)
        self.stats = np.zeros((n if stats else 0, STATS))
        self.grad = np.zeros((n if learn else 0, LOGITS))
        self.glob = np.zeros(2)
        self.pick = np.zeros(PICK_FIELDS)   # its PICK_BASELINE, the reward's mean, carries over from climb to climb
        self._movable = None

    @classmethod
    def uniform(cls, num_nodes: int, *, stats: bool = True) -> "MoveProposals":
        """No policy (mix 0: the climb's own draws), counting the picks: the imitation data."""
        return cls(np.zeros(num_nodes), np.zeros(num_nodes), 0.0, stats=stats)

    def arrays(self, movable: np.ndarray) -> dict:
        """The `ClimbState` fields (`regal.kernels.structs`) of this policy, for a graph whose
        non-resident nodes are `movable`; the counting arrays are shared, not copied."""
        if self._movable is None or not np.array_equal(self._movable[0], movable):
            self._movable = (movable.copy(), np.cumsum(self.weight[movable]))
        return dict(move_weight=self.weight, move_cum=self.cum, move_cum_movable=self._movable[1],
                    move_group=self.group, move_stats=self.stats, move_grad=self.grad, move_glob=self.glob,
                    move_pick=self.pick)

    def gradient(self) -> np.ndarray:
        """float[n, 2]: the summed REINFORCE gradient of the moves' log-probabilities, times
        their advantages, with respect to the node logits (column 0) and the group logits (1):
        the picks over all nodes or all movable nodes spread over them by weight here (the
        kernel sums their share once, `glob`). Logits at the clip get no gradient."""
        if self.grad.shape[0] == 0:
            raise ValueError("this move policy was not made with learn=True")
        g = self.grad.copy()
        g[:, LOGIT_NODE] -= self.glob[GLOB_ANY] * self.weight / self.cum[-1]
        if self._movable is not None and self._movable[0].size:
            mov = self._movable[0]
            g[mov, LOGIT_NODE] -= self.glob[GLOB_MOVABLE] * self.weight[mov] / self._movable[1][-1]
        g[self.clipped] = 0.0
        return g
