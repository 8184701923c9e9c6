"""`regal train --head start|moves` (issue 57): the learned policy's two other heads, trained by
the library (regal.training.data, .start, .moves, .heads) from the command line."""

import gzip
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

import regal
from randgraph import random_dag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    d = tmp_path_factory.mktemp("heads")
    paths = []
    for i, n in enumerate((40, 60, 50)):
        p = str(d / f"g{i}.json")
        regal.save(random_dag(i + 3, num_nodes=n), p)
        paths.append(p)
    return paths


def _invoke(args):
    from regal.cli import main
    return CliRunner().invoke(main, args)


def _one_line_error(r, *words):
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    lines = [line for line in r.output.strip().splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and all(w in lines[0] for w in words), r.output


@pytest.mark.slow
def test_train_start_then_moves_writes_policies_regal_optimize_runs(graphs, tmp_path):
    out = str(tmp_path / "out")
    given = [a for p in graphs for a in ("--graph", p)]
    r = _invoke(["train", "--head", "start", "-o", out, *given, "--collect-seeds", "0", "-n", "60", "--epochs", "2"])
    assert r.exit_code == 0, r.output
    start = regal.policy.load_policy(os.path.join(out, "start.npz"))
    assert start.config.start and not start.config.moves and not start.config.placement
    assert start.meta["training_cells"] == 6 and len(start.meta["curve"]) == 2
    r = _invoke(["train", "--head", "moves", "-o", out, *given, "--collect-seeds", "0", "-n", "60", "--imitate", "10",
                 "--steps", "1", "--samples", "2"])
    assert r.exit_code == 0, r.output
    learned = os.path.join(out, "learned.npz")
    pol = regal.policy.load_policy(learned)
    assert pol.config.start and pol.config.moves and pol.meta["mix"] == 0.5
    assert pol.meta["moves"]["reinforce_steps"] == 1 and pol.meta["moves"]["training_cells"] == 6
    with np.load(learned) as z, np.load(os.path.join(ROOT, "regal", "policy", "learned.npz")) as shipped:
        assert set(z.files) == set(shipped.files)   # the shipped file's arrays, every one
        for name in ("start_score/w", "moves_hidden/w", "head_moves/w"):
            assert z[name].shape == shipped[name].shape
    # the start network is the start head's, unchanged by the move head's training
    assert np.array_equal(pol.params["start_score"]["w"], start.params["start_score"]["w"])
    for policy in (learned, os.path.join(out, "start.npz")):
        r = _invoke(["optimize", graphs[1], "-d", "2", "-n", "200", "--policy", policy])
        assert r.exit_code == 0, r.output
    # a second run reads the collected runs back (nothing run again)
    r = _invoke(["train", "--head", "start", "-o", out, *given, "--collect-seeds", "0", "-n", "60", "--epochs", "1"])
    assert r.exit_code == 0 and "6 cached, 0 to run" in r.output, r.output


def test_head_options_are_refused_where_they_do_not_apply(graphs, tmp_path):
    out = str(tmp_path / "o")
    _one_line_error(_invoke(["train", "-o", out, "--epochs", "3"]), "--epochs", "--head")
    _one_line_error(_invoke(["train", "-o", out, "--graph", graphs[0]]), "--graph", "--head")
    _one_line_error(_invoke(["train", "--head", "start", "-o", out, "--kind", "gas"]), "--kind", "--head start")
    _one_line_error(_invoke(["train", "--head", "start", "-o", out, "--imitate", "3"]), "--imitate")
    _one_line_error(_invoke(["train", "--head", "moves", "-o", out, "--epochs", "3"]), "--epochs")
    _one_line_error(_invoke(["train", "--head", "start", "-o", out, "--graph", graphs[0], "--collect-seeds", "a"]),
                    "--collect-seeds")
    _one_line_error(_invoke(["train", "--head", "moves", "-o", out, "--graph", graphs[0]]), "start.npz", "--start")
    _one_line_error(_invoke(["train", "--head", "moves", "-o", out, "--graph", graphs[0], "--start", "default"]),
                    "no start-choice head")
    _one_line_error(_invoke(["train", "--head", "other", "-o", out]), "--head")
    assert not os.path.exists(os.path.join(out, "moves-rows"))


def test_train_help_keeps_the_beta_heads_and_names_the_other_two():
    r = _invoke(["train", "--help"])
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for option in ("--heads", "--head [start|moves]", "--per-source", "--collect-seeds", "--epochs", "--start", "--mix"):
        assert option in text, option


def test_the_corpus_is_the_recipes():
    """The library's corpus is experiments/configs/learned_answers.json's datasets, and its cells
    (30 train graphs a source, seeds 0 and 1, d = 2, 4) are those the shipped data was collected on."""
    from regal.training.data import CORPUS, corpus_jobs
    cfg = json.load(open(os.path.join(ROOT, "experiments", "configs", "learned_answers.json")))
    ours = [(f"{source}-{split}", {k: (os.path.join("data", v) if k == "manifest" else v) for k, v in entry.items()})
            for source, split, entry in CORPUS]
    theirs = [(ds["label"], {k: v for k, v in ds.items() if k != "label"}) for ds in cfg["datasets"]]
    assert ours == theirs
    with gzip.open(os.path.join(ROOT, "experiments", "results", "learned", "starts.json.gz"), "rt") as f:
        shipped = {(r["source"], r["split"], r["path"], r["devices"], r["seed"]) for r in json.load(f)}
    jobs = corpus_jobs(30, (0, 1), tuple(cfg["devices"]), data=os.path.join(ROOT, "data"))
    assert {(s, sp, os.path.relpath(p, ROOT), d, seed) for s, sp, p, d, seed in jobs} == shipped
