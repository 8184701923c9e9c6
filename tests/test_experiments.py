"""experiments: a tiny experiment end to end on a local Dask cluster, cached and resumable."""

import glob
import json
import os

import numpy as np
import pytest

from randgraph import random_dag
from regal.graph import save
from regal.simulate import simulate


@pytest.fixture()
def tiny_experiment(tmp_path):
    """Three random graphs in a manifest, and a config with three methods and two seeds."""
    gdir = tmp_path / "data" / "graphs" / "real"
    gdir.mkdir(parents=True)
    graphs = {}
    for s in range(3):
        g = random_dag(200 + s, num_nodes=40)
        save(g, gdir / f"{g.name}.json.gz")
        graphs[g.name] = {"path": f"real/{g.name}.json.gz", "nodes": g.num_nodes, "family": "random"}
    manifest = tmp_path / "data" / "manifest.json"
    manifest.write_text(json.dumps({"format": "regal-manifest/1", "graphs": graphs,
                                    "splits": {"test": sorted(graphs)}}))
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({
        "name": "tiny", "datasets": [{"label": "real-test", "split": "test"}], "devices": [1, 2],
        "seeds": [0, 1], "reference": "brkga", "plots": ["sample_efficiency", "scaling"],
        "methods": [
            {"name": "brkga", "solver": "brkga", "options": {"budget": 300}},
            {"name": "brkga-long", "solver": "brkga", "options": {"budget": 900}},
            {"name": "random", "solver": "random", "seeds": [0]},
        ],
        "long_reference": "brkga-long", "match_method": "brkga",
    }))
    return tmp_path, str(config), str(manifest)


@pytest.mark.slow  # a local Dask cluster: about 17 s
def test_tiny_experiment_end_to_end_and_resume(tiny_experiment):
    """The table equals what the solution files give, and deleting one cell recomputes only it."""
    from experiments.run import run
    tmp, config, manifest = tiny_experiment
    cache, results = str(tmp / "cache"), str(tmp / "results")
    out = run(config, workers=2, progress=False, manifest=manifest, cache_dir=cache, results_dir=results)
    # 3 graphs x 2 device counts x (2 + 2 + 1 seeds)
    assert out["counts"] == {"cells": 30, "cached": 0, "computed": 30, "stale": 0}
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(cache) for f in fs if f.endswith(".json"))
    assert len(files) == 30

    # recompute the table from the solution files by hand
    from regal.graph import load
    peaks = {}
    for f in files:
        doc = json.load(open(f))
        g = load(tmp / "data" / "graphs" / "real" / f"{doc['graph']}.json.gz")
        idx = g.index
        sim = simulate(g, [doc["placement"][i] for i in g.ids], [idx[i] for i in doc["order"]], doc["devices"])
        assert sim.peak_bytes == doc["peak_bytes"]
        seed = int(os.path.basename(f).split("_s")[1].split(".")[0])
        # the cell's folder names the config's method; the file names the registry's solver
        folder = os.path.basename(os.path.dirname(os.path.dirname(f))).rsplit("-", 1)[0]
        assert doc["method"] == ("random" if folder == "random" else "brkga")
        peaks[(folder, doc["graph"], doc["devices"], seed)] = sim.peak_bytes
    for row in out["summary"]:
        d, m = row["devices"], row["method"]
        imps, gaps = [], []
        for gname in {k[1] for k in peaks}:
            best = min(p for k, p in peaks.items() if k[1] == gname and k[2] == d)
            ref = [peaks[("brkga", gname, d, s)] for s in (0, 1)]
            mine = [peaks[(m, gname, d, s)] for s in ((0,) if m == "random" else (0, 1))]
            pairs = [(r, mine[0]) for r in ref] if len(mine) == 1 else list(zip(ref, mine))
            imps.append(np.mean([(a - b) / a for a, b in pairs]) * 100)
            gaps.append(np.mean([(p - best) / best for p in mine]) * 100)
        assert row["improvement_pct"] == pytest.approx(np.mean(imps))
        assert row["gap_pct"] == pytest.approx(np.mean(gaps))
    assert {r["method"] for r in out["summary"]} == {"brkga", "brkga-long", "random"}
    assert next(r for r in out["summary"] if r["method"] == "brkga")["improvement_pct"] == 0.0
    readme = open(os.path.join(results, "README.md")).read()
    assert "Commit:" in readme and "Machine:" in readme and "| brkga |" in readme
    assert glob.glob(os.path.join(results, "sample_efficiency_*_d2.png"))
    assert os.path.exists(os.path.join(results, "scaling.png"))

    # resume: nothing to do; delete one cell, only it is recomputed, the table is unchanged
    out2 = run(config, workers=2, progress=False, manifest=manifest, cache_dir=cache, results_dir=results)
    assert out2["counts"] == {"cells": 30, "cached": 30, "computed": 0, "stale": 0}
    victim = files[7]
    before = os.path.getmtime(files[8])
    os.remove(victim)
    out3 = run(config, workers=2, progress=False, manifest=manifest, cache_dir=cache, results_dir=results)
    assert out3["counts"] == {"cells": 30, "cached": 29, "computed": 1, "stale": 0}
    assert os.path.exists(victim) and os.path.getmtime(files[8]) == before
    assert out3["table"] == out["table"]  # deterministic per seed

    # a rebuilt graph file (one node's bytes changed): its 10 cells are stale and run again
    from regal.graph import Graph
    name = sorted(json.load(open(manifest))["graphs"])[0]
    path = tmp / "data" / "graphs" / "real" / f"{name}.json.gz"
    recs = load(path).to_records()
    recs[-1]["bytes"] += 1000
    save(Graph.from_records(recs, name=name), path)
    out4 = run(config, workers=2, progress=False, manifest=manifest, cache_dir=cache, results_dir=results)
    assert out4["counts"] == {"cells": 30, "cached": 20, "computed": 10, "stale": 10}


@pytest.mark.slow  # a Dask scheduler and two workers: about 16 s
def test_experiment_runs_on_an_external_cluster_whose_workers_lack_the_repository(tiny_experiment, tmp_path):
    """A real `dask scheduler` and two `dask worker` processes, started in a directory where the
    repository's `experiments` package cannot be imported, run a tiny experiment."""
    import socket
    import subprocess
    import sys
    import time
    from experiments.run import run
    tmp, config, manifest = tiny_experiment
    bare = tmp_path / "bare"
    bare.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--no-dashboard"], cwd=bare, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        time.sleep(3)
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker",
                                           f"tcp://127.0.0.1:{port}", "--nthreads", "1", "--no-dashboard"],
                                          cwd=bare, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        check = subprocess.run([sys.executable, "-c", "import experiments"], cwd=bare, env=env, capture_output=True)
        assert check.returncode != 0  # the workers' directory does not see the repository
        out = run(config, scheduler=f"tcp://127.0.0.1:{port}", progress=False, manifest=manifest,
                  cache_dir=str(tmp_path / "cache"), results_dir=str(tmp_path / "results"))
        assert out["counts"]["computed"] == 30
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def test_a_method_may_narrow_the_experiments_seeds_and_devices():
    """A config method's "seeds" and "devices" keep only those cells of the experiment's grid
    (e.g. a 60 s CP-SAT run at d = 2 only); the others get every (d, seed)."""
    from experiments.runner import Method, cells_for
    wide = Method.from_config({"name": "brkga", "options": {"budget": 10}})
    narrow = Method.from_config({"name": "cpsat-60s", "solver": "cpsat", "options": {"time_limit_s": 60},
                                 "seeds": [0], "devices": [2]})
    cells = cells_for([wide, narrow], ["a.json", "b.json"], [1, 2, 4], [0, 1])
    got = {(c.method.name, c.graph_path, c.devices, c.seed) for c in cells}
    assert {x for x in got if x[0] == "cpsat-60s"} == {("cpsat-60s", "a.json", 2, 0), ("cpsat-60s", "b.json", 2, 0)}
    assert len([x for x in got if x[0] == "brkga"]) == 2 * 3 * 2 and len(cells) == len(got)


@pytest.mark.parametrize("name", ["default", "gas", "transfer", "runtime", "teacher", "teacher-schedule", "none"])
def test_a_configs_policy_name_stays_a_name_and_a_relative_path_becomes_absolute(name):
    """A config method's "policy": every name the library resolves stays as it is (a config once
    turned "transfer" into a missing file and its cells were refused); a file path is made
    relative to the repository, so the run works from any folder."""
    from experiments.runner import Method, _options
    method = lambda policy: Method.from_config({"name": "m", "solver": "regal", "options": {"policy": policy}})  # noqa: E731
    assert _options(method(name))["policy"] == name
    path = _options(method(os.path.join("runs", "p", "best.npz")))["policy"]
    assert os.path.isabs(path) and path.endswith(os.path.join("runs", "p", "best.npz"))


def test_runtime_experiment_skips_large_graphs_for_a_method_and_reruns_a_changed_graph(tmp_path):
    """The runner's "runtime" kind: a method's `max_nodes` leaves larger graphs out; cells are
    cached (the runner's cache, a limit's cells as a variant), and a graph file that changed has
    its cells solved again."""
    from experiments.runtime import run_config
    from regal.graph import Graph, load
    gdir = tmp_path / "graphs"
    gdir.mkdir()
    graphs = {}
    for s, n in ((300, 12), (301, 40)):
        g = random_dag(s, num_nodes=n)
        save(g, gdir / f"{g.name}.json.gz")
        graphs[g.name] = {"path": f"{g.name}.json.gz", "nodes": g.num_nodes, "family": "random"}
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"format": "regal-manifest/1", "root": "graphs", "graphs": graphs,
                                    "splits": {"test": sorted(graphs)}}))
    cfg = {"name": "rt", "kind": "runtime", "datasets": [{"label": "t", "split": "test", "manifest": str(manifest)}],
           "devices": [2], "seeds": [0], "limit_factors": [None, 1.5], "peak_budget": 200, "reference": "heft",
           "methods": [{"name": "heft", "solver": "heft"},
                       {"name": "cpsat-runtime", "solver": "cpsat-runtime", "options": {"time_limit_s": 1},
                        "max_nodes": 20}]}
    cache, results = tmp_path / "cache", tmp_path / "results"
    results.mkdir()

    def run():
        return run_config(cfg, str(tmp_path / "rt.json"), None, progress=False, cache_dir=str(cache),
                          results_dir=str(results))
    out = run()
    cells = {(r["method"], r["graph"], r["limit"]) for r in out["rows"]}
    assert cells == {(m, g, lim) for lim in ("none", "1.5x")
                     for m, g in (("heft", "random300"), ("heft", "random301"), ("cpsat-runtime", "random300"))}
    limits = {(r["graph"], r["limit"]): r["limit_bytes"] for r in out["rows"]}
    assert limits[("random300", "none")] is None and limits[("random300", "1.5x")] > 0
    (small,) = glob.glob(str(cache / "cpsat-runtime-*" / "random300" / "d2_none_s0.json"))
    assert glob.glob(str(cache / "peak-regal-*" / "random300" / "d2_s0.json"))
    before = os.path.getmtime(small)
    assert run()["counts"]["computed"] == 0 and os.path.getmtime(small) == before  # cached
    recs = load(gdir / "random300.json.gz").to_records()
    recs[-1]["bytes"] += 7
    save(Graph.from_records(recs, name="random300"), gdir / "random300.json.gz")
    assert run()["counts"]["stale"] == 4  # the graph changed: its cells (2 methods x 2 limits) solved again
    assert os.path.getmtime(small) != before


def test_runtime_summary_is_per_dataset():
    """experiments.runtime's summary keeps datasets apart; a one-seed method stands in every seed."""
    from experiments.runtime import _summary

    def row(ds, graph, method, seed, makespan, feasible=True):
        return {"dataset": ds, "graph": graph, "devices": 2, "limit": "none", "method": method, "seed": seed,
                "makespan_s": makespan, "feasible": feasible}
    rows = [row("a", "g1", "ref", 0, 10.0), row("a", "g1", "ref", 1, 10.0), row("a", "g1", "heft", 0, 8.0),
            row("a", "g1", "m", 0, 5.0), row("a", "g1", "m", 1, 5.0),
            row("b", "g2", "ref", 0, 10.0), row("b", "g2", "ref", 1, 10.0), row("b", "g2", "heft", 0, 20.0),
            row("b", "g2", "m", 0, 20.0), row("b", "g2", "m", 1, 20.0, feasible=False)]
    out = {(s["dataset"], s["method"]): s for s in _summary(rows, ["ref", "heft", "m"], "ref")}
    assert out["a", "m"]["reduction_over_reference_pct"] == 50.0 and out["a", "m"]["runs"] == 2
    assert out["b", "m"]["reduction_over_reference_pct"] == -100.0 and out["b", "m"]["feasible_share"] == 0.5
    assert out["b", "m"]["infeasible_where_another_fits"] == 1
    assert out["a", "heft"]["runs"] == 2 and out["b", "heft"]["gap_from_best_pct"] == 100.0


def test_runtime_pairs_compare_a_method_with_its_ablation_run_by_run():
    """experiments.runtime._pairs: reduction over the same graph and seed where both are feasible,
    shorter/longer counts, and the runs where only one of the two is feasible."""
    from experiments.runtime import _pairs

    def row(graph, method, seed, makespan, feasible=True):
        return {"dataset": "a", "graph": graph, "devices": 2, "limit": "1x", "method": method, "seed": seed,
                "makespan_s": makespan, "feasible": feasible}
    rows = [row("g", "p", 0, 9.0), row("g", "q", 0, 10.0), row("g", "p", 1, 11.0), row("g", "q", 1, 10.0),
            row("h", "p", 0, 5.0), row("h", "q", 0, 5.0, feasible=False)]
    (p,) = _pairs(rows, [["p", "q"]])
    assert p["runs"] == 2 and abs(p["reduction_pct"] - 0.0) < 1e-9 and (p["better"], p["worse"]) == (1, 1)
    assert (p["feasible_only_method"], p["feasible_only_versus"]) == (1, 0)


def test_a_tune_config_runs_its_grid_as_runner_cells_equal_to_the_flagship_with_that_setting(tmp_path):
    """The runner's "tune" kind: every value of the grid is the flagship with that FlagshipConfig
    field (peaks equal `regal.optimize(..., config=...)`), local search is the baseline, and a
    second config sharing the cache runs nothing it already has."""
    import regal
    from experiments.tune import run_config
    gdir = tmp_path / "graphs"
    gdir.mkdir()
    graphs = {}
    for s in (400, 401):
        g = random_dag(s, num_nodes=30)
        save(g, gdir / f"{g.name}.json.gz")
        graphs[g.name] = {"path": f"{g.name}.json.gz", "nodes": g.num_nodes, "family": "random"}
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"format": "regal-manifest/1", "root": "graphs", "graphs": graphs,
                                    "splits": {"valid": sorted(graphs)}}))
    cfg = {"name": "t", "kind": "tune", "graphs": [f"{manifest}:valid:0"], "devices": [2], "seeds": [0],
           "budget": 150, "set": {"anneal_temperature": [0, 0.02]}}
    cache = tmp_path / "cache"
    for sub in ("r1", "r2"):
        (tmp_path / sub).mkdir()
    out = run_config(cfg, str(tmp_path / "t.json"), None, progress=False, cache_dir=str(cache),
                     results_dir=str(tmp_path / "r1"))
    assert out["counts"]["computed"] == 2 * 3
    for p in (str(gdir / f"{n}.json.gz") for n in graphs):
        g = regal.load(p)
        want = regal.optimize(g, 2, budget=150, seed=0, config=regal.FlagshipConfig().replace(anneal_temperature=0.0))
        assert out["peaks"][(p, 2, 0, "anneal_temperature", 0.0)] == want.peak_bytes
        ls = regal.methods.solve("local-search", g, 2, seed=0, budget=150)
        assert out["peaks"][(p, 2, 0, "anneal_temperature", None)] == ls.peak_bytes
    assert "| 2 | 0.02 |" in open(tmp_path / "r1" / "README.md").read()
    cfg2 = dict(cfg, name="t2", set={"anneal_temperature": [0.02, 0.04]})
    out2 = run_config(cfg2, str(tmp_path / "t2.json"), None, progress=False, cache_dir=str(cache),
                      results_dir=str(tmp_path / "r2"))
    assert out2["counts"]["computed"] == 2  # only 0.04 is new; local search and 0.02 are cached


def test_the_runner_refuses_a_config_of_an_unknown_kind(tmp_path):
    """experiments.run: a config's "kind" is one the runner has, else a ValueError naming it
    (before any cluster starts)."""
    from experiments.run import KINDS, run
    assert set(KINDS) == {"table", "runtime", "tune"}
    config = tmp_path / "x.json"
    config.write_text(json.dumps({"name": "x", "kind": "plots"}))
    with pytest.raises(ValueError, match="plots"):
        run(str(config), results_dir=str(tmp_path / "out"))


def test_run_files_runs_only_the_jobs_without_a_file(tmp_path):
    """experiments.runner.run_files (the scripts' back end and cache): a job whose result file
    exists is not run again; json_job writes a function's value as that file."""
    from experiments.runner import json_job, run_files
    jobs = [(str(tmp_path / f"{i}.json"), json_job, (pow, str(tmp_path / f"{i}.json"), i, 2)) for i in range(3)]
    assert run_files(jobs, progress=False) == {"cached": 0, "computed": 3}
    assert [json.load(open(j[0])) for j in jobs] == [0, 1, 4]
    os.remove(jobs[1][0])
    assert run_files(jobs, progress=False) == {"cached": 2, "computed": 1}


def test_a_corrupt_cached_cell_is_named_discarded_and_computed_again(tmp_path, capsys):
    """A cut-off cell file, one that is not UTF-8 and one whose peak was edited are each named in
    one line on stderr, removed and solved again; the rows equal an untouched cache's (issue 37)."""
    from experiments.runner import Method, cells_for, load_results, run_cells
    paths = []
    for s in range(2):
        g = random_dag(400 + s, num_nodes=30)
        paths.append(str(tmp_path / f"{g.name}.json.gz"))
        save(g, paths[-1])
    cells = cells_for([Method("brkga", "brkga", {"budget": 200})], paths, [1, 2], [0])
    cache = str(tmp_path / "cache")
    run_cells(cells, cache, progress=False)
    good = load_results(cells, cache)
    files = [c.path(cache) for c in cells]
    text = open(files[0]).read()
    open(files[0], "w").write(text[:len(text) // 2])
    open(files[1], "wb").write(b"\xff\xfe not utf-8")
    doc = json.loads(open(files[2]).read())
    doc["peak_bytes"] -= 1
    open(files[2], "w").write(json.dumps(doc))
    capsys.readouterr()
    rows = load_results(cells, cache)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "Traceback" not in "".join(err)
    for line, path in zip(err, files):
        assert path in line and "corrupt cached cell" in line and "computed again" in line
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("seconds", "info")} for r in rs]  # noqa: E731
    assert strip(rows) == strip(good)
    assert strip(load_results(cells, cache)) == strip(good) and not capsys.readouterr().err  # repaired for good


def test_experiments_run_writes_elsewhere_with_out(monkeypatch, tmp_path, capsys):
    """`python -m experiments.run CONFIG --out DIR --cache DIR` hands both folders to run() (the
    shipped results and cache are left alone); without them, run() picks its defaults (issue 37)."""
    import experiments.run as er
    calls = []
    monkeypatch.setattr(er, "run", lambda *a, **kw: calls.append((a, kw)) or {"table": "T"})
    er.main(["cfg.json", "--out", str(tmp_path / "mine"), "--cache", str(tmp_path / "cache"), "--no-progress"])
    er.main(["cfg.json"])
    assert calls[0][1]["results_dir"] == str(tmp_path / "mine") and calls[0][1]["cache_dir"] == str(tmp_path / "cache")
    assert calls[1][1]["results_dir"] is None and calls[1][1]["cache_dir"] is None
    assert capsys.readouterr().out == "T\nT\n"


def test_never_trapped_room_and_shortfall_tables():
    """experiments.never_trapped: the room local search leaves above the bound, and where a 1K
    answer falls short of the 5K one, on hand-made records."""
    from experiments.never_trapped import room_to_bound, short_of_top

    def rec(solver, family, budget, seed, peak, kind=None):
        return {"source": "s", "graph": "g", "d": 2, "seed": seed, "family": family, "solver": solver,
                "budget": budget, "peak": peak, "bound": 100.0, "best_kind": kind}
    records = [rec("local-search", "local-search", 5000, 0, 100.5),   # within 1 % of the bound
               rec("local-search", "local-search", 5000, 1, 110.0),
               rec("regal", "regal", 5000, 0, 100.5, "plain"), rec("regal", "regal", 5000, 1, 99.0, "packed"),
               rec("regal", "regal", 1000, 0, 101.5, "plain"), rec("regal", "regal", 1000, 1, 108.9, "plain")]
    room = room_to_bound(records)
    row = room.splitlines()[2].split("|")  # local search above the bound: the mean of 0.50 and 9.09 %
    assert [c.strip() for c in row[1:6]] == ["s", "2", "2", "4.79", "1"]
    assert row[6].strip() == "+10.00"   # (110 - 99) / 110 on the one cell with room
    short = short_of_top(records).splitlines()[2].split("|")
    # seed 1: the 5K best from a packed start, the 1K best from a plain one; seed 0: the same kind
    assert [c.strip() for c in short[4:8]] == ["1", "10.0", "1", "1.0"]


def _figure(monkeypatch, draw):
    """(figure, renderer): the figure `draw()` saves through experiments.report, drawn."""
    import experiments.report as report
    box = []
    real = report.atomic_savefig

    def keep(fig, path, **kwargs):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        real(fig, path, **kwargs)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box.append((fig, canvas.get_renderer()))

    monkeypatch.setattr(report, "atomic_savefig", keep)
    draw()
    return box[0]


def test_the_sample_efficiency_plot_names_the_evaluations_the_reference_ran(monkeypatch, tmp_path):
    """A 2,000-evaluation reference is labelled "at 2,000" and its dotted line sits at 2,000
    (the plot said "at 5,000", the config's budget); the median of its runs' counts."""
    from experiments import report
    rows = []
    for seed, spent in enumerate([2000, 1900, 2000]):
        for m in ("brkga", "regal"):
            hist = [[e, 1000 - e / 10, e / 1000] for e in range(100, spent + 1, 100)]
            rows.append({"method": m, "dataset": "x", "graph": "g", "devices": 1, "seed": seed,
                         "peak_bytes": hist[-1][1], "evaluations": spent, "seconds": spent / 1000,
                         "info": {"history": hist}})
    assert report.reference_evaluations(rows, "brkga") == 2000
    fig, _ = _figure(monkeypatch, lambda: report.plot_sample_efficiency(
        rows, str(tmp_path / "se.png"), ["brkga", "regal"], "brkga"))
    ax = fig.axes[0]
    assert "at 2,000 evaluations" in ax.get_ylabel() and "5,000" not in ax.get_ylabel()
    vertical = [ln for ln in ax.get_lines() if len(set(ln.get_xdata())) == 1 and ln.get_linestyle() == ":"]
    assert [ln.get_xdata()[0] for ln in vertical] == [2000]
    # no reference counts: no line, a label that claims none
    fig, _ = _figure(monkeypatch, lambda: report.plot_sample_efficiency(
        [dict(r, evaluations=0) if r["method"] == "brkga" else r for r in rows], str(tmp_path / "se0.png"),
        ["brkga", "regal"], "brkga"))
    assert "final" in fig.axes[0].get_ylabel()


@pytest.mark.parametrize("lo,hi", [(30, 90), (60, 500), (40, 43), (50, 300_000)])
def test_the_scaling_plots_tick_labels_never_overlap(monkeypatch, tmp_path, lo, hi):
    """Log axes spanning under a decade to four: the minor ticks carry no label, at most eight
    labels per axis, at least two on the node axis when it spans a ratio of two, and no two
    labels overlap (matplotlib's defaults labelled minor ticks, overlapping)."""
    from matplotlib.ticker import NullFormatter
    from experiments import report
    rng = np.random.default_rng(lo)
    rows = []
    for m in ("a", "b", "c"):
        for nodes in np.exp(rng.uniform(np.log(lo), np.log(hi), 60)).astype(int):
            rows.append({"method": m, "nodes": int(nodes), "seconds": nodes * 1e-4 * rng.uniform(0.5, 2)})
    fig, renderer = _figure(monkeypatch, lambda: report.plot_scaling(rows, str(tmp_path / "s.png"), ["a", "b", "c"]))
    ax = fig.axes[0]
    for axis in (ax.xaxis, ax.yaxis):
        assert isinstance(axis.get_minor_formatter(), NullFormatter)
        lo_v, hi_v = sorted(axis.get_view_interval())
        shown = [t for t, loc in zip(axis.get_ticklabels(), axis.get_ticklocs())
                 if t.get_text() and lo_v <= loc <= hi_v]
        assert 1 <= len(shown) <= 8
        if axis is ax.xaxis and hi / lo >= 2:
            assert len(shown) >= 2
        boxes = [t.get_window_extent(renderer) for t in shown]
        for a, b in zip(boxes, boxes[1:]):
            assert not a.overlaps(b), [t.get_text() for t in shown]
