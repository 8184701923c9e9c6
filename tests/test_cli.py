"""The `regal` command line through click's runner: output, files, and one-line errors."""

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from randgraph import random_dag
from regal.allocation import allocation
from regal.cli import main
from regal.graph import save
from regal.solution import load_solution


@pytest.fixture()
def graph_file(tmp_path):
    g = random_dag(3, num_nodes=60)
    p = tmp_path / "g.json.gz"
    save(g, p)
    return g, p


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_optimize_writes_a_valid_solution_and_prints_a_summary(graph_file, tmp_path):
    """regal optimize writes regal-solution/1 whose peak equals a fresh simulation, and prints it."""
    g, p = graph_file
    out = tmp_path / "sol.json"
    r = _invoke("optimize", p, "--devices", 2, "--budget", 300, "--seed", 4, "--policy", "none", "-o", out)
    assert r.exit_code == 0, r.output
    sol = load_solution(out, g)  # re-simulates and checks the claimed peaks
    doc = json.loads(out.read_text())
    assert doc["format"] == "regal-solution/1" and doc["devices"] == 2 and doc["evaluations"] == 300
    assert f"({sol.peak_bytes:,} B)" in r.output and "bound" in r.output and "device 1" in r.output
    assert out.read_text() == json.dumps(sol.to_json(), indent=1) + "\n"  # Solution.save's fast path


def test_optimize_json_output(graph_file):
    """--json prints a machine-readable summary with the lower bound."""
    g, p = graph_file
    r = _invoke("optimize", p, "--budget", 200, "--policy", "none", "--json")
    doc = json.loads(r.output)
    assert doc["evaluations"] == 200 and doc["lower_bound_bytes"] == g.lower_bound(1)
    assert doc["peak_bytes"] >= doc["lower_bound_bytes"]


def test_evaluate_accepts_a_valid_file(graph_file, tmp_path):
    """regal evaluate re-simulates a solution and reports its peak."""
    g, p = graph_file
    out = tmp_path / "sol.json"
    _invoke("optimize", p, "-d", 3, "-n", 150, "--policy", "none", "-o", out)
    r = _invoke("evaluate", p, out, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["peak_bytes"] == json.loads(out.read_text())["peak_bytes"]
    doc = json.loads(r.output)  # and SPEC section 3a's allocation of the same schedule
    sol = load_solution(out, g)
    assert doc["allocation_bytes"] == allocation(g, sol.placement, sol.order, 3).allocation_bytes
    assert len(doc["device_allocation_bytes"]) == 3
    text = _invoke("evaluate", p, out).output
    assert "allocation" in text and "section 3a" in text


@pytest.mark.parametrize("edit, reason", [
    (lambda d: d["order"].reverse(), "is not topological"),
    (lambda d: d["placement"].pop(next(iter(d["placement"]))), "is not placed"),
    (lambda d: d["placement"].update({next(iter(d["placement"])): 7}), "outside 0..1"),
    (lambda d: d.update(peak_bytes=d["peak_bytes"] - 1), "claims peak_bytes"),
    (lambda d: d["order"].append(d["order"][0]), "2 times"),
    (lambda d: d.update(format="other/1"), "not a regal-solution/1 file"),
])
def test_evaluate_rejects_invalid_solutions_with_one_line(graph_file, tmp_path, edit, reason):
    """An invalid solution exits non-zero with a one-line reason and no traceback."""
    g, p = graph_file
    out = tmp_path / "sol.json"
    _invoke("optimize", p, "-d", 2, "-n", 120, "--policy", "none", "-o", out)
    doc = json.loads(out.read_text())
    edit(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = _invoke("evaluate", p, bad)
    assert r.exit_code == 1 and reason in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_info_prints_sizes_and_bound(graph_file):
    """regal info reports nodes, edges, depth and the single-device lower bound."""
    g, p = graph_file
    r = _invoke("info", p, "--json")
    s = json.loads(r.output)
    assert s["nodes"] == 60 and s["lower_bound_bytes"] == g.lower_bound(1) and s["depth"] == g.depth()
    r = _invoke("info", p)
    assert f"{g.lower_bound(1):,} B" in r.output
    assert "xla_schedule" not in s and "XLA's schedule" not in r.output  # no meta.xla_order


def test_info_reports_xla_schedule_of_a_compiled_module():
    """A scheduled HLO module's graph (meta.xla_order): info gives the peak and SPEC section 3a
    allocation of XLA's own schedule, on one device."""
    import regal
    from regal.simulate import simulate
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "graphs", "real",
                        "transformer_enc_l2_d128_b32_train_opt.json.gz")
    s = json.loads(_invoke("info", path, "--json").output)["xla_schedule"]
    g = regal.load(path)
    order = np.asarray([g.index[i] for i in g.meta["xla_order"]])
    placement = np.zeros(g.num_nodes, dtype=np.int64)
    assert s["peak_bytes"] == simulate(g, placement, order, 1).peak_bytes
    assert s["allocation_bytes"] == allocation(g, placement, order, 1).allocation_bytes > s["peak_bytes"]
    assert "XLA's schedule" in _invoke("info", path).output


def test_bad_graph_file_is_one_line_error(tmp_path):
    """A malformed graph exits 1 with a one-line error naming the file and node."""
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"format": "regal-graph/1", "nodes": [{"id": "a", "bytes": -5}]}))
    for cmd in ("info", "optimize"):
        r = _invoke(cmd, p)
        assert r.exit_code == 1 and "'a'" in r.output and "bad.json" in r.output
        assert len(r.output.strip().splitlines()) == 1
    r = _invoke("info", tmp_path / "missing.json")
    assert r.exit_code == 1 and "no such file" in r.output


def test_interrupt_still_writes_best_solution(graph_file, tmp_path, monkeypatch):
    """A SIGINT during the search stops it and the best solution so far is still written."""
    import os
    import signal
    from regal.problems import MemoryProblem
    g, p = graph_file
    real = MemoryProblem.evaluate
    calls = []

    def interrupting(self, population):
        if self.graph.num_nodes == g.num_nodes:   # the search's own (the kernels' warm-up searches a tiny graph)
            calls.append(1)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGINT)
        return real(self, population)

    monkeypatch.setattr(MemoryProblem, "evaluate", interrupting)
    out = tmp_path / "sol.json"
    r = _invoke("optimize", p, "-n", 5000, "--policy", "none", "-o", out)
    assert r.exit_code == 3 and "interrupted" in r.output
    sol = load_solution(out, g)
    assert sol.evaluations < 5000 and sol.info["stopped"] == "interrupted (SIGINT)"


def test_import_hlo_then_optimize_the_module_directly(tmp_path):
    """import-hlo writes a graph file; optimize also takes the HLO module itself."""
    import os
    tiny = os.path.join(os.path.dirname(__file__), "data", "tiny.hlo")
    out = tmp_path / "tiny.json.gz"
    r = _invoke("import-hlo", tiny, "-o", out)
    assert r.exit_code == 0 and "8 nodes" in r.output and "6 aliases folded" in r.output
    a = json.loads(_invoke("optimize", out, "-n", 50, "--policy", "none", "--json").output)
    b = json.loads(_invoke("optimize", tiny, "-n", 50, "--policy", "none", "--json").output)
    assert a["peak_bytes"] == b["peak_bytes"] and a["graph"] == b["graph"] == "tiny"


def test_bad_hlo_is_one_line_error_with_line_number(tmp_path):
    """An HLO file that does not parse exits 1 naming the file and line."""
    p = tmp_path / "bad.hlo"
    p.write_text("HloModule m\n\nENTRY %e () -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] add(%a, %zz)\n}\n")
    r = _invoke("import-hlo", p, "-o", tmp_path / "x.json")
    assert r.exit_code == 1 and "bad.hlo:5:" in r.output and "zz" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_plot_writes_a_png(graph_file, tmp_path):
    """regal plot draws a PNG of a valid solution and refuses an invalid one."""
    g, p = graph_file
    sol = tmp_path / "sol.json"
    _invoke("optimize", p, "-d", 2, "-n", 100, "--policy", "none", "-o", sol)
    fig = tmp_path / "fig.png"
    r = _invoke("plot", sol, p, "-o", fig)
    assert r.exit_code == 0 and fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(sol.read_text())
    doc["peak_bytes"] += 1
    sol.write_text(json.dumps(doc))
    r = _invoke("plot", sol, p, "-o", fig)
    assert r.exit_code == 1 and "claims peak_bytes" in r.output


def test_graph_and_solution_come_in_either_order(graph_file, tmp_path):
    """evaluate and plot take GRAPH SOLUTION, and the swapped order too (the files say which is which)."""
    g, p = graph_file
    sol = tmp_path / "sol.json"
    _invoke("optimize", p, "-d", 2, "-n", 100, "-o", sol)
    a, b = _invoke("evaluate", p, sol, "--json"), _invoke("evaluate", sol, p, "--json")
    assert a.exit_code == 0 and a.output == b.output
    for first, second in ((p, sol), (sol, p)):
        fig = tmp_path / "fig.png"
        r = _invoke("plot", first, second, "-o", fig)
        assert r.exit_code == 0 and fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_optimize_with_the_shipped_policy(graph_file, tmp_path, monkeypatch):
    """The flagship with the shipped policy's priors runs from the CLI and its solution re-simulates."""
    monkeypatch.setenv("REGAL_JAX_CACHE_DIR", str(tmp_path / "jax"))
    g, p = graph_file
    out = tmp_path / "sol.json"
    r = _invoke("optimize", p, "-d", 2, "-n", 300, "--policy", "default", "-o", out)
    assert r.exit_code == 0, r.output
    sol = load_solution(out, g)
    assert sol.method == "regal" and sol.evaluations == 300 and sol.info["priors"]


def test_unknown_policy_file_is_one_line_error(graph_file):
    """--policy naming a missing file exits 1 with one line."""
    g, p = graph_file
    r = _invoke("optimize", p, "--policy", "nope.npz")
    assert r.exit_code == 1 and "nope.npz: no such policy file" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_onnx_models_are_read_wherever_a_graph_is(tmp_path):
    """`regal.load`, `info`, `optimize` and `import-onnx` take an ONNX model; a symbolic dimension
    needs --dim, else a one-line error names it."""
    from pathlib import Path

    import regal
    model = Path(__file__).resolve().parent.parent / "data" / "onnx" / "resnet50.onnx.gz"
    g = regal.load(model, dims={"batch": 8})
    assert g.num_nodes > 100 and g.resident.any()
    r = _invoke("info", model)
    assert r.exit_code == 1 and "batch" in r.output and len(r.output.strip().splitlines()) == 1
    r = _invoke("info", model, "--dim", "batch=8", "--json")
    assert r.exit_code == 0 and f'"nodes": {g.num_nodes}' in r.output
    out = tmp_path / "resnet.json.gz"
    r = _invoke("import-onnx", model, "--dim", "batch=8", "-o", out)
    assert r.exit_code == 0 and regal.load(out).num_nodes == g.num_nodes
    r = _invoke("optimize", model, "--dim", "batch=8", "-d", 2, "-n", 300)
    assert r.exit_code == 0 and "peak" in r.output
    r = _invoke("info", model, "--dim", "batch")
    assert r.exit_code != 0 and "NAME=VALUE" in r.output


def _wait_for_cpu_seconds(proc, seconds: float, hang_s: float = 300.0) -> None:
    """Wait until `proc` has run `seconds` of CPU time (Linux: /proc; elsewhere that many seconds
    of wall time): a point in its run that does not move with the machine's load."""
    import os
    import time
    t0 = time.perf_counter()
    stat = f"/proc/{proc.pid}/stat"
    while time.perf_counter() - t0 < hang_s and proc.poll() is None:
        if not os.path.exists(stat):
            time.sleep(seconds)
            return
        with open(stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") >= seconds:
            return
        time.sleep(0.1)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_the_search_and_keep_the_best(graph_file, tmp_path, signame):
    """A real `regal optimize` process sent SIGTERM or SIGHUP mid-search writes its best
    solution and exits with status 3 (interrupted), not 143 / 129 with nothing written."""
    import os
    import signal
    import subprocess
    import sys
    g, p = graph_file
    out = tmp_path / "sol.json"
    env = {**os.environ, "REGAL_JAX_CACHE": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "regal.cli", "optimize", str(p), "-n", "100000000",
                             "-d", "2", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    _wait_for_cpu_seconds(proc, 5.0)  # start-up and a part of the search, however loaded the machine
    proc.send_signal(getattr(signal, signame))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3, stderr
    assert f"interrupted ({signame})" in stdout
    sol = load_solution(out, g)
    assert 0 < sol.evaluations < 100000000


def test_output_path_is_checked_before_the_search(graph_file, tmp_path):
    """A missing output directory fails at once with a one-line error, before any search."""
    g, p = graph_file
    r = _invoke("optimize", p, "-n", 10 ** 9, "-o", tmp_path / "missing" / "x.json")
    assert r.exit_code == 1 and "no such directory" in r.output
    r = _invoke("solve", "gp-dfs", p, "-o", tmp_path / "missing" / "x.json")
    assert r.exit_code == 1 and "no such directory" in r.output


def test_an_interrupted_write_keeps_the_old_file(graph_file, tmp_path, monkeypatch):
    """Files are written to a temporary file and renamed: a write that dies midway leaves the
    earlier file intact and no temporary file behind."""
    import regal._io
    from regal.search import brkga_search
    g, p = graph_file
    out = tmp_path / "sol.json.gz"
    good = brkga_search(g, 2, budget=50)
    good.save(out)
    before = out.read_bytes()
    open_text = regal._io.open_text

    class Dying:  # writes half of the first text it is given, then dies
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

        def write(self, text):
            self.f.write(text[:len(text) // 2])
            raise KeyboardInterrupt

    monkeypatch.setattr(regal._io, "open_text", lambda path, mode="rt": Dying(open_text(path, mode)))
    with pytest.raises(KeyboardInterrupt):
        brkga_search(g, 2, budget=60, seed=1).save(out)
    assert out.read_bytes() == before
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]


def test_optimize_takes_the_brkga_settings(graph_file, tmp_path):
    """--population/--elites/--mutants/--inheritance reach the BRKGA (a population asked for exactly, the
    default one scaled to the budget); a bad combination is one line."""
    g, p = graph_file
    out = tmp_path / "sol.json"
    r = _invoke("optimize", p, "-n", 300, "--population", 40, "--elites", 0.25, "--mutants", 0.2,
                "--inheritance", 0.6, "-o", out)
    assert r.exit_code == 0, r.output
    cfg = load_solution(out, g).info["config"]
    assert cfg == {"population_size": 40, "elite_fraction": 0.25, "mutant_fraction": 0.2, "elite_inheritance": 0.6,
                   "prior_share": 0.5}
    # without --population the flagship scales its population to the budget (one per 40 evaluations)
    assert _invoke("optimize", p, "-n", 400, "-o", out).exit_code == 0
    assert load_solution(out, g).info["config"]["population_size"] == 10
    r = _invoke("optimize", p, "--population", 4, "--elites", 0.75, "--mutants", 0.5)
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1


def test_command_list_is_not_cut_off():
    """`regal --help` lists every command with its whole one-line description."""
    r = _invoke("--help")
    assert r.exit_code == 0 and "..." not in r.output.split("Commands:")[1]
    for name in ("optimize", "solve", "import-onnx", "evaluate", "plot", "train"):
        assert f"  {name} " in r.output


def test_remaining_bad_files_are_one_line_errors(graph_file, tmp_path):
    """A cut-off policy .npz or .hlo.gz, JSON nested 200,000 deep, a solution whose fields have the
    wrong types or that belongs to another graph: one line, exit 1, no traceback."""
    import gzip
    from pathlib import Path
    g, p = graph_file
    root = Path(__file__).resolve().parent
    policy = (root.parent / "regal" / "policy" / "default.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(policy[:len(policy) // 2])
    hlo = gzip.compress((root / "data" / "tiny.hlo").read_bytes())
    (tmp_path / "cut.hlo.gz").write_bytes(hlo[:len(hlo) // 2])
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    sol = tmp_path / "sol.json"
    _invoke("optimize", p, "-n", 50, "-o", sol)
    good = json.loads(sol.read_text())
    bad = {"peaks.json": {**good, "device_peak_bytes": 5}, "info.json": {**good, "info": [1]},
           "other.json": {**good, "graph": "another_graph"}}
    for name, doc in bad.items():
        (tmp_path / name).write_text(json.dumps(doc))
    cases = [("optimize", p, "--policy", tmp_path / "cut.npz"), ("info", tmp_path / "cut.hlo.gz"),
             ("info", tmp_path / "deep.json"), ("evaluate", p, tmp_path / "deep.json"),
             *[("evaluate", p, tmp_path / name) for name in bad]]
    for args in cases:
        r = _invoke(*args)
        assert r.exit_code == 1, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output, (args, r.output)


def test_every_command_that_reads_a_graph_takes_dim(tmp_path):
    """evaluate and plot take --dim like info, optimize and import-onnx; without it, every one of
    them names the option (--dim batch=VALUE), never Python's dims={...} (issue 37, item 7)."""
    from pathlib import Path
    model = Path(__file__).resolve().parent.parent / "data" / "onnx" / "resnet50.onnx.gz"
    sol = tmp_path / "sol.json"
    r = _invoke("optimize", model, "--dim", "batch=8", "-d", 2, "-n", 100, "-o", sol)
    assert r.exit_code == 0, r.output
    r = _invoke("evaluate", model, sol, "--dim", "batch=8", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["peak_bytes"] == json.loads(sol.read_text())["peak_bytes"]
    r = _invoke("plot", sol, model, "--dim", "batch=8", "-o", tmp_path / "m.png")
    assert r.exit_code == 0 and (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    for args in (("info", model), ("optimize", model, "-n", 10), ("evaluate", model, sol),
                 ("plot", model, sol, "-o", tmp_path / "m.png"), ("import-onnx", model, "-o", tmp_path / "g.json")):
        r = _invoke(*args)
        assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, (args, r.output)
        assert "--dim batch=VALUE" in r.output and "dims=" not in r.output, (args, r.output)


@pytest.mark.slow
def test_a_time_limit_does_not_cut_the_report(graph_file):
    """A search ended by --time-limit still reports the allocation and the packed arena (only a
    stop request cuts the report short). The report has REPORT_SHARE of the limit: a limit whose
    share a busy machine's report fits in (0.3 s left it 15 ms, and it failed at load 4)."""
    g, p = graph_file
    r = _invoke("optimize", p, "-d", 2, "-n", 10 ** 8, "--time-limit", 8, "--policy", "none")
    assert r.exit_code == 0 and "stopped   time_limit" in r.output, r.output
    assert "not computed" not in r.output and "allocated " in r.output and "packed    " in r.output
    doc = json.loads(_invoke("optimize", p, "-n", 10 ** 8, "--time-limit", 8, "--policy", "none", "--json").output)
    assert isinstance(doc["allocation_bytes"], int) and isinstance(doc["arena_bytes"], int)


def test_a_time_limit_keeps_time_for_the_plan(graph_file):
    """Once the graph is loaded the search's deadline moves earlier by PLAN_SECONDS_PER_NODE per
    node (the solution's re-simulation and its file must fit in the limit) and by REPORT_SHARE
    of the limit (the report's, issue 48); no limit, no change."""
    from regal._stop import Deadline
    from regal.commands._common import PLAN_SECONDS_PER_NODE, REPORT_SHARE, load_or_exit
    g, p = graph_file
    deadline = Deadline(10.0)
    at = deadline.at
    assert load_or_exit(str(p), (), deadline).num_nodes == g.num_nodes
    assert deadline.at == pytest.approx(at - PLAN_SECONDS_PER_NODE * g.num_nodes - REPORT_SHARE * 10.0, abs=0.05)
    unlimited = Deadline()
    load_or_exit(str(p), (), unlimited)
    assert unlimited.at is None


def test_the_report_does_not_wait_for_a_slow_packing(graph_file, monkeypatch):
    """The packed arena of the report is given REPORT_PACK_WALL_S (its greedy placements took
    minutes on 60,000 nodes, after a --time-limit search of 3 s): past it the line says so, and
    --json holds null."""
    import time

    import regal.commands._report
    g, p = graph_file
    monkeypatch.setattr(regal.commands._report, "REPORT_PACK_WALL_S", 0.3)
    monkeypatch.setattr(regal.commands._report, "packed_summary", lambda g, sol: time.sleep(30))
    t = time.perf_counter()
    r = _invoke("optimize", p, "-n", 200, "--policy", "none", "--time-limit", 5)
    assert r.exit_code == 0 and "packed    (not computed within 0.3 s" in r.output, r.output
    doc = json.loads(_invoke("optimize", p, "-n", 200, "--policy", "none", "--json").output)
    assert doc["arena_bytes"] is None and isinstance(doc["allocation_bytes"], int)
    assert time.perf_counter() - t < 120  # a hang only: the time limit's figures are benchmarks'


def test_solution_text_is_json_dumps_with_indent_for_any_ids():
    """`Solution.save`'s writer gives `json.dumps(doc, indent=1)`'s text, ids with quotes,
    backslashes, non-ASCII and text shaped like a top-level field included."""
    from regal.solution import _dumps
    for ids in (['a', 'b"q', "é", " x\\n", '\n "order": 0', "\x00order\x00"], [], ["z"]):
        doc = {"format": "regal-solution/1", "graph": '\n "placement": 0', "devices": 2,
               "placement": {k: i % 2 for i, k in enumerate(ids)}, "order": list(reversed(ids)),
               "peak_bytes": 5, "info": {"history": [[1, 2.5]], "note": "\x00order\x00"}}
        assert _dumps(doc) == json.dumps(doc, indent=1)
