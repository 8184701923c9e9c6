"""Big numbers, odd ids and tampered plans (issue 48): `regal pack`, the plan reader and
`regal evaluate` are exact to 2**62 (sizes, times, offsets; sums checked, never wrapped), refuse
anything larger in one line naming the file and row, write CSV that reads back, and call a plan
valid only when every node, device and offset it names exists and fits. Never a traceback,
never a wrong answer with exit 0."""

import csv
import json

import numpy as np
import pytest
from click.testing import CliRunner

from regal import packing
from regal.cli import main
from regal.graph import Graph, save
from regal.memory_plan import plan, plan_json
from regal.solution import make_solution

LIMIT = 2 ** 62


def _write(path, rows, header="id,lower,upper,size"):
    path.write_text(header + "\n" + "".join(",".join(str(x) for x in r) + "\n" for r in rows))
    return str(path)


def _pack(path, *extra):
    return CliRunner().invoke(main, ["pack", str(path), "--time-limit", "2", *extra])


def _one_line_error(r, *words):
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    for w in words:
        assert w in lines[0], lines[0]


def _naive(lower, upper, size, offsets):
    """(arena, live-bytes bound, first collision or None), all in Python ints."""
    m = len(size)
    live = [i for i in range(m) if size[i] > 0 and upper[i] > lower[i]]
    clash = next(((i, j) for i in live for j in live if i < j and lower[i] < upper[j] and lower[j] < upper[i]
                  and offsets[i] < offsets[j] + size[j] and offsets[j] < offsets[i] + size[i]), None)
    times = sorted({lower[i] for i in live})
    bound = max((sum(size[i] for i in live if lower[i] <= t < upper[i]) for t in times), default=0)
    return max((offsets[i] + size[i] for i in live), default=0), bound, clash


def test_two_buffers_at_the_limit_are_exact_and_one_byte_more_is_refused(tmp_path):
    """Two live buffers of 2**61 pack in exactly 2**62 B; live bytes of 2**62 + 1 (the issue's
    wrapped case) are refused, naming the time; a value over 2**62 names the file, row and field."""
    r = _pack(_write(tmp_path / "a.csv", [("x", 0, 5, 2 ** 61), ("y", 1, 6, 2 ** 61)]), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {"packed_bytes": LIMIT, "bound_bytes": LIMIT, "optimal": True}
    r = _pack(_write(tmp_path / "b.csv", [("x", 0, 5, LIMIT), ("y", 3, 6, 1)]))
    _one_line_error(r, "b.csv", "live at time 3", "2**62")
    for value, field in ((LIMIT + 1, "size"), (2 ** 63, "size"), (2 ** 64, "size"), (LIMIT + 1, "upper")):
        row = ("x", 0, value, 1) if field == "upper" else ("x", 0, 5, value)
        r = _pack(_write(tmp_path / "c.csv", [("a", 0, 1, 1), row]))
        _one_line_error(r, "c.csv", "row 3", f"field '{field}'", str(value))


def test_fuzz_pack_at_the_size_limits(tmp_path):
    """120 random small instances whose sizes and times are drawn near 2**62, 2**61, 2**40 and
    small: each either packs (exit 0) with offsets that collide nowhere, an arena and a bound that
    are the exact Python-int values, or is refused in one line (exit 1) because its live bytes
    pass 2**62; never a traceback."""
    rng = np.random.default_rng(48)
    scales = [LIMIT, 2 ** 61, 2 ** 61 + 1, 2 ** 40, 1000, 1]
    packed = refused = 0
    for trial in range(120):
        m = int(rng.integers(1, 7))
        big_times = trial % 3 == 0
        lower = [int(rng.integers(0, 6)) + (LIMIT - 10 if big_times else 0) for _ in range(m)]
        upper = [lo + int(rng.integers(0, 6)) for lo in lower]
        upper = [min(u, LIMIT) for u in upper]
        size = [int(min(LIMIT, max(0, scales[int(rng.integers(len(scales)))] - int(rng.integers(0, 3)))))
                for _ in range(m)]
        path = _write(tmp_path / f"f{trial}.csv", [(f"b{i}", lower[i], upper[i], size[i]) for i in range(m)])
        out = tmp_path / f"f{trial}.out.csv"
        r = _pack(path, "--json", "-o", str(out))
        arena_any, bound, _ = _naive(lower, upper, size, [0] * m)
        if bound > LIMIT:
            _one_line_error(r, "2**62")
            refused += 1
            continue
        assert r.exit_code == 0, r.output
        doc = json.loads(r.output)
        with open(out, newline="") as f:
            offsets = [int(row["offset"]) for row in csv.DictReader(f)]
        arena, naive_bound, clash = _naive(lower, upper, size, offsets)
        assert clash is None and doc["packed_bytes"] == arena and doc["bound_bytes"] == naive_bound == bound
        assert arena <= LIMIT
        packed += 1
    assert packed > 30 and refused > 10


@pytest.mark.parametrize("bad", ["x,with comma", 'a "quoted" id', "two\nlines", "naïve ✓", " spaced "])
def test_output_csv_quotes_ids_and_reads_back(tmp_path, bad):
    """An id holding a comma, a quote, a line break or non-ASCII text is written quoted: the
    output CSV reads back to the same buffers and its offsets check."""
    path = tmp_path / "in.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "lower", "upper", "size"])
        w.writerows([[bad, 0, 4, 3], ["b", 2, 6, 5]])
    out = tmp_path / "out.csv"
    r = _pack(path, "-o", str(out))
    assert r.exit_code == 0, r.output
    inst, back = packing.read_csv(path), packing.read_csv(out)
    assert back.ids == inst.ids and back.ids[0] == bad.strip()
    with open(out, newline="", encoding="utf-8") as f:
        offsets = [int(row["offset"]) for row in csv.DictReader(f)]
    assert packing.check(back, offsets) == 8


def test_a_byte_order_mark_is_accepted(tmp_path):
    """Excel's "CSV UTF-8" starts with a byte-order mark: the header still has its 'id' column."""
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffid,lower,upper,size\r\na,0,4,3\r\nb,2,6,5\r\n".encode("utf-8"))
    r = _pack(path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["packed_bytes"] == 8


def _planned(tmp_path):
    """A 2-device schedule with copies, a temp and a 0-byte node, its plan file and its graph."""
    g = Graph.from_records([
        {"id": "w", "bytes": 16, "resident": True},
        {"id": "a", "bytes": 40, "inputs": ["w"], "temp_bytes": 8},
        {"id": "z", "bytes": 0, "inputs": ["a"]},
        {"id": "b", "bytes": 24, "inputs": ["a", "w"]},
        {"id": "c", "bytes": 8, "inputs": ["b", "z"]},
    ], name="planned")
    placement, order = np.array([0, 0, 1, 1, 0]), np.arange(5)
    sol = make_solution(g, placement, order, 2, method="test")
    doc = sol.to_json()
    doc["memory_plan"] = plan_json(g, plan(g, placement, order, 2))
    save(g, tmp_path / "g.json")
    return str(tmp_path / "g.json"), doc


TAMPERS = [
    ("an offset of 2**63 - 1", lambda p: p["offsets"].update(a=2 ** 63 - 1), "2**62"),
    ("an offset of 2**64", lambda p: p["offsets"].update(a=2 ** 64), "2**62"),
    ("an offset ending past 2**62", lambda p: p["offsets"].update(a=LIMIT - 1), "2**62"),
    ("a negative offset", lambda p: p["offsets"].update(a=-1), "non-negative"),
    ("a float offset", lambda p: p["offsets"].update(a=1.5), "non-negative integer"),
    ("a boolean offset", lambda p: p["offsets"].update(a=True), "non-negative integer"),
    ("a node the graph lacks", lambda p: p["offsets"].update(ghost=0), "'ghost'"),
    ("an offset for a 0-byte node", lambda p: p["offsets"].update(z=0), "'z'"),
    ("a copy on device 99", lambda p: p["copy_offsets"]["w"].update({"99": 0}), "device '99'"),
    ("a copy on device '01'", lambda p: p["copy_offsets"]["w"].update({"01": 0}), "device '01'"),
    ("a copy on a device without one", lambda p: p["copy_offsets"].update(c={"1": 0}), "'c'"),
    ("a copy of a node the graph lacks", lambda p: p["copy_offsets"].update(ghost={"1": 0}), "'ghost'"),
    ("copy offsets not an object", lambda p: p["copy_offsets"].update(w=[0]), "'w'"),
    ("a temp offset for a node without temp", lambda p: p.setdefault("temp_offsets", {}).update(b=0), "'b'"),
    ("a missing offset", lambda p: p["offsets"].pop("b"), "'b'"),
    ("arena_bytes of the wrong length", lambda p: p.update(arena_bytes=p["arena_bytes"] + [0]), "arena_bytes"),
    ("a wrong arena", lambda p: p.update(arena_bytes=[p["arena_bytes"][0] + 1, p["arena_bytes"][1]]), "arena_bytes"),
    ("colliding offsets", lambda p: p["offsets"].update(b=p["copy_offsets"]["a"]["1"]), "overlap"),
]


@pytest.mark.parametrize("what, tamper, words", TAMPERS, ids=[t[0] for t in TAMPERS])
def test_evaluate_refuses_a_tampered_plan_in_one_line(tmp_path, what, tamper, words):
    """A plan naming a node, device or offset that does not exist or does not fit (or that
    overlaps, or claims other arenas) is refused by `regal evaluate` in one line; the untouched
    plan is valid."""
    graph, doc = _planned(tmp_path)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["evaluate", graph, str(good)])
    assert r.exit_code == 0, r.output
    tamper(doc["memory_plan"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["evaluate", graph, str(bad)])
    _one_line_error(r, "memory_plan", words)
