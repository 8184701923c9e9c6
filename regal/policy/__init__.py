"""REGAL's learned prior: a policy that reads a graph and biases the BRKGA per node.

The only package of regal that imports JAX, Haiku and optax (to train, and to run a "gas"
policy); `import regal` does not load it, and loading or running a "gnn" policy does not either
(`regal.policy.numpy_net`).

    policy = load_policy("default")            # the trained policy shipped with regal
    priors = policy.priors(graph, devices=2)   # per-gene Beta priors for regal.optimize
    regal.optimize(graph, devices=2, priors=priors)   # or: regal.optimize(..., policy="default")
"""

from __future__ import annotations

import importlib
import os

__all__ = ["Policy", "PolicyConfig", "load_policy", "init_policy", "DEFAULT_POLICY", "GAS_POLICY", "TRANSFER_POLICY",
           "LEARNED_POLICY",
           "RUNTIME_POLICY",
           "Actions", "BETA_ACTIONS", "ELITE_ACTIONS", "to_priors", "build"]

_HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_POLICY = os.path.join(_HERE, "default.npz")
GAS_POLICY = os.path.join(_HERE, "gas.npz")
#: The policy chosen by leave-one-source-out (issue 12): feature set v2, scheduling head only,
#: imitation of the teacher on all six corpus sources (transfer.json: command and evidence).
TRANSFER_POLICY = os.path.join(_HERE, "transfer.npz")
#: The start choice (issue 34): which start the flagship's climb goes on from, trained on the
#: flagship's result at 1,000 evaluations on six graph sources (learned.json: command and evidence).
LEARNED_POLICY = os.path.join(_HERE, "learned.npz")
#: The policy of the runtime objective (issue 16): REGAL's transfer-priority head with the
#: placement and scheduling heads, trained by REINFORCE on makespan (runtime.json: command and evidence).
RUNTIME_POLICY = os.path.join(_HERE, "runtime.npz")


#: Names defined in the package's modules, imported on first use (PEP 562): importing
#: `regal.policy.names` then imports nothing heavy.
_LAZY = {"Policy": "loader", "load_policy": "loader", "init_policy": "loader", "policy_file": "loader",
         "_jitted_apply": "loader", "PolicyConfig": "policy_config", "Actions": "actions",
         "BETA_ACTIONS": "actions", "ELITE_ACTIONS": "actions", "to_priors": "actions", "build": "features"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'regal.policy' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"regal.policy.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
