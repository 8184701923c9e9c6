"""REGAL's learned prior: a policy that reads a graph and biases the BRKGA per node.

The only package of regal that imports JAX, Haiku and optax; `import regal` does not load it.

    policy = load_policy("default")            # the trained policy shipped with regal
    priors = policy.priors(graph, devices=2)   # per-gene Beta priors for regal.optimize
    regal.optimize(graph, devices=2, priors=priors)   # or: regal.optimize(..., policy="default")
"""

from __future__ import annotations

import json
import os
import zipfile
from functools import lru_cache

import numpy as np

from regal.graph import Graph
from regal.policy.actions import BETA_ACTIONS, ELITE_ACTIONS, Actions, to_priors
from regal.policy.features import GraphBatch, build
from regal.priors import Priors

__all__ = ["Policy", "PolicyConfig", "load_policy", "init_policy", "DEFAULT_POLICY", "GAS_POLICY",
           "Actions", "BETA_ACTIONS", "ELITE_ACTIONS", "to_priors", "build"]

_HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_POLICY = os.path.join(_HERE, "default.npz")
GAS_POLICY = os.path.join(_HERE, "gas.npz")


def __getattr__(name):
    if name == "PolicyConfig":
        from regal.policy.network import PolicyConfig
        return PolicyConfig
    raise AttributeError(name)


@lru_cache(maxsize=None)
def _jitted_apply(config):
    """`apply(params, batch) -> Logits` of the network of `config` (a PolicyConfig), jitted.

    One per config, shared by every Policy with an equal config: compiled code (one executable
    per padded bucket) is reused when, e.g., training validates a new Policy at every step.
    """
    import jax
    from regal.policy.network import make_network
    net = make_network(config)
    return jax.jit(lambda params, batch: net.apply(params, None, batch))


class Policy:
    """A trained (or fresh) policy: network config, parameters and provenance metadata."""

    def __init__(self, config, params, meta: dict | None = None):
        self.config = config
        self.params = params
        self.meta = dict(meta or {})

    @property
    def _apply(self):
        return _jitted_apply(self.config)

    def _check_devices(self, devices: int) -> None:
        if not 1 <= devices <= self.config.max_devices:
            raise ValueError(f"this policy serves 1..{self.config.max_devices} devices, not {devices}")

    def logits(self, graph: Graph, devices: int, batch: GraphBatch | None = None) -> dict[str, np.ndarray]:
        """Unpadded logits: placement [n, devices, A], scheduling [n, A], elite [n, B]."""
        self._check_devices(devices)
        batch = batch if batch is not None else self.config.batch(graph, devices)
        out = self._apply(self.params, batch)
        n = graph.num_nodes
        return {"placement": np.asarray(out.placement)[:n, :devices],
                "scheduling": np.asarray(out.scheduling)[:n], "elite": np.asarray(out.elite)[:n]}

    def actions(self, graph: Graph, devices: int, *, sample: bool = False, seed: int = 0) -> Actions:
        """The most likely action per node and head, or a sample (Gumbel-max, seeded)."""
        lg = self.logits(graph, devices)
        rng = np.random.default_rng(seed)

        def pick(x):
            if sample:
                x = x + rng.gumbel(size=x.shape)
            return np.argmax(x, axis=-1)

        c = self.config
        return Actions(pick(lg["placement"]) if c.placement else None,
                       pick(lg["scheduling"]) if c.scheduling else None,
                       pick(lg["elite"]) if c.elite else None)

    def priors(self, graph: Graph, devices: int, *, sample: bool = False, seed: int = 0) -> Priors:
        """BRKGA priors for `graph` on `devices` devices (see `regal.policy.actions`)."""
        return to_priors(self.actions(graph, devices, sample=sample, seed=seed), graph.num_nodes, devices)

    def save(self, path: str) -> None:
        """Parameters as an .npz, with the config and metadata as JSON inside it."""
        flat = {f"{m}/{k}": np.asarray(v) for m, d in self.params.items() for k, v in d.items()}
        flat["__config__"] = np.array(json.dumps(self.config._asdict()))
        flat["__meta__"] = np.array(json.dumps(self.meta))
        from regal._io import atomic_binary
        with atomic_binary(path) as f:  # a kill mid-write leaves the earlier file
            np.savez_compressed(f, **flat)


def load_policy(path: str | os.PathLike = "default") -> Policy:
    """Load a policy file; "default" is REGAL's shipped policy and "gas" the GAS baseline's."""
    from regal.policy.network import PolicyConfig
    p = os.fspath(path)
    p = {"default": DEFAULT_POLICY, "gas": GAS_POLICY}.get(p, p)
    if not os.path.exists(p):
        raise ValueError(f"{p}: no such policy file")
    try:
        with np.load(p) as z:
            saved = json.loads(str(z["__config__"]))
            saved.setdefault("features", "v1")  # files from before feature set v2 read v1
            saved["drop_features"] = tuple(saved.get("drop_features", ()))
            config = PolicyConfig(**saved)
            meta = json.loads(str(z["__meta__"]))
            params: dict = {}
            for key in z.files:
                if key.startswith("__"):
                    continue
                module, name = key.rsplit("/", 1)
                params.setdefault(module, {})[name] = z[key]
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as e:  # e.g. a cut-off file
        raise ValueError(f"{p}: not a regal policy file ({type(e).__name__})") from None
    import jax.numpy as jnp
    params = {m: {k: jnp.asarray(v) for k, v in d.items()} for m, d in params.items()}
    return Policy(config, params, meta)


def init_policy(config=None, seed: int = 0, example: Graph | None = None) -> Policy:
    """A fresh, untrained policy (it prefers plain BRKGA's action everywhere)."""
    import jax
    from regal.policy.network import PolicyConfig, make_network
    config = config or PolicyConfig()
    if example is None:
        example = Graph.from_records([{"id": "a", "bytes": 1}, {"id": "b", "bytes": 1, "inputs": ["a"]}])
    params = make_network(config).init(jax.random.PRNGKey(seed), config.batch(example, 1))
    return Policy(config, params, {"trained": False})
