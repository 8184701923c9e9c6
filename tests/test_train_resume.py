"""Training resume: a stopped run continues with the same numbers as one never stopped; a
checkpoint of another setting, or a damaged one, is refused with one line; nothing is pickled."""

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from randgraph import random_dag
from regal.graph import save

pytest.importorskip("jax")

from regal.policy import load_policy  # noqa: E402
from regal.training.reinforce import (CheckpointError, ResumeError, TrainConfig,  # noqa: E402
                                    train)

TINY = TrainConfig(devices=(1, 2), steps=4, samples=2, budget=60, checkpoint_every=2, validate_every=2,
                   valid_seeds=1)
QUIET = lambda *_: None  # noqa: E731


class _Killed(Exception):
    pass


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    d = tmp_path_factory.mktemp("graphs")
    paths = []
    for s in range(3):
        p = str(d / f"g{s}.json")
        save(random_dag(300 + s, num_nodes=24), p)
        paths.append(p)
    return paths


@pytest.fixture(scope="module")
def stopped_run(graphs, tmp_path_factory):
    """A run killed right after step 3 (its checkpoint is from step 2), and the same run resumed."""
    out = str(tmp_path_factory.mktemp("stopped"))

    def log(msg):
        if msg.startswith("step 3/"):
            raise _Killed

    with pytest.raises(_Killed):
        train(graphs[:2], graphs[2:], out, tc=TINY, resume=True, log=log)
    before = sorted(os.listdir(out))
    train(graphs[:2], graphs[2:], out, tc=TINY, resume=True, log=QUIET)
    return out, before


@pytest.fixture(scope="module")
def checkpointed(graphs, tmp_path_factory):
    """A folder with the checkpoint of TINY's run on graphs[:2] at step 2 (made without training,
    so that the tests of refusals need no compiled network)."""
    import jax
    from regal.policy import init_policy
    from regal.training.reinforce import _Learner, _save_checkpoint, _TrainState, run_setup
    out = str(tmp_path_factory.mktemp("checkpointed"))
    policy = init_policy(None, seed=TINY.seed)
    learner = _Learner(policy, TINY)
    state = _TrainState(policy.params, learner.opt.init(policy.params), 2, jax.random.PRNGKey(0), 0.5, [1, 0])
    _save_checkpoint(os.path.join(out, "checkpoint.npz"), state, np.random.default_rng(0),
                     run_setup(TINY, policy.config, graphs[:2], graphs[2:]))
    return out


def _rows(path):
    return [r.split(",") for r in open(path).read().splitlines()]


@pytest.mark.slow  # three short training runs: about 30 s
def test_a_resumed_run_equals_an_uninterrupted_one(graphs, stopped_run, tmp_path):
    """Same parameters, same curves (but the wall seconds), no duplicated rows."""
    out, before = stopped_run
    assert "checkpoint.npz" in before and not [f for f in before if ".tmp" in f or f.endswith(".pkl")]
    whole = str(tmp_path / "whole")
    train(graphs[:2], graphs[2:], whole, tc=TINY, resume=True, log=QUIET)
    a, b = load_policy(os.path.join(out, "last.npz")), load_policy(os.path.join(whole, "last.npz"))
    for m in a.params:
        for k in a.params[m]:
            assert np.array_equal(np.asarray(a.params[m][k]), np.asarray(b.params[m][k])), (m, k)
    ta, tb = _rows(os.path.join(out, "train.csv")), _rows(os.path.join(whole, "train.csv"))
    assert [r[0] for r in ta] == ["step", "1", "2", "3", "4"]
    assert [r[:-1] for r in ta] == [r[:-1] for r in tb]  # all but "seconds"
    assert _rows(os.path.join(out, "valid.csv")) == _rows(os.path.join(whole, "valid.csv"))
    assert [r[0] for r in _rows(os.path.join(out, "valid.csv"))] == ["step", "0", "2", "4"]


def test_the_checkpoint_is_an_npz_without_pickles(checkpointed):
    with np.load(os.path.join(checkpointed, "checkpoint.npz"), allow_pickle=False) as z:
        doc = json.loads(str(z["__state__"]))
        assert z["key"].dtype == np.uint32 and any(k.startswith("opt/") for k in z.files)
    assert doc["format"] == "regal-checkpoint/1" and doc["step"] == 2 and doc["order"] == [1, 0]
    assert doc["setup"]["train_graphs"] == ["g0.json", "g1.json"]


@pytest.mark.parametrize("change, field", [
    (dict(tc=TINY._replace(budget=61)), "budget"),
    (dict(tc=TINY._replace(devices=(2,))), "devices"),
    (dict(policy_config="gas"), "kind"),
    (dict(train_paths=1), "train_graphs"),
    (dict(valid_paths=0), "valid_graphs"),
])
def test_resume_refuses_another_setting_naming_the_field(graphs, checkpointed, change, field):
    from regal.policy.network import PolicyConfig
    out = checkpointed
    kw = dict(tc=TINY._replace(steps=6))
    if "tc" in change:
        kw["tc"] = change["tc"]
    if "policy_config" in change:
        kw["policy_config"] = PolicyConfig(kind=change["policy_config"])
    train_paths = graphs[:change.get("train_paths", 2)]
    valid_paths = graphs[2:] if "valid_paths" not in change else []
    with pytest.raises(ResumeError, match=field) as e:
        train(train_paths, valid_paths, out, resume=True, log=QUIET, **kw)
    assert e.value.field == field and "\n" not in str(e.value)


def _damaged_copies(src: bytes):
    """(label, bytes): cut off, flipped bytes, emptied, and valid zips with wrong contents."""
    rng = np.random.default_rng(0)
    yield "empty", b""
    for frac in (0.1, 0.5, 0.9, 0.999):
        yield f"cut at {frac}", src[:int(len(src) * frac)]
    for k in range(6):
        b = bytearray(src)
        for i in rng.integers(0, len(b), size=3):
            b[i] ^= 0xFF
        yield f"flipped {k}", bytes(b)
    yield "text", b"not a checkpoint\n"


def _rezip(src_path, dst_path, edit):
    with np.load(src_path) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    np.savez(dst_path, **arrays)


def _edit_state(**fields):
    def edit(arrays):
        doc = json.loads(str(arrays["__state__"]))
        doc.update(fields)
        arrays["__state__"] = np.array(json.dumps(doc))
    return edit


def test_a_damaged_checkpoint_is_a_one_line_error(graphs, checkpointed, tmp_path):
    out = checkpointed
    src = os.path.join(out, "checkpoint.npz")
    data = open(src, "rb").read()
    cases = list(_damaged_copies(data))
    edits = {"no state": lambda a: a.pop("__state__"), "step -1": _edit_state(step=-1),
             "step text": _edit_state(step="4"), "order": _edit_state(order=[0, 0]),
             "rng": _edit_state(rng={"bit_generator": "MT19937"}), "format": _edit_state(format="x"),
             "nested": _edit_state(setup=json.loads("[" * 50 + "]" * 50)),
             "no key": lambda a: a.pop("key"), "opt missing": lambda a: a.pop("opt/0"),
             "param shape": lambda a: a.update({k: a[k][:1] for k in a if k.startswith("params/")})}
    for label, edit in edits.items():
        p = str(tmp_path / "x.npz")
        _rezip(src, p, edit)
        cases.append((label, open(p, "rb").read()))
    run = str(tmp_path / "run")
    os.makedirs(run)
    for label, blob in cases:
        with open(os.path.join(run, "checkpoint.npz"), "wb") as f:
            f.write(blob)
        with pytest.raises(CheckpointError) as e:
            train(graphs[:2], graphs[2:], run, tc=TINY, resume=True, log=QUIET)
        assert "\n" not in str(e.value) and "checkpoint.npz" in str(e.value), label


def test_an_old_pickle_checkpoint_is_not_read(graphs, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pkl").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    with pytest.raises(CheckpointError, match="pickle"):
        train(graphs[:2], graphs[2:], str(run), tc=TINY, resume=True, log=QUIET)


def _manifest(tmp_path, graphs):
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps({"format": "regal-manifest/1", "root": os.path.dirname(graphs[0]),
                             "splits": {"train": ["g0", "g1"], "valid": ["g2"]},
                             "graphs": {f"g{i}": {"path": f"g{i}.json", "nodes": 24} for i in range(3)}}))
    return str(m)


def test_cli_train_refuses_a_mismatch_or_a_damaged_checkpoint_in_one_line(graphs, checkpointed, tmp_path):
    """Before any cluster starts: the option to change is named, --fresh suggested."""
    from regal.cli import main
    out = checkpointed
    base = ["train", "--manifest", _manifest(tmp_path, graphs), "--devices", "1", "--devices", "2", "--samples", "2",
            "--budget", "60", "--imitate", "0", "-o", out]
    r = CliRunner().invoke(main, base + ["--budget", "61"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    err = r.output.strip().splitlines()
    assert len(err) == 1 and "budget" in err[0] and "--budget" in err[0] and "--fresh" in err[0], r.output
    r = CliRunner().invoke(main, base + ["--kind", "gas"])
    assert r.exit_code == 1 and "--kind" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "checkpoint.npz").write_bytes(open(os.path.join(out, "checkpoint.npz"), "rb").read()[:500])
    r = CliRunner().invoke(main, base[:-1] + [str(broken)])
    assert r.exit_code == 1 and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert "checkpoint.npz" in r.output and "--fresh" in r.output


# ------------------------------------------------------------------ stop and lock (issue 37, items 1 and 5)
def _copy_dir(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return str(dst)


def test_a_stop_writes_the_checkpoint_of_the_last_finished_step(graphs, checkpointed, tmp_path):
    """`train(deadline=...)` stopped before its next step writes the checkpoint of the step it
    holds (same state) and returns that step's policy, marked stopped; before any state exists
    (the network's start, the warm start) it raises Stopped and writes nothing."""
    from regal._stop import Deadline, Stopped
    out = _copy_dir(checkpointed, tmp_path / "run")
    before = dict(np.load(os.path.join(out, "checkpoint.npz"), allow_pickle=False))
    os.remove(os.path.join(out, "checkpoint.npz"))
    np.savez(os.path.join(out, "checkpoint.npz"), **before)
    stop = Deadline()

    def log(msg):  # the stop comes once the checkpoint is read, before the next step
        if msg.startswith("resumed from"):
            stop.request_stop("interrupted (SIGTERM)")

    pol = train(graphs[:2], graphs[2:], out, tc=TINY, resume=True, log=log, deadline=stop)
    assert pol.meta["stopped"] == "interrupted (SIGTERM)" and pol.meta["step"] == 2
    with np.load(os.path.join(out, "checkpoint.npz"), allow_pickle=False) as z:
        assert sorted(z.files) == sorted(before) and all(np.array_equal(z[k], before[k]) for k in z.files)
    for folder in (out, str(tmp_path / "fresh")):  # stopped before the network exists: nothing written
        with pytest.raises(Stopped):
            train(graphs[:2], graphs[2:], folder, tc=TINY, resume=True, log=QUIET, deadline=stop)
    assert not os.path.exists(tmp_path / "fresh" / "checkpoint.npz")


def _hold_lock(folder):
    """A process that holds `folder`'s training lock until killed; returns once it holds it."""
    import subprocess
    import sys
    code = ("import sys, time\nfrom regal._io import directory_lock\n"
            f"with directory_lock({str(folder)!r}, what='another regal train'):\n"
            "    print('held', flush=True)\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_one_training_run_per_directory(graphs, checkpointed, tmp_path):
    """A second `regal train` into a directory in use exits 1 with one line naming it and the
    holder's pid, before any cluster starts; once the holder is killed (-9), the lock is free."""
    import signal
    from regal._io import LockedError, directory_lock
    from regal.cli import main
    out = _copy_dir(checkpointed, tmp_path / "run")
    holder = _hold_lock(out)
    try:
        args = ["train", "--manifest", _manifest(tmp_path, graphs), "-d", "1", "-d", "2", "--samples", "2",
                "-n", "60", "--imitate", "0", "-o", out]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1 and "Traceback" not in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and f"pid {holder.pid}" in r.output and out in r.output
        with pytest.raises(LockedError):
            train(graphs[:2], graphs[2:], out, tc=TINY, resume=True, log=QUIET)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with directory_lock(out):  # a crashed holder leaves nothing stuck
        with directory_lock(out):  # re-entrant within one process
            pass


def test_train_options_match_the_other_commands(graphs, checkpointed, tmp_path):
    """`regal train` takes -n/--budget, -s/--seed (with help) and -o/--output like optimize and
    solve; the old --out still works, unlisted."""
    from regal.cli import main
    r = CliRunner().invoke(main, ["train", "--help"])
    assert "-n, --budget" in r.output and "-s, --seed" in r.output and "-o, --output" in r.output
    assert "--out " not in r.output and "--out\n" not in r.output
    seed_help = r.output.split("-s, --seed", 1)[1].split("\n  -", 1)[0]
    assert "seed" in seed_help.lower() and len(seed_help.split()) > 3
    base = ["train", "--manifest", _manifest(tmp_path, graphs), "-d", "1", "-d", "2", "--samples", "2",
            "--imitate", "0"]
    for spelling in (["-o", checkpointed], ["--output", checkpointed], ["--out", checkpointed]):
        r = CliRunner().invoke(main, base + ["-n", "61"] + spelling)  # the checkpoint has 60: refused, naming it
        assert r.exit_code == 1 and "--budget" in r.output, (spelling, r.output)
    r = CliRunner().invoke(main, base + ["-s", "3", "-n", "61", "-o", checkpointed])  # parsed, then refused
    assert r.exit_code == 1 and "--budget" in r.output, r.output
    r = CliRunner().invoke(main, base + ["-s", "-1", "-o", checkpointed])
    assert r.exit_code == 2 and "--seed" in r.output, r.output
    r = CliRunner().invoke(main, base)
    assert r.exit_code == 2 and "--output" in r.output


@pytest.mark.slow  # three short training runs: about 30 s
def test_a_run_stopped_by_its_deadline_resumes_to_the_same_numbers(graphs, tmp_path):
    """A stop request after step 3 writes the checkpoint of step 3 (off the checkpoint_every
    cadence); resumed, the run ends with the parameters and curves of a run never stopped."""
    from regal._stop import Deadline
    out, whole = str(tmp_path / "stopped"), str(tmp_path / "whole")
    stop = Deadline()

    def log(msg):
        if msg.startswith("step 3/"):
            stop.request_stop("interrupted (SIGTERM)")

    pol = train(graphs[:2], graphs[2:], out, tc=TINY, resume=True, log=log, deadline=stop)
    assert pol.meta["stopped"] == "interrupted (SIGTERM)" and pol.meta["step"] == 3
    train(graphs[:2], graphs[2:], out, tc=TINY, resume=True, log=QUIET)
    train(graphs[:2], graphs[2:], whole, tc=TINY, resume=True, log=QUIET)
    a, b = load_policy(os.path.join(out, "last.npz")), load_policy(os.path.join(whole, "last.npz"))
    for m in a.params:
        for k in a.params[m]:
            assert np.array_equal(np.asarray(a.params[m][k]), np.asarray(b.params[m][k])), (m, k)
    ta, tb = _rows(os.path.join(out, "train.csv")), _rows(os.path.join(whole, "train.csv"))
    assert [r[:-1] for r in ta] == [r[:-1] for r in tb]
    assert _rows(os.path.join(out, "valid.csv")) == _rows(os.path.join(whole, "valid.csv"))


@pytest.mark.slow  # a real `regal train` (JAX, a Dask cluster of one worker): about a minute
def test_regal_train_stops_on_sigterm_with_a_checkpoint_and_resumes(graphs, tmp_path):
    """SIGTERM mid-training: status 3 within a couple of seconds (the cluster's closing
    included), the checkpoint of the last finished step written; a second run into the same
    directory meanwhile exits 1; the same command then resumes from the checkpoint."""
    import signal
    import subprocess
    import sys
    import time
    out = str(tmp_path / "run")
    args = [sys.executable, "-m", "regal.cli", "train", "--manifest", _manifest(tmp_path, graphs), "-d", "1",
            "--samples", "2", "-n", "60", "--imitate", "0", "--steps", "100000", "--workers", "1", "-o", out]
    env = {**os.environ, "REGAL_JAX_CACHE": "0"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for line in proc.stdout:
        if line.startswith("step 3/"):
            break
    second = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 1 and "in use by another regal train" in second.stderr, second.stderr
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    latency = time.perf_counter() - sent
    assert proc.returncode == 3, stderr
    assert latency < 2.0, latency
    assert "stopped (interrupted (SIGTERM)) at step" in stderr and "Traceback" not in stderr
    with np.load(os.path.join(out, "checkpoint.npz"), allow_pickle=False) as z:
        step = json.loads(str(z["__state__"]))["step"]
    assert step >= 3
    resumed = subprocess.run(args[:args.index("--steps") + 1] + [str(step + 1)] + args[args.index("--steps") + 2:],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stderr
