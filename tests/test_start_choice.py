"""The start choice (issue 34): a policy picks which start the flagship's climb goes on from."""

import numpy as np
import pytest

import regal
from randgraph import random_dag
from regal.local_search import Score
from regal.policy import init_policy, load_policy
from regal.policy.network import PolicyConfig
from regal.policy.start_choice import DEFAULT_COLUMN, NUM_START_FEATURES, start_features

CONFIG = PolicyConfig(start=True, placement=False, scheduling=False, features="v2", hidden=16, rounds=1)


class Forced:
    def __init__(self, k):
        self.k, self.seen = k, None

    def choose_start(self, graph, devices, names, scores):
        self.seen = (list(names), list(scores))
        return self.k


def test_start_features_columns():
    scores = [Score(200, 300, 2), Score(100, 150, 1), Score(100, 160, 1)]
    f = start_features(["gp-dfs", "xla-dfs/compute-on-1", "made-up"], scores)
    assert f.shape == (3, NUM_START_FEATURES)
    assert f[:, 0].tolist() == [0, 1, 0]                                  # computes on fewer devices
    assert np.isclose(f[0, 1], np.log(2.0)) and f[1, 1] == 0               # peak over the lowest
    assert f[:, DEFAULT_COLUMN].tolist() == [0, 1, 0]                      # the lowest score
    assert f[:, 3].tolist() == [1.0, 0.0, 0.5]                             # rank by score
    assert (np.abs(f).sum(axis=1) > 0).all()
    with pytest.raises(ValueError, match="starts"):
        start_features([], [])


def test_a_forced_choice_is_climbed_from_and_the_budget_is_exact():
    g = random_dag(5, num_nodes=80)
    default = regal.optimize(g, 2, budget=400, seed=1)
    names = default.info["seeding"]
    chosen = next(i for i, n in enumerate(names) if n != default.info["climbs"][0]["start"])
    forced = Forced(chosen)
    sol = regal.optimize(g, 2, budget=400, seed=1, policy=forced)
    assert sol.info["climbs"][0]["start"] == names[chosen]
    assert forced.seen[0] == names and all(isinstance(s, Score) for s in forced.seen[1])
    assert sol.evaluations == 400


def test_an_untrained_start_head_keeps_the_flagship_as_it_is():
    g = random_dag(7, num_nodes=60)
    pol = init_policy(CONFIG)
    for d in (1, 2):
        plain = regal.optimize(g, d, budget=300, seed=2)
        with_head = regal.optimize(g, d, budget=300, seed=2, policy=pol)
        assert with_head.peak_bytes == plain.peak_bytes
        assert np.array_equal(with_head.order, plain.order) and np.array_equal(with_head.placement, plain.placement)


def test_choose_start_numpy_and_jax_agree(tmp_path):
    rng = np.random.default_rng(0)
    pol = init_policy(CONFIG)
    pol.params = {m: {k: np.asarray(v) + 0.3 * rng.standard_normal(v.shape).astype(np.float32) for k, v in d.items()}
                  for m, d in pol.params.items()}
    g = random_dag(3, num_nodes=50)
    names = ["gp-dfs", "greedy", "xla-list", "inductor-dfs/compute-on-1"]
    scores = [Score(int(x), int(x) * 2, 1) for x in rng.integers(100, 200, 4)]
    k = pol.choose_start(g, 2, names, scores)
    path = tmp_path / "p.npz"
    pol.save(str(path))
    again = load_policy(str(path))
    assert again.choose_start(g, 2, names, scores) == k
    gas = type(pol)(CONFIG, pol.params)   # the JAX path (as "gas" policies run) on the same parameters
    from regal.policy import _jitted_apply
    from regal.policy.start_choice import MAX_STARTS
    feats = np.zeros((MAX_STARTS, NUM_START_FEATURES), np.float32)
    feats[:4] = start_features(names, scores)
    jax_scores = np.asarray(_jitted_apply(CONFIG)(gas.params, CONFIG.batch(g, 2), feats).start_scores)[:4]
    assert int(np.argmax(jax_scores)) == k


def test_the_shipped_learned_policy_runs_without_jax():
    import subprocess
    import sys
    code = ("import sys, regal; from randgraph import random_dag; "
            "s = regal.optimize(random_dag(1, num_nodes=60), 2, budget=300, policy='learned'); "
            "assert s.info['policy'] == 'learned'; sys.exit(any(m in sys.modules for m in ('jax', 'haiku')))")
    import os
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


def test_learned_in_the_paper_setting_is_plain_brkga():
    g = random_dag(4, num_nodes=70)
    import regal.methods
    paper = regal.methods.solve("regal-paper", g, 2, seed=3, budget=300, policy="learned")
    plain = regal.methods.solve("brkga", g, 2, seed=3, budget=300)
    assert paper.peak_bytes == plain.peak_bytes and np.array_equal(paper.order, plain.order)


def test_the_cli_runs_the_learned_policy(tmp_path):
    import json
    from click.testing import CliRunner
    from regal.cli import main
    from regal.graph import save
    path = tmp_path / "g.json"
    save(random_dag(6, num_nodes=60), str(path))
    r = CliRunner().invoke(main, ["optimize", str(path), "-d", "2", "--budget", "300", "--policy", "learned", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["info"]["policy"] == "learned" and doc["evaluations"] == 300
