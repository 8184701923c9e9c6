"""regal.policy: features, networks, actions -> priors, REINFORCE training and resume."""

import os

import numpy as np
import pytest

from randgraph import random_dag
from regal.graph import save
from regal.search import brkga_search as optimize
from regal.policy import Actions, init_policy, load_policy, to_priors
from regal.policy.features import NUM_NODE_FEATURES, build, bucket
from regal.policy.network import PolicyConfig


def test_buckets_are_powers_of_two_and_padding_is_masked():
    """Node and edge counts pad to powers of two; masks mark exactly the real nodes and edges."""
    g = random_dag(5, num_nodes=100, control_fraction=0.5)
    b = build(g, 2)
    assert b.nodes.shape == (128, NUM_NODE_FEATURES) and b.senders.shape[0] == bucket(g.num_data_edges + g.num_control_edges)
    assert b.node_mask.sum() == 100 and b.edge_mask.sum() == g.num_data_edges + g.num_control_edges
    assert (b.senders[~b.edge_mask] == 127).all() and not b.node_mask[127]
    assert sorted(b.seq_order[:100].tolist()) == list(range(100))
    assert np.isfinite(b.nodes).all() and np.abs(b.nodes).max() < 20


def test_bucket_function():
    """bucket(x) is the least power of two >= x (and >= the minimum)."""
    assert [bucket(x) for x in (1, 64, 65, 1000, 1024, 1025)] == [64, 64, 128, 1024, 1024, 2048]


def test_zero_actions_reproduce_plain_brkga_exactly():
    """All-default actions (Beta(1,1), inheritance 0.7) give plain BRKGA's solution bit for bit."""
    g = random_dag(9, num_nodes=80)
    n, d = g.num_nodes, 2
    acts = Actions(np.zeros((n, d), int), np.zeros(n, int), np.zeros(n, int))
    a = optimize(g, devices=d, budget=700, seed=3)
    b = optimize(g, devices=d, budget=700, seed=3, priors=to_priors(acts, n, d))
    assert a.peak_bytes == b.peak_bytes and np.array_equal(a.order, b.order)
    assert [h[:2] for h in a.info["history"]] == [h[:2] for h in b.info["history"]]


def test_actions_map_to_the_right_genes():
    """Placement actions set the d affinity genes, scheduling actions the priority gene."""
    acts = Actions(np.array([[3, 4], [0, 0]]), np.array([1, 6]), None)
    p = to_priors(acts, 2, 2)
    assert p.alpha.tolist() == [5.0, 1.0, 0.5, 1.0, 1.0, 5.0]
    assert p.beta.tolist() == [1.0, 5.0, 0.5, 1.0, 1.0, 2.0]
    assert p.elite_inheritance is None


@pytest.mark.parametrize("kind", ["gnn", "gas"])
def test_untrained_policy_prefers_plain_brkga_and_saves_losslessly(kind, tmp_path):
    """A fresh policy's most likely action is action 0; save/load keeps its outputs."""
    g = random_dag(2, num_nodes=70)
    pol = init_policy(PolicyConfig(kind=kind))
    acts = pol.actions(g, 2)
    assert (acts.scheduling == 0).all() and (acts.placement == 0).all() and acts.elite is None
    sampled = pol.actions(g, 2, sample=True, seed=1)
    assert 0 < (sampled.scheduling != 0).mean() < 0.8
    path = str(tmp_path / "p.npz")
    pol.save(path)
    back = load_policy(path)
    assert back.config == pol.config
    lg1, lg2 = pol.logits(g, 3), back.logits(g, 3)
    assert all(np.array_equal(lg1[k], lg2[k]) for k in lg1)


def test_gnn_is_permutation_equivariant():
    """Renumbering the nodes renumbers the GNN's outputs and changes nothing else.

    (Checked without the structural features: a DFS order and a METIS partition break ties by
    node index, so those two features themselves depend on the numbering.)"""
    import regal
    from regal.decode import decode
    g = random_dag(8, num_nodes=40)
    recs = g.to_records()
    _, order = decode(g, np.random.default_rng(0).random(2 * g.num_nodes), 1)  # a random topological order
    h = regal.Graph.from_records([recs[v] for v in order])
    assert h.ids != g.ids
    pol = init_policy(PolicyConfig(kind="gnn", structure_features=False), seed=3)
    # give the heads non-zero weights so the outputs depend on the node
    pol.params = {m: {k: (v + 0.1 if m.startswith("head") and k == "w" else v) for k, v in d.items()}
                  for m, d in pol.params.items()}
    a, b = pol.logits(g, 2), pol.logits(h, 2)
    idx = [h.index[nid] for nid in g.ids]
    assert np.allclose(a["scheduling"], b["scheduling"][idx], atol=1e-4)


def test_policies_with_equal_configs_share_one_compiled_network():
    """Policies with equal configs share one jitted apply, each with its own parameters."""
    a, b = init_policy(PolicyConfig(hidden=16), seed=0), init_policy(PolicyConfig(hidden=16), seed=1)
    assert a._apply is b._apply
    assert init_policy(PolicyConfig(hidden=8))._apply is not a._apply
    g = random_dag(4, num_nodes=30)
    before = b.logits(g, 2)["scheduling"]
    a.params = {m: {k: (v + 0.1 if m.startswith("head") and k == "w" else v) for k, v in d.items()}
                for m, d in a.params.items()}
    assert not np.allclose(a.logits(g, 2)["scheduling"], before)
    assert np.array_equal(b.logits(g, 2)["scheduling"], before)


def test_policy_inputs_are_checked():
    """A policy refuses device counts beyond its placement head."""
    pol = init_policy(PolicyConfig(max_devices=2))
    with pytest.raises(ValueError, match="1..2 devices"):
        pol.priors(random_dag(1, num_nodes=10), 3)


@pytest.mark.slow  # training: about 11 s
def test_reinforce_trains_checkpoints_and_resumes(tmp_path):
    """A short training run writes curves and checkpoints, and a resumed run continues from them."""
    from regal.training.reinforce import TrainConfig, train
    paths = []
    for s in range(4):
        p = str(tmp_path / f"g{s}.json.gz")
        save(random_dag(100 + s, num_nodes=60), p)
        paths.append(p)
    out = str(tmp_path / "run")
    tc = TrainConfig(devices=(1, 2), steps=3, samples=2, budget=200, validate_every=3, checkpoint_every=2)
    pol = train(paths[:3], paths[3:], out, tc=tc, resume=False, log=lambda *_: None)
    assert pol.meta["valid_improvement_pct"] == 0.0  # untrained = plain BRKGA on validation
    rows = open(os.path.join(out, "train.csv")).read().splitlines()
    assert len(rows) == 4 and rows[0].startswith("step,graph")
    assert {"checkpoint.npz", "curves.png", "best.npz", "last.npz", "reference.json"} <= set(os.listdir(out))
    train(paths[:3], paths[3:], out, tc=tc._replace(steps=5), resume=True, log=lambda *_: None)
    rows = open(os.path.join(out, "train.csv")).read().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3", "4", "5"]
