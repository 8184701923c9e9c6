"""Tests for regal.hlo: XLA HLO text -> Graph."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from regal.graph import GraphError, from_json
from regal.hlo import COST_MODEL, HloParseError, load_hlo, parse_hlo, shape_bytes

TINY = os.path.join(os.path.dirname(__file__), "data", "tiny.hlo")
PEAK, BW = COST_MODEL["peak_flops_per_s"], COST_MODEL["bandwidth_bytes_per_s"]


def _records(g):
    return {r["id"]: r for r in g.to_records()}


def _entry(body: str, header: str = "HloModule m") -> str:
    return f"{header}\n\nENTRY %main {{\n{body}\n}}\n"


# ---------------------------------------------------------------------- the hand-written fixture
def test_tiny_fixture_nodes_bytes_and_edges_are_exact():
    """tiny.hlo imports to exactly the expected real nodes, bytes, data and control edges."""
    g = load_hlo(TINY)
    assert g.name == "tiny"
    assert list(g.ids) == ["x", "w", "zero", "dot", "sq", "loop", "neg", "sum"]
    assert list(g.ops) == ["parameter", "parameter", "constant", "dot", "multiply", "while",
                           "negate", "add"]
    assert g.bytes.tolist() == [128, 64, 4, 32, 32, 36, 32, 32]
    assert g.resident.tolist() == [True, True, True, False, False, False, False, False]
    recs = _records(g)
    assert recs["dot"]["inputs"] == ["x", "w"]
    assert recs["sq"]["inputs"] == ["dot"]                   # multiply(%dot, %dot): listed once
    assert recs["loop"]["inputs"] == ["zero", "sq"]          # through the folded tuple %init
    assert recs["neg"]["inputs"] == ["loop"]                 # gte of a while is the while
    assert recs["neg"]["control_inputs"] == ["sq"]           # control on the bitcast %flat
    assert recs["sum"]["inputs"] == ["neg", "sq"]            # gte(%init, 1) is %sq
    assert recs["sum"]["control_inputs"] == ["dot"]          # self-reference dropped
    assert g.num_data_edges == 8 and g.num_control_edges == 2


def test_gzip_hlo_file_imports_like_the_plain_file(tmp_path):
    """load_hlo of a `.hlo.gz` copy of tiny.hlo gives the same records and meta as the plain file."""
    import gzip
    gz = tmp_path / "tiny.hlo.gz"
    with open(TINY, "rb") as src, gzip.open(gz, "wb") as dst:
        dst.write(src.read())
    plain, packed = load_hlo(TINY), load_hlo(gz)
    assert packed.to_records() == plain.to_records() and packed.meta == plain.meta


def test_tiny_fixture_root_tuple_leaves_are_outputs():
    """The folded ROOT tuple makes no node; its leaves (sum, sq via bitcast, loop) are outputs."""
    g = load_hlo(TINY)
    no_consumers = {g.ids[v] for v in range(g.num_nodes) if g.consumers(v).size == 0}
    assert no_consumers == {"sum"}                           # sq and loop are also consumed
    assert "res" not in g.ids and "flat" not in g.ids and "count" not in g.ids
    # every leaf is marked `output`: XLA keeps a returned value to the end, consumed or not
    assert {g.ids[v] for v in range(g.num_nodes) if g.output[v]} == {"sum", "sq", "loop"}


def test_tiny_fixture_meta_counts_folded_and_keeps_xla_order():
    """meta records module, scheduling, instruction and folded counts, and the XLA order."""
    meta = load_hlo(TINY).meta
    assert meta["source"] == "hlo" and meta["module"] == "tiny" and meta["entry"] == "main"
    assert meta["scheduled"] is True
    assert meta["hlo_instructions"] == 14
    assert meta["folded"] == 6                               # init, out, count, flat, pick, res
    assert meta["xla_order"] == ["x", "w", "zero", "dot", "sq", "loop", "neg", "sum"]
    assert meta["outputs"] == ["sum", "sq", "loop"]          # the ROOT tuple's leaves


def test_tiny_fixture_cost_is_roofline_of_the_nominal_device():
    """cost = max(flops/peak, (operand + output bytes)/bandwidth); resident nodes cost 0."""
    g = load_hlo(TINY)
    c = dict(zip(g.ids, g.cost.tolist()))
    assert c["x"] == c["w"] == c["zero"] == 0.0
    assert c["dot"] == pytest.approx(max(2 * 8 * 8 / PEAK, (128 + 64 + 32) / BW))
    assert c["loop"] == pytest.approx((36 + 36) / BW)        # operand is the 36-byte tuple


# ---------------------------------------------------------------------- shape_bytes
@pytest.mark.parametrize("etype,nbytes", [
    ("pred", 1), ("s8", 1), ("u8", 1),
    ("f8e5m2", 1), ("f8e4m3fn", 1), ("f8e4m3b11fnuz", 1), ("f8e5m2fnuz", 1), ("f8e4m3fnuz", 1),
    ("f8e4m3", 1), ("f8e3m4", 1), ("f8e8m0fnu", 1),
    ("s16", 2), ("u16", 2), ("f16", 2), ("bf16", 2),
    ("s32", 4), ("u32", 4), ("f32", 4),
    ("s64", 8), ("u64", 8), ("f64", 8), ("c64", 8), ("c128", 16),
])
def test_shape_bytes_byte_sized_types_multiply_elements(etype, nbytes):
    """A whole-byte element type takes elements * its width."""
    assert shape_bytes(f"{etype}[3,5]{{1,0}}") == 15 * nbytes
    assert shape_bytes(f"{etype}[]") == nbytes


@pytest.mark.parametrize("etype,bits", [("s1", 1), ("u1", 1), ("s2", 2), ("u2", 2), ("s4", 4),
                                        ("u4", 4), ("f4e2m1fn", 4)])
def test_shape_bytes_sub_byte_types_pack_and_round_up(etype, bits):
    """A sub-byte array takes ceil(elements * bits / 8) bytes."""
    assert shape_bytes(f"{etype}[7]") == -(-7 * bits // 8)
    assert shape_bytes(f"{etype}[16]{{0}}") == 16 * bits // 8


def test_shape_bytes_tuples_tokens_dynamic_dims_and_layouts():
    """Tuples sum (nested too), token/opaque are 0, <=N counts N, layouts and tiling are ignored."""
    assert shape_bytes("(f32[2,3]{1,0}, s8[5])") == 24 + 5
    assert shape_bytes("(f32[], (bf16[4]{0}, (u4[3], pred[2])), token[])") == 4 + 8 + 2 + 2
    assert shape_bytes("()") == 0
    assert shape_bytes("token[]") == 0 and shape_bytes("opaque[]") == 0
    assert shape_bytes("f32[<=10,4]{1,0}") == 160
    assert shape_bytes("bf16[8,128]{1,0:T(8,128)(2,1)}") == 2048
    assert shape_bytes("f32[1024]{0:T(1024)S(1)}") == 4096
    assert shape_bytes("(f32[2]{0}, /*index=1*/f32[3]{0:S(1)})") == 20


def test_shape_bytes_unknown_element_type_is_an_error():
    """An element type XLA does not have raises HloParseError naming it."""
    with pytest.raises(HloParseError, match="unknown element type 'f33'"):
        shape_bytes("f33[2]")
    assert issubclass(HloParseError, GraphError)


# ---------------------------------------------------------------------- folding and attributes
def test_add_dependency_folds_and_its_token_orders_consumers():
    """add-dependency aliases operand 0; its token's producer becomes a control input."""
    g = parse_hlo(_entry("""
  %a = f32[8]{0} parameter(0)
  %e = f32[8]{0} exponential(%a)
  %tok = token[] after-all()
  %dep = f32[8]{0} add-dependency(%e, %tok)
  ROOT %n = f32[8]{0} negate(%dep)"""))
    recs = _records(g)
    assert list(g.ids) == ["a", "e", "tok", "n"] and g.meta["folded"] == 1
    assert recs["tok"]["bytes"] == 0
    assert recs["n"]["inputs"] == ["e"] and recs["n"]["control_inputs"] == ["tok"]
    assert "xla_order" not in g.meta and g.meta["scheduled"] is False


def test_control_predecessors_of_a_folded_instruction_pass_to_its_consumers():
    """A folded instruction's control predecessors become control inputs of its real consumers."""
    g = parse_hlo(_entry("""
  %a = f32[8]{0} parameter(0)
  %b = f32[8]{0} sine(%a)
  %c = f32[8]{0} cosine(%a)
  %t = (f32[8]{0}, f32[8]{0}) tuple(%b, %b), control-predecessors={%c}
  ROOT %d = f32[8]{0} add(%t, %a)"""))
    recs = _records(g)
    assert recs["d"]["inputs"] == ["b", "a"] and recs["d"]["control_inputs"] == ["c"]


def test_opt_barrier_folds_and_get_tuple_element_sees_through_it():
    """opt-barrier aliases its tuple operand; gte on it selects the element's producer."""
    g = parse_hlo(_entry("""
  %a = f32[8]{0} parameter(0)
  %b = f32[8]{0} sine(%a)
  %c = s32[3]{0} iota(), iota_dimension=0
  %t = (f32[8]{0}, s32[3]{0}) tuple(%b, %c)
  %o = (f32[8]{0}, s32[3]{0}) opt-barrier(%t)
  %g = s32[3]{0} get-tuple-element(%o), index=1
  ROOT %n = s32[3]{0} negate(%g)"""))
    assert list(g.ids) == ["a", "b", "c", "n"] and g.meta["folded"] == 3
    assert _records(g)["n"]["inputs"] == ["c"]


def test_all_reduce_start_tuple_is_all_output():
    """A multi-operand all-reduce-start's tuple holds only outputs, so its bytes are the tuple's."""
    g = parse_hlo(_entry("""
  %a = f32[8]{0} parameter(0)
  %b = f32[4]{0} parameter(1)
  %s = (f32[8]{0}, f32[4]{0}) all-reduce-start(%a, %b), replica_groups={}, to_apply=%sum
  %d = (f32[8]{0}, f32[4]{0}) all-reduce-done(%s)
  ROOT %g = f32[4]{0} get-tuple-element(%d), index=1"""))
    assert list(g.ids) == ["a", "b", "s"] and g.bytes.tolist() == [32, 16, 48]


def test_async_done_folds_into_start_whose_bytes_exclude_aliased_operands():
    """`*-done` folds into its `*-start`; the start's tuple minus its operands is its bytes."""
    g = parse_hlo(_entry("""
  %p = f32[256]{0} parameter(0)
  %ags = (f32[256]{0}, f32[1024]{0}) all-gather-start(%p), dimensions={0}, replica_groups={{0,1,2,3}}
  %agd = f32[1024]{0} all-gather-done(%ags)
  %cs = (f32[1024]{0:S(1)}, f32[1024]{0}, u32[]) copy-start(%agd)
  %cd = f32[1024]{0:S(1)} copy-done(%cs)
  ROOT %r = f32[1024]{0} add(%cd, %agd)"""))
    recs = _records(g)
    assert list(g.ids) == ["p", "ags", "cs", "r"] and g.meta["folded"] == 2
    assert recs["ags"]["bytes"] == 4096 and recs["cs"]["bytes"] == 4096 + 4
    assert recs["cs"]["inputs"] == ["ags"] and recs["r"]["inputs"] == ["cs", "ags"]


def test_operands_with_shapes_comments_and_multiline_instructions_parse():
    """Operands printed with shapes and /*index*/ comments, and wrapped lines, are understood."""
    g = parse_hlo(_entry("""
  %a = f32[2]{0} parameter(0)
  %b = f32[2]{0} parameter(1)
  %c = f32[2]{0} add(f32[2]{0} %a, /*index=1*/f32[2]{0} %b), metadata={op_name="a=b, c"
      source_file="x.py"}
  %k = f32[2,2]{1,0} constant({ { 1, 2 },
      { 3, 4 } })
  ROOT %d = f32[2]{0} custom-call(%c, %k), custom_call_target="foo", backend_config="{\\"x\\": \\"}\\"}" """))
    recs = _records(g)
    assert recs["c"]["inputs"] == ["a", "b"] and recs["d"]["inputs"] == ["c", "k"]
    assert recs["k"]["resident"] and recs["k"]["bytes"] == 16


def test_hand_written_hlo_wrapped_after_commas_parses():
    """XLA-test-style HLO (no %, spaced dims, lines wrapped after commas) is understood."""
    g = parse_hlo("""HloModule donation,
      is_scheduled=true

ENTRY e() -> f32[2, 2] {
    input = f32[2, 2] parameter(0)
    cc = (f32[2, 2], u8[0]) custom-call(input),
        custom_call_target="__xla_test$$TestError",
        output_to_operand_aliasing={{0}: (0, {})}
    ROOT result = f32[2, 2] get-tuple-element(cc), index=0
}
""")
    assert list(g.ids) == ["input", "cc"] and g.bytes.tolist() == [16, 16]
    assert g.meta["scheduled"] is True and g.meta["folded"] == 1 and g.meta["entry"] == "e"
    assert _records(g)["cc"]["inputs"] == ["input"] and g.ops[1] == "custom-call"


def test_unknown_opcode_becomes_a_plain_node():
    """An opcode the importer does not know is one ordinary node with its operands as inputs."""
    g = parse_hlo(_entry("""
  %a = f32[4]{0} parameter(0)
  %b = (f32[4]{0}, s8[4]{0}) frobnicate-v2(%a, %a), flavour={strange}
  ROOT %c = s8[4]{0} get-tuple-element(%b), index=1"""))
    recs = _records(g)
    assert recs["b"]["op"] == "frobnicate-v2" and recs["b"]["bytes"] == 20
    assert recs["b"]["inputs"] == ["a"] and g.num_nodes == 2


def test_fusion_op_name_carries_the_fusion_kind():
    """A fusion's op is `fusion:<kind>`; a dot's flops use the lhs contracting dims."""
    g = parse_hlo(_entry("""
  %a = f32[2048,2048]{1,0} parameter(0)
  %b = f32[2048,2048]{1,0} parameter(1)
  %d = f32[2048,2048]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %f = f32[2048,2048]{1,0} fusion(%d), kind=kLoop, calls=%fused"""))
    assert list(g.ops) == ["parameter", "parameter", "dot", "fusion:kLoop"]
    assert g.cost[2] == pytest.approx(2 * 2048**3 / PEAK)    # compute bound


def test_convolution_flops_use_kernel_elements_per_output_feature():
    """A convolution's flops are 2 * out elements * kernel elements / output features."""
    g = parse_hlo(_entry("""
  %x = f32[8,64,64,256]{3,2,1,0} parameter(0)
  %w = f32[3,3,256,128]{3,2,1,0} parameter(1)
  ROOT %c = f32[8,64,64,128]{3,2,1,0} convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"""))
    out = 8 * 64 * 64 * 128
    assert g.cost[2] == pytest.approx(2 * out * (3 * 3 * 256) / PEAK)


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("body,line,what", [
    ("  %a = f32[2]{0} parameter(0)\n  %b f32[2]{0} negate(%a)", 5, "expected '<name> ="),
    ("  %a = f32[2]{0} parameter(0)\n  %b = f32[2]{0} negate(%a\n  ROOT %c = f32[2]{0} negate(%a)",
     5, "missing ')'"),
    ("  %a = f32[2]{0} parameter(0)\n  %b = f32[2]{0} negate(%a))", 5, "unexpected ')'"),
    ("  %a = f32[2]{0} parameter(0)\n\n  %b = f32[2]{0} add(%a, %zz)", 6, "operand 'zz' of 'b'"),
    ("  %a = f32[2]{0} parameter(0)\n  %b = q7[2]{0} negate(%a)", 5, "unknown element type 'q7'"),
    ("  %a = f32[2]{0} parameter(%x)", 4, "takes an index"),
    ("  %a = f32[2]{0} parameter(0)\n  %b = f32[2]{0} negate(%a), control-predecessors={%nope}",
     5, "control predecessor 'nope'"),
    ("  %a = (f32[2]{0}) tuple()\n  %b = f32[2]{0} get-tuple-element(%a), index=3", 5, "out of range"),
    ("  %a = f32[2]{0} parameter(0)\n  %a = f32[2]{0} negate(%a)", 5, "defined twice"),
])
def test_parse_errors_name_the_source_and_line(body, line, what):
    """Unparseable text raises HloParseError `source:line: what`, on one line."""
    with pytest.raises(HloParseError) as e:
        parse_hlo(_entry(body), source="mod.hlo")
    msg = str(e.value)
    assert msg.startswith(f"mod.hlo:{line}: ") and what in msg and "\n" not in msg


def test_load_hlo_of_a_missing_file_is_an_error():
    """load_hlo of a path that does not exist raises HloParseError naming the path."""
    with pytest.raises(HloParseError, match="nope.hlo:0: no such file"):
        load_hlo("nope.hlo")


def test_missing_entry_computation_is_an_error():
    """Text with no ENTRY computation raises HloParseError."""
    with pytest.raises(HloParseError, match="no ENTRY computation"):
        parse_hlo("HloModule m\n\n%f {\n  ROOT %a = f32[] parameter(0)\n}\n", source="s")


# ---------------------------------------------------------------------- real jax modules
@pytest.fixture(scope="module")
def jax_modules():
    """Pre-optimization and compiled HLO of a train step, a scan, and a cond returning a tuple."""
    jax = pytest.importorskip("jax")
    jnp, lax = jax.numpy, jax.lax

    def loss(p, x, y):
        return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)

    def step(p, x, y):
        value, grads = jax.value_and_grad(loss)(p, x, y)
        return value, jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, p, grads)

    def scan(x):
        return lax.scan(lambda c, xi: (jnp.sin(c) * xi, c.sum()), x[0], x)

    def cond(flag, x):
        return lax.cond(flag, lambda v: (jnp.sin(v), v.astype(jnp.bfloat16)),
                        lambda v: (jnp.cos(v), v.astype(jnp.bfloat16)), x)

    params = {"w1": jnp.ones((8, 16)), "b1": jnp.ones(16), "w2": jnp.ones((16, 4))}
    cases = {"step": (step, (params, jnp.ones((5, 8)), jnp.ones((5, 4)))),
             "scan": (scan, (jnp.ones((10, 3)),)),
             "cond": (cond, (True, jnp.ones(4)))}
    out = {}
    for key, (f, args) in cases.items():
        lowered = jax.jit(f).lower(*args)
        out[key] = (lowered.compiler_ir("hlo").as_hlo_text(), lowered.compile().as_text())
    return out


@pytest.mark.parametrize("key", ["step", "scan", "cond"])
def test_jax_modules_import_before_and_after_compilation(jax_modules, key):
    """Both HLO forms import; every instruction is a node or folded; parameters are resident."""
    for text, scheduled in zip(jax_modules[key], (False, True)):
        g = parse_hlo(text)
        assert g.meta["scheduled"] is scheduled
        assert g.num_nodes + g.meta["folded"] == g.meta["hlo_instructions"]
        assert g.meta["module"] == f"jit_{key}" and g.name == f"jit_{key}"
        params = [v for v in range(g.num_nodes) if g.ops[v] == "parameter"]
        assert len(params) == {"step": 5, "scan": 1, "cond": 2}[key]
        assert g.resident[params].all()
        again = from_json(json.loads(json.dumps(g.to_json())))   # meta is plain JSON
        assert again.ids == g.ids and again.meta == g.meta
        assert all(g.inputs(v).size > 0 for v in range(g.num_nodes) if not g.resident[v]
                   and g.ops[v] not in ("iota", "after-all", "partition-id", "replica-id"))
    pre = parse_hlo(jax_modules[key][0])
    if key == "step":
        assert pre.ops.count("dot") == 5      # 2 forward, 3 backward
    if key == "scan":
        assert pre.ops.count("while") == 1


@pytest.mark.parametrize("key", ["step", "scan", "cond"])
def test_compiled_xla_order_is_a_topological_order_of_every_node(jax_modules, key):
    """xla_order lists each node once, after all its data and control inputs."""
    g = parse_hlo(jax_modules[key][1])
    order = g.meta["xla_order"]
    assert sorted(order) == sorted(g.ids) and len(order) == g.num_nodes
    pos = {nid: i for i, nid in enumerate(order)}
    for v in range(g.num_nodes):
        preds = np.concatenate([g.inputs(v), g.control_inputs(v)])
        assert all(pos[g.ids[u]] < pos[g.ids[v]] for u in preds)


def test_a_generic_module_name_gives_way_to_the_file_name(tmp_path):
    """A module jax names `jit__lambda` takes its file's name; a real module name is kept."""
    from regal.hlo import load_hlo
    text = ("HloModule jit__lambda\n\nENTRY %e (a: f32[4]) -> f32[4] {\n  %a = f32[4] parameter(0)\n"
            "  ROOT %b = f32[4] negate(%a)\n}\n")
    (tmp_path / "resnet_step.hlo").write_text(text)
    assert load_hlo(tmp_path / "resnet_step.hlo").name == "resnet_step"
    (tmp_path / "other.hlo").write_text(text.replace("jit__lambda", "resnet50_train"))
    assert load_hlo(tmp_path / "other.hlo").name == "resnet50_train"
    assert load_hlo(tmp_path / "resnet_step.hlo", name="mine").name == "mine"


# ---------------------------------------------------------------------- in-place reuse
REUSE_HLO = """HloModule reuse, is_scheduled=true

%loop_elementwise (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  %m = f32[8]{0} multiply(%p0, %p1)
  ROOT %t = f32[8]{0} tanh(%m)
}

%loop_broadcast (q0: f32[8], q1: f32[]) -> f32[8] {
  %q0 = f32[8]{0} parameter(0)
  %q1 = f32[] parameter(1)
  %b = f32[8]{0} broadcast(%q1), dimensions={}
  %r = f32[8]{0} reverse(%q0), dimensions={0}
  ROOT %s = f32[8]{0} add(%r, %b)
}

%output_add (o0: f32[8,4], o1: f32[4,4], o2: f32[8,4]) -> f32[8,4] {
  %o0 = f32[8,4]{1,0} parameter(0)
  %o1 = f32[4,4]{1,0} parameter(1)
  %o2 = f32[8,4]{1,0} parameter(2)
  %d = f32[8,4]{1,0} dot(%o0, %o1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %a = f32[8,4]{1,0} add(%d, %o2)
}

%dus (u0: f32[8], u1: f32[2], u2: s32[]) -> f32[8] {
  %u0 = f32[8]{0} parameter(0)
  %u1 = f32[2]{0} parameter(1)
  %u2 = s32[] parameter(2)
  ROOT %up = f32[8]{0} dynamic-update-slice(%u0, %u1, %u2)
}

ENTRY %main (x: f32[8], y: f32[8], w: f32[4,4], i: s32[]) -> (f32[8], f32[8,4], f32[8], f32[8]) {
  %x = f32[8]{0} parameter(0)
  %y = f32[8]{0} parameter(1)
  %w = f32[4,4]{1,0} parameter(2)
  %i = s32[] parameter(3)
  %zero = f32[] constant(0)
  %e = f32[8]{0} exponential(%x)
  %n = f32[8]{0} negate(%e)
  %f = f32[8]{0} fusion(%n, %e), kind=kLoop, calls=%loop_elementwise
  %g = f32[8]{0} fusion(%f, %zero), kind=kLoop, calls=%loop_broadcast
  %h = f32[8]{0} copy(%g)
  %k = f32[8]{0} add(%h, %y)
  %bc = f32[2,4]{1,0} bitcast(%k)
  %pad = f32[8]{0} sine(%k)
  %m2 = f32[2,4]{1,0} negate(%bc)
  %flip = f32[2,4]{0,1} copy(%m2)
  %lay = f32[2,4]{1,0} cosine(%flip)
  %sl = f32[2]{0} slice(%pad), slice={[0:2]}
  %u = f32[8]{0} fusion(%pad, %sl, %i), kind=kLoop, calls=%dus
  %bx = f32[8,4]{1,0} broadcast(%u), dimensions={0}
  %lhs = f32[8,4]{1,0} exponential(%bx)
  %o = f32[8,4]{1,0} fusion(%lhs, %w, %bx), kind=kOutput, calls=%output_add
  %last = f32[8]{0} negate(%u)
  %lay2 = f32[2,4]{1,0} negate(%lay)
  ROOT %out = (f32[8], f32[8,4], f32[8], f32[8]) tuple(%last, %o, %u, %pad)
}
"""


def test_hlo_reuse_follows_xlas_sharing_conditions():
    """`reuse` lists the operands XLA's heap simulator may write an output over: elementwise ops
    and loop fusions whose parameter is used elementwise, an output fusion adding to a dot, an
    in-place root; never a parameter, a copy, an operand seen through a bitcast, another layout,
    a live-out value, or a parameter reversed or broadcast inside the fusion."""
    g = parse_hlo(REUSE_HLO)
    reuse = {g.ids[v]: [g.ids[u] for u in g.reuse(v)] for v in range(g.num_nodes) if g.reuse(v).size}
    assert reuse.get("n") == ["e"] and reuse.get("f") == ["n", "e"] and reuse.get("k") == ["h"]
    assert reuse.get("lhs") == ["bx"] and reuse.get("o") == ["bx"] and reuse.get("lay2") == ["lay"]
    assert set(reuse) == {"n", "f", "k", "lhs", "o", "lay2"}
    # n: negate(e); f: a loop fusion using both parameters elementwise, in operand order; k:
    # add(h, y), y a parameter; lhs: exponential(bx); o: an output fusion whose root adds
    # parameter 2 (bx) to a dot; lay2: same shape and layout. Nothing for e (x is a parameter),
    # g (its parameter is reversed), h and flip (copies), m2 (its operand is a bitcast), lay
    # (flip has another layout), u (its in-place operand pad is live out, the ROOT tuple's) or
    # last (u is live out).


def test_hlo_reuse_lowers_the_peak_of_xlas_order():
    """The chain e -> n -> f in place: XLA's own order peaks lower with the field than without."""
    from regal.graph import Graph
    from regal.simulate import simulate
    g = parse_hlo(REUSE_HLO)
    plain = Graph.from_records([{k: v for k, v in r.items() if k != "reuse"} for r in g.to_records()])
    order = [g.index[i] for i in g.meta["xla_order"]]
    zeros = np.zeros(g.num_nodes, dtype=np.int32)
    assert simulate(g, zeros, order, 1).peak_bytes < simulate(plain, zeros, order, 1).peak_bytes


def test_hlo_while_and_in_place_ops_share_their_operands_buffer():
    """A while takes over its init operands, an in-place dynamic-update-slice its updated operand."""
    text = _entry("""  %x = f32[4]{0} parameter(0)
  %i = s32[] parameter(1)
  %a = f32[4]{0} exponential(%x)
  %b = f32[4]{0} negate(%x)
  %init = (f32[4], f32[4]) tuple(%a, %b)
  %loop = (f32[4], f32[4]) while(%init), condition=%c, body=%body
  %p = f32[4]{0} get-tuple-element(%loop), index=0
  %s = f32[1]{0} slice(%p), slice={[0:1]}
  %q = f32[4]{0} cosine(%p)
  %upd = f32[4]{0} dynamic-update-slice(%q, %s, %i)
  ROOT %r = f32[4]{0} negate(%upd)""")
    g = parse_hlo(text)
    reuse = {g.ids[v]: [g.ids[u] for u in g.reuse(v)] for v in range(g.num_nodes) if g.reuse(v).size}
    assert reuse["loop"] == ["a", "b"]
    assert reuse["upd"] == ["q"]
    assert "q" not in reuse          # p is a get-tuple-element of the while: no direct use
    assert reuse.get("r") is None    # upd's buffer is shared with q: no further sharing
