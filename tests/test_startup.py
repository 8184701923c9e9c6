"""Start-up: the `seconds` a search reports count the search, not the loading of its kernels, and
`regal optimize` with a policy (computed in a forked process while the kernels load) gives the
same answer as the library. Each check runs in a fresh process (benchmarks/bench_startup.py
measures the times)."""

import json
import os
import subprocess
import sys

import pytest

from randgraph import random_dag
from regal.graph import save

REGAL = [sys.executable, "-m", "regal.cli"]

_CHECK = r"""
import sys, numba
import regal, regal.commands._common
from regal.flagship import warmup

def signatures():
    return {f"{m.__name__}.{n}": len(o.signatures) for m in list(sys.modules.values())
            if getattr(m, "__name__", "").startswith("regal") for n, o in vars(m).items()
            if isinstance(o, numba.core.dispatcher.Dispatcher)}

g = regal.commands._common.load_graph(sys.argv[1])
d, seeding, polish = int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
warmup(d, seeding=seeding, polish=polish)
before = signatures()
regal.optimize(g, d, budget=1500, seeding=seeding, polish=polish)
after = signatures()
print({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})
"""


@pytest.fixture(scope="module")
def graph_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("startup") / "g.json"
    save(random_dag(21, num_nodes=120, control_fraction=0.2), p)
    return str(p)


@pytest.mark.parametrize("devices, seeding, polish", [(2, 0, 0), (3, 1, 1), (1, 1, 0)])
def test_warmup_loads_every_kernel_the_search_runs(graph_path, devices, seeding, polish):
    """After `warmup` with the search's settings, the search itself loads no kernel."""
    out = subprocess.run([sys.executable, "-c", _CHECK, graph_path, str(devices), str(seeding), str(polish)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "{}", out.stdout


@pytest.mark.slow  # three CLI runs with JAX: about 11 s
def test_optimize_with_a_policy_in_a_child_process_matches_the_library(graph_path, tmp_path):
    """The CLI computes a policy's priors in a forked process; same peak as `regal.optimize`, the
    solution names the policy; a bad policy file is still one line."""
    pytest.importorskip("jax")
    import regal
    env = {**os.environ, "REGAL_JAX_CACHE_DIR": str(tmp_path / "jax")}
    out = subprocess.run(REGAL + ["optimize", graph_path, "-d", "2", "-n", "400", "--policy", "default", "--json"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    sol = regal.optimize(regal.load(graph_path), 2, budget=400, policy="default")
    assert doc["peak_bytes"] == sol.peak_bytes
    assert doc["info"]["policy"] == "default" and doc["info"]["policy_seconds"] > 0
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip")
    out = subprocess.run(REGAL + ["optimize", graph_path, "-d", "2", "-n", "50", "--policy", str(bad)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [f"Error: {bad}: not a regal policy file (BadZipFile)"], out.stderr


_LEAN = r"""
import json, sys
import numba, numpy as np
from numba.core.base import BaseContext
import regal, regal.commands._common, regal._lean_start

refreshes = []
_refresh = BaseContext.refresh
BaseContext.refresh = lambda self: (refreshes.append(1), _refresh(self))[1]
if sys.argv[2] == "lean":
    regal._lean_start.load_kernels_lean()
g = regal.commands._common.load_graph(sys.argv[1])
regal.warmup(2)
sol = regal.optimize(g, 2, budget=600)
loaded_refreshes = len(refreshes)

@numba.njit
def total(x):  # not in any cache: compiled here, after the cached kernels
    return x.sum()

from regal.kernels.decode import shift_node
order, pos = np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int64)
shift_node(order, pos, 0, 2)  # loaded from the cache
deferred = sum("_regal_linking_bitcode" in o.library.__dict__ for o in shift_node.overloads.values())

@numba.njit
def shifted(order, pos):  # not in any cache: compiled here, linking the cached shift_node
    shift_node(order, pos, 0, 3)
    return order[3] * 10 + pos[order[3]]

print(json.dumps({"peak": sol.peak_bytes, "placement": sol.placement.tolist(), "order": sol.order.tolist(),
                  "refreshes": loaded_refreshes, "compiled": int(total(np.arange(5))), "deferred": deferred,
                  "linked": int(shifted(order, pos))}))
"""


def test_program_loads_cached_kernels_without_starting_the_compiler(graph_path):
    """`load_kernels_lean` (the `regal` program): the cached kernels load without refreshing
    Numba's target, the search's answer is the library's, and a kernel compiled afterwards works,
    also one that links a cached kernel (whose linking bitcode the lean load left unparsed)."""
    docs = {}
    for mode in ("library", "lean"):
        subprocess.run([sys.executable, "-c", _LEAN, graph_path, mode], capture_output=True)  # fills the cache
        out = subprocess.run([sys.executable, "-c", _LEAN, graph_path, mode], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        docs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    assert docs["library"]["refreshes"] > 0 and docs["lean"]["refreshes"] == 0
    assert docs["lean"]["compiled"] == 10
    # the lean load leaves a cached kernel's linking bitcode unparsed until a compilation links it
    assert docs["lean"]["deferred"] == 1 and docs["library"]["deferred"] == 0
    assert docs["lean"]["linked"] == docs["library"]["linked"] == 13  # order [2, 0, 3, 1] after both moves
    assert {k: docs["lean"][k] for k in ("peak", "placement", "order")} == \
           {k: docs["library"][k] for k in ("peak", "placement", "order")}


_LAZY = r"""
import sys
import regal
heavy = sorted(m for m in ("numpy", "numba", "jax") if m in sys.modules)
import regal.cli
skipped = [m for m in ("scipy", "yaml", "numpy", "numba") if m in sys.modules]
regal._lean_start.import_numba_lean()
lean = [m for m in ("scipy", "yaml") if m in sys.modules]
import scipy, yaml
import regal.load, regal.simulate
names = {n: callable(getattr(regal, n)) or n == "FORMAT" for n in regal.__all__}
print(heavy, skipped, lean, "numba" in sys.modules)
print(type(regal.load).__name__, type(regal.simulate).__name__, all(names.values()))
"""


def test_import_regal_is_lazy_and_the_cli_imports_numba_lean(tmp_path):
    """`import regal` imports no NumPy, Numba or JAX, every public name still resolves (regal.load
    and regal.simulate the functions, beside their submodules); `import regal.cli` imports neither
    NumPy nor Numba (`regal --help` needs neither), and the program's `import_numba_lean`
    imports Numba without SciPy and PyYAML, which stay importable."""
    out = subprocess.run([sys.executable, "-c", _LAZY], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[] [] [] True", "function function True"], out.stdout


_HELP = r"""
import sys
sys.argv = ["regal", "--help"]
import regal.cli
try:
    regal.cli.main()
except SystemExit:
    pass
print(sorted(m for m in ("numpy", "numba", "jax", "scipy") if m in sys.modules), file=sys.stderr)
"""


def test_help_imports_neither_numpy_nor_numba(tmp_path):
    """`regal --help` (run as the program) prints its help without importing NumPy or Numba."""
    out = subprocess.run([sys.executable, "-c", _HELP], capture_output=True, text=True, cwd=tmp_path)
    assert "Usage: regal" in out.stdout, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr


def test_the_lean_start_knows_this_numba():
    """Every private name of Numba and llvmlite the lean start patches is where it expects it.
    A failure here means a Numba or llvmlite release moved one: the program still works (the
    patches step aside, `test_an_unknown_numba_layout_only_costs_time`), but `regal._lean_start`
    must be brought up to date for the start-up's 0.1-0.2 s."""
    import numba
    from regal._lean_start import numba_layout_missing
    missing = numba_layout_missing()
    assert missing == [], (f"regal._lean_start does not know numba {numba.__version__}'s layout: "
                           f"{', '.join(missing)} missing")


_SWITCH = r"""
import json, os, sys
import regal._lean_start as L
if sys.argv[2] == "unknown":  # a layout the patches do not know: one more name they would need
    L.PATCHED_NAMES = L.PATCHED_NAMES + (("numba.core.caching", "Cache._not_in_any_numba"),)
L.lean_start()
from numba.core import caching, codegen
patched = [getattr(caching.Cache.load_overload, "lean", False),
           getattr(codegen.JITCodeLibrary.get_pointer_to_function, "lean", False)]
import regal, regal.commands._common
g = regal.commands._common.load_graph(sys.argv[1])
sol = regal.optimize(g, 2, budget=400)
print(json.dumps({"patched": patched, "peak": sol.peak_bytes, "order": sol.order.tolist()}))
"""


@pytest.mark.parametrize("mode, env, patched", [("known", "1", [True, True]), ("known", "0", [False, False]),
                                                ("unknown", "1", [False, False])])
def test_an_unknown_numba_layout_only_costs_time(graph_path, mode, env, patched):
    """The lean start patches Numba only with REGAL_LEAN_START on and on a layout it knows; off,
    or on an unknown layout, it leaves Numba alone and the answer is the same."""
    out = subprocess.run([sys.executable, "-c", _SWITCH, graph_path, mode], capture_output=True, text=True,
                         env={**os.environ, "REGAL_LEAN_START": env})
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["patched"] == patched
    ref = subprocess.run([sys.executable, "-c", _SWITCH, graph_path, "known"], capture_output=True, text=True)
    assert {k: doc[k] for k in ("peak", "order")} == {k: json.loads(ref.stdout.strip().splitlines()[-1])[k]
                                                      for k in ("peak", "order")}


_EVERY = r"""
import sys, numba
import numpy as np
import regal, regal.methods
from regal import packing
from regal._warmup import cache_misses

def signatures():
    return {f"{m.__name__}.{n}": len(o.signatures) for m in list(sys.modules.values())
            if getattr(m, "__name__", "").startswith("regal") for n, o in vars(m).items()
            if isinstance(o, numba.core.dispatcher.Dispatcher)}

regal.warmup()
before, misses = signatures(), cache_misses()
g = regal.load(sys.argv[1])
for d in (1, 2):
    regal.optimize(g, d, budget=300)
    regal.optimize(g, d, budget=300, seeding=False, polish=False)
    regal.optimize(g, d, budget=300, objective="arena")
    regal.optimize(g, d, budget=300, objective="runtime", memory_limit_bytes=g.lower_bound(d) * 2)
    for name in regal.methods.names():
        spec = regal.methods.get(name)
        if spec.origin == "regal":
            regal.methods.solve(name, g, d, budget=200 if spec.takes_budget else None)
from regal.fit import fit
from regal.allocation import allocation
from regal.memory_plan import plan
sol = regal.optimize(g, 2, budget=300)
allocation(g, sol.placement, sol.order, 2)
plan(g, sol.placement, sol.order, 2, time_limit_s=0.5)
fit(g, g.lower_bound(1) * 3, 1, time_limit_s=2, budget=200)
rng = np.random.default_rng(0)
lo = rng.integers(0, 50, 300)
packing.pack(packing.instance(lo, lo + rng.integers(1, 20, 300), rng.integers(1, 100, 300)), time_limit_s=0.5)
after = signatures()
print({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}, cache_misses() - misses)
"""


def test_warmup_compiles_every_kernel_a_command_can_call(graph_path):
    """After `regal.warmup()`, the searches of every objective, every method of the library's
    registry, the reports' allocation and memory plan, `fit` and the packer's search load or
    compile no further kernel (issue 48: the packer compiled inside the first `regal pack`)."""
    out = subprocess.run([sys.executable, "-c", _EVERY, graph_path], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "{} 0", out.stdout
