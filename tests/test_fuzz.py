"""Fuzzing the command line with damaged input files: graph JSON (`regal info`), solution files
(`regal evaluate`), policy files (`regal optimize --policy FILE`) and HLO text (`regal info`).

Each mutant is cut off, has bytes flipped, inserted or deleted, a field deleted or given another
type, or a value replaced by JSON nested 100,000 deep. Every run must either fail with exit 1 and
one line `Error: ...` (no traceback, no uncaught exception), or succeed with a right answer:
checked against the mutated file itself with the naive twins of tests/naive.py. Seeds are fixed;
REGAL_FUZZ_VERBOSE=1 (with -s) prints every mutant and its outcome.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import random

import numpy as np
import pytest
from click.testing import CliRunner

import naive
from randgraph import random_dag
from regal.cli import main
from regal.graph import save

SEED = 13
HERE = os.path.dirname(os.path.abspath(__file__))
DEEP = "[" * 100_000 + "]" * 100_000
OTHER_VALUES = ["x", "", -1, 0, 1.5, 2 ** 64, -2 ** 70, 1e308, None, True, False, [], {}, [None], {"a": 1},
                "\u00e9"]


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _check_outcome(r, label) -> bool:
    """True if the command succeeded; else assert that it failed cleanly with one line."""
    if os.environ.get("REGAL_FUZZ_VERBOSE"):
        print(f"{label!r:40.40} exit {r.exit_code}: {r.output.strip()[:150]}")
    if r.exit_code == 0:
        return True
    assert isinstance(r.exception, SystemExit), f"{label}: uncaught {r.exception!r}\n{r.output}"
    assert r.exit_code == 1, (label, r.exit_code, r.output)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in r.output, (label, r.output)
    return False


# ------------------------------------------------------------------ mutations
def _byte_mutants(data: bytes, rng: random.Random, k: int):
    """(label, bytes): cut off at a few places, then random flips, insertions and deletions."""
    yield "empty", b""
    for frac in (0.01, 0.3, 0.7, 0.99):
        yield f"cut at {frac}", data[:max(1, int(len(data) * frac))]
    for j in range(k):
        b = bytearray(data)
        how = rng.choice(("flip", "insert", "delete", "digit"))
        i = rng.randrange(len(b))
        if how == "flip":
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif how == "insert":
            b[i:i] = bytes(rng.choice(b"{}[],:\"0123456789-e.x\xff\x00") for _ in range(rng.randint(1, 3)))
        elif how == "delete":
            del b[i:i + rng.randint(1, 8)]
        else:  # a digit becomes another one: a size, an index or a count changes, the JSON still parses
            digits = [p for p, c in enumerate(b) if chr(c).isdigit()]
            if digits:
                b[rng.choice(digits)] = ord(rng.choice("0123456789"))
        yield f"{how} {j}", bytes(b)


def _paths(doc, prefix=()):
    """Every (container path, key) inside a JSON document."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield prefix + (key,)
        yield from _paths(value, prefix + (key,))


def _json_mutants(doc, rng: random.Random, k: int):
    """(label, text): a field deleted, given another type's value, or nested 100,000 deep."""
    paths = list(_paths(doc))
    top = [p for p in paths if len(p) == 1]
    for j in range(k):
        path = rng.choice(top if j < len(top) else paths)  # every top-level field first
        d = copy.deepcopy(doc)
        parent = d
        for key in path[:-1]:
            parent = parent[key]
        how = rng.choice(("delete", "retype", "retype", "deep"))
        if how == "delete":
            del parent[path[-1]]
            yield f"delete {path}", json.dumps(d)
        elif how == "retype":
            value = rng.choice(OTHER_VALUES)
            parent[path[-1]] = value
            yield f"{path} = {value!r}", json.dumps(d)
        else:
            parent[path[-1]] = "@@DEEP@@"
            yield f"deep {path}", json.dumps(d).replace('"@@DEEP@@"', DEEP)
    yield "deep top", DEEP


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    g = random_dag(SEED, num_nodes=30, control_fraction=0.2)
    gpath = d / "g.json"
    save(g, gpath)
    sol = d / "sol.json"
    r = _invoke("optimize", gpath, "-d", 2, "-n", 60, "--no-polish", "-o", sol)
    assert r.exit_code == 0, r.output
    return g, gpath, sol


# ------------------------------------------------------------------ graphs
def _raw_nodes(text: str):
    doc = json.loads(text)
    return doc["nodes"]


def test_fuzzed_graph_json_gives_a_right_summary_or_one_line(files, tmp_path):
    from regal.graph import load
    _, gpath, _ = files
    rng = random.Random(SEED)
    data = gpath.read_bytes()
    mutants = list(_byte_mutants(data, rng, 40))
    mutants += [(label, text.encode()) for label, text in _json_mutants(json.loads(data), rng, 30)]
    mutants += [(f"gz {label}", blob) for label, blob in _byte_mutants(gzip.compress(data), rng, 6)]
    ok = 0
    for label, blob in mutants:
        p = tmp_path / ("m.json.gz" if label.startswith("gz ") else "m.json")
        p.write_bytes(blob)
        r = _invoke("info", p, "--json")
        if not _check_outcome(r, label):
            continue
        ok += 1
        s = json.loads(r.output)
        text = gzip.decompress(blob).decode() if label.startswith("gz ") else blob.decode()
        nodes = _raw_nodes(text)  # what the file says, read without regal
        assert s["nodes"] == len(nodes), label
        assert s["total_bytes"] == sum(int(n["bytes"]) for n in nodes), label
        assert s["resident_bytes"] == sum(int(n["bytes"]) for n in nodes if n.get("resident")), label
        assert s["data_edges"] == sum(len(n.get("inputs") or []) for n in nodes), label
        g = load(p)
        order = g.topological_order()
        assert naive.is_topological(g, order), label
        peak, _ = naive.simulate(g, [0] * g.num_nodes, list(order), 1)
        assert 0 <= s["lower_bound_bytes"] <= peak, label
    assert ok < len(mutants) // 2  # most mutants are refused


# ------------------------------------------------------------------ solutions
def test_fuzzed_solution_is_valid_or_one_line(files, tmp_path):
    """`regal evaluate` accepts a mutated solution only if it is a valid schedule with the peak the
    naive simulator gives."""
    g, gpath, sol = files
    rng = random.Random(SEED + 1)
    data = sol.read_bytes()
    mutants = list(_byte_mutants(data, rng, 40)) + [(label, text.encode())
                                                   for label, text in _json_mutants(json.loads(data), rng, 40)]
    ok = 0
    for label, blob in mutants:
        p = tmp_path / "m.json"
        p.write_bytes(blob)
        r = _invoke("evaluate", gpath, p, "--json")
        if not _check_outcome(r, label):
            continue
        ok += 1
        doc = json.loads(blob)
        d = doc["devices"]
        placement = [doc["placement"][nid] for nid in g.ids]
        order = [g.index[nid] for nid in doc["order"]]
        assert naive.is_topological(g, order) and all(0 <= k < d for k in placement), label
        peak, peaks = naive.simulate(g, placement, order, d)
        out = json.loads(r.output)
        assert out["peak_bytes"] == peak and out["device_peak_bytes"] == peaks, label
        assert doc.get("peak_bytes", peak) == peak, label
    assert 0 < ok < len(mutants) // 2


# ------------------------------------------------------------------ policies
def _npz_mutants(path: str, rng: random.Random):
    """A policy file with its config or metadata retyped or deleted, or a parameter reshaped."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    config = json.loads(str(arrays["__config__"]))
    params = sorted(k for k in arrays if not k.startswith("__"))
    edits = [("no config", lambda a: a.pop("__config__")), ("no meta", lambda a: a.pop("__meta__")),
             ("config list", lambda a: a.update(__config__=np.array("[1, 2]"))),
             ("config deep", lambda a: a.update(__config__=np.array(DEEP))),
             ("config bytes", lambda a: a.update(__config__=np.frombuffer(b"\xff\xfe", np.uint8))),
             ("no param", lambda a: a.pop(params[0])),
             ("param shape", lambda a: a.update({params[1]: arrays[params[1]][..., :1]})),
             ("param int", lambda a: a.update({params[2]: arrays[params[2]].astype(np.int64)})),
             ("param nan", lambda a: a.update({params[3]: np.full_like(arrays[params[3]], np.nan)})),
             ("extra param", lambda a: a.update({"ghost/w": np.zeros(3, np.float32)}))]
    retyped = [("unknown field", lambda a: a.update(__config__=np.array(json.dumps({**config, "x": 1}))))]
    for field in ("kind", "hidden", "max_devices", "placement", "rounds", "features", "drop_features"):
        for value in ("x", -1, None, 10 ** 9, [1]):
            retyped.append((f"{field}={value!r}", lambda a, f=field, v=value: a.update(
                __config__=np.array(json.dumps({**config, f: v})))))
    for label, edit in edits + rng.sample(retyped, 8):
        a = dict(arrays)
        edit(a)
        yield label, a


def test_fuzzed_policy_file_gives_a_valid_solution_or_one_line(files, tmp_path):
    """`regal optimize --policy FILE` on a damaged policy: a one-line error, or (when the file is
    still a policy this graph can use) a solution that re-simulates to its claimed peak."""
    pytest.importorskip("jax")
    from regal.policy import DEFAULT_POLICY
    g, gpath, _ = files
    rng = random.Random(SEED + 2)
    data = open(DEFAULT_POLICY, "rb").read()
    mutants = list(_byte_mutants(data, rng, 8))
    for label, arrays in _npz_mutants(DEFAULT_POLICY, rng):
        p = tmp_path / "x.npz"
        np.savez(p, **arrays)
        mutants.append((label, p.read_bytes()))
    out = tmp_path / "sol.json"
    ok = 0
    for label, blob in mutants:
        p = tmp_path / "m.npz"
        p.write_bytes(blob)
        if out.exists():
            out.unlink()
        r = _invoke("optimize", gpath, "-d", 2, "-n", 40, "--no-seeding", "--no-polish", "--policy", p, "-o", out)
        if not _check_outcome(r, label):
            assert not out.exists(), label
            continue
        ok += 1
        doc = json.loads(out.read_text())
        placement = [doc["placement"][nid] for nid in g.ids]
        order = [g.index[nid] for nid in doc["order"]]
        assert naive.is_topological(g, order), label
        assert naive.simulate(g, placement, order, 2)[0] == doc["peak_bytes"], label
    assert 0 < ok < len(mutants) // 2  # NaN or integer parameters, or one more, still make a policy


# ------------------------------------------------------------------ HLO
def test_fuzzed_hlo_is_a_graph_or_one_line(tmp_path):
    """`regal info` on mutated HLO text (and a mutated .hlo.gz): a summary or one line."""
    from regal.load import load_graph
    data = open(os.path.join(HERE, "data", "tiny.hlo"), "rb").read()
    rng = random.Random(SEED + 3)
    mutants = list(_byte_mutants(data, rng, 40))
    mutants += [(f"gz {label}", blob) for label, blob in _byte_mutants(gzip.compress(data), rng, 6)]
    for label, blob in mutants:
        p = tmp_path / ("m.hlo.gz" if label.startswith("gz ") else "m.hlo")
        p.write_bytes(blob)
        r = _invoke("info", p, "--json")
        if _check_outcome(r, label):
            s = json.loads(r.output)
            g = load_graph(p)
            order = g.topological_order()
            assert naive.is_topological(g, order), label
            assert 0 <= s["lower_bound_bytes"] <= naive.simulate(g, [0] * g.num_nodes, list(order), 1)[0], label
