"""regal.graph: validation per SPEC.md section 1, file and networkx round trips, derived arrays."""

import gzip
import json

import numpy as np
import pytest

import regal
from regal.graph import Graph, GraphError, from_networkx, load, save, to_networkx

from randgraph import random_dag


def _write(tmp_path, doc, name="g.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


def _doc(nodes):
    return {"format": "regal-graph/1", "name": "t", "nodes": nodes}


def _error(tmp_path, nodes) -> str:
    with pytest.raises(GraphError) as e:
        load(_write(tmp_path, _doc(nodes)))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_cycle_error_names_the_nodes_on_one_cycle(tmp_path):
    """A cycle is rejected and the message lists the nodes of one cycle, in edge direction."""
    msg = _error(tmp_path, [
        {"id": "x", "bytes": 1},
        {"id": "a", "bytes": 1, "inputs": ["x", "c"]},
        {"id": "b", "bytes": 1, "inputs": ["a"]},
        {"id": "c", "bytes": 1, "inputs": ["b"]},
        {"id": "d", "bytes": 1, "inputs": ["c"]},
    ])
    assert "cycle" in msg and "a -> b -> c -> a" in msg and "'x'" not in msg and "d ->" not in msg


def test_control_edge_cycle_is_rejected(tmp_path):
    """A cycle closed by a control edge is still a cycle."""
    msg = _error(tmp_path, [
        {"id": "a", "bytes": 1, "control_inputs": ["b"]},
        {"id": "b", "bytes": 1, "inputs": ["a"]},
    ])
    assert "a -> b -> a" in msg


def test_self_loop_names_the_node(tmp_path):
    """A node that is its own input is a one-node cycle named in the message."""
    assert "'s'" in _error(tmp_path, [{"id": "s", "bytes": 1, "inputs": ["s"]}])


def test_missing_input_names_consumer_and_input(tmp_path):
    """An input id that does not exist is rejected naming both the node and the missing id."""
    msg = _error(tmp_path, [{"id": "a", "bytes": 1}, {"id": "b", "bytes": 1, "inputs": ["a", "ghost"]}])
    assert "'b'" in msg and "'ghost'" in msg and "does not exist" in msg


def test_missing_control_input_is_rejected(tmp_path):
    """A control input that does not exist is rejected naming the node."""
    msg = _error(tmp_path, [{"id": "a", "bytes": 1, "control_inputs": ["nope"]}])
    assert "'a'" in msg and "'nope'" in msg


def test_duplicate_id_is_named(tmp_path):
    """Two nodes with one id: the id is named."""
    assert "duplicate node id 'a'" in _error(tmp_path, [{"id": "a", "bytes": 1}, {"id": "a", "bytes": 2}])


@pytest.mark.parametrize("bad", [-1, 1.5, "12", True, None, float("nan")])
def test_bad_bytes_names_the_node(tmp_path, bad):
    """bytes must be an integer >= 0; anything else names the node and the field."""
    msg = _error(tmp_path, [{"id": "ok", "bytes": 1}, {"id": "bad", "bytes": bad}])
    assert "'bad'" in msg and "'bytes'" in msg


def test_integral_float_bytes_are_accepted(tmp_path):
    """A JSON number like 4.0 is an integer value and is accepted."""
    g = load(_write(tmp_path, _doc([{"id": "a", "bytes": 4.0}])))
    assert g.bytes.tolist() == [4] and g.bytes.dtype == np.int64


def test_missing_bytes_names_the_node(tmp_path):
    """bytes is required."""
    assert "'a' has no 'bytes'" in _error(tmp_path, [{"id": "a"}])


def test_bad_temp_bytes_names_the_node(tmp_path):
    """temp_bytes follows the same rule as bytes."""
    msg = _error(tmp_path, [{"id": "t", "bytes": 1, "temp_bytes": -3}])
    assert "'t'" in msg and "'temp_bytes'" in msg


def test_resident_with_inputs_is_named(tmp_path):
    """A resident node must have no inputs."""
    msg = _error(tmp_path, [{"id": "a", "bytes": 1}, {"id": "w", "bytes": 1, "resident": True, "inputs": ["a"]}])
    assert "'w' is resident but has inputs" in msg


def test_duplicate_input_is_named(tmp_path):
    """SPEC lists each input once; a repeat names the node and the input."""
    msg = _error(tmp_path, [{"id": "a", "bytes": 1}, {"id": "b", "bytes": 1, "inputs": ["a", "a"]}])
    assert "'b'" in msg and "'a' twice" in msg


def test_empty_graph_is_rejected(tmp_path):
    """A graph with no nodes is an error."""
    assert "empty" in _error(tmp_path, [])


def test_not_json_is_rejected(tmp_path):
    """A file that is not JSON gives a one-line error naming the file."""
    p = _write(tmp_path, "{not json", "bad.json")
    with pytest.raises(GraphError, match=r"bad\.json: not a JSON file"):
        load(p)


def test_wrong_format_is_rejected(tmp_path):
    """JSON that is not regal-graph/1 is rejected, naming the format found."""
    p = _write(tmp_path, {"format": "something/2", "nodes": []})
    with pytest.raises(GraphError, match="not a regal-graph/1 file"):
        load(p)
    p = _write(tmp_path, [1, 2, 3], "list.json")
    with pytest.raises(GraphError, match="top level is not an object"):
        load(p)


def test_missing_file_is_a_graph_error(tmp_path):
    """A path that does not exist is a one-line GraphError, not a traceback."""
    with pytest.raises(GraphError, match="no such file"):
        load(tmp_path / "absent.json")


def test_unknown_keys_are_ignored(tmp_path):
    """SPEC: unknown keys are ignored."""
    g = load(_write(tmp_path, _doc([{"id": "a", "bytes": 3, "color": "red"}]) | {"extra": 1}))
    assert g.num_nodes == 1 and g.bytes[0] == 3


def test_csr_arrays_match_the_records():
    """in/out/control CSR arrays hold exactly the edges of the records, inputs in file order."""
    g = Graph.from_records([
        {"id": "w", "bytes": 8, "resident": True},
        {"id": "a", "bytes": 4},
        {"id": "b", "bytes": 2, "inputs": ["w", "a"]},
        {"id": "c", "bytes": 1, "inputs": ["b", "a"], "control_inputs": ["w"]},
    ])
    assert [g.inputs(v).tolist() for v in range(4)] == [[], [], [0, 1], [2, 1]]
    assert [g.consumers(v).tolist() for v in range(4)] == [[2], [2, 3], [3], []]
    assert g.control_inputs(3).tolist() == [0]
    assert g.ctrl_out_idx.tolist() == [3] and g.ctrl_out_ptr.tolist() == [0, 1, 1, 1, 1]
    assert g.pred_idx[g.pred_ptr[3]:g.pred_ptr[4]].tolist() == [0, 1, 2]
    assert g.succ_idx[g.succ_ptr[0]:g.succ_ptr[1]].tolist() == [2, 3]


def test_lower_bound_is_below_every_simulated_peak():
    """The lower bound never exceeds the peak of any schedule (random DAGs, random schedules)."""
    from regal.simulate import simulate
    rng = np.random.default_rng(0)
    for seed in range(200):
        g = random_dag(seed)
        for d in (1, 2, 3):
            placement = rng.integers(0, d, g.num_nodes)
            order = g.topological_order()
            assert g.lower_bound(d) <= simulate(g, placement, order, d).peak_bytes


def _shuffled(seed: int) -> Graph:
    """A random DAG whose records are listed in random order, so node order is not topological."""
    recs = random_dag(seed, control_fraction=0.5).to_records()
    np.random.default_rng(seed).shuffle(recs)
    return Graph.from_records(recs, name=f"shuffled{seed}")


def test_topological_order_is_kahn_taking_the_lowest_ready_index():
    """topological_order() is Kahn's algorithm that always runs the lowest-index ready node."""
    import heapq
    for seed in range(100):
        g = _shuffled(seed)
        preds = [set(g.inputs(v).tolist()) | set(g.control_inputs(v).tolist()) for v in range(g.num_nodes)]
        indeg = [len(p) for p in preds]
        ready = [v for v in range(g.num_nodes) if indeg[v] == 0]
        expected = []
        while ready:
            v = heapq.heappop(ready)
            expected.append(v)
            for w in range(g.num_nodes):
                if v in preds[w]:
                    indeg[w] -= 1
                    if indeg[w] == 0:
                        heapq.heappush(ready, w)
        order = g.topological_order()
        assert order.dtype == np.int64 and order.tolist() == expected


def test_levels_and_depth_are_longest_paths():
    """levels() counts edges on the longest path from a source and to a sink; depth() counts nodes."""
    import networkx as nx
    for seed in range(50):
        g = _shuffled(seed)
        h = nx.DiGraph()
        h.add_nodes_from(range(g.num_nodes))
        h.add_edges_from((int(u), v) for v in range(g.num_nodes) for u in g.pred_idx[g.pred_ptr[v]:g.pred_ptr[v + 1]])
        from_sources, to_sinks = g.levels()
        longest_to = {v: 0 for v in h}
        for v in nx.topological_sort(h):
            for w in h.successors(v):
                longest_to[w] = max(longest_to[w], longest_to[v] + 1)
        longest_from = {v: 0 for v in h}
        for v in reversed(list(nx.topological_sort(h))):
            for w in h.successors(v):
                longest_from[v] = max(longest_from[v], longest_from[w] + 1)
        assert from_sources.tolist() == [longest_to[v] for v in range(g.num_nodes)]
        assert to_sinks.tolist() == [longest_from[v] for v in range(g.num_nodes)]
        assert g.depth() == nx.dag_longest_path_length(h) + 1


def test_cached_values_are_computed_once_per_key():
    """Graph.cached calls `make` only on the first request for a key and returns the same object."""
    g = random_dag(3)
    calls = []
    first = g.cached("test-key", lambda: calls.append(1) or np.arange(3))
    assert g.cached("test-key", lambda: calls.append(1) or np.arange(5)) is first and calls == [1]


def test_summary_of_a_chain():
    """summary() of the SPEC chain a(4)->b(2)->c(1): counts, depth 3 and bound 6."""
    g = Graph.from_records([{"id": "a", "bytes": 4}, {"id": "b", "bytes": 2, "inputs": ["a"]},
                            {"id": "c", "bytes": 1, "inputs": ["b"]}], name="chain")
    s = g.summary()
    assert (s["nodes"], s["data_edges"], s["depth"], s["total_bytes"]) == (3, 2, 3, 7)
    assert s["largest_tensor"] == {"id": "a", "bytes": 4}
    assert s["lower_bound_bytes_1_device"] == 6


def _same(g1: Graph, g2: Graph):
    assert g1.name == g2.name and g1.ids == g2.ids and g1.ops == g2.ops and g1.meta == g2.meta
    for f in ("bytes", "temp_bytes", "cost", "resident", "in_ptr", "in_idx", "ctrl_in_ptr", "ctrl_in_idx"):
        a, b = getattr(g1, f), getattr(g2, f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_file_round_trip_is_lossless(tmp_path, suffix):
    """save then load gives back identical arrays, ids, ops and meta (plain and gzip)."""
    for seed in range(30):
        g = random_dag(seed)
        g.meta.update({"source": "test", "seed": seed})
        p = tmp_path / f"g{seed}{suffix}"
        save(g, p)
        _same(g, load(p))
    if suffix.endswith(".gz"):
        with gzip.open(p) as f:
            assert json.load(f)["format"] == "regal-graph/1"


def test_networkx_round_trip_is_lossless():
    """to_networkx then from_networkx gives back the same graph, control edges included."""
    for seed in range(30):
        g = random_dag(seed, control_fraction=0.5)
        g.meta["k"] = 1
        _same(g, from_networkx(to_networkx(g)))


def test_from_networkx_accepts_plain_digraphs():
    """A plain DiGraph with bytes on nodes becomes a graph of data edges."""
    import networkx as nx
    h = nx.DiGraph()
    h.add_node("in", bytes=10, resident=True)
    h.add_node("f", bytes=5)
    h.add_edge("in", "f")
    g = from_networkx(h, name="plain")
    assert g.ids == ("in", "f") and g.inputs(1).tolist() == [0] and bool(g.resident[0])


def test_import_regal_does_not_import_jax():
    """A scheduler that imports regal pays nothing for JAX."""
    import subprocess
    import sys
    code = "import regal, regal.search, regal.cli, sys; print('jax' in sys.modules, 'haiku' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
    assert regal.__version__


def test_byte_counts_beyond_exact_arithmetic_are_refused_naming_the_node():
    """A node over 2**53 - 1 bytes, or bytes that add up past it, is a GraphError naming the node
    (not a wrong peak or a failed assertion later)."""
    from regal.graph import MAX_TOTAL_BYTES
    with pytest.raises(GraphError, match="'big'.*too large"):
        Graph.from_records([{"id": "big", "bytes": 2**53 + 1}])
    recs = [{"id": f"n{i}", "bytes": MAX_TOTAL_BYTES // 3, "inputs": [f"n{i - 1}"] if i else []} for i in range(4)]
    with pytest.raises(GraphError, match="'n3'.*add up"):
        Graph.from_records(recs)
    Graph.from_records(recs[:3])  # three fit


def test_device_counts_are_bounded_by_the_graph_and_by_memory():
    """More devices than nodes, or a population that cannot fit, fail before allocating."""
    import regal
    from regal.solution import SolutionError, solution_from_json
    g = Graph.from_records([{"id": "a", "bytes": 1}, {"id": "b", "bytes": 1, "inputs": ["a"]}])
    with pytest.raises(ValueError, match="more than the graph's 2 nodes"):
        regal.optimize(g, devices=3, budget=10)
    doc = {"format": "regal-solution/1", "graph": g.name, "devices": 10**9, "placement": {"a": 0, "b": 0},
           "order": ["a", "b"], "peak_bytes": 2}
    with pytest.raises(SolutionError, match="more than the graph's 2 nodes"):
        solution_from_json(g, doc)
    chain = Graph.from_records([{"id": f"n{i}", "bytes": 1, "inputs": [f"n{i - 1}"] if i else []}
                                for i in range(50_000)])
    with pytest.raises(ValueError, match="GiB"):
        regal.optimize(chain, devices=20_000, budget=10)


# ---------------------------------------------------------------------------- the reuse field
@pytest.mark.parametrize("reuse, what", [
    ("a", "'reuse' must be a list of input ids"),
    ([3], "'reuse' holds 3, not a node id"),
    (["zz"], "'reuse' lists 'zz', which is not one of its data inputs"),
    (["c"], "'reuse' lists 'c', which is not one of its data inputs"),      # a control input
    (["b"], "'reuse' lists 'b', which is not one of its data inputs"),      # itself
    (["a", "a"], "'reuse' lists 'a' twice"),
])
def test_bad_reuse_fields_are_one_line_errors_naming_node_and_field(tmp_path, reuse, what):
    """A `reuse` entry must be one of the node's own data inputs, named once."""
    msg = _error(tmp_path, [{"id": "a", "bytes": 1}, {"id": "c", "bytes": 1},
                            {"id": "b", "bytes": 1, "inputs": ["a"], "control_inputs": ["c"], "reuse": reuse}])
    assert "node 'b'" in msg and what in msg


def test_a_resident_node_cannot_list_reuse(tmp_path):
    msg = _error(tmp_path, [{"id": "a", "bytes": 1}, {"id": "w", "bytes": 1, "resident": True, "reuse": ["a"]}])
    assert "node 'w'" in msg and "'reuse'" in msg


def test_reuse_round_trips_through_files_and_networkx(tmp_path):
    """The field survives save/load (JSON) and to_networkx/from_networkx, in its order."""
    g = random_dag(7, num_nodes=30, reuse_fraction=0.8)
    assert g.has_reuse
    path = tmp_path / "g.json.gz"
    save(g, path)
    for h in (load(path), from_networkx(to_networkx(g))):
        assert h.to_records() == g.to_records()
        assert h.reuse_ptr.tolist() == g.reuse_ptr.tolist() and h.reuse_idx.tolist() == g.reuse_idx.tolist()
    plain = random_dag(7, num_nodes=30)
    assert not plain.has_reuse and all("reuse" not in r for r in plain.to_records())


@pytest.mark.slow  # brute force on 50 graphs: about 11 s
def test_lower_bound_with_reuse_stays_below_the_optimum():
    """The per-op bound subtracts what a node can take over, so it stays a bound (brute force)."""
    import naive
    for seed in range(25):
        g = random_dag(seed, num_nodes=7, reuse_fraction=0.8)
        for d in (1, 2):
            assert g.lower_bound(d) <= naive.brute_force_peak(g, d), (seed, d)
    g = Graph.from_records([{"id": "x", "bytes": 8}, {"id": "y", "bytes": 8, "inputs": ["x"], "reuse": ["x"]}])
    assert g.max_taken_bytes().tolist() == [0, 8] and g.lower_bound(1) == 8


def _same_fields(a, b) -> bool:
    for x, y in zip(a, b):
        if isinstance(x, tuple):
            if not all(p.dtype == q.dtype and np.array_equal(p, q) for p, q in zip(x, y)):
                return False
        elif isinstance(x, np.ndarray):
            if x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif x != y or list(x) != list(y):
            return False
    return True


def test_column_checks_build_the_arrays_the_record_checks_build():
    """bulk_fields (issue 36's fast load) gives the same arrays, dtypes and id order as record_fields."""
    from regal.graph.records import bulk_fields, record_fields
    for seed in range(60):
        recs = random_dag(seed, max_nodes=40, reuse_fraction=0.5, output_fraction=0.2).to_records()
        fast = bulk_fields(recs)
        assert fast is not None
        assert _same_fields(fast, record_fields(recs, "g"))


@pytest.mark.parametrize("change", [
    lambda r: r[2].update(bytes=4.0), lambda r: r[2].update(inputs=None), lambda r: r[2].update(cost=True),
    lambda r: r[2].update(inputs=["n0", "n0"]), lambda r: r[2].update(inputs=["n2"]),
    lambda r: r[2].update(inputs=["nope"]), lambda r: r[2].update(reuse=["n0", "n0"]),
    lambda r: r[1].update(reuse=["n2"]), lambda r: r[1].update(id="n0"),
    lambda r: r[2].update(bytes=2**63), lambda r: r[1].update(resident=True),
    lambda r: r[0].update(resident=True, control_inputs=["n1"]), lambda r: r[2].update(op=3)])
def test_column_checks_leave_anything_unusual_to_the_record_checks(change):
    """bulk_fields returns None for a value it does not take plainly (valid or not); record_fields decides."""
    from regal.graph.records import bulk_fields
    recs = [{"id": "n0", "bytes": 1}, {"id": "n1", "bytes": 2, "inputs": ["n0"]},
            {"id": "n2", "bytes": 3, "inputs": ["n0", "n1"], "reuse": ["n0"]}]
    assert bulk_fields(recs) is not None
    change(recs)
    assert bulk_fields(recs) is None
