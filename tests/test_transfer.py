"""What makes a learned prior transferable across graph sources (issue 12): source-invariant
features, op categories shared by every importer, and the uniform share of the flagship's mutants."""

import numpy as np
import pytest

from randgraph import random_dag
import regal
from regal.brkga import BrkgaConfig
from regal.graph import Graph
from regal.policy.features import FEATURE_GROUPS, OP_CATEGORIES, build, num_node_features, op_category
from regal.search import brkga_search, teacher_priors


def _scaled(g: Graph, byte_factor: int, cost_factor: float) -> Graph:
    recs = g.to_records()
    for r in recs:
        r["bytes"] = int(r.get("bytes", 0)) * byte_factor
        if r.get("temp_bytes"):
            r["temp_bytes"] = int(r["temp_bytes"]) * byte_factor
        r["cost"] = float(r.get("cost", 0.0)) * cost_factor
    return Graph.from_records(recs)


@pytest.mark.parametrize("seed", range(4))
def test_v2_features_do_not_see_units(seed):
    """The same graph in bytes or in KiB-multiples, costs in s or ms: identical v2 features (v1 differs).

    Except the METIS part columns: METIS partitions by integer weights, and a 0-byte node weighs
    1 in both, so on toy byte counts the partition itself may move."""
    g = random_dag(700 + seed, num_nodes=40)
    h = _scaled(g, 1024, 1000.0)
    part = list(range(num_node_features("v2") - 4, num_node_features("v2")))
    for d in (1, 2, 3):
        a, b = build(g, d, features="v2"), build(h, d, features="v2")
        a = a._replace(nodes=np.delete(a.nodes, part, axis=1))
        b = b._replace(nodes=np.delete(b.nodes, part, axis=1))
        # bytes over the lower bound move by the bound's rounding up (ceil(total / d)) only
        assert all(np.allclose(x, y, rtol=0, atol=1e-2) for x, y in zip(a, b))
    assert not np.allclose(build(g, 2).nodes, build(h, 2).nodes)


def test_v2_layout_groups_and_drop():
    g = random_dag(11, num_nodes=30)
    full = build(g, 2, features="v2")
    assert full.nodes.shape[1] == num_node_features("v2")
    cols = sorted(c for group in FEATURE_GROUPS.values() for c in group)
    assert cols == list(range(num_node_features("v2")))  # every column in exactly one group
    dropped = build(g, 2, features="v2", drop=("sizes", "op"))
    assert not dropped.nodes[:, list(FEATURE_GROUPS["sizes"])].any()
    assert (dropped.op_ids == len(OP_CATEGORIES) - 1).all()
    keep = list(FEATURE_GROUPS["structure"] + FEATURE_GROUPS["graph"])
    assert np.array_equal(dropped.nodes[:, keep], full.nodes[:, keep])
    with pytest.raises(ValueError, match="feature set"):
        build(g, 2, features="v3")
    with pytest.raises(ValueError, match="drop"):
        build(g, 2, features="v2", drop=("colour",))


@pytest.mark.parametrize("ops,category", [
    (("dot", "MatMul", "Gemm", "aten.mm.default", "aten.addmm.default", "aten.linear.default", "Linear"), "matmul"),
    (("convolution", "Conv", "aten.conv2d.default", "aten.convolution_backward.default", "Conv2d"), "conv"),
    (("aten.native_layer_norm.default", "LayerNormalization", "BatchNorm2d", "aten.batch_norm.default"), "normalization"),
    (("reduce", "ReduceMean", "aten.sum.dim_IntList", "Softmax", "MaxPool", "aten.max_pool2d.default"), "reduction"),
    (("add", "Add", "aten.add_.Tensor", "fusion:kLoop", "Relu", "aten.gelu_backward.default", "tanh"), "elementwise"),
    (("reshape", "Transpose", "aten.cat.default", "concatenate", "Gather", "slice"), "data-movement"),
    (("parameter", "initializer", "buffer", "input", "optimizer_state"), "input"),
    (("aten.scaled_dot_product_attention.default", "MultiheadAttention"), "attention"),
])
def test_op_categories_agree_across_frameworks(ops, category):
    assert {OP_CATEGORIES[op_category(op)] for op in ops} == {category}


def test_prior_share_mixes_uniform_mutants():
    """prior_share 1: every mutant from the priors (REGAL); 0: plain BRKGA exactly; between: both."""
    g = random_dag(5, num_nodes=60)
    pri = teacher_priors(g, 2)
    plain = brkga_search(g, 2, budget=600, seed=1)
    none = brkga_search(g, 2, budget=600, seed=1, priors=pri, config=BrkgaConfig(prior_share=0.0))
    assert none.peak_bytes == plain.peak_bytes and np.array_equal(none.order, plain.order)
    full = brkga_search(g, 2, budget=600, seed=1, priors=pri)
    also_full = brkga_search(g, 2, budget=600, seed=1, priors=pri, config=BrkgaConfig(prior_share=1.0))
    assert np.array_equal(full.order, also_full.order) and np.array_equal(full.placement, also_full.placement)
    assert BrkgaConfig(prior_share=0.5).num_prior(10) == 5
    with pytest.raises(ValueError, match="prior_share"):
        BrkgaConfig(prior_share=1.5).validate()


def test_teacher_policies_need_no_network():
    g = random_dag(9, num_nodes=50)
    sol = regal.optimize(g, 2, budget=400, seed=0, policy="teacher")
    assert sol.info["priors"] and sol.info["config"]["prior_share"] == 0.5
    paper = regal.optimize(g, 2, budget=400, seed=0, policy="teacher-schedule", seeding=False, polish=False)
    assert paper.info["config"]["prior_share"] == 1.0
    sched = teacher_priors(g, 2, placement=False)
    L = g.num_nodes * 3
    assert np.all(sched.alpha.reshape(g.num_nodes, 3)[:, :2] == 1.0) and sched.alpha.shape == (L,)


def test_shipped_transfer_policy_reads_v2_and_leaves_placement_uniform():
    from regal.policy import load_policy
    pol = load_policy("transfer")
    assert pol.config.features == "v2" and not pol.config.placement and pol.config.scheduling
    g = random_dag(21, num_nodes=40)
    pri = pol.priors(g, 2)
    ab = np.stack([pri.alpha, pri.beta]).reshape(2, g.num_nodes, 3)
    assert np.all(ab[:, :, :2] == 1.0)  # placement genes: plain BRKGA's uniform
    default = load_policy("default")  # since issue 47: the same kind (v2, scheduling head), trained on d = 1, 2, 4
    assert default.config.features == "v2" and not default.config.placement and default.config.scheduling
    ab = default.priors(g, 4)
    assert np.all(np.stack([ab.alpha, ab.beta]).reshape(2, g.num_nodes, 5)[:, :, :4] == 1.0)


def test_paper_default_gate_and_tempering_reach_plain_brkga(tmp_path):
    """experiments.paper_default's two ways toward plain BRKGA: a gate on action 0's logit (in the
    policy file; a large one leaves every gene Beta(1, 1): plain BRKGA's search bit for bit) and
    tempering the Betas (t = 0: uniform; t = 1: unchanged)."""
    import shutil
    from experiments.paper_default import gated_policy, tempered
    from regal.policy import load_policy
    from regal.policy.loader import policy_file
    base = str(tmp_path / "p.npz")
    shutil.copy(policy_file("default"), base)
    g = random_dag(5, num_nodes=60)
    pri = load_policy(base).priors(g, 2)
    assert gated_policy(base, 0.0) == base and np.any(pri.alpha != 1.0)
    off = load_policy(gated_policy(base, 100.0)).priors(g, 2)
    assert np.all(off.alpha == 1.0) and np.all(off.beta == 1.0)
    plain = regal.optimize(g, 2, budget=300, seed=1, policy="none", seeding=False, polish=False)
    gated = regal.optimize(g, 2, budget=300, seed=1, policy="none", priors=off, seeding=False, polish=False)
    assert gated.peak_bytes == plain.peak_bytes and np.array_equal(gated.order, plain.order)
    assert np.all(tempered(pri, 0.0).alpha == 1.0) and np.array_equal(tempered(pri, 1.0).beta, pri.beta)
