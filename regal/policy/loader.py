"""Loading, running and creating a policy (`regal.policy`'s functions and the `Policy` class).

`regal.policy` imports this module on first use of one of its names, so that reading the policy
names (`regal.policy.names`) or the shipped files' paths imports neither NumPy nor the graph
kernels (`regal --help` stays light).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
import zlib
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from regal.graph import Graph
from regal.policy import _HERE
from regal.policy.actions import Actions, to_priors
from regal.policy.features import GraphBatch
from regal.policy.names import SHIPPED_POLICIES
from regal.priors import Priors

__all__ = ["Policy", "load_policy", "init_policy", "policy_file"]


@lru_cache(maxsize=None)
def _jitted_apply(config):
    """`apply(params, batch) -> Logits` of the network of `config` (a PolicyConfig), jitted.

    One per config, shared by every Policy with an equal config: compiled code (one executable
    per padded bucket) is reused when, e.g., training validates a new Policy at every step.
    """
    import jax
    from regal.policy.network import make_network
    net = make_network(config)
    return jax.jit(lambda params, batch, starts=None: net.apply(params, None, batch, starts))


class Policy:
    """A trained (or fresh) policy: network config, parameters and provenance metadata."""

    def __init__(self, config, params, meta: dict | None = None, *, source: str | None = None):
        self.config = config
        self.params = params
        self.meta = dict(meta or {})
        self.source = source  # the file it was loaded from, for error messages

    @property
    def _apply(self):
        return _jitted_apply(self.config)

    def _check_devices(self, devices: int) -> None:
        if not 1 <= devices <= self.config.max_devices:
            raise ValueError(f"this policy serves 1..{self.config.max_devices} devices, not {devices}")

    def logits(self, graph: Graph, devices: int, batch: GraphBatch | None = None) -> dict[str, np.ndarray]:
        """Unpadded logits: placement [n, devices, A], scheduling [n, A], elite [n, B],
        transfer_priority [n, A] (zeros for a policy without that head)."""
        self._check_devices(devices)
        batch = batch if batch is not None else self.config.batch(graph, devices)
        try:
            if self.config.kind == "gnn":  # NumPy: no JAX import, milliseconds (numpy_net.py)
                from regal.policy.numpy_net import forward
                out = SimpleNamespace(**forward(self.config, self.params, batch))  # read like `Logits`
            else:
                out = self._apply(self.params, batch)
        except (ValueError, TypeError, KeyError) as e:  # a parameter missing or of another shape
            where = f"{self.source}: " if self.source else ""
            raise ValueError(f"{where}the parameters do not fit the policy's network ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''})") from None
        n = graph.num_nodes
        return {"placement": np.asarray(out.placement)[:n, :devices],
                "scheduling": np.asarray(out.scheduling)[:n], "elite": np.asarray(out.elite)[:n],
                "transfer_priority": np.asarray(out.transfer_priority)[:n]}

    @property
    def has_start(self) -> bool:
        """Whether the policy has a start-choice head (which start the flagship climbs from, issue 34)."""
        return bool(getattr(self.config, "start", False))

    def start_scores(self, graph: Graph, devices: int, names, scores, batch: GraphBatch | None = None) -> np.ndarray:
        """float[K]: the start-choice head's score of each of the starts `names` (at most
        MAX_STARTS) with climb scores `scores` (`regal.policy.start_choice`). Runs the NumPy
        network (no JAX) for "gnn" policies."""
        if not self.has_start:
            raise ValueError(f"{self.source or 'this policy'} has no start head")
        from regal.policy.start_choice import MAX_STARTS, padded_start_features
        self._check_devices(devices)
        feats = padded_start_features(names, scores)
        batch = batch if batch is not None else self.config.batch(graph, devices)
        if self.config.kind == "gnn":
            from regal.policy.numpy_net import forward
            out = forward(self.config, self.params, batch, feats)["start_scores"]
        else:
            out = _jitted_apply(self.config)(self.params, batch, feats).start_scores
        return np.asarray(out)[:min(len(names), MAX_STARTS)]

    def choose_start(self, graph: Graph, devices: int, names, scores, batch: GraphBatch | None = None) -> int:
        """The start the flagship's climb goes on from: the index among `names` of the highest
        `start_scores`."""
        return int(np.argmax(self.start_scores(graph, devices, names, scores, batch)))

    @property
    def has_moves(self) -> bool:
        """Whether the policy has a move head (the climb's move proposals, issue 47)."""
        return bool(getattr(self.config, "moves", False))

    def move_logits(self, graph: Graph, devices: int, batch: GraphBatch | None = None) -> np.ndarray:
        """float[n, 2]: the move head's node and group logits (`regal.moves`)."""
        if not self.has_moves:
            raise ValueError(f"{self.source or 'this policy'} has no move head")
        self._check_devices(devices)
        batch = batch if batch is not None else self.config.batch(graph, devices)
        if self.config.kind == "gnn":
            from regal.policy.numpy_net import forward
            out = forward(self.config, self.params, batch)["moves"]
        else:
            out = _jitted_apply(self.config)(self.params, batch).moves
        return np.asarray(out, dtype=np.float64)[:graph.num_nodes]

    def move_proposals(self, graph: Graph, devices: int, *, mix: float | None = None, learn: bool = False,
                       stats: bool = False):
        """The climb's move proposals for `graph` (`regal.moves.MoveProposals`): the move head's
        logits, a share `mix` of the picks (the file's `mix`, else `regal.moves.DEFAULT_MIX`)."""
        from regal.moves import DEFAULT_MIX, MoveProposals
        logits = self.move_logits(graph, devices)
        if mix is None:   # files written before issue 57 name it "moves_mix"
            mix = self.meta.get("mix", self.meta.get("moves_mix", DEFAULT_MIX))
        return MoveProposals(logits[:, 0], logits[:, 1], mix, learn=learn, stats=stats)

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
                       pick(lg["elite"]) if c.elite else None,
                       pick(lg["transfer_priority"]) if c.transfer_priority else None)

    def priors(self, graph: Graph, devices: int, *, sample: bool = False, seed: int = 0,
               objective: str | None = None) -> Priors:
        """BRKGA priors for `graph` on `devices` devices (see `regal.policy.actions`), for the
        chromosome of `objective` ("memory" or "runtime"; None: the one the policy was trained for)."""
        objective = objective or self.objective
        return to_priors(self.actions(graph, devices, sample=sample, seed=seed), graph.num_nodes, devices,
                         objective)

    @property
    def objective(self) -> str:
        """The objective the policy was trained for: "runtime" with a transfer-priority head."""
        return "runtime" if self.config.transfer_priority else "memory"

    def save(self, path: str) -> None:
        """Parameters as an .npz, with the config and metadata as JSON inside it."""
        flat = {f"{m}/{k}": np.asarray(v) for m, d in self.params.items() for k, v in d.items()}
        flat["__config__"] = np.array(json.dumps(self.config._asdict()))
        flat["__meta__"] = np.array(json.dumps(self.meta))
        from regal._io import atomic_binary
        with atomic_binary(path) as f:  # a kill mid-write leaves the earlier file
            np.savez_compressed(f, **flat)


def policy_file(path: str | os.PathLike) -> str:
    """The file of a policy: a shipped policy's name (regal/policy/NAME.npz) or the path itself."""
    p = os.fspath(path)
    return os.path.join(_HERE, f"{p}.npz") if p in SHIPPED_POLICIES else p


def load_policy(path: str | os.PathLike = "default") -> Policy:
    """Load a policy file; "learned" is the start choice trained for short budgets (issue 34),
    "default" is REGAL's shipped policy, "transfer" the one chosen by
    leave-one-source-out (feature set v2, scheduling head), "gas" the GAS baseline's, "runtime"
    the one trained for the runtime objective (with a transfer-priority head)."""
    from regal.policy.policy_config import PolicyConfig
    p = policy_file(path)
    if not os.path.exists(p):
        raise ValueError(f"{p}: no such policy file")
    try:
        with np.load(p, allow_pickle=False) as z:
            saved = json.loads(str(z["__config__"]))
            meta = json.loads(str(z["__meta__"]))
            params: dict = {}
            for key in z.files:
                if key.startswith("__"):
                    continue
                module, name = key.rsplit("/", 1)
                params.setdefault(module, {})[name] = z[key]
    except (OSError, ValueError, KeyError, TypeError, EOFError, RecursionError, zipfile.BadZipFile,
            zlib.error) as e:  # e.g. a cut-off file
        raise ValueError(f"{p}: not a regal policy file ({type(e).__name__})") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{p}: not a regal policy file (its config is not a JSON object)")
    saved.setdefault("features", "v1")  # files from before feature set v2 read v1
    config = PolicyConfig(**_config_fields(saved, p))
    if not isinstance(meta, dict):
        raise ValueError(f"{p}: not a regal policy file (its metadata is not a JSON object)")
    for m, d in params.items():
        for k, v in d.items():
            if v.dtype.kind not in "fiu" or v.dtype.itemsize > 8:
                raise ValueError(f"{p}: parameter {m}/{k} holds {v.dtype}, not numbers")
            if not np.isfinite(v).all():
                raise ValueError(f"{p}: parameter {m}/{k} holds NaN or infinity")
    if config.kind != "gnn":  # the NumPy forward runs "gnn" policies without JAX
        import jax.numpy as jnp
        params = {m: {k: jnp.asarray(v) for k, v in d.items()} for m, d in params.items()}
    return Policy(config, params, meta, source=p)


#: Largest values of the integer fields of a policy config a file may give (bigger ones are damage).
_CONFIG_LIMITS = {"hidden": 4096, "rounds": 64, "max_devices": 4096}


def _config_fields(saved: dict, source: str) -> dict:
    """The fields of a policy file's config, each checked against the type of PolicyConfig's
    default: ValueError naming the field for an unknown field or a value of another type."""
    from regal.policy.features import FEATURE_GROUPS, FEATURE_SETS
    from regal.policy.policy_config import PolicyConfig
    defaults = PolicyConfig()._asdict()
    out = {}
    for field, value in saved.items():
        if field not in defaults:
            raise ValueError(f"{source}: unknown policy config field {field!r}")
        want = defaults[field]
        if isinstance(want, bool):
            ok = isinstance(value, bool)
        elif isinstance(want, int):
            ok = type(value) is int and 1 - (field == "rounds") <= value <= _CONFIG_LIMITS.get(field, 2 ** 31)
        elif isinstance(want, float):
            ok = type(value) in (int, float) and math.isfinite(value)
        elif isinstance(want, tuple):
            ok = isinstance(value, list) and all(isinstance(x, str) for x in value)
            value = tuple(value) if ok else value
        else:
            ok = isinstance(value, type(want))
        if field == "kind":
            ok = value in ("gnn", "gas")
        elif field == "features":
            ok = value in FEATURE_SETS
        elif field == "drop_features" and ok:
            ok = set(value) <= set(FEATURE_GROUPS)
        if not ok:
            expected = {"kind": "'gnn' or 'gas'", "features": " or ".join(map(repr, FEATURE_SETS)),
                        "drop_features": f"a list of {', '.join(FEATURE_GROUPS)}", "bool": "true or false",
                        "int": f"an integer in {1 - (field == 'rounds')}..{_CONFIG_LIMITS.get(field, 2 ** 31)}",
                        "float": "a finite number"}
            raise ValueError(f"{source}: policy config field {field!r} is {json.dumps(value)[:40]}, not "
                             f"{expected.get(field) or expected[type(want).__name__]}")
        out[field] = value
    return out


def init_policy(config=None, seed: int = 0, example: Graph | None = None) -> Policy:
    """A fresh, untrained policy (it prefers plain BRKGA's action everywhere)."""
    import jax
    from regal.policy.network import PolicyConfig, make_network
    config = config or PolicyConfig()
    if example is None:
        example = Graph.from_records([{"id": "a", "bytes": 1}, {"id": "b", "bytes": 1, "inputs": ["a"]}])
    params = make_network(config).init(jax.random.PRNGKey(seed), config.batch(example, 1))
    return Policy(config, params, {"trained": False})
