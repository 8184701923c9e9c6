"""The runtime objective's learned prior (issue 16): REGAL's transfer-priority head, the timed
chromosome's priors, REINFORCE on makespan, and the refusals when a policy and an objective differ."""

import json
import os

import numpy as np
import pytest

from randgraph import random_dag
from regal.graph import save
from regal.policy import Actions, BETA_ACTIONS, init_policy, to_priors
from regal.policy.network import PolicyConfig
from regal.runtime import optimize_runtime
from regal.timed import timed_chromosome_length


def test_runtime_priors_lay_the_transfer_action_over_the_d_transfer_genes():
    """to_priors(objective="runtime"): per node d affinities, the priority, then d transfer genes
    sharing the transfer-priority action; the memory layout is unchanged by the new field."""
    n, d = 3, 2
    acts = Actions(np.array([[1, 2], [0, 0], [3, 4]]), np.array([5, 0, 6]), None, np.array([3, 0, 4]))
    mem = to_priors(acts, n, d)
    assert mem.num_keys == n * (d + 1)
    assert np.array_equal(mem.alpha, to_priors(acts._replace(transfer_priority=None), n, d).alpha)
    rt = to_priors(acts, n, d, "runtime")
    assert rt.num_keys == timed_chromosome_length(n, d) == n * (2 * d + 1)
    ab = np.stack([rt.alpha, rt.beta], axis=1).reshape(n, 2 * d + 1, 2)
    table = np.asarray(BETA_ACTIONS)
    assert np.array_equal(ab[0, :2], table[[1, 2]]) and np.array_equal(ab[0, 2], table[5])
    assert np.array_equal(ab[0, 3:], table[[3, 3]]) and np.array_equal(ab[2, 3:], table[[4, 4]])
    assert np.array_equal(ab[1], np.ones((2 * d + 1, 2)))  # action 0 everywhere: Beta(1, 1)
    with pytest.raises(ValueError, match="objective"):
        to_priors(acts, n, d, "speed")


def test_untrained_runtime_policy_is_plain_and_a_trained_one_steers_the_timed_search():
    """A fresh policy with the transfer-priority head gives the runtime flagship's result bit for bit
    (its most likely actions are plain BRKGA's); priors that are not uniform change the search."""
    g = random_dag(21, num_nodes=60)
    pol = init_policy(PolicyConfig(transfer_priority=True), example=g)
    assert pol.objective == "runtime" and pol.priors(g, 2).num_keys == timed_chromosome_length(60, 2)
    plain = optimize_runtime(g, 2, 600, 1)
    same = optimize_runtime(g, 2, 600, 1, policy=pol)
    assert same.info["timed"]["makespan_s"] == plain.info["timed"]["makespan_s"] and same.info["priors"]
    n = g.num_nodes
    skew = to_priors(Actions(np.tile([3, 4], (n, 1)), None, None, np.full(n, 3)), n, 2, "runtime")
    other = optimize_runtime(g, 2, 600, 1, priors=skew, seeding=False, polish=False)
    base = optimize_runtime(g, 2, 600, 1, seeding=False, polish=False)
    assert [h[:2] for h in other.info["history"]] != [h[:2] for h in base.info["history"]]


def test_policy_and_objective_must_match():
    """A memory policy (or the teacher) is refused for the runtime objective and a runtime policy
    for the memory objective, each with a one-line ValueError; so are priors of the wrong length."""
    import regal
    g = random_dag(22, num_nodes=30)
    rt = init_policy(PolicyConfig(transfer_priority=True), example=g)
    mem = init_policy(PolicyConfig(), example=g)
    with pytest.raises(ValueError, match="memory objective, not 'runtime'"):
        regal.optimize(g, 2, budget=100, objective="runtime", policy=mem)
    with pytest.raises(ValueError, match="runtime objective, not 'memory'"):
        regal.optimize(g, 2, budget=100, policy=rt)
    with pytest.raises(ValueError, match="predicts the memory objective"):
        regal.optimize(g, 2, budget=100, objective="runtime", policy="teacher")
    with pytest.raises(ValueError, match="genes"):
        regal.optimize(g, 2, budget=100, objective="runtime", priors=mem.priors(g, 2))


def test_the_shipped_runtime_policy_loads_and_runs_from_the_command_line(tmp_path):
    """`--policy runtime` names the shipped policy of the runtime objective: its provenance file
    says how it was made, and `regal optimize --objective runtime --policy runtime` uses it."""
    from click.testing import CliRunner
    from regal.cli import main
    from regal.policy import RUNTIME_POLICY, load_policy
    pol = load_policy("runtime")
    assert pol.objective == "runtime"
    with open(os.path.splitext(RUNTIME_POLICY)[0] + ".json") as f:
        meta = json.load(f)
    assert meta["file"] == "runtime.npz" and "--objective runtime" in meta["command"]
    p, out = tmp_path / "g.json.gz", tmp_path / "sol.json"
    save(random_dag(24, num_nodes=40), p)
    r = CliRunner().invoke(main, ["optimize", str(p), "-d", "2", "--budget", "200", "--objective", "runtime",
                                  "--policy", "runtime", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["info"]["priors"] is True


def test_cli_refuses_a_memory_policy_for_the_runtime_objective(tmp_path):
    """`regal optimize --objective runtime --policy default`: one line naming the mismatch, exit 2."""
    from click.testing import CliRunner
    from regal.cli import main
    p = tmp_path / "g.json.gz"
    save(random_dag(23, num_nodes=20), p)
    r = CliRunner().invoke(main, ["optimize", str(p), "-d", "2", "--budget", "50", "--objective", "runtime",
                                  "--policy", "default"])
    assert r.exit_code != 0 and "trained for the memory objective" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.slow  # training: about 55 s
def test_reinforce_on_makespan_trains_and_keeps_its_references_apart(tmp_path):
    """objective="runtime": rewards from timed BRKGA runs, references keyed by objective, resume
    works, and a memory-setting policy config is refused."""
    from regal.training.reinforce import TrainConfig, train
    paths = []
    for s in range(3):
        p = str(tmp_path / f"g{s}.json.gz")
        save(random_dag(200 + s, num_nodes=40), p)
        paths.append(p)
    out = str(tmp_path / "run")
    tc = TrainConfig(devices=(2,), steps=2, samples=2, budget=150, validate_every=2, checkpoint_every=1,
                     objective="runtime", learning_rate=1e-2)
    cfg = PolicyConfig(transfer_priority=True, hidden=16, rounds=1)
    pol = train(paths[:2], paths[2:], out, cfg, tc, resume=False, log=lambda *_: None)
    assert pol.objective == "runtime" and pol.meta["valid_improvement_pct"] == 0.0
    refs = json.load(open(os.path.join(out, "reference.json")))
    assert refs and all(k.endswith("|runtime") and isinstance(v, float) and v > 0 for k, v in refs.items())
    train(paths[:2], paths[2:], out, cfg, tc._replace(steps=3), resume=True, log=lambda *_: None)
    rows = open(os.path.join(out, "train.csv")).read().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3"]
    with pytest.raises(ValueError, match="transfer-priority head"):
        train(paths[:2], [], str(tmp_path / "x"), PolicyConfig(), tc, log=lambda *_: None)


def test_a_checkpoint_from_before_the_objective_field_still_resumes():
    """Fields added to the training or policy config since a checkpoint, at their defaults, are
    the checkpoint's run: resuming is allowed; another value is refused naming the field."""
    from regal.training.reinforce import ResumeError, TrainConfig, _check_setup, run_setup
    now = run_setup(TrainConfig(), PolicyConfig(), ["a.json"], [])
    old = json.loads(json.dumps(now))
    del old["train_config"]["objective"], old["policy_config"]["transfer_priority"]
    _check_setup("ck", old, now)
    rt = run_setup(TrainConfig(objective="runtime"), PolicyConfig(transfer_priority=True), ["a.json"], [])
    with pytest.raises(ResumeError) as e:
        _check_setup("ck", old, rt)
    assert e.value.field in ("objective", "transfer_priority")
