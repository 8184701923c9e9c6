"""FX program or ExportedProgram -> `Graph` (SPEC.md section 1): the importer of `regal.torch`.

    graph = regal.torch.from_exported(torch.export.export(model, (x,)))
    graph = regal.torch.from_fx(gm, placeholders, ["loss"])     # a make_fx program (a training step)

Tested with torch 2.14.1 (torchvision 0.29.1, transformers 5.23.0); the extra admits 2.9-2.14.
`regal.torch.from_module` / `regal.torch.trace` (`regal.torch.tracing`) trace a module and import
it here: the forward pass with `torch.export.export` (ATen ops as the module calls them, in-place
ops such as `relu_` kept), one training step with `make_fx(tracing_mode="fake")`, the ATen-level
tracer AOTAutograd is built on (forward, `torch.autograd.grad` of the loss, then the optimizer's
in-place update: `regal.torch._step_trace`, the one tracer of training steps). Why not
torch.export for a step: it cannot trace `autograd.grad` or an optimizer step. Tracing below
autograd records the backward ops the autograd engine runs, and an eager optimizer updates
parameters and its state in place, so the update allocates nothing, as in PyTorch. Nothing runs:
tensors are fake.

What each FX node becomes:

- A placeholder (parameter, buffer, lifted constant, user input, optimizer state) is a
  **resident** node (op `parameter`, `buffer`, `constant`, `input`, `optimizer_state`), id its
  fully qualified name (`layer1.0.conv1.weight`). A `get_attr` tensor is a resident `constant`.
- A call whose result shares storage with an input (`node.meta["val"]` fake tensors know their
  storage), or whose schema says it returns an alias, is a **view** and makes no node: views,
  `alias`, `detach`, `t`, `expand`, `_unsafe_view`, `getitem` of a tuple. Consumers read the
  producer directly, as hlo.py folds bitcasts.
- An **in-place** op (its schema writes the returned alias: `relu_`, `add_`, the optimizer's
  `mul_`/`add_`) is a node of 0 bytes that reads its target; later readers of the target read
  it as well (ordering), and it has control inputs from earlier readers of the target (a
  write may not overtake a read). An argument written but not returned (BatchNorm's running
  statistics) gets the same ordering.
- Every other call is **one** node, op `aten.<name>.<overload>`, `bytes` the sum of the sizes
  (`numel * element_size`) of its new output tensors. SymInt arithmetic makes no node.
- `reuse` (SPEC.md section 3): an elementwise ATen op (`ELEMENTWISE_ATEN`) with one new output
  lists its tensor arguments of the output's shape and dtype that are a whole node's output, in
  argument order: an allocator may hand the output the buffer of such an argument whose last
  reader it is (Inductor's buffer reuse does).
  Higher-order ops (`cond`, `while_loop`, ...) are rejected with a message naming the node.
- The nodes the program returns are marked `output` (never freed, SPEC.md section 3, even when
  consumed inside too) and are in no `reuse` list; `meta["outputs"]` names them.

`cost`: the roofline of `regal._ops` (`COST_MODEL`: 100 TFLOP/s, 1 TB/s; `cost_model=` another,
such as the one a planned step measures on its device): FLOPs of matrix products, convolutions
(forward and backward) and attention, bytes moved for the rest.
"""

from __future__ import annotations

import contextlib
import inspect
import operator
import warnings
from typing import Any, Mapping, NamedTuple, Sequence

try:
    import torch
    import torch.fx
except ImportError as e:  # pragma: no cover - exercised only where torch is absent
    raise ImportError("regal.torch needs PyTorch: pip install regal[torch]") from e

from regal._ops import COST_MODEL
from regal.torch._ops import ELEMENTWISE_ATEN, _flops, _has_out_variant, _op_name  # noqa: F401
from regal.graph import Graph, GraphError, mark_outputs

__all__ = ["Traced", "from_exported", "from_fx"]

_KIND_OPS = {"PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant",
             "USER_INPUT": "input", "TOKEN": "token", "CUSTOM_OBJ": "custom_object"}


def _tensors(val) -> list:
    """The tensors in a node's value (a tensor, or a tuple/list of them and non-tensors)."""
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)):
        return [t for v in val for t in _tensors(v)]
    return []


def _nbytes(t: torch.Tensor, what: str) -> int:
    try:
        return int(t.numel()) * t.element_size()
    except (TypeError, RuntimeError) as e:  # a symbolic size without a hint
        raise GraphError(f"{what}: size is not static ({e}); export with static shapes") from None


def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


class _Builder:
    """Records for Graph.from_records; `struct[fx node]` is the value's producing regal nodes:
    a tuple of node indices for a tensor, a list of such tuples for a tuple/list value."""

    def __init__(self, source: str, reuse: bool = True, split_outputs: bool = False, random_order: bool = False,
                 cost_model: Mapping | None = None):
        self.source = source
        model = COST_MODEL if cost_model is None else cost_model
        self.flops_per_s, self.bytes_per_s = float(model["peak_flops_per_s"]), float(model["bandwidth_bytes_per_s"])
        self.reuse = reuse
        self.split_outputs = split_outputs
        self.random_order = random_order
        self.last_random: int | None = None   # the last seeded-random op (random_order)
        self.records: list[dict] = []
        self.struct: dict[torch.fx.Node, Any] = {}
        self.readers: dict[int, list[int]] = {}
        self.writes: dict[Any, int] = {}   # storage -> the last node that wrote it in place
        self.side_writes: dict[Any, int] = {}   # storage -> the last op that wrote it beside its output
        self.alloc_owner: dict[int, int] = {}   # alloc node (`_split`) -> the op that fills it
        self.folded = 0

    def resident(self, node: torch.fx.Node, nid: str, op: str, val) -> None:
        ts = _tensors(val)
        if not ts:
            self.struct[node] = ()
            return
        nbytes = sum(_nbytes(t, f"{self.source}: {op} '{nid}'") for t in ts)
        self.struct[node] = (len(self.records),)
        self.records.append({"id": nid, "op": op, "bytes": nbytes, "resident": True})

    def leaves(self, arg) -> tuple:
        """Producing regal nodes of an FX argument (nested lists, tuples and dicts allowed)."""
        out: dict[int, None] = {}
        for a in _flat_nodes(arg):
            s = self.struct.get(a, ())
            for x in (s if isinstance(s, tuple) else [v for e in s for v in e]):
                out[x] = None
            for t in _tensors(a.meta.get("val")) if self.writes else ():
                w = self.writes.get(_storage(t))   # a write through another alias (a view)
                if w is not None:
                    out[w] = None
        return tuple(out)

    def written_by(self, arg) -> list:
        """The ops that wrote the storages of an FX argument beside their own output (`side_writes`)."""
        if not self.side_writes:
            return []
        return [w for a in _flat_nodes(arg) for t in _tensors(a.meta.get("val"))
                if (w := self.side_writes.get(_storage(t))) is not None]

    def wrote(self, nodes, idx: int) -> None:
        """`idx` wrote the storages of these FX nodes: later readers of any alias follow it."""
        for n in nodes:
            for t in _tensors(n.meta.get("val")):
                key = _storage(t)
                if key is not None:
                    self.writes[key] = idx


def _flat_nodes(arg) -> list:
    if isinstance(arg, torch.fx.Node):
        return [arg]
    if isinstance(arg, (tuple, list)):
        return [n for a in arg for n in _flat_nodes(a)]
    if isinstance(arg, dict):
        return [n for a in arg.values() for n in _flat_nodes(a)]
    return []


def _schema_args(node: torch.fx.Node):
    """(schema argument, FX value) pairs of an OpOverload call."""
    schema = node.target._schema
    for k, a in enumerate(schema.arguments):
        if k < len(node.args):
            yield a, node.args[k]
        elif a.name in node.kwargs:
            yield a, node.kwargs[a.name]


#: Arguments ATen ops write without saying so in their schema: BatchNorm's running statistics,
#: written when `training` is true (functionalization's `_native_batch_norm_legit` declares them).
UNDECLARED_WRITES = {"native_batch_norm": ("running_mean", "running_var"),
                     "cudnn_batch_norm": ("running_mean", "running_var"),
                     "miopen_batch_norm": ("running_mean", "running_var")}


def _written_args(node: torch.fx.Node) -> list:
    """The FX arguments an ATen op writes in place: marked `(a!)` in its schema, or listed in
    `UNDECLARED_WRITES`."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return []
    args = dict((a.name, v) for a, v in _schema_args(node))
    undeclared = UNDECLARED_WRITES.get(node.target._opname, ()) if args.get("training") else ()
    return [n for a, v in _schema_args(node) if (a.alias_info is not None and a.alias_info.is_write)
            or a.name in undeclared for n in _flat_nodes(v)]


def _alias_args(node, ret) -> list:
    """FX arguments a schema return aliases (same alias set), for OpOverloads."""
    info = ret.alias_info
    if info is None:
        return []
    sets = set(info.before_set)
    return [v for a, v in _schema_args(node) if a.alias_info is not None and set(a.alias_info.before_set) & sets]


def _add_call(b: _Builder, node: torch.fx.Node) -> None:
    """One call_function node: folded, in place, or a new node (see the module docstring)."""
    what = f"{b.source}: node '{node.name}' ({_op_name(node.target)})"
    val = node.meta.get("val")
    if node.target is operator.getitem:
        base = b.struct.get(node.args[0], ())
        b.struct[node] = base[node.args[1]] if isinstance(base, list) and isinstance(node.args[1], int) \
            and -len(base) <= node.args[1] < len(base) else b.leaves(node.args[0])
        b.folded += 1
        return
    if isinstance(node.target, torch._ops.HigherOrderOperator):
        raise GraphError(f"{what}: higher-order op (control flow or a wrapped region) is not supported")
    outs = val if isinstance(val, (tuple, list)) else [val]
    if not _tensors(val):
        b.struct[node] = ()  # SymInt arithmetic, None results: no tensor, no node
        return
    idx = len(b.records)
    per_out, new_bytes, in_place, written, written_nodes = _outputs(b, node, outs, idx, what)
    own_bytes, allocs = _split(b, node, outs, per_out, idx, what) if b.split_outputs and not in_place else (0, [])
    moved = new_bytes
    if allocs:
        idx = len(b.records)   # the op's own record comes after its alloc nodes'
        b.alloc_owner.update((a, idx) for a in allocs)   # their readers run after the op fills them
        per_out = [(idx,) if p == ("own",) else p for p in per_out]
        new_bytes = own_bytes
    written_args = _written_args(node)
    if not in_place and not written_args and all(idx not in p for p in per_out):
        b.struct[node] = per_out if isinstance(val, (tuple, list)) else per_out[0]
        b.folded += 1
        return
    inputs = list(b.leaves((node.args, node.kwargs)))
    inputs.extend(allocs)
    for v in written_args:  # later readers of a written argument read it after this node
        written.extend(b.leaves(v))
        if not b.split_outputs:
            b.struct[v] = b.leaves(v) + (idx,)
    control = _control(b, node, inputs, written, idx)
    if b.split_outputs and written_args and not in_place:
        # BatchNorm writing its running statistics: later readers of them follow it by a control
        # edge; a data edge would keep its (large) output alive until they run.
        b.side_writes.update((key, idx) for n in written_args for t in _tensors(n.meta.get("val"))
                             if (key := _storage(t)) is not None)
        b.wrote(written_nodes, idx)
    else:
        b.wrote(written_nodes + written_args, idx)
    for u in inputs:
        b.readers.setdefault(u, []).append(idx)
    moved += sum(_nbytes(t, what) for n in dict.fromkeys(_flat_nodes((node.args, node.kwargs)))
                            for t in _tensors(n.meta.get("val")))
    rec = {"id": node.name, "op": _op_name(node.target), "bytes": new_bytes, "inputs": inputs,
           "control_inputs": control, "cost": max(_flops(node) / b.flops_per_s, moved / b.bytes_per_s)}
    reuse = _reuse(b, node, val, new_bytes) if b.reuse and not in_place and not written_args else []
    if reuse:
        rec["reuse"] = reuse
    _pin(b, node, rec, in_place or bool(written_args) or bool(allocs), written + list(allocs))
    b.records.append(rec)
    b.struct[node] = per_out if isinstance(val, (tuple, list)) else per_out[0]


def _outputs(b: _Builder, node: torch.fx.Node, outs: list, idx: int, what: str):
    """Where each output of a call comes from: `per_out[k]`, the regal nodes of output k (an
    input's for a view or alias, `idx` for a new tensor, both for an in-place write); the bytes
    of its new tensors; whether it writes in place, and what (regal nodes, FX nodes)."""
    val = node.meta.get("val")
    schema_rets = node.target._schema.returns if isinstance(node.target, torch._ops.OpOverload) else []
    if len(schema_rets) == 1 and isinstance(val, (tuple, list)):
        schema_rets = list(schema_rets) * len(outs)  # Tensor[] returns: one schema entry for all
    input_storages = {_storage(t): n for n in _flat_nodes((node.args, node.kwargs))
                      for t in _tensors(n.meta.get("val"))}
    input_storages.pop(None, None)
    per_out: list[tuple] = []
    new_bytes, in_place, written, written_nodes = 0, False, [], []
    for k, t in enumerate(outs):
        if not isinstance(t, torch.Tensor):
            per_out.append(())
            continue
        ret = schema_rets[k] if k < len(schema_rets) else None
        aliased = _alias_args(node, ret) if ret is not None else []
        shared = input_storages.get(_storage(t)) if input_storages else None
        if aliased and shared is None and not ret.alias_info.is_write and _storage(t) is not None:
            aliased = []   # "may alias" (`to`, `contiguous`) but made a new tensor: a node
        if shared is not None and not aliased:
            aliased = [shared]
        if aliased:
            base = b.leaves(aliased)
            if ret is not None and ret.alias_info is not None and ret.alias_info.is_write:
                in_place = True
                written.extend(base)
                written_nodes.extend(aliased)
                per_out.append(base + (idx,))
            else:
                per_out.append(base)
            continue
        new_bytes += _nbytes(t, f"{what}: output {k}")
        per_out.append((idx,))
    return per_out, new_bytes, in_place, written, written_nodes


def _pin(b: _Builder, node: torch.fx.Node, rec: dict, writes: bool, overwritten: list) -> None:
    """`recompute: false` (SPEC.md section 3b) where running an op again would not give the value
    its readers saw: the op writes in place, writes an argument beside its output (BatchNorm's
    running statistics), fills alloc nodes (`split_outputs`) or draws random numbers; and the
    nodes whose tensor it overwrites (a second run would make the value from before the write)."""
    random = isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags
    if writes or random:
        rec["recompute"] = False
    for u in overwritten:
        if 0 <= u < len(b.records) and not b.records[u].get("resident"):
            b.records[u]["recompute"] = False


def _control(b: _Builder, node: torch.fx.Node, inputs: list, written: list, idx: int) -> list:
    """A call's control inputs: earlier readers of what it writes (a write may not overtake a
    read), the ops that wrote an argument beside their output, the op that fills an alloc node
    it reads (`_split`), and with `random_order` the previous seeded-random op."""
    after = b.written_by((node.args, node.kwargs))
    control = sorted({r for w in written for r in b.readers.get(w, ()) if r not in inputs}
                     | {w for w in after if w not in inputs}
                     | {b.alloc_owner[u] for u in inputs if u in b.alloc_owner and b.alloc_owner[u] != idx})
    if b.random_order and isinstance(node.target, torch._ops.OpOverload) \
            and torch.Tag.nondeterministic_seeded in node.target.tags:
        if b.last_random is not None and b.last_random not in inputs and b.last_random not in control:
            control.append(b.last_random)
        b.last_random = idx
    return control


def _split(b: _Builder, node: torch.fx.Node, outs, per_out: list, idx: int, what: str) -> tuple[int, list]:
    """`split_outputs`: a call with several new outputs (BatchNorm's output and saved
    statistics, max pooling's output and indices, a convolution's three gradients) keeps only its
    largest output as its own bytes; each other new output becomes an `alloc` node of its size
    that the op reads (so it is live through the op) and that the output's readers read. Each
    output is then freed after its own last reader, as eager PyTorch frees it, instead of all of
    them after the last reader of any. An alloc node runs no op (a plan skips it) and has no
    inputs: run earlier than right before its op it only books its bytes sooner, so the model
    never undercounts. (Its op's inputs as its control inputs would keep it from running before
    them, but under SPEC.md 3b a control edge orders every instance of its source before the
    target: no input of a multi-output op, such as every activation a convolution's backward
    reads, could then be recomputed after the op's alloc nodes.)
    Returns `(the op's own bytes, [alloc node indices])`, `(0, [])` for a call with fewer than
    two new outputs; `per_out` is rewritten for the alloc nodes."""
    new = [k for k, p in enumerate(per_out) if p == (idx,)]
    if len(new) < 2:
        return 0, []
    sizes = {k: _nbytes(outs[k], f"{what}: output {k}") for k in new}
    own = max(new, key=lambda k: (sizes[k], -k))
    allocs = []
    for k in new:
        if k == own:
            per_out[k] = ("own",)   # the op's own index is known once its alloc nodes are made
        else:
            allocs.append(len(b.records))
            per_out[k] = (allocs[-1],)
            b.records.append({"id": f"{node.name}:{k}", "op": "alloc", "bytes": sizes[k], "inputs": [],
                              "control_inputs": [], "cost": 0.0})
    return sizes[own], allocs


def _reuse(b: _Builder, node: torch.fx.Node, val, new_bytes: int) -> list:
    """An elementwise op's tensor arguments with the output's shape and dtype whose buffer is a
    whole node's output (one producer of exactly that size): buffers it may write over."""
    target = node.target
    if not (isinstance(target, torch._ops.OpOverload) and target.namespace == "aten"
            and target._opname in ELEMENTWISE_ATEN and isinstance(val, torch.Tensor)
            and _has_out_variant(target)):
        return []
    found: list = []
    for n in _flat_nodes(node.args):
        t = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
        if not isinstance(t, torch.Tensor) or t.shape != val.shape or t.dtype != val.dtype \
                or t.stride() != val.stride():   # written in place, the output keeps its layout
            continue
        leaves = b.leaves(n)
        if len(leaves) == 1:
            u = leaves[0]
            r = b.records[u]
            if not r.get("resident") and r["bytes"] == new_bytes and u not in found:
                found.append(u)
    return found


def from_fx(gm: torch.fx.GraphModule, placeholders: Mapping[str, tuple[str, str]] | None = None,
            outputs: Sequence[str] | None = None, name: str = "torch", meta: Mapping | None = None,
            source: str | None = None, reuse: bool = True, split_outputs: bool = False,
            random_order: bool = False, cost_model: Mapping | None = None) -> Graph:
    """Import an FX graph whose nodes carry `meta["val"]` (fake tensors).

    `placeholders` maps a placeholder's name to `(regal id, op)`; unnamed ones become inputs.
    `outputs` names the graph outputs in `meta["outputs"]` (default: output_0, output_1, ...).
    `reuse=False` leaves out every `reuse` list (eager PyTorch writes no output over an input).
    `split_outputs=True`: each new output of a multi-output op is freed after its own last
    reader (`_split`; a plan must then take each output out of its tuple at once, as
    `regal.torch.plan.plan_program` does). `random_order=True`: the seeded-random ops keep their
    traced order (control edges), so a plan draws from the global generator what eager draws.
    `cost_model`: the roofline's two rates (`regal._ops.COST_MODEL`'s keys), default the nominal.
    """
    source = source or f"torch program '{name}'"
    placeholders = placeholders or {}
    b = _Builder(source, reuse, split_outputs, random_order, cost_model)
    out_args: list = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            nid, op = placeholders.get(node.name, (node.name, "input"))
            b.resident(node, nid, op, node.meta.get("val"))
        elif node.op == "get_attr":
            val = node.meta.get("val")
            if val is None:
                val = _get_attr(gm, node.target)
            b.resident(node, str(node.target), "constant", val)
        elif node.op == "call_function":
            _add_call(b, node)
        elif node.op == "output":
            out_args = list(node.args[0]) if isinstance(node.args[0], (tuple, list)) else [node.args[0]]
        else:
            raise GraphError(f"{source}: node '{node.name}': unsupported FX op '{node.op}'")
    if not b.records:
        raise GraphError(f"{source}: the program has no tensors")
    names = list(outputs) if outputs is not None else [f"output_{k}" for k in range(len(out_args))]
    ids = [r["id"] for r in b.records]
    out_ids = {n: [ids[u] for u in b.leaves(a)] for n, a in zip(names, out_args)}
    mark_outputs(b.records, [u for a in out_args for u in b.leaves(a)])
    for r in b.records:
        if "inputs" in r:
            r["inputs"] = [ids[u] for u in r["inputs"]]
            r["control_inputs"] = [ids[u] for u in r["control_inputs"]]
        if "reuse" in r:
            r["reuse"] = [ids[u] for u in r["reuse"]]
    resident = [r for r in b.records if r.get("resident")]
    full_meta = {"source": "torch", "torch": torch.__version__, "fx_nodes": len(gm.graph.nodes),
                 "folded": b.folded, "outputs": out_ids,
                 "parameter_bytes": sum(r["bytes"] for r in resident if r["op"] == "parameter"),
                 "cost_model": dict(COST_MODEL if cost_model is None else cost_model),
                 **({"split_outputs": True} if split_outputs else {}),
                 **dict(meta or {})}
    return Graph.from_records(b.records, name=name, meta=full_meta, source=source)


def _get_attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def from_exported(ep: "torch.export.ExportedProgram", name: str = "torch", meta: Mapping | None = None,
                  reuse: bool = True) -> Graph:
    """Import an `ExportedProgram`: parameters, buffers and constants are resident nodes named
    by their fully qualified names; user inputs are resident `input` nodes."""
    return from_fx(ep.graph_module, *_exported_names(ep), name=name, reuse=reuse,
                   meta={"mode": "forward", "ir": "torch.export", **dict(meta or {})})


def _exported_names(ep) -> tuple[dict, list]:
    """An ExportedProgram's placeholders `{name: (regal id, op)}` and output names."""
    placeholders = {}
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        nid = spec.target if spec.target is not None and kind != "USER_INPUT" else spec.arg.name
        placeholders[spec.arg.name] = (str(nid), _KIND_OPS.get(kind, "input"))
    outputs = [getattr(s.arg, "name", f"output_{k}") if s.kind.name == "USER_OUTPUT" else f"{s.kind.name.lower()}:{s.target}"
               for k, s in enumerate(ep.graph_signature.output_specs)]
    return placeholders, outputs


class Traced(NamedTuple):
    """A traced program and the regal graph of it (`trace`): what `regal.torch.plan` runs.

    graph_module: the FX program (ATen ops; a training step is forward, backward and the
    in-place update); args: the real tensors its placeholders take, flat, in placeholder order
    (parameters, buffers, optimizer state, inputs); arg_ids: the regal id of each.
    """
    graph: Graph
    graph_module: "torch.fx.GraphModule"
    args: tuple
    arg_ids: tuple


@contextlib.contextmanager
def no_onednn():
    """oneDNN off (its RNN kernels cannot be traced), its TF32 notice kept quiet."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.backends.mkldnn.flags(enabled=False):
            yield


def _forward_arity(model) -> int | None:
    """How many leading positional inputs `model.forward` takes (None: all of them)."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _default_loss(outputs, *inputs):
    leaves = [t for t in torch.utils._pytree.tree_leaves(outputs)
              if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise GraphError("training step: the module returns no floating tensor to take a loss of")
    return sum(t.float().mean() for t in leaves)
