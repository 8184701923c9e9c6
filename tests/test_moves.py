"""Issue 47: the climb's learned move proposals (`regal.moves`) and their training
(`regal.training.moves`)."""

import numpy as np
import pytest

import regal
from randgraph import random_dag
from regal.moves import MoveProposals
from regal.policy import init_policy
from regal.policy.network import PolicyConfig
from regal.training.moves import (Reinforce, fit_imitation, head_logits, imitation_targets, init_head,
                                  with_head)


class _Moves:
    """A policy object that gives the flagship move proposals made by `make(num_nodes)`."""

    def __init__(self, make):
        self.make, self.made = make, []

    def move_proposals(self, graph, devices):
        self.made.append(self.make(graph.num_nodes))
        return self.made[-1]


def _same(a, b):
    return a.peak_bytes == b.peak_bytes and np.array_equal(a.order, b.order) and np.array_equal(a.placement, b.placement)


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_mix_zero_is_the_flagship_bit_for_bit_and_counts_the_picks(devices):
    g = random_dag(5, num_nodes=120)
    plain = regal.optimize(g, devices, budget=600, seed=3)
    pol = _Moves(MoveProposals.uniform)
    counted = regal.optimize(g, devices, budget=600, seed=3, policy=pol)
    assert _same(plain, counted)
    stats = pol.made[0].stats
    assert stats.shape == (120, 6) and 0 < stats[:, 0].sum() <= 600 * 2
    assert (stats[:, 1] <= stats[:, 0]).all() and (stats[:, 3] <= stats[:, 2]).all() and (stats[:, 5] <= stats[:, 4]).all()
    if devices > 1:   # the group draw of device moves is counted
        assert stats[:, 2].sum() + stats[:, 4].sum() > 0


def test_a_policy_changes_the_picks_and_sums_a_gradient():
    g = random_dag(6, num_nodes=150)
    rng = np.random.default_rng(0)
    node, group = rng.normal(size=150), rng.normal(size=150)
    pol = _Moves(lambda n: MoveProposals(node, group, 0.5, learn=True, stats=True))
    sol = regal.optimize(g, 2, budget=800, seed=1, policy=pol)
    m = pol.made[0]
    grad = m.gradient()
    assert grad.shape == (150, 2) and np.isfinite(grad).all() and np.abs(grad).sum() > 0
    # a categorical's log-probability gradient sums to zero over its logits, move by move
    assert abs(grad[:, 0].sum()) < 1e-6 * max(1.0, np.abs(grad[:, 0]).sum())
    again = _Moves(lambda n: MoveProposals(node, group, 0.5, learn=True, stats=True))
    assert _same(sol, regal.optimize(g, 2, budget=800, seed=1, policy=again))   # deterministic
    assert np.array_equal(again.made[0].gradient(), grad)


def test_heavy_weights_steer_the_picks():
    g = random_dag(7, num_nodes=100)
    node = np.full(100, -4.0)
    node[:10] = 4.0
    pol = _Moves(lambda n: MoveProposals(node, np.zeros(n), 1.0, stats=True))
    regal.optimize(g, 2, budget=800, seed=0, policy=pol)
    picks = pol.made[0].stats[:, 0]
    base = _Moves(MoveProposals.uniform)
    regal.optimize(g, 2, budget=800, seed=0, policy=base)
    share = lambda p: p[:10].sum() / p.sum()
    assert share(picks) > 2 * share(base.made[0].stats[:, 0])


@pytest.mark.parametrize("args, match", [
    ((np.zeros(3), np.zeros(4)), "one of each per node"),
    ((np.array([0.0, np.nan]), np.zeros(2)), "finite"),
    ((np.zeros(2), np.zeros(2), 1.5), "mix must be in"),
])
def test_bad_move_policies_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        MoveProposals(*args)


def test_gradient_needs_learning():
    with pytest.raises(ValueError, match="learn=True"):
        MoveProposals.uniform(3).gradient()


def test_imitation_targets_favour_the_nodes_that_paid():
    stats = np.zeros((4, 6))
    stats[:, 0] = 50          # picks
    stats[0, 1] = 25          # node 0 paid half the time, the others rarely
    stats[1:, 1] = 2
    stats[:, 2], stats[:, 4] = 10, 10
    stats[2, 3], stats[2, 5] = 8, 1    # node 2's grouped moves paid more than its single ones
    t, w = imitation_targets(stats)
    assert t[0, 0] > 0 > t[1, 0] and t[2, 1] > 0 and (w > 0).all()


def test_training_the_head_moves_its_logits_the_right_way():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 8)).astype(np.float32)
    head = init_head(8, 16, seed=0)
    assert np.allclose(head_logits(head, x), 0.0)   # an untrained head: the climb's own picks
    t = np.zeros((30, 2), np.float32)
    t[:10, 0] = 2.0
    fitted, curve = fit_imitation(head, [(x, t, np.ones_like(t))], steps=100, lr=1e-2)
    assert curve[-1] < curve[0] and head_logits(fitted, x)[:10, 0].mean() > head_logits(fitted, x)[10:, 0].mean()
    rl = Reinforce(head, lr=1e-2)
    g = np.zeros((30, 2), np.float32)
    g[5, 0], g[6, 0] = 1.0, -1.0
    for _ in range(5):
        rl.step([(x, g, 1.0)])
    out = head_logits(rl.numpy_params, x)
    assert out[5, 0] > out[6, 0]


def test_a_policy_file_with_a_move_head_runs_in_the_flagship(tmp_path):
    g = random_dag(8, num_nodes=60)
    cfg = PolicyConfig(hidden=16, rounds=2, start=True, moves=True, placement=False, scheduling=False)
    start = init_policy(cfg._replace(moves=False), seed=0)
    states_dim = cfg.hidden + cfg.batch(g, 2).nodes.shape[1]
    head = init_head(states_dim, cfg.hidden, seed=1)
    head["head_moves"]["b"] = np.array([0.5, -0.5], np.float32)
    pol = with_head(start, head, 0.5, {"note": "test"})
    path = tmp_path / "p.npz"
    pol.save(str(path))
    from regal.policy import load_policy
    loaded = load_policy(str(path))
    assert loaded.has_moves and loaded.meta["mix"] == 0.5
    assert np.allclose(loaded.move_logits(g, 2)[:, 1], -0.5, atol=1e-5)
    sol = regal.optimize(g, 2, budget=400, seed=0, policy=str(path))
    assert sol.peak_bytes > 0
