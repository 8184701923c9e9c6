"""Tests for regal.torch: torch.export / make_fx programs -> Graph. Skipped where torch is absent."""

from __future__ import annotations

import importlib
import json
import os
import sys

import numpy as np
import pytest

import regal
import regal.onnx
from regal.graph import GraphError

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "data", "onnx")


def test_import_without_torch_says_how_to_install(monkeypatch):
    """`import regal.torch` with no torch raises ImportError naming `pip install regal[torch]`."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "regal.torch", raising=False)
    with pytest.raises(ImportError, match=r"pip install regal\[torch\]"):
        importlib.import_module("regal.torch")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def rt(torch):
    return importlib.import_module("regal.torch")


def _mlp(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _recs(g):
    return {r["id"]: r for r in g.to_records()}


def test_a_returned_tensor_that_is_also_consumed_is_an_output(torch, rt):
    """forward returns (h, -h): h = relu(x) is marked `output` (kept to the end, never taken
    over) although neg reads it; the neg node is an output too."""
    class M(torch.nn.Module):
        def forward(self, x):
            h = torch.relu(x)
            return h, -h
    g = rt.from_module(M(), (torch.randn(4, 4),))
    outs = [g.ids[v] for v in np.flatnonzero(g.output)]
    assert len(outs) == 2 and sorted(outs) == sorted(i for ids in g.meta["outputs"].values() for i in ids)
    assert all(g.reuse(v).size == 0 or not g.output[g.reuse(v)].any() for v in range(g.num_nodes))


def test_mlp_forward_nodes_and_bytes_are_exact(torch, rt):
    """Linear(4,8) -> ReLU -> Linear(8,2) at batch 3: parameters and the input are resident,
    three op nodes with their output bytes, edges to the weights."""
    g = rt.from_module(_mlp(torch), (torch.randn(3, 4),))
    r = _recs(g)
    assert [g.ids[v] for v in np.flatnonzero(g.resident)] == ["0.weight", "0.bias", "2.weight", "2.bias", "input"]
    ops = [(g.ops[v], int(g.bytes[v])) for v in np.flatnonzero(~g.resident)]
    assert ops == [("aten.linear.default", 96), ("aten.relu.default", 96), ("aten.linear.default", 24)]
    first = g.ids[np.flatnonzero(~g.resident)[0]]
    assert r[first]["inputs"] == ["input", "0.weight", "0.bias"]
    assert g.meta["parameter_bytes"] == (32 + 8 + 16 + 2) * 4
    assert g.meta["mode"] == "forward" and list(g.meta["outputs"].values()) == [[g.ids[-1]]]


def test_views_fold_into_their_producer(torch, rt):
    """reshape, t and unsqueeze make no node; the consumer reads the producer directly."""
    class M(torch.nn.Module):
        def forward(self, x):
            y = torch.sin(x)
            return torch.cos(y.reshape(4, 6).t().unsqueeze(0))

    g = rt.from_module(M(), (torch.randn(2, 12),))
    assert [g.ops[v] for v in range(g.num_nodes)] == ["input", "aten.sin.default", "aten.cos.default"]
    assert _recs(g)[g.ids[2]]["inputs"] == [g.ids[1]]
    assert g.meta["folded"] == 3


def test_in_place_op_allocates_nothing_and_orders_readers(torch, rt):
    """x.sin() then relu_ in place: relu_ has 0 bytes, and the consumer reads both."""
    class M(torch.nn.Module):
        def forward(self, x):
            y = torch.sin(x)
            z = y.relu_()
            return z * 2

    g = rt.from_module(M(), (torch.randn(5),))
    r = _recs(g)
    sin, relu, mul = (g.ids[v] for v in range(1, 4))
    assert r[relu]["bytes"] == 0 and r[relu]["inputs"] == [sin]
    assert set(r[mul]["inputs"]) == {sin, relu}


def test_training_step_has_backward_and_in_place_updates(torch, rt):
    """SGD step: one momentum buffer per parameter (resident), one 0-byte update per parameter
    that reads it, the loss as the only output; the graph is a valid DAG regal can schedule."""
    m = _mlp(torch)
    g = rt.from_module(m, (torch.randn(3, 4),), training=True)
    names = [n for n, _ in m.named_parameters()]
    state = [g.ids[v] for v in range(g.num_nodes) if g.ops[v] == "optimizer_state"]
    assert state == [f"{n}.momentum_buffer" for n in names]
    for n in names:
        p = g.index[n]
        updates = [v for v in g.consumers(p) if g.ops[v] == "aten.add_.Tensor"]
        assert len(updates) == 1 and g.bytes[updates[0]] == 0
    assert any(op == "aten.threshold_backward.default" for op in g.ops)
    (loss,) = g.meta["outputs"]["loss"]
    assert g.bytes[g.index[loss]] == 4 and g.meta["mode"] == "train" and m.training
    sol = regal.optimize(g, devices=1, budget=100, seed=0)
    assert sol.peak_bytes >= g.lower_bound(1)


def test_adam_keeps_two_state_tensors_per_parameter(torch, rt):
    """optimizer='adam' gives exp_avg and exp_avg_sq per parameter, each its parameter's size."""
    m = _mlp(torch)
    g = rt.from_module(m, (torch.randn(3, 4),), training=True, optimizer="adam")
    state = {g.ids[v]: int(g.bytes[v]) for v in range(g.num_nodes) if g.ops[v] == "optimizer_state"}
    assert len(state) == 2 * len(list(m.parameters()))
    for n, p in m.named_parameters():
        assert state[f"{n}.exp_avg"] == state[f"{n}.exp_avg_sq"] == p.numel() * 4


def test_from_exported_matches_from_module(torch, rt):
    """An ExportedProgram the user made imports to the same records as from_module."""
    m = _mlp(torch).eval()
    x = torch.randn(3, 4)
    a = rt.from_exported(torch.export.export(m, (x,)), name="mlp_fwd")
    b = rt.from_module(m, (x,), name="mlp_fwd")
    assert a.to_records() == b.to_records()


def test_export_failure_is_a_graph_error(torch, rt):
    """A forward torch.export cannot trace (data-dependent control flow) is a one-line GraphError."""
    class M(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x * 3

    with pytest.raises(GraphError, match="torch.export failed") as e:
        rt.from_module(M(), (torch.randn(3),))
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------- real architectures
def _real(torch, name):
    torch.manual_seed(0)
    if name == "bert_base":
        transformers = pytest.importorskip("transformers")
        return transformers.BertModel(transformers.BertConfig()), (torch.randint(0, 30522, (2, 32)),)
    torchvision = pytest.importorskip("torchvision")
    return getattr(torchvision.models, name)(weights=None), (torch.randn(2, 3, 224, 224),)


REAL = ["resnet50", "mobilenet_v3_large", "vit_b_16", "bert_base"]


@pytest.mark.parametrize("name", REAL)
def test_real_forward_matches_torch_parameters_and_outputs(torch, rt, name):
    """Parameter bytes equal torch's sum(p.numel() * p.element_size()); output bytes equal the
    model's outputs; the ONNX fixture of the same model has the same output bytes."""
    m, args = _real(torch, name)
    g = rt.from_module(m, args, name=name)
    assert g.meta["parameter_bytes"] == sum(p.numel() * p.element_size() for p in m.parameters())
    with torch.no_grad():
        out = m.eval()(*args)
    outs = [out] if isinstance(out, torch.Tensor) else [out[0], out[1]]
    got = [int(g.bytes[g.index[ids[0]]]) for ids in g.meta["outputs"].values()]
    assert got == [t.numel() * t.element_size() for t in outs]
    entry = json.load(open(os.path.join(FIXTURES, "manifest.json")))["models"][name]
    dims = {"batch": 2, "sequence": 32}
    onnx_graph = regal.onnx.load_onnx(os.path.join(FIXTURES, entry["file"]), dims=dims)
    assert sorted(int(onnx_graph.bytes[onnx_graph.index[ids[0]]]) for ids in onnx_graph.meta["outputs"].values()) \
        == sorted(got)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == "resnet50" else pytest.mark.slow) for n in REAL])
def test_real_training_step_imports(torch, rt, name):
    """A training step imports: every parameter has an optimizer state of its size, the loss is
    the output, and the step needs more memory than the forward pass."""
    m, args = _real(torch, name)
    fwd = rt.from_module(m, args)
    g = rt.from_module(m, args, training=True)
    params = dict((n, p.numel() * p.element_size()) for n, p in m.named_parameters())
    assert g.meta["parameter_bytes"] == sum(params.values())
    for n, nbytes in params.items():
        assert g.bytes[g.index[f"{n}.momentum_buffer"]] == nbytes
    assert list(g.meta["outputs"]) == ["loss"]
    assert g.lower_bound(1) > fwd.lower_bound(1) and g.num_nodes > fwd.num_nodes


def test_elementwise_aten_ops_list_same_shape_arguments_for_reuse(torch, rt):
    """sin -> relu -> add(relu, sin): elementwise ops list their same-shape, same-dtype argument
    nodes as `reuse` (SPEC section 3); an input, a matmul and a broadcast operand are not listed."""
    class M(torch.nn.Module):
        def forward(self, x, b):
            s = torch.sin(x)
            r = torch.relu(s)
            a = r + s
            return (a @ a.t()) + b

    g = rt.from_module(M(), (torch.randn(4, 4), torch.randn(4)))
    reuse = [(g.ops[v], [g.ops[u] for u in g.reuse(v)]) for v in range(g.num_nodes) if not g.resident[v]]
    assert reuse[:3] == [("aten.sin.default", []), ("aten.relu.default", ["aten.sin.default"]),
                         ("aten.add.Tensor", ["aten.relu.default", "aten.sin.default"])]
    last = reuse[-1]  # (a @ a.t()) + b: the matmul's output, not the broadcast b (an input)
    assert last[0] == "aten.add.Tensor" and len(last[1]) == 1 and ("mm" in last[1][0] or "matmul" in last[1][0])
    assert all(not u for op, u in reuse if "mm" in op or "matmul" in op)
