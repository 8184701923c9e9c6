"""`PolicyConfig`: a policy network's shape and heads (NumPy only: loading a policy that runs
through `regal.policy.numpy_net` never imports JAX; `regal.policy.network` builds the network)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PolicyConfig"]


class PolicyConfig(NamedTuple):
    kind: str = "gnn"            # "gnn" (REGAL) or "gas" (graph as sequence)
    hidden: int = 64
    rounds: int = 4              # message-passing rounds (gnn)
    max_devices: int = 4         # placement head width; a policy serves 1..max_devices
    placement: bool = True       # which heads act (REGAL Table 3); an inactive head is plain BRKGA
    scheduling: bool = True
    elite: bool = False
    transfer_priority: bool = False  # REGAL's transfer-priority head (the runtime objective's chromosome)
    start: bool = False          # the start-choice head (issue 34): which start the flagship climbs from
    moves: bool = False          # the move head (issue 47): which node the climb's moves pick, and grouping
    default_bias: float = 2.0    # initial logit bonus of action 0
    structure_features: bool = True  # DFS position and METIS part as node features
    features: str = "v2"         # feature set (regal.policy.features): "v2" source-invariant, "v1" REGAL's
    drop_features: tuple = ()    # v2 feature groups zeroed (the ablation)

    def batch(self, graph, devices: int):
        """The padded features of `graph` that this network reads (built once per graph, devices
        and feature settings, and kept on the graph: a policy's start choice and its move head
        read the same)."""
        from regal.policy.features import build
        key = ("policy_batch", devices, self.structure_features, self.features, tuple(self.drop_features))
        return graph.cached(repr(key), lambda: build(graph, devices, self.structure_features, self.features,
                                                     tuple(self.drop_features)))
