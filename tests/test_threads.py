"""Threads (issue 36): the command line decodes populations on Intel TBB's threads where TBB loads
(else Numba's workqueue layer, never OpenMP's) unless NUMBA_THREADING_LAYER names one, and its
answer is the same on any layer and thread count. Each check runs in a fresh process (the layer is chosen once per process);
benchmarks/bench_threads.py measures the speeds."""

import json
import os
import subprocess
import sys

import pytest

from randgraph import random_dag
from regal.graph import save

_LAYER = r"""
import sys, numba
import regal.commands._common
regal.commands._common.start_numba()
import regal
g = regal.commands._common.load_graph(sys.argv[1])
regal.optimize(g, 2, budget=300, seeding=False, polish=False)
print(numba.threading_layer())
"""


@pytest.fixture(scope="module")
def graph_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("threads") / "g.json"
    save(random_dag(36, num_nodes=150, control_fraction=0.2), p)
    return str(p)


def _env(layer):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    return env if layer is None else {**env, "NUMBA_THREADING_LAYER": layer}


def _tbb_loads() -> bool:
    out = subprocess.run([sys.executable, "-c", "from regal.threads import preload_tbb; "
                          "preload_tbb(); import numba.np.ufunc.tbbpool"], capture_output=True)
    return out.returncode == 0


@pytest.mark.parametrize("layer, expected", [(None, None), ("omp", "omp"), ("workqueue", "workqueue")])
def test_command_line_uses_tbb_or_workqueue_unless_the_environment_names_a_layer(graph_path, layer, expected):
    """`start_numba` picks TBB where it loads (a dependency on Linux x86-64), else workqueue;
    NUMBA_THREADING_LAYER, when set, wins."""
    if layer == "omp":
        pytest.importorskip("numba.np.ufunc.omppool")
    if expected is None:
        expected = "tbb" if _tbb_loads() else "workqueue"
    out = subprocess.run([sys.executable, "-c", _LAYER, graph_path], env=_env(layer), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == expected


def test_optimize_answer_is_the_same_on_any_layer_and_thread_count(graph_path, tmp_path):
    """`regal optimize` writes the same solution on 1 and 2 threads, on the layer it picks,
    workqueue or OpenMP."""
    pytest.importorskip("numba.np.ufunc.omppool")
    docs = []
    for layer, threads in ((None, 1), (None, 2), ("workqueue", 2), ("omp", 2)):
        out_path = tmp_path / f"{layer}_{threads}.json"
        out = subprocess.run([sys.executable, "-m", "regal.cli", "optimize", graph_path, "-d", "2", "-n", "1500",
                              "--threads", str(threads), "-o", str(out_path), "--json"],
                             env=_env(layer), capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        doc = json.loads(out_path.read_text())
        docs.append((doc["peak_bytes"], doc["placement"], doc["order"]))
    assert docs[0] == docs[1] == docs[2] == docs[3]


_LIBRARY = r"""
import sys, numba
import regal
regal.use_fast_threads()
g = regal.load(sys.argv[1])
regal.optimize(g, 2, budget=300, seeding=False, polish=False)
print(numba.threading_layer())
"""


def test_an_application_picks_the_same_layer_with_use_fast_threads(graph_path):
    """`regal.use_fast_threads()` before the first search gives an application the command
    line's layer (TBB where it loads, else workqueue)."""
    out = subprocess.run([sys.executable, "-c", _LIBRARY, graph_path], env=_env(None), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == ("tbb" if _tbb_loads() else "workqueue")
