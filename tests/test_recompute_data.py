"""The recompute benchmark's training steps (data/manifest_recompute.json, `python -m data.recompute_steps`):
every listed graph loads as a valid regal graph, matches its manifest entry, carries op costs, and
the split holds whole sources out."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import regal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFEST = os.path.join(ROOT, "data", "manifest_recompute.json")

pytestmark = pytest.mark.skipif(not os.path.exists(MANIFEST), reason="no data/manifest_recompute.json")


def _manifest() -> dict:
    with open(MANIFEST, encoding="utf-8") as f:
        return json.load(f)


def test_manifest_splits_hold_whole_sources_out():
    m = _manifest()
    assert m["format"] == "regal-manifest/1"
    assert m["tune_source"] == "torch-cnn" and "torch-cnn" not in m["held_out_sources"]
    names = set(m["graphs"])
    assert set(m["splits"]["tune"]) | set(m["splits"]["held_out"]) == names
    assert not set(m["splits"]["tune"]) & set(m["splits"]["held_out"])
    for name, e in m["graphs"].items():
        assert e["source"] in m["sources"], name
        assert e["split"] == ("tune" if e["source"] == m["tune_source"] else "held_out"), name
        assert name in m["by_source"][e["source"]]
    assert len({e["source"] for e in m["graphs"].values()}) >= 2


def test_folder_size_budget():
    m = _manifest()
    total = sum(os.path.getsize(os.path.join(ROOT, "data", m["root"], e["path"])) for e in m["graphs"].values())
    assert total < 3.5e6, total


def test_every_graph_loads_with_costs():
    m = _manifest()
    for name, e in m["graphs"].items():
        g = regal.load(os.path.join(ROOT, "data", m["root"], e["path"]))   # validates: a DAG, every id known
        assert g.name == name
        assert (g.num_nodes, g.num_data_edges, g.num_control_edges) == (e["nodes"], e["edges"], e["control_edges"])
        assert g.num_nodes <= 6000
        assert int(g.no_recompute.sum()) == e["recompute_false"]
        cost = g.cost[~g.resident]
        assert (cost >= 0).all() and cost.sum() > 0, name
        assert g.meta["mode"] == "train"
        if e["source"].startswith("torch"):
            assert g.meta["cost_model"].startswith("measured: CPU, torch "), name
            assert g.meta["traced_order_topological"], name
            alloc = np.flatnonzero(np.asarray(g.ops) == "alloc")
            assert all(g.control_inputs(int(v)).size == 0 for v in alloc), name
            assert g.no_recompute[alloc].all(), name   # an alloc node never runs again (it costs 0)
            # most of a step's measured time is in nodes that compute something
            assert (g.cost > 0).sum() > 0.3 * (~g.resident).sum(), name
        else:
            assert isinstance(g.meta["cost_model"], dict), name   # the HLO importer's roofline


def test_traced_order_is_scored():
    m = _manifest()
    name = min((n for n, e in m["graphs"].items() if e["source"].startswith("torch")),
               key=lambda n: m["graphs"][n]["nodes"], default=None)
    if name is None:
        pytest.skip("no torch graph yet")
    g = regal.load(os.path.join(ROOT, "data", m["root"], m["graphs"][name]["path"]))
    n = g.num_nodes
    sim = regal.simulate(g, np.zeros(n, dtype=np.int32), np.arange(n), 1)
    assert sim.peak_bytes >= g.lower_bound(1)
