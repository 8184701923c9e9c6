"""regal.policy.numpy_net: the NumPy forward of the "gnn" policy equals the Haiku network, head by head."""

import subprocess
import sys

import numpy as np
import pytest

from randgraph import random_dag
from regal.graph import Graph
from regal.policy import init_policy
from regal.policy.network import PolicyConfig, make_network
from regal.policy.numpy_net import forward
from regal.policy.start_choice import MAX_STARTS, NUM_START_FEATURES, start_features

HEADS = ("placement", "scheduling", "elite", "transfer_priority")
SMALL = dict(hidden=16, rounds=2)


def _perturbed(config, seed=0):
    """A fresh policy's parameters plus seeded noise, so the zero-initialised head weights matter."""
    rng = np.random.default_rng(seed)
    params = init_policy(config, seed=seed).params
    return {m: {k: np.asarray(v) + (0.1 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in d.items()}
            for m, d in params.items()}


def _graphs():
    isolated = Graph.from_records([{"id": "a", "bytes": 4}, {"id": "b", "bytes": 8, "resident": True},
                                   {"id": "c", "bytes": 2, "inputs": ["a"]}, {"id": "d", "bytes": 1}])
    single = Graph.from_records([{"id": "only", "bytes": 3}])  # no edges at all
    return [single, isolated, random_dag(1, num_nodes=40, control_fraction=0.3), random_dag(2, num_nodes=150)]


@pytest.mark.parametrize("config", [
    PolicyConfig(**SMALL),
    PolicyConfig(**SMALL, start=True),
    PolicyConfig(**SMALL, elite=True, features="v1"),
    PolicyConfig(**SMALL, transfer_priority=True, start=True, max_devices=3),
    PolicyConfig(**SMALL, features="v1", structure_features=False),
    PolicyConfig(**SMALL, start=True, moves=True, placement=False, scheduling=False),
], ids=["default", "start", "elite-v1", "transfer-start", "v1-nostructure", "start-moves"])
def test_numpy_forward_equals_haiku(config):
    params = _perturbed(config)
    net = make_network(config)
    rng = np.random.default_rng(3)
    starts = np.zeros((MAX_STARTS, NUM_START_FEATURES), np.float32)
    starts[:5] = start_features(["gp-dfs", "greedy", "xla-list/compute-on-1", "other", "inductor-dfs"],
                                [tuple(int(x) for x in rng.integers(1, 100, 3)) for _ in range(5)])
    for g, devices in zip(_graphs(), (1, 2, 1, 2)):
        batch = config.batch(g, devices)
        want = net.apply(params, None, batch, starts)
        got = forward(config, params, batch, starts)
        for head in HEADS + (("start_scores",) if config.start else ()) + (("moves",) if config.moves else ()):
            w = np.asarray(getattr(want, head))
            assert got[head].shape == w.shape, head
            assert np.allclose(got[head], w, rtol=1e-4, atol=1e-5), (head, np.abs(got[head] - w).max())
        if config.start:  # five real starts with non-trivial scores, the padding masked out
            assert np.ptp(got["start_scores"][:5]) > 0.01 and (got["start_scores"][5:] < -1e8).all()


def test_numpy_forward_takes_jax_parameters():
    config = PolicyConfig(hidden=16, rounds=1)
    pol = init_policy(config)
    batch = config.batch(_graphs()[2], 2)
    want = make_network(config).apply(pol.params, None, batch)
    assert np.allclose(forward(config, pol.params, batch)["scheduling"], np.asarray(want.scheduling), atol=1e-5)


def test_gas_kind_is_refused():
    config = PolicyConfig(kind="gas", **SMALL)
    with pytest.raises(ValueError, match="kind 'gas'"):
        forward(config, {}, config.batch(_graphs()[0], 1))


def test_numpy_forward_does_not_import_jax():
    code = ("import sys, regal.policy.numpy_net, regal.policy.features; "
            "sys.exit(any(m in sys.modules for m in ('jax', 'haiku')))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
