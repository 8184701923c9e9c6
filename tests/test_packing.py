"""regal.packing, regal.memory_plan, regal.fit and the `regal pack` / `regal fit` contract (issue 35)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import naive_pack
import regal
from regal import packing
from regal.cli import main
from regal.decode import decode
from regal.graph import Graph
from regal.memory_plan import buffers, check_plan_json, plan, plan_json
from regal.simulate import simulate


def _random_instance(rng, m, horizon=12, life=8, size=8):
    lower = rng.integers(0, horizon, m)
    return lower, lower + rng.integers(1, life + 1, m), rng.integers(1, size + 1, m)


@pytest.mark.slow  # brute force on 150 instances: about 20 s
def test_packer_is_optimal_on_tiny_instances_like_its_naive_twin():
    """On 150 random instances of up to 6 buffers the packer's arena is the brute-force optimum,
    its packing collides nowhere, and its bound is the naive live-bytes count."""
    rng = np.random.default_rng(0)
    for _ in range(150):
        lo, up, sz = _random_instance(rng, int(rng.integers(1, 7)))
        res = packing.pack(packing.instance(lo, up, sz), time_limit_s=None)
        assert naive_pack.collide(lo, up, sz, res.offsets) is None
        assert res.bound_bytes == naive_pack.live_bytes(lo, up, sz)
        assert res.packed_bytes == naive_pack.optimal_arena(lo, up, sz)
        assert res.optimal  # with no time limit the search ends with a proof


def test_greedy_kernel_matches_its_naive_twin():
    """First fit in a given order places every buffer where the naive first fit does."""
    from regal.kernels import pack as K
    rng = np.random.default_rng(1)
    for _ in range(50):
        lo, up, sz = _random_instance(rng, 20)
        order = rng.permutation(20).astype(np.int64)
        ptr, idx = K.overlaps(lo.astype(np.int64), up.astype(np.int64), np.zeros(1, dtype=np.int64))
        off, arena, placed = K.greedy(sz.astype(np.int64), ptr, idx, order, False, np.zeros(1, dtype=np.int64))
        assert placed == 20
        ref, ref_arena = naive_pack.first_fit(lo, up, sz, order.tolist())
        assert off.tolist() == ref and arena == ref_arena


def test_search_decides_like_brute_force():
    """The exact search fits every tiny instance at its optimum and proves one byte less infeasible."""
    from regal.kernels import minimalloc as K
    rng = np.random.default_rng(2)
    for trial in range(120):
        lo, up, sz = _random_instance(rng, int(rng.integers(2, 7)))
        opt = naive_pack.optimal_arena(lo, up, sz)
        part = packing._part(packing.instance(lo, up, sz), np.arange(lo.shape[0]))
        if part.size.shape[0] == 0:
            continue
        for cap, want in ((opt, K.FOUND), (opt - 1, K.INFEASIBLE)):
            out = np.empty(part.size.shape[0], dtype=np.int64)
            status, _ = K.search(packing._buffers(part), trial % 3, cap - part.base, 10**7, out,
                                 np.zeros(1, dtype=np.int64))
            assert status == want
            if status == K.FOUND:
                assert naive_pack.collide(part.lower, part.upper, part.size, out + part.base) is None


def test_packings_of_random_larger_instances_are_valid():
    """On 30 instances of 60 buffers every packing passes the naive pairwise check, within its
    bound-to-greedy range."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        lo, up, sz = _random_instance(rng, 60, horizon=40, life=15, size=100)
        inst = packing.instance(lo, up, sz)
        res = packing.pack(inst, time_limit_s=0.2)
        assert naive_pack.collide(lo, up, sz, res.offsets) is None
        assert res.bound_bytes <= res.packed_bytes <= packing.greedy_pack(inst).packed_bytes


def test_check_names_two_colliding_buffers():
    """The checker refuses a packing where two live buffers share a byte, naming both."""
    inst = packing.instance([0, 2], [5, 6], [4, 4], ids=["a", "b"])
    assert packing.check(inst, [0, 4]) == 8
    with pytest.raises(packing.PackingError, match="'a' and 'b'|'b' and 'a'"):
        packing.check(inst, [0, 3])


def test_csv_round_trip(tmp_path):
    """write_csv then read_csv gives the same buffers; the offset column holds the packing."""
    rng = np.random.default_rng(4)
    lo, up, sz = _random_instance(rng, 25)
    inst = packing.instance(lo, up, sz, ids=[f"b{i}" for i in range(25)])
    res = packing.pack(inst, time_limit_s=0.5)
    path = tmp_path / "out.csv"
    packing.write_csv(path, inst, res.offsets)
    back = packing.read_csv(path)
    assert back.ids == inst.ids
    for a, b in zip(back[1:], inst[1:]):
        assert np.array_equal(a, b)
    rows = path.read_text().splitlines()
    assert rows[0] == "id,lower,upper,size,offset"
    assert [int(r.split(",")[-1]) for r in rows[1:]] == res.offsets.tolist()


@pytest.mark.parametrize("text, where", [
    ("id,lower,upper,size\n0,1,5,x\n", "row 2: field 'size'"),
    ("id,lower,upper\n0,1,5\n", "row 1: header lacks column 'size'"),
    ("id,lower,upper,size\n0,1,5,3\n1,7,4,2\n", "row 3: field 'upper'"),
    ("id,lower,upper,size\n0,1,5,3\n0,2,4,2\n", "row 3: field 'id'"),
    ("id,lower,upper,size\n0,-1,5,3\n", "row 2: field 'lower'"),
])
def test_pack_cli_bad_csv_is_one_line_naming_row_and_field(tmp_path, text, where):
    """A malformed CSV: exit 1 and one line naming the file, the row and the field, no traceback."""
    path = tmp_path / "bad.csv"
    path.write_text(text)
    r = CliRunner().invoke(main, ["pack", str(path)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    line = r.output.strip()
    assert "\n" not in line and str(path) in line and where in line


def test_pack_cli_json_keys_and_output_csv(tmp_path):
    """`regal pack --json` prints exactly packed_bytes, bound_bytes, optimal; -o adds offsets."""
    path, out = tmp_path / "in.csv", tmp_path / "out.csv"
    path.write_text("id,lower,upper,size\na,0,4,3\nb,2,6,5\nc,5,9,3\n")
    r = CliRunner().invoke(main, ["pack", str(path), "-o", str(out), "--time-limit", "1", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc) == {"packed_bytes", "bound_bytes", "optimal"}
    assert doc == {"packed_bytes": 8, "bound_bytes": 8, "optimal": True}
    assert out.read_text().splitlines()[0] == "id,lower,upper,size,offset"


def _chain():
    return Graph.from_records([
        {"id": "w", "bytes": 16, "resident": True},
        {"id": "a", "bytes": 40, "inputs": ["w"]},
        {"id": "b", "bytes": 40, "inputs": ["a"], "reuse": ["a"]},
        {"id": "c", "bytes": 8, "inputs": ["b", "w"], "temp_bytes": 4},
    ], name="chain")


def test_take_over_shares_the_buffer_and_the_bound_is_the_peak():
    """b takes a over: one block, one offset; the plan's live-bytes bound is the section 3 peak."""
    g = _chain()
    order = np.arange(4)
    b = buffers(g, np.zeros(4, dtype=np.int64), order, 1)
    assert b.block_of[1] == b.block_of[2]
    mp = plan(g, np.zeros(4, dtype=np.int64), order, 1)
    assert mp.bound_bytes[0] == simulate(g, np.zeros(4, dtype=np.int64), order, 1).peak_bytes
    doc = plan_json(g, mp)
    assert doc["offsets"]["a"] == doc["offsets"]["b"]
    assert check_plan_json(g, np.zeros(4, dtype=np.int64), order, 1, doc).tolist() == mp.arena_bytes.tolist()
    doc["offsets"]["b"] = doc["offsets"]["a"] + 1
    with pytest.raises(packing.PackingError, match="takes over"):
        check_plan_json(g, np.zeros(4, dtype=np.int64), order, 1, doc)


def test_plan_live_bytes_equal_device_peaks_on_random_schedules():
    """On random schedules of shipped graphs, d = 1, 2, 3, each device's buffers hold at most
    its section 3 peak at once, and exactly it."""
    import glob
    rng = np.random.default_rng(5)
    for path in sorted(glob.glob("data/graphs/synthetic/*.json.gz"))[:4]:
        g = regal.load(path)
        for d in (1, 2, 3):
            placement, order = decode(g, rng.random(g.num_nodes * (d + 1)), d)
            sim = simulate(g, placement, order, d)
            b = buffers(g, placement, order, d)
            for k in range(d):
                inst, _ = b.instance(g, k)
                assert packing.live_bytes_bound(inst.lower, inst.upper, inst.size) == sim.device_peak_bytes[k]


def test_fit_cli_contract(tmp_path):
    """`regal fit --json`: exactly fits, arena_bytes, bound_bytes, proof; exit 0 with a checked
    plan written by -o, 4 with a named bound above the limit."""
    import glob
    graph = sorted(glob.glob("data/graphs/synthetic/*.json.gz"))[0]
    g = regal.load(graph)
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["fit", graph, "--memory", "10MiB", "--devices", "1", "-o", str(out), "--json",
                                  "--budget", "200"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc) == {"fits", "arena_bytes", "bound_bytes", "proof"} and doc["fits"] is True
    sol = regal.load_solution(str(out), g)
    plan_doc = json.loads(out.read_text())["memory_plan"]
    assert check_plan_json(g, sol.placement, sol.order, 1, plan_doc).tolist() == doc["arena_bytes"]
    lb = g.lower_bound(2)
    r = CliRunner().invoke(main, ["fit", graph, "--memory", str(lb - 1), "-d", "2", "--json"])
    assert r.exit_code == 4, r.output
    doc = json.loads(r.output)
    assert doc["fits"] is False and doc["bound_bytes"] == lb and "SPEC section 7" in doc["proof"]
    r = CliRunner().invoke(main, ["fit", graph, "--memory", "lots"])
    assert r.exit_code == 2


def test_fit_undecided_exits_5():
    """A limit between the bound and anything the search finds: exit 5, fits null."""
    import glob
    graph = sorted(glob.glob("data/graphs/synthetic/*.json.gz"))[0]
    g = regal.load(graph)
    r = CliRunner().invoke(main, ["fit", graph, "--memory", str(g.lower_bound(1)), "--json", "--budget", "100",
                                  "--time-limit", "3"])
    doc = json.loads(r.output)
    assert (r.exit_code, doc["fits"]) in ((5, None), (0, True))


def test_runtime_objective_over_its_limit_exits_4_with_a_bound():
    """`regal optimize --objective runtime --memory-limit` below a lower bound: exit 4, not 0."""
    import glob
    graph = sorted(glob.glob("data/graphs/synthetic/*.json.gz"))[0]
    r = CliRunner().invoke(main, ["optimize", graph, "--objective", "runtime", "--memory-limit", "10",
                                  "--budget", "50"])
    assert r.exit_code == 4, r.output
