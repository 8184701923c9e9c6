"""Tests for regal.onnx: ONNX model -> Graph (hand-built models and the shipped fixtures)."""

from __future__ import annotations

import collections
import gzip
import json
import math
import os
import random
import time
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import regal  # noqa: E402
from regal import _ops  # noqa: E402
from regal.graph import Graph, GraphError  # noqa: E402
from regal.hlo import COST_MODEL as HLO_COST_MODEL  # noqa: E402
from regal.onnx import ELEMENT_BITS, TESTED_OPSETS, load_onnx, tensor_bytes  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "data", "onnx")
MANIFEST = json.load(open(os.path.join(FIXTURES, "manifest.json")))["models"]
OPSET = 18


def _model(nodes, inputs, outputs, inits=(), opset=OPSET, **kw):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits), **kw)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def _vi(name, shape, dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def _init(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.ones(shape, dtype), name)


def _recs(g):
    return {r["id"]: r for r in g.to_records()}


def _small():
    """x[batch,4] @ w[4,6] -> Mul(m, m) -> Reshape(s) -> Split into two -> Add -> y."""
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             h.make_node("Mul", ["m", "m"], ["sq"], name="sq"),
             h.make_node("Reshape", ["sq", "s"], ["r"], name="rs"),
             h.make_node("Split", ["r"], ["a", "b"], axis=1, num_outputs=2, name="split"),
             h.make_node("Add", ["a", "b"], ["y"], name="add")]
    s = numpy_helper.from_array(np.array([-1, 6], np.int64), "s")
    return _model(nodes, [_vi("x", ["batch", 4])], [_vi("y", None)], [_init("w", (4, 6)), s])


# ---------------------------------------------------------------------- hand-built models
def test_small_model_nodes_bytes_and_edges_are_exact():
    """Weights and inputs are resident, Reshape folds, Mul(m, m) lists m once, Split sums outputs."""
    g = load_onnx(_small(), dims={"batch": 8})
    assert list(g.ids) == ["w", "s", "x", "mm", "sq", "split", "add"]
    assert list(g.ops) == ["initializer", "initializer", "input", "MatMul", "Mul", "Split", "Add"]
    assert g.bytes.tolist() == [96, 16, 128, 192, 192, 192, 96]
    assert g.resident.tolist() == [True, True, True, False, False, False, False]
    r = _recs(g)
    assert r["mm"]["inputs"] == ["x", "w"]
    assert r["sq"]["inputs"] == ["mm"]
    assert r["split"]["inputs"] == ["sq", "s"]        # through the folded Reshape, shape tensor too
    assert r["add"]["inputs"] == ["split"]            # both outputs of one node: one edge
    assert g.meta["outputs"] == {"y": ["add"]} and g.meta["folded"] == 1
    assert g.meta["num_parameters"] == 26 and g.meta["parameter_bytes"] == 112


def test_a_graph_output_that_is_also_consumed_is_marked_and_never_taken_over():
    """h = Relu(x) is returned and read by y = Neg(h): h is `output` (kept to the end) and is not
    in y's `reuse` list, although Neg is elementwise over a same-shape input."""
    nodes = [h.make_node("Relu", ["x"], ["h"], name="relu"), h.make_node("Neg", ["h"], ["y"], name="neg")]
    g = load_onnx(_model(nodes, [_vi("x", [4, 4])], [_vi("h", None), _vi("y", None)]))
    assert g.output.tolist() == [False, True, True]
    assert _recs(g)["neg"].get("reuse") is None
    assert regal.simulate(g, [0, 0, 0], [0, 1, 2], 1).peak_bytes == 64 + 64 + 64


def test_dims_scale_activation_bytes_not_weights():
    """Doubling the batch doubles every activation's bytes and leaves the weights alone."""
    g8, g16 = load_onnx(_small(), dims={"batch": 8}), load_onnx(_small(), dims={"batch": 16})
    act = ~g8.resident | (np.array(g8.ops) == "input")
    assert (g16.bytes[act] == 2 * g8.bytes[act]).all()
    assert (g16.bytes[~act] == g8.bytes[~act]).all()


def test_missing_dim_value_is_one_line_error_naming_input_and_dim():
    """A symbolic input dimension without a value names the input and the dimension."""
    with pytest.raises(GraphError, match=r"graph input 'x' has symbolic dimension 'batch' without a value"):
        load_onnx(_small())


def test_dim_expressions_from_exporters_are_evaluated():
    """value_info dims like 'Min(512, seq)' and '2*batch' take their values from dims."""
    nodes = [h.make_node("Concat", ["x", "x"], ["c"], axis=0, name="cat"),
             h.make_node("Relu", ["c"], ["y"], name="relu")]
    m = _model(nodes, [_vi("x", ["batch", "seq"])], [_vi("y", None)],
               value_info=[_vi("c", ["2*batch", "Min(512, seq)"])])
    g = load_onnx(m, dims={"batch": 3, "seq": 5})
    assert int(g.bytes[g.index["cat"]]) == 2 * 3 * 5 * 4


def test_optional_empty_inputs_and_outputs_are_skipped():
    """An omitted optional input ('') is no edge; an omitted optional output counts 0 bytes."""
    nodes = [h.make_node("Clip", ["x", "", "hi"], ["c"], name="clip"),
             h.make_node("Dropout", ["c"], ["y", ""], name="drop")]
    hi = numpy_helper.from_array(np.array(1.0, np.float32), "hi")
    g = load_onnx(_model(nodes, [_vi("x", [2, 3])], [_vi("y", None)], [hi]))
    r = _recs(g)
    assert r["clip"]["inputs"] == ["x", "hi"]
    assert r["drop"]["bytes"] == 24


def test_unsorted_nodes_are_put_in_topological_order():
    """Nodes listed consumer-first import as if sorted."""
    nodes = [h.make_node("Relu", ["a"], ["y"], name="second"), h.make_node("Neg", ["x"], ["a"], name="first")]
    g = load_onnx(_model(nodes, [_vi("x", [4])], [_vi("y", None)]))
    assert list(g.ids) == ["x", "first", "second"]


def test_cycle_is_rejected_naming_a_node():
    """A cycle between two nodes is a GraphError naming one of them."""
    nodes = [h.make_node("Add", ["x", "b"], ["a"], name="n1"), h.make_node("Relu", ["a"], ["b"], name="n2")]
    with pytest.raises(GraphError, match=r"cycle through node 'n1' \(Add\)"):
        load_onnx(_model(nodes, [_vi("x", [4])], [_vi("b", None)]))


def test_dangling_input_is_rejected_naming_node_and_input():
    """An input that nothing defines names the node and the tensor."""
    nodes = [h.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    with pytest.raises(GraphError, match=r"node 'add' \(Add\): input 'ghost' is not produced"):
        load_onnx(_model(nodes, [_vi("x", [4])], [_vi("y", None)]))


def test_unknown_element_type_is_rejected_naming_the_initializer():
    """An initializer of element type 99 names itself."""
    w = _init("w", (2,))
    w.data_type = 99
    nodes = [h.make_node("Identity", ["w"], ["y"], name="id")]
    with pytest.raises(GraphError, match=r"initializer 'w' has unknown element type 99"):
        load_onnx(_model(nodes, [], [_vi("y", None)], [w]))


def test_control_flow_is_rejected_naming_the_node():
    """An If node (a subgraph) is rejected with its name, not inlined."""
    branch = h.make_graph([h.make_node("Identity", ["x"], ["o"])], "b", [], [_vi("o", [4])])
    nodes = [h.make_node("If", ["c"], ["y"], name="branchy", then_branch=branch, else_branch=branch)]
    with pytest.raises(GraphError, match=r"node 'branchy' \(If\) has a subgraph"):
        load_onnx(_model(nodes, [_vi("c", [], T.BOOL), _vi("x", [4])], [_vi("y", None)]))


def test_unknown_shape_is_rejected_naming_the_node():
    """A custom op shape inference knows nothing about names the node."""
    nodes = [h.make_node("Mystery", ["x"], ["y"], name="magic", domain="my.ops")]
    m = _model(nodes, [_vi("x", [4])], [_vi("y", None)])
    m.opset_import.append(h.make_opsetid("my.ops", 1))
    with pytest.raises(GraphError, match=r"node 'magic' \(Mystery\): output 'y' has an unknown shape"):
        load_onnx(m)


def test_opset_outside_tested_range_warns():
    """Opset 11 imports but warns; a tested opset does not."""
    nodes = [h.make_node("Relu", ["x"], ["y"], name="relu")]
    with pytest.warns(UserWarning, match="opset 11 is outside the tested range"):
        load_onnx(_model(nodes, [_vi("x", [4])], [_vi("y", None)], opset=11))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for opset in (TESTED_OPSETS.start, 18, TESTED_OPSETS.stop - 1):
            load_onnx(_model(nodes, [_vi("x", [4])], [_vi("y", None)], opset=opset))


def test_local_functions_are_inlined():
    """A node calling a model-local function becomes the function body's nodes."""
    fn = h.make_function("local", "Twice", ["a"], ["b"],
                         [h.make_node("Add", ["a", "a"], ["t"]), h.make_node("Relu", ["t"], ["b"])],
                         [h.make_opsetid("", OPSET)])
    nodes = [h.make_node("Twice", ["x"], ["y"], name="call", domain="local")]
    m = _model(nodes, [_vi("x", [4])], [_vi("y", None)])
    m.opset_import.append(h.make_opsetid("local", 1))
    m.functions.append(fn)
    g = load_onnx(m)
    assert sorted(g.ops) == ["Add", "Relu", "input"]


def test_graph_output_that_is_a_weight_maps_to_it():
    """An output that is an initializer passed through Identity resolves to the initializer."""
    nodes = [h.make_node("Identity", ["w"], ["y"], name="id")]
    g = load_onnx(_model(nodes, [], [_vi("y", None)], [_init("w", (3,))]))
    assert g.num_nodes == 1 and g.meta["outputs"] == {"y": ["w"]}


def test_every_onnx_element_type_has_a_size():
    """ELEMENT_BITS covers every TensorProto.DataType this onnx knows but UNDEFINED (and the
    types of onnx 1.23, 1 to 28); sub-byte types pack."""
    assert set(ELEMENT_BITS) >= set(T.DataType.values()) - {T.UNDEFINED}
    assert set(ELEMENT_BITS) == set(range(1, 29))
    assert tensor_bytes(22, (3,), "t") == 2 and tensor_bytes(25, (5,), "t") == 2  # INT4, UINT2
    assert tensor_bytes(T.FLOAT16, (2, 3), "t") == 12 and tensor_bytes(T.COMPLEX128, (), "t") == 16


def test_cost_is_the_documented_roofline():
    """MatMul and Conv cost 2*out*K FLOPs at 100 TFLOP/s; a Relu costs its bytes at 1 TB/s."""
    assert _ops.PEAK_FLOPS_PER_S == HLO_COST_MODEL["peak_flops_per_s"]
    assert _ops.BANDWIDTH_BYTES_PER_S == HLO_COST_MODEL["bandwidth_bytes_per_s"]
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             h.make_node("Conv", ["img", "k"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["m"], ["y"], name="relu")]
    m = _model(nodes, [_vi("x", [256, 512]), _vi("img", [1, 8, 16, 16])], [_vi("y", None), _vi("c", None)],
               [_init("w", (512, 1024)), _init("k", (32, 8, 3, 3))])
    g = load_onnx(m)
    cost = dict(zip(g.ids, g.cost))
    mm_bytes = (256 * 512 + 512 * 1024 + 256 * 1024) * 4
    assert cost["mm"] == pytest.approx(max(2 * 256 * 1024 * 512 / 100e12, mm_bytes / 1e12))
    assert cost["conv"] == pytest.approx(max(2 * 32 * 16 * 16 * 8 * 9 / 100e12, (8192 + 9216 + 32768) / 1e12))
    assert cost["relu"] == pytest.approx(2 * 256 * 1024 * 4 / 1e12)


# ---------------------------------------------------------------------- files, external data, bad bytes
def test_gz_plain_and_bytes_give_the_same_graph(tmp_path):
    """A .onnx, a .onnx.gz and the raw bytes import to the same records."""
    data = _small().SerializeToString()
    (tmp_path / "m.onnx").write_bytes(data)
    (tmp_path / "m.onnx.gz").write_bytes(gzip.compress(data))
    a = load_onnx(tmp_path / "m.onnx", dims={"batch": 2})
    b = load_onnx(str(tmp_path / "m.onnx.gz"), dims={"batch": 2})
    c = load_onnx(data, dims={"batch": 2}, name="m")
    assert a.name == b.name == c.name == "m"
    assert a.to_records() == b.to_records() == c.to_records()


def test_external_data_is_not_read(tmp_path):
    """A model saved with external data imports the same with its data file deleted."""
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = _model(nodes, [_vi("x", [2, 64])], [_vi("y", None)], [_init("w", (64, 64))])
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="ext.weights", size_threshold=0)
    with_data = load_onnx(path).to_records()
    os.remove(tmp_path / "ext.weights")
    assert load_onnx(path).to_records() == with_data
    assert with_data[0] == {"id": "w", "op": "initializer", "bytes": 64 * 64 * 4, "resident": True}


@pytest.mark.parametrize("content, match", [
    (b"", "not an ONNX model"),
    (b"\x1f\x8b\x08\x00garbage", "not a gzip file"),
    (b"this is not a protobuf at all \xff\xff\xff", "not an ONNX model"),
])
def test_garbage_files_are_one_line_errors(tmp_path, content, match):
    """Empty, broken-gzip and garbage files raise one-line GraphErrors naming the file."""
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(GraphError, match=match) as e:
        load_onnx(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_missing_file_and_truncated_fixture_are_errors(tmp_path):
    """A missing path and a fixture cut in half are GraphErrors naming the file."""
    with pytest.raises(GraphError, match="no such file"):
        load_onnx(tmp_path / "nope.onnx")
    raw = gzip.open(os.path.join(FIXTURES, "resnet50.onnx.gz")).read()
    path = tmp_path / "cut.onnx"
    path.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(GraphError, match=str(path)):
        load_onnx(path, dims={"batch": 1})


# ---------------------------------------------------------------------- shipped fixtures
@pytest.fixture(scope="module")
def fixtures():
    out = {}
    for name, entry in MANIFEST.items():
        path = os.path.join(FIXTURES, entry["file"])
        out[name] = (entry, load_onnx(path, dims=entry["reference_dims"]),
                     onnx.load_from_string(gzip.open(path).read()))
    return out


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixture_weights_match_torch_parameter_bytes(fixtures, name):
    """Every initializer's bytes come from its dims; the float tensors add up to torch's
    sum(p.numel() * p.element_size()), less half the BatchNorm bytes the exporter folds away."""
    entry, g, proto = fixtures[name]
    facts = entry["torch_facts"]
    for t in proto.graph.initializer:
        assert g.bytes[g.index[t.name]] == math.prod(t.dims) * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(
            t.data_type)).itemsize
    weights = sum(int(g.bytes[g.index[t.name]]) for t in proto.graph.initializer
                  if t.data_type == T.FLOAT and math.prod(t.dims) > 1)
    # A folded BatchNorm's scale goes into the conv weight, its shift becomes a conv bias.
    assert weights == facts["parameter_bytes"] - facts["batchnorm_parameter_bytes"] // 2
    assert g.meta["parameter_bytes"] == int(g.bytes[[g.index[t.name] for t in proto.graph.initializer]].sum())


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixture_outputs_match_torch_output_bytes(fixtures, name):
    """Each graph output's node has the bytes of torch's output at the reference dims, and every
    node that nothing consumes is a graph output (no dead nodes)."""
    entry, g, _ = fixtures[name]
    for out, spec in entry["torch_facts"]["outputs"].items():
        (nid,) = g.meta["outputs"][out]
        assert g.bytes[g.index[nid]] == spec["bytes"]
    sinks = {g.ids[v] for v in range(g.num_nodes) if g.consumers(v).size == 0 and not g.resident[v]}
    assert sinks <= {nid for ids in g.meta["outputs"].values() for nid in ids}


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixture_node_counts(fixtures, name):
    """One node per ONNX node that is not folded; Conv count is torch's Conv2d module count;
    resident nodes are the initializers plus the inputs."""
    entry, g, proto = fixtures[name]
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    folded = sum(ops[o] for o in regal.onnx.FOLDED_OPS)
    assert g.num_nodes == len(proto.graph.node) - folded + len(proto.graph.initializer) + len(entry["inputs"])
    assert int(g.resident.sum()) == len(proto.graph.initializer) + len(entry["inputs"]) + ops["Constant"]
    assert collections.Counter(g.ops)["Conv"] == entry["torch_facts"]["conv2d_modules"]
    assert g.lower_bound(1) > g.meta["parameter_bytes"] and entry["compressed_bytes"] < 300_000


def test_fixture_import_finishes(fixtures):
    """Each shipped fixture imports (well under a second idle: benchmarks/bench_import.py; the
    bound here only catches a hang)."""
    for name, entry in MANIFEST.items():
        t0 = time.perf_counter()
        load_onnx(os.path.join(FIXTURES, entry["file"]), dims=entry["reference_dims"])
        assert time.perf_counter() - t0 < 60, name


# ---------------------------------------------------------------------- fuzz
def _mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    kind = rng.randrange(5)
    i = rng.randrange(len(b))
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del b[i:]
    elif kind == 2:
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == 3:
        del b[i:i + rng.randint(1, 64)]
    else:
        b[i] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
    return bytes(b)


def test_fuzzed_fixture_bytes_give_a_graph_or_a_graph_error(tmp_path):
    """Mutated ResNet-50 and BERT bytes (and a few mutated .gz files) never raise anything but
    GraphError, and never hang."""
    rng = random.Random(0)
    counts = collections.Counter()
    dims = {"batch": 2, "sequence": 16}
    t0 = time.perf_counter()
    plans = [("resnet50", 400, False), ("bert_base", 150, False), ("mobilenet_v3_large", 50, True)]
    for name, count, as_gz_file in plans:
        packed = open(os.path.join(FIXTURES, MANIFEST[name]["file"]), "rb").read()
        raw = gzip.decompress(packed)
        for k in range(count):
            counts["mutants"] += 1
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    if as_gz_file:
                        path = tmp_path / f"m{k}.onnx.gz"
                        path.write_bytes(_mutate(packed, rng))
                        out = load_onnx(path, dims=dims)
                    else:
                        out = load_onnx(_mutate(raw, rng), dims=dims)
                    assert isinstance(out, Graph)
                    counts["graphs"] += 1
                except GraphError as e:
                    assert "\n" not in str(e)
                    counts["clean_errors"] += 1
                except Exception as e:  # noqa: BLE001 - the point of the test
                    counts["tracebacks"] += 1
                    print("traceback:", type(e).__name__, e)
    seconds = time.perf_counter() - t0
    print(f"fuzz: {counts['mutants']} mutants, {counts['clean_errors']} clean errors, "
          f"{counts['graphs']} graphs, {counts['tracebacks']} tracebacks, {seconds:.1f} s")
    assert counts["tracebacks"] == 0
    assert counts["graphs"] > 0 and counts["clean_errors"] > 0
    assert seconds < 600  # catches a hang only (about 5 s idle; speed is not a test)


# ---------------------------------------------------------------------- in-place reuse
def test_elementwise_ops_list_same_size_inputs_for_reuse():
    """An elementwise op lists its inputs of the output's shape and size produced by one real
    node (SPEC section 3 `reuse`); graph inputs, weights, broadcasts, other sizes and
    non-elementwise ops list nothing."""
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             h.make_node("Relu", ["m"], ["r"], name="relu"),
             h.make_node("Add", ["r", "m"], ["s"], name="add"),          # both [2, 6]
             h.make_node("Add", ["s", "bias"], ["t"], name="addb"),      # bias [6] broadcasts
             h.make_node("Mul", ["x", "x"], ["xx"], name="xx"),          # a graph input: resident
             h.make_node("Cast", ["t"], ["c"], to=T.DOUBLE, name="cast"),  # 8 bytes per element
             h.make_node("Softmax", ["t"], ["y"], name="softmax")]
    g = load_onnx(_model(nodes, [_vi("x", [2, 4])], [_vi("y", None), _vi("c", None, T.DOUBLE), _vi("xx", None)],
                         [_init("w", (4, 6)), _init("bias", (6,))]))
    reuse = {r["id"]: r.get("reuse") for r in g.to_records()}
    assert reuse["relu"] == ["mm"] and reuse["add"] == ["relu", "mm"] and reuse["addb"] == ["add"]
    assert reuse["xx"] is None and reuse["cast"] is None and reuse["softmax"] is None and reuse["mm"] is None


# ---------------------------------------------------------------------- a solution's order in ONNX
def _branches(seed: int = 0):
    """Two branches of MatMul -> Relu, interleaved in the file (A0 B0 A1 B1 A2 B2), whose wide
    intermediates (256 x 1024) the file's order keeps live together; weights included (a
    runtime runs it)."""
    rng = np.random.default_rng(seed)
    shapes = [(16, 1024), (1024, 1024), (1024, 64)]
    nodes, inits = [], []
    for k in range(3):
        for b in "AB":
            src = "x" if k == 0 else f"{b}{k - 1}"
            nodes.append(h.make_node("MatMul", [src, f"w{b}{k}"], [f"{b}{k}m"], name=f"{b}{k}mm"))
            nodes.append(h.make_node("Relu", [f"{b}{k}m"], [f"{b}{k}"], name=f"{b}{k}relu"))
            inits.append(numpy_helper.from_array((rng.standard_normal(shapes[k]) / 30).astype(np.float32), f"w{b}{k}"))
    nodes.append(h.make_node("Reshape", ["A2", "shape"], ["A2r"], name="alias"))   # folded by the importer
    nodes.append(h.make_node("Add", ["A2r", "B2"], ["y"], name="add"))
    inits.append(numpy_helper.from_array(np.array([256, 64], np.int64), "shape"))
    model = _model(nodes, [_vi("x", [256, 16])], [_vi("y", [256, 64])], inits)
    return model, rng.standard_normal((256, 16)).astype(np.float32)


def _ordered_case():
    from regal.onnx.order import ordered_model
    model, x = _branches()
    g = load_onnx(model)
    sol = regal.optimize(g, 1, budget=300, seed=0)
    file_order = regal.make_solution(g, np.zeros(g.num_nodes, dtype=np.int64), np.arange(g.num_nodes), 1, "file")
    assert sol.peak_bytes < file_order.peak_bytes   # regal's order matters here
    return model, x, g, sol, ordered_model(model, sol)


def test_ordered_model_lists_the_nodes_in_the_solutions_order():
    """`ordered_model`: graph.node in the solution's order (the folded Reshape right after its
    input), everything else the model's; it passes onnx.checker and says how to run it."""
    model, x, g, sol, om = _ordered_case()
    names = [n.name for n in om.graph.node]
    regal_names = [g.ids[v] for v in sol.order.tolist() if g.ids[v] in names]
    assert [n for n in names if n != "alias"] == regal_names
    assert names.index("alias") == names.index("A2relu") + 1
    assert names != [n.name for n in model.graph.node]
    assert sorted(names) == sorted(n.name for n in model.graph.node)
    assert list(om.graph.initializer) == list(model.graph.initializer)
    assert "PRIORITY_BASED" in {p.key: p.value for p in om.metadata_props}["regal.order"]
    onnx.checker.check_model(om, full_check=True)


def test_ordered_model_computes_what_the_model_computes():
    """ONNX's reference evaluator, which runs graph.node as listed, gives the original model's
    outputs on the reordered model."""
    from onnx.reference import ReferenceEvaluator
    model, x, g, sol, om = _ordered_case()
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(ReferenceEvaluator(om).run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_onnxruntime_runs_the_ordered_model_in_its_order(tmp_path):
    """ONNX Runtime with ExecutionOrder.PRIORITY_BASED and graph optimizations off runs the
    ordered file's nodes in the file's order (its profile's kernel events), which is regal's,
    with the original model's outputs, bit for bit (the same kernels)."""
    ort = pytest.importorskip("onnxruntime")
    model, x, g, sol, om = _ordered_case()

    def run(m, prefix):
        so = ort.SessionOptions()
        so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / prefix)
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        y = s.run(None, {"x": x})[0]
        with open(s.end_profiling()) as f:
            events = json.load(f)
        ran = [e["name"][:-len("_kernel_time")] for e in sorted(events, key=lambda e: e["ts"])
               if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
        return y, ran

    y0, ran0 = run(model, "original")
    y1, ran1 = run(om, "ordered")
    assert np.array_equal(y0, y1)
    assert ran1 == [n.name for n in om.graph.node] and ran0 == [n.name for n in model.graph.node]


def test_export_onnx_command_and_its_refusals(tmp_path):
    """`regal export-onnx MODEL SOLUTION -o OUT.onnx` writes the ordered model; a solution of
    another graph, one with recomputations, or a .gz output are one-line errors."""
    from click.testing import CliRunner

    from regal.cli import main
    model, x, g, sol, om = _ordered_case()
    onnx.save(model, tmp_path / "m.onnx")
    g = load_onnx(tmp_path / "m.onnx")   # named after the file: the solution names its graph
    regal.make_solution(g, sol.placement, sol.order, 1, "regal").save(tmp_path / "s.json")
    r = CliRunner().invoke(main, ["export-onnx", str(tmp_path / "m.onnx"), str(tmp_path / "s.json"),
                                  "-o", str(tmp_path / "o.onnx")])
    assert r.exit_code == 0 and "PRIORITY_BASED" in r.output, r.output
    assert [n.name for n in onnx.load(tmp_path / "o.onnx").graph.node] == [n.name for n in om.graph.node]
    other = tmp_path / "other.json"
    regal.optimize(regal.load("tests/data/tiny.hlo"), 1, budget=50).save(other)
    for args in ((str(other), "-o", str(tmp_path / "p.onnx")), (str(tmp_path / "s.json"), "-o", str(tmp_path / "p.onnx.gz"))):
        r = CliRunner().invoke(main, ["export-onnx", str(tmp_path / "m.onnx"), *args])
        assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output, r.output


def test_a_recomputing_solution_is_refused():
    """ONNX runs each node once: an order that lists a node again (SPEC 3b) is refused."""
    from types import SimpleNamespace

    from regal.graph import GraphError
    from regal.onnx import import_with_ids
    from regal.onnx.order import reorder
    model, x = _branches()
    g, m, node_ids = import_with_ids(model)
    again = SimpleNamespace(node_ids=g.ids, graph_name=g.name, order=np.concatenate([np.arange(g.num_nodes), [5]]))
    with pytest.raises(GraphError, match="recomputes"):
        reorder(m, g, node_ids, again)
