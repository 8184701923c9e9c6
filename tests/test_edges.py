"""Trust at every edge (issue 55): every count, size, budget and seed checked at the door of
every command and library function (one line naming it and its range, never a traceback), a
closed stdout pipe, an empty output path, quoted ids, a directory in the experiments' cache,
temporary files of a reused pid."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import regal
from regal import _args
from regal.cli import main

TINY = os.path.join(os.path.dirname(__file__), "data", "tiny.hlo")
HUGE = str(2**63)
GIANT = str(10**30)


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_usage_error(r, option: str):
    """Exit status 2 (a usage error: docs/terminal.md), click's usage lines and one error line
    that names the option and its range; no traceback."""
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "OverflowError" not in r.output and "TypingError" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and option in errors[0], r.output
    assert re.search(r"\d\.\.\d|[\[(][^ ]+, [^ ]+[\])]", errors[0]), errors[0]  # the range: 1..N or (0, 1)


@pytest.mark.parametrize("args, option", [
    (("optimize", TINY, "-d", 2, "-n", HUGE), "--budget"),
    (("optimize", TINY, "-n", GIANT), "--budget"),
    (("optimize", TINY, "-d", HUGE), "--devices"),
    (("optimize", TINY, "-s", HUGE), "--seed"),
    (("optimize", TINY, "-s", -1), "--seed"),
    (("optimize", TINY, "--population", GIANT), "--population"),
    (("optimize", TINY, "--threads", GIANT), "--threads"),
    (("optimize", TINY, "--time-limit", "1e300"), "--time-limit"),
    (("optimize", TINY, "--elites", "nan"), "--elites"),
    (("optimize", TINY, "--recompute-budget", "nan"), "--recompute-budget"),
    (("solve", "local-search", TINY, "-n", GIANT), "--budget"),
    (("solve", "cpsat", TINY, "-s", str(2**31)), "--seed"),
    (("fit", TINY, "--memory", "1GiB", "-n", HUGE), "--budget"),
    (("fit", TINY, "--memory", "1GiB", "-d", HUGE), "--devices"),
    (("fit", TINY, "--memory", "1GiB", "--time-limit", "inf"), "--time-limit"),
    (("pack", TINY, "--time-limit", "nan"), "--time-limit"),
    (("info", TINY, "-d", HUGE), "--devices"),
    (("torch", "x.py:f", "-n", GIANT), "--budget"),
    (("torch", "x.py:f", "-s", HUGE), "--seed"),
    (("train", "-o", "out", "--workers", GIANT), "--workers"),
    (("train", "-o", "out", "--lr", "nan"), "--lr"),
    (("import-onnx", TINY, "-o", "g.json", "--dim", f"batch={GIANT}"), "--dim"),
])
def test_every_numeric_option_is_checked_at_the_door(args, option):
    """Out of range (2**63, 10**30, -1, NaN, inf): a usage error naming the option and its range,
    before anything is read or run."""
    _one_line_usage_error(_invoke(*args), option)


def test_threads_above_numbas_are_named():
    """--threads above NUMBA_NUM_THREADS: the option and the machine's range, not num_threads."""
    from numba import config
    r = _invoke("optimize", TINY, "--threads", config.NUMBA_NUM_THREADS + 1)
    _one_line_usage_error(r, "--threads")


@pytest.mark.parametrize("call, name", [
    (lambda g: regal.optimize(g, 2, budget=2**63), "budget"),
    (lambda g: regal.optimize(g, 2, budget=10**30), "budget"),
    (lambda g: regal.optimize(g, 2, seed=2**63), "seed"),
    (lambda g: regal.optimize(g, 2**63), "devices"),
    (lambda g: regal.optimize(g, 2, time_limit_s=float("nan")), "time_limit_s"),
    (lambda g: __import__("regal.methods").methods.solve("local-search", g, 2, budget=10**30), "budget"),
    (lambda g: __import__("regal.methods").methods.solve("cpsat", g, 2, seed=2**31), "seed"),
    (lambda g: __import__("regal.fit").fit.fit(g, 2**70, 2), "memory_limit_bytes"),
    (lambda g: __import__("regal.fit").fit.fit(g, 10**9, 2, budget=2**63), "budget"),
    (lambda g: __import__("regal.fit").fit.fit(g, 10**9, 2, pack_time_s=-1.0), "pack_time_s"),
])
def test_the_librarys_doors_check_the_same_ranges(call, name):
    """The library refuses the same values in one line naming the argument and its range."""
    g = regal.load(TINY)
    with pytest.raises((ValueError, TypeError)) as e:
        call(g)
    msg = str(e.value)
    assert msg.startswith(name) and ".." in msg and "\n" not in msg


def test_pack_and_plan_check_their_time_limits():
    from regal import packing
    from regal.memory_plan import plan
    inst = packing.instance(np.array([0]), np.array([2]), np.array([4]), ["a"])
    with pytest.raises(ValueError, match="^time_limit_s must be"):
        packing.pack(inst, time_limit_s=float("inf"))
    g = regal.load(TINY)
    with pytest.raises(ValueError, match="^time_limit_s must be"):
        plan(g, np.zeros(g.num_nodes, dtype=np.int64), np.arange(g.num_nodes), 1, time_limit_s=-1.0)


def test_planned_step_checks_budget_and_seed():
    torch = pytest.importorskip("torch")
    import regal.torch
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for kwargs, name in (({"budget": 2**63}, "budget"), ({"budget": 10**30}, "budget"), ({"seed": -1}, "seed")):
        with pytest.raises(ValueError, match=f"^{name} must be"):
            regal.torch.planned_step(model, opt, (torch.randn(3, 4),), **kwargs)


def test_the_ranges_are_what_the_code_takes():
    """The largest budget and seed run (a seed reaches OR-Tools' int32 random_seed)."""
    g = regal.load(TINY)
    sol = regal.optimize(g, 2, budget=50, seed=_args.MAX_SEED, time_limit_s=5)
    assert sol.info["seed"] == _args.MAX_SEED
    from regal import methods
    methods.solve("cpsat", g, 2, seed=_args.MAX_SEED, time_limit_s=2)
    sol = regal.optimize(g, 2, budget=_args.MAX_EVALUATIONS, time_limit_s=0.5)
    assert 0 < sol.evaluations < _args.MAX_EVALUATIONS


def test_fit_rounds_wrap_their_seed(monkeypatch):
    """regal.fit's later rounds run seed + round, modulo 2**31: the last seed is a valid start."""
    import regal.fit
    seen = []
    real = regal.fit._round

    def spy(graph, devices, limit, budget, seed, *rest):
        seen.append(seed)
        return real(graph, devices, limit, budget, seed, *rest)

    monkeypatch.setattr(regal.fit, "_round", spy)
    g = regal.load(TINY)
    regal.fit.fit(g, g.lower_bound(2), 2, budget=30, seed=_args.MAX_SEED, time_limit_s=3)
    assert seen[0] == _args.MAX_SEED and all(0 <= s <= _args.MAX_SEED for s in seen)


@pytest.mark.parametrize("command", [("optimize", TINY), ("solve", "brkga", TINY), ("fit", TINY, "--memory", "1GiB"),
                                     ("import-hlo", TINY), ("plot", TINY, TINY)])
def test_an_empty_output_path_is_refused(command):
    """-o '' wrote nothing and exited 0: now a usage error naming -o."""
    r = _invoke(*command, "-o", "")
    assert r.exit_code == 2 and "empty path" in r.output and "Traceback" not in r.output, r.output


def test_a_closed_stdout_pipe_ends_quietly_with_141(tmp_path):
    """`regal info G | head -1`: the reader leaves; the command ends quietly (no message, no
    traceback) with 141, 128 + SIGPIPE's number, as a program the signal kills."""
    for args in (["info", TINY], ["optimize", TINY, "-n", "50"]):
        p = subprocess.Popen([sys.executable, "-m", "regal.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait(timeout=120) == 141, err
        assert err == "", err


def test_pack_keeps_quoted_ids_and_ends_its_json_with_a_newline(tmp_path):
    """A quoted id " a" stays " a" (it came back as "a"); -o quotes it again; --json is one line
    that ends with a newline."""
    from regal import packing
    src = tmp_path / "in.csv"
    src.write_text('id,lower,upper,size\n" a",0,4,3\n"b ",2,6,5\n"c,d",5,9,3\n"e""q",1,2,3\nplain, 1, 3, 2\n'
                   ' trimmed ,0,1,1\n"two\nlines" , 4, 8, 1\n')
    ids = [" a", "b ", "c,d", 'e"q', "plain", "trimmed", "two\nlines"]
    assert list(packing.read_csv(src).ids) == ids
    out = tmp_path / "out.csv"
    r = subprocess.run([sys.executable, "-m", "regal.cli", "pack", str(src), "-o", str(out), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.endswith("}\n") and r.stdout.count("\n") == 1, r
    assert set(json.loads(r.stdout)) == {"packed_bytes", "bound_bytes", "optimal"}
    assert list(packing.read_csv(out).ids) == ids
    bad = tmp_path / "bad.csv"
    for text, what in (('id,lower,upper,size\n"open,0,1,1\n', "row 2: a quoted field is not closed"),
                       ('id,lower,upper,size\n"a"x,0,1,1\n', "row 2: text after a quoted field")):
        bad.write_text(text)
        with pytest.raises(packing.PackingError, match=what):
            packing.read_csv(bad)


def test_the_check_kernel_agrees_with_the_sweep():
    """`packing.check`'s kernel (`regal.kernels.collide`) and its sweep in Python give the same
    verdict on random packings, valid or not, with offsets of any integer type."""
    from regal import packing
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 25))
        lo = rng.integers(0, 20, n)
        inst = packing.instance(lo, lo + rng.integers(0, 8, n), rng.integers(0, 5, n), [f"b{i}" for i in range(n)])
        off = rng.integers(0, 15, n).astype(rng.choice([np.int64, np.int32, np.uint64, object]))
        verdicts = []
        for vectorized in (True, False):
            try:
                verdicts.append(packing.check(inst, off, vectorized=vectorized))
            except packing.PackingError:
                verdicts.append("collision")
        assert verdicts[0] == verdicts[1]


def test_a_directory_in_place_of_a_cached_cell_is_one_line(tmp_path, capsys):
    """experiments.runner: a directory where a cell's file belongs ends the run in one line (it
    was a traceback from deep inside the cache), before any job runs."""
    from experiments.runner import json_job, run_files
    bad = tmp_path / "cell.json"
    bad.mkdir()
    ran = []
    with pytest.raises(SystemExit) as e:
        run_files([(str(tmp_path / "ok.json"), json_job, (lambda: ran.append(1) or 1, str(tmp_path / "ok.json"))),
                   (str(bad), json_job, (lambda: 2, str(bad)))], progress=False)
    assert "a directory where a cached cell's file belongs" in str(e.value) and str(bad) in str(e.value)
    assert "\n" not in str(e.value) and not ran


def test_a_temporary_file_of_a_reused_pid_goes(tmp_path):
    """A temporary file whose pid runs again, as another process (it started later than the
    writer did), is stale: the next write removes it. One of the live writer stays; an old-style
    name of a live pid goes once over an hour old."""
    from regal import _io
    me, start = os.getppid(), _io._start_ticks(os.getppid())
    if start is None:
        pytest.skip("no /proc here: the start time cannot be read")
    reused = tmp_path / f"s.json.{me}-{start + 1}-0123abcd.tmp.json"
    live = tmp_path / f"s.json.{me}-{start}-0123abcd.tmp.json"
    old = tmp_path / f"s.json.{me}-89abcdef.tmp.json"
    for f in (reused, live, old):
        f.write_text("partial")
    past = os.stat(old).st_mtime - _io.LEGACY_TEMP_AGE_S - 10
    os.utime(old, (past, past))
    with _io.atomic_text(tmp_path / "s.json") as f:
        f.write("{}")
    assert sorted(os.listdir(tmp_path)) == sorted(["s.json", live.name])


def test_atomic_writes_name_their_temporary_with_the_writers_start(tmp_path):
    from regal import _io
    with _io.atomic_path(tmp_path / "x.json") as tmp:
        name = os.path.basename(tmp)
        m = _io._TEMP.fullmatch(name[len("x.json"):len(name) - len(".tmp.json") + 4])   # ".<pid>-<start>-<hex>.tmp"
        assert m and int(m.group(1)) == os.getpid()
        assert int(m.group(2)) == (_io._start_ticks(os.getpid()) or 0)
        open(tmp, "w").close()


def test_a_policy_file_is_resolved_by_its_heads_as_its_name_is(tmp_path):
    """`regal optimize --policy regal/policy/learned.npz` runs the start and move heads that
    `--policy learned` runs (the CLI decided by the name and dropped them for a file): the same
    solution, placement and order; `policy_heads` reads them from the policy itself."""
    from regal.policy import policy_file
    from regal.policy.resolve import PolicyHeads, policy_heads
    path = policy_file("learned")
    assert policy_heads("learned") == policy_heads(path) == PolicyHeads(priors=False, start=True, moves=True)
    assert policy_heads("default") == PolicyHeads(True, False, False) and policy_heads("teacher") == (False,) * 3
    graph = os.path.join(os.path.dirname(__file__), "..", "data", "graphs", "real", "vit_l8_d256_b8_train_opt.json.gz")
    sols = {}
    for name, policy in (("name", "learned"), ("file", path)):
        out = tmp_path / f"{name}.json"
        r = _invoke("optimize", graph, "-d", 2, "-n", 600, "--policy", policy, "-o", out)
        assert r.exit_code == 0, r.output
        sols[name] = json.loads(out.read_text())
    assert sols["name"]["placement"] == sols["file"]["placement"] and sols["name"]["order"] == sols["file"]["order"]
    assert sols["name"]["peak_bytes"] == sols["file"]["peak_bytes"]
    lib = regal.optimize(regal.load(graph), 2, budget=600, policy=path)
    assert lib.peak_bytes == sols["file"]["peak_bytes"]


def test_priors_and_a_start_policy_together():
    """Explicit priors with a policy that has a start head: the priors as given, the start
    choice beside (a teacher's name with priors is still refused)."""
    from regal.policy.resolve import resolve_policy, teacher_priors
    g = regal.load(TINY)
    pri = teacher_priors(g, 2)
    got, chooser = resolve_policy(g, 2, pri, "learned")
    assert got is pri and callable(chooser)
    with pytest.raises(ValueError, match="either priors or a policy"):
        resolve_policy(g, 2, pri, "teacher")


@pytest.mark.parametrize("name", ["nope.json", "nope.json.gz", "nope.hlo", "nope.onnx", "nope"])
def test_a_missing_graph_file_is_a_graph_error_and_an_oserror(tmp_path, name):
    """regal.load of a missing file: GraphFileNotFound, a GraphError (one line naming the file)
    and a FileNotFoundError (`except OSError` catches it, as for `open`); it pickles (Dask)."""
    import pickle

    from regal.graph.io import GraphFileNotFound
    path = str(tmp_path / name)
    with pytest.raises(FileNotFoundError) as e:
        regal.load(path)
    assert isinstance(e.value, GraphFileNotFound) and isinstance(e.value, regal.GraphError)
    assert str(e.value) == f"{path}: no such file" and e.value.filename == path
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is GraphFileNotFound and str(again) == str(e.value)
    r = _invoke("info", path)
    assert r.exit_code == 1 and r.output.strip() == f"Error: {path}: no such file"


def test_a_solutions_numbers_are_python_numbers():
    """A Solution holds Python ints and floats, whoever built it, and its info no NumPy value:
    `json.dumps` of any of them works (placement, order, device_peak_bytes stay arrays)."""
    import dataclasses

    import regal.methods
    g = regal.load(TINY)
    for method in ("regal", "gp-dfs"):
        sol = regal.methods.solve(method, g, 2)
        json.dumps({"peak": sol.peak_bytes, "d": sol.num_devices, "n": sol.evaluations, "s": sol.seconds,
                    "info": sol.info})
    odd = dataclasses.replace(sol, peak_bytes=np.int64(7), num_devices=np.int32(2), seconds=np.float32(0.5),
                              info={"a": np.float64(1.5), "b": [np.int64(3)], "c": np.arange(2)})
    assert type(odd.peak_bytes) is int and type(odd.num_devices) is int and type(odd.seconds) is float
    assert json.loads(json.dumps(odd.info)) == {"a": 1.5, "b": [3], "c": [0, 1]}


def test_fit_reports_mib_and_bytes_and_a_next_step(tmp_path):
    """`regal fit` prints sizes as optimize does (MiB and bytes), names the bound, and an answer
    other than "fits" says what to try next: more time, a larger limit, more devices."""
    graph = os.path.join(os.path.dirname(__file__), "..", "data", "graphs", "synthetic", "synthetic_s0_0000.json.gz")
    r = _invoke("fit", graph, "--memory", "2KiB")
    assert r.exit_code == 0 and "KiB (" in r.output and "next" not in r.output, r.output
    r = _invoke("fit", graph, "--memory", 1030, "--time-limit", 1, "-n", 50)
    assert r.exit_code == 5, r.output
    line = next(line for line in r.output.splitlines() if line.startswith("next"))
    assert "--time-limit" in line and "--memory" in line and "--devices 2" in line
    assert "bound     1,018 B (SPEC section 7: per op)" in r.output
    r = _invoke("fit", graph, "--memory", 100, "-d", 2)
    assert r.exit_code == 4 and "next      a limit of at least the bound, --memory 509" in r.output, r.output


def test_a_loose_bound_is_said_to_be_loose():
    """A gap to the bound of 100 % or more names the bound and says it is loose (a training
    step's "gap to bound 394 %" read as a failure)."""
    graph = os.path.join(os.path.dirname(__file__), "..", "data", "graphs", "torch", "torch_mobilenet_v2_train.json.gz")
    r = _invoke("optimize", graph, "-n", 100)
    line = next(line for line in r.output.splitlines() if line.startswith("bound"))
    assert "the per op bound: loose" in line and "no shortfall" in line, line


@pytest.mark.parametrize("which", ["solution", "csv"])
def test_a_missing_solution_or_csv_is_an_oserror_too(tmp_path, which):
    """load_solution and packing.read_csv of a missing file (the edge check found them plain
    SolutionError / PackingError): also a FileNotFoundError, one line naming the file; it
    pickles; the commands say it in one line, exit 1."""
    import pickle

    from regal import packing
    from regal.solution import SolutionError, load_solution
    path = str(tmp_path / ("nope.json" if which == "solution" else "nope.csv"))
    call = (lambda: load_solution(path, regal.load(TINY))) if which == "solution" else (lambda: packing.read_csv(path))
    with pytest.raises(FileNotFoundError) as e:
        call()
    assert isinstance(e.value, SolutionError if which == "solution" else packing.PackingError)
    assert str(e.value) == f"{path}: no such file" and e.value.filename == path
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is type(e.value) and str(again) == str(e.value)
    r = _invoke(*(("evaluate", TINY, path) if which == "solution" else ("pack", path)))
    assert r.exit_code == 1 and r.output.strip() == f"Error: {path}: no such file", r.output


def test_measure_anchors_checks_budget_and_seed_at_the_door():
    """measure_anchors / measure_anchor: an out-of-range budget or seed is a ValueError naming it
    (each anchor caught it and returned it as its string: no refusal)."""
    torch = pytest.importorskip("torch")
    from regal.torch.eager import measure_anchor, measure_anchors
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for kwargs, name in (({"budget": 10**30}, "budget"), ({"budget": -1}, "budget"), ({"seed": 2**63}, "seed")):
        with pytest.raises(ValueError, match=f"^{name} must be in"):
            measure_anchors(model, opt, (torch.randn(3, 4),), **kwargs)
        with pytest.raises(ValueError, match=f"^{name} must be in"):
            measure_anchor("eager", model, opt, (torch.randn(3, 4),), **kwargs)
