"""Layer-granularity graphs: torchvision and Hugging Face models with one node per layer, not per op.

    .venv-torch/bin/python -m data.layer_graphs --out data/graphs/layers     # the torch venv (data/README.md)

What a user's layer-level view of a model looks like (Keras' layer list, a torch.fx trace with
`nn.Module` leaves, a pipeline-parallel planner's cost table): each node is a layer.

**Forward** (`mode="fwd"`): the model is exported with `torch.export` (eval mode, no_grad) and
imported at operator granularity by `regal.torch.from_exported`; its ATen nodes are then
contracted into layers with the module hierarchy torch.export records on every node
(`meta["nn_module_stack"]`):

- a node belongs to the innermost module on its stack whose class name ends in `Attention`
  (`nn.MultiheadAttention`, `BertSelfAttention`, `LlamaAttention`, torchvision's
  `ShiftedWindowAttention`, ...: attention is one layer) unless it runs inside a container
  child of that module (BertAttention's `BertSelfOutput`), else to its innermost module if that
  module has no children (`Conv2d`, `BatchNorm2d`, `ReLU`, `Linear`, `LayerNorm`, ...), else it
  is functional glue of a container (`out += identity`, `torch.cat`, `flatten`);
- each maximal run of consecutive nodes (in the exported program's order) with the same owner
  becomes one layer node; contracting contiguous runs of a topological order cannot create a
  cycle. A module called twice (torchvision's shared `relu`) gives two layer nodes;
- a layer's `bytes` is the sum of the `bytes` of its member ops whose result is read outside
  the layer (or is a graph output): its output tensors; its `temp_bytes` is the most its
  internal intermediates (read only inside the layer) hold at once, in member order; its
  `cost` is the sum of its members' roofline costs (`regal._ops`: 100 TFLOP/s, 1 TB/s; FLOPs
  of matrix products and convolutions, bytes moved for the rest);
- the parameters of one module are one resident node (`<module>.params`, op `parameter`), its
  buffers another (`<module>.buffers`, op `buffer`); inputs and constants stay as they are.

Layer ops are the module class names (`Conv2d`, `BertSelfAttention`) or, for glue, the ATen
ops it runs (`add_`, `flatten+linear`).

**Training step** (`mode="train"`): the forward layer graph, a `loss` node reading every graph
output (the importer's default loss, a sum of means) and its gradient, then a backward pass
that mirrors the forward one (see `mirror_training_step`): a gradient layer per forward layer
in reverse order, reading the saved activations it needs (its inputs, or its output for
activation functions), so they stay alive until then; only layers that depend on a parameter
get a gradient (not attention masks or position lookups); adds and
concatenations pass their gradient through; gradients of a layer read by several layers are
summed by an `add_n` node; a weight-gradient node per layer with parameters; an optimizer
update per parameter node (SGD with momentum: one resident state; Adam: two) writing the new
parameters and states. Backward costs: the forward layer's cost for the input gradient and
again for the weight gradient (FLOPs x2 in all, the usual rule of thumb).

Graphs outside 50-20,000 nodes are dropped. Writes `<out>/*.json.gz` and
`data/manifest_layers.json` (family split of `data.torch_corpus.FAMILY_SPLIT`). Deterministic
for the same torch version.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from data._files import save_graph, write_source_manifest
from data.torch_corpus import FAMILY_SPLIT, MODELS as TORCH_MODELS, _tv
from regal._ops import COST_MODEL, roofline
from regal.graph import Graph

__all__ = ["MODELS", "layer_graph", "mirror_training_step", "main"]

MIN_NODES, MAX_NODES = 50, 20_000

#: The models of the layer source: a subset of `data.torch_corpus.MODELS` plus a few more CNNs.
MODELS = {name: TORCH_MODELS[name] for name in (
    "resnet18", "mobilenet_v2", "densenet121", "squeezenet", "shufflenet", "regnet_y_400mf", "efficientnet_b0",
    "googlenet", "convnext_tiny", "vit_s8_64", "swin_t", "bert_4l", "gpt2_4l", "llama_4l", "bart_2x2", "t5_2x2")}
MODELS.update({
    "resnet50": ("resnet", _tv("resnet50"), lambda: (torch.randn(4, 3, 64, 64),), None, "sgd",
                 "torchvision ResNet-50, 64x64"),
    "vgg16_bn": ("vgg", _tv("vgg16_bn"), lambda: (torch.randn(4, 3, 64, 64),), None, "sgd",
                 "torchvision VGG-16-BN, 64x64"),
    "mobilenet_v3_large": ("mobilenet", _tv("mobilenet_v3_large"), lambda: (torch.randn(8, 3, 96, 96),), None, "sgd",
                           "torchvision MobileNetV3-Large, 96x96"),
})
LAYER_FAMILY_SPLIT = dict(FAMILY_SPLIT, vgg="train")

_SAVES_OUTPUT = ("relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "hardswish", "hardsigmoid", "mish",
                 "newgeluactivation", "geluactivation", "siluactivation")
_PASS_THROUGH = {"add", "add_", "cat", "add+add", "add_+add_"}


def _short(target) -> str:
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0] if "." in name else name


def _owner(node: torch.fx.Node, model: torch.nn.Module) -> tuple[str, str, str]:
    """(module path, class name, "module" | "glue") that owns an exported node."""
    entries = list((node.meta.get("nn_module_stack") or {}).values())
    entries = [(str(p), str(c).rsplit(".", 1)[-1]) for p, c in entries]

    def is_leaf(path: str) -> bool:
        try:
            return not any(True for _ in model.get_submodule(path).children())
        except AttributeError:
            return False

    attn = [i for i, e in enumerate(entries) if e[1].endswith("Attention")]
    # the innermost attention module, unless the node sits in a non-leaf, non-attention child
    # of it (BertAttention's BertSelfOutput: projection, residual add, LayerNorm are layers)
    if attn and (attn[-1] == len(entries) - 1 or is_leaf(entries[attn[-1] + 1][0])):
        return entries[attn[-1]][0], entries[attn[-1]][1], "module"
    if entries:
        path, cls = entries[-1]
        return path, cls, "module" if is_leaf(path) else "glue"
    return "", "", "glue"


def layer_graph(ep, model: torch.nn.Module, name: str) -> tuple[Graph, dict[str, str]]:
    """The forward layer graph of an ExportedProgram, and the kind of each resident node
    ("input", "param", "stat", "constant")."""
    import regal.torch
    g = regal.torch.from_exported(ep, name=name)
    fx = {n.name: n for n in ep.graph.nodes}
    n = g.num_nodes
    resident_of: dict[int, str] = {}  # resident op index -> layer-level resident id
    recs: list[dict] = []
    kinds: dict[str, str] = {}
    for v in range(n):
        if not g.resident[v]:
            continue
        op, nid = g.ops[v], g.ids[v]
        if op in ("parameter", "buffer"):
            module = nid.rsplit(".", 1)[0] if "." in nid else nid
            rid = f"{module}.{'params' if op == 'parameter' else 'buffers'}"
            kind = "param" if op == "parameter" else "stat"
        else:
            rid, kind = nid, ("input" if op == "input" else "constant")
        if rid not in kinds:
            kinds[rid] = kind
            recs.append({"id": rid, "op": op, "bytes": 0, "resident": True})
        resident_of[v] = rid
        next(r for r in reversed(recs) if r["id"] == rid)["bytes"] += int(g.bytes[v])

    # contiguous runs of the same owner among the compute nodes, in order
    groups: list[list[int]] = []
    owners: list[tuple] = []
    for v in range(n):
        if g.resident[v]:
            continue
        owner = _owner(fx[g.ids[v]], model) if g.ids[v] in fx else ("", "", "glue")
        if not groups or owners[-1] != owner:
            groups.append([])
            owners.append(owner)
        groups[-1].append(v)
    group_of = {v: k for k, members in enumerate(groups) for v in members}
    seen: dict[tuple, int] = {}
    layer_ids = []
    for (path, cls, kind), members in zip(owners, groups):
        k = seen[(path, kind)] = seen.get((path, kind), -1) + 1
        base = path or "model"
        layer_ids.append(f"{base}#{k}" if kind == "module" else f"{base}/fn{k}")

    def ref(u: int) -> str:
        return resident_of[u] if g.resident[u] else layer_ids[group_of[u]]

    for k, members in enumerate(groups):
        mset = set(members)
        out_bytes, live, temp, cost = 0, 0, 0, 0.0
        last_use: dict[int, int] = {}
        for i, v in enumerate(members):
            for u in g.inputs(v):
                if int(u) in mset:
                    last_use[int(u)] = i
        ins: dict[str, None] = {}
        ctrl: dict[str, None] = {}
        ops: list[str] = []
        for i, v in enumerate(members):
            cons = g.consumers(v)
            external = cons.size == 0 or any(int(c) not in mset for c in cons)
            if external:
                out_bytes += int(g.bytes[v])
            else:
                live += int(g.bytes[v])
            temp = max(temp, live + int(g.temp_bytes[v]))
            for u, j in list(last_use.items()):
                if j == i and not g.resident[u]:
                    cu = g.consumers(u)
                    if not (cu.size == 0 or any(int(c) not in mset for c in cu)):
                        live -= int(g.bytes[u])
                    del last_use[u]
            cost += float(g.cost[v])
            for u in g.inputs(v):
                if int(u) not in mset:
                    ins[ref(int(u))] = None
            for u in g.control_inputs(v):
                if int(u) not in mset:
                    ctrl[ref(int(u))] = None
            op = str(g.ops[v]).split(".")
            short = op[1] if len(op) > 1 and op[0] == "aten" else op[0]
            if short not in ops:
                ops.append(short)
        path, cls, kind = owners[k]
        rec = {"id": layer_ids[k], "op": cls if kind == "module" else "+".join(ops[:3]), "bytes": out_bytes,
               "inputs": list(ins), "cost": float(f"{cost:.4g}")}
        ctrl_only = [c for c in ctrl if c not in ins]
        if ctrl_only:
            rec["control_inputs"] = ctrl_only
        if temp:
            rec["temp_bytes"] = temp
        recs.append(rec)
    meta = {k: v for k, v in g.meta.items() if k not in ("outputs",)}
    meta.update(granularity="layer", op_nodes=n, cost_model=COST_MODEL)
    return Graph.from_records(recs, name=name, meta=meta, source=name), kinds


def mirror_training_step(fwd: Graph, kinds: dict[str, str], optimizer: str, name: str) -> Graph:
    """Forward layers, loss, mirrored backward layers and optimizer updates (module docstring)."""
    recs = fwd.to_records()
    by_id = {r["id"]: r for r in recs}
    compute = [r for r in recs if not r.get("resident")]
    consumed = {u for r in compute for u in r.get("inputs", [])}
    outputs = [r["id"] for r in compute if r["id"] not in consumed and r["bytes"] > 0]
    n_state = {"sgd": 1, "adam": 2}[optimizer]
    out: list[dict] = list(recs)

    def add(rec: dict) -> str:
        out.append(rec)
        by_id[rec["id"]] = rec
        return rec["id"]

    def moved(ins: list[str], b: int) -> int:
        return b + sum(by_id[u]["bytes"] for u in set(ins))

    add({"id": "loss", "op": "loss", "bytes": 4, "inputs": outputs, "cost": roofline(0, moved(outputs, 4))})
    grads: dict[str, list[str]] = {}
    for o in outputs:
        grads[o] = [add({"id": f"grad:{o}", "op": "loss_grad", "bytes": by_id[o]["bytes"], "inputs": ["loss", o],
                         "cost": roofline(0, moved([o], by_id[o]["bytes"]))})]
    # a layer's output needs a gradient iff it depends on a parameter (masks, positions,
    # token-type lookups of buffers do not)
    needs_grad: dict[str, bool] = {}
    for rec in compute:
        needs_grad[rec["id"]] = any(kinds.get(u) == "param" or needs_grad.get(u, False)
                                    for u in rec.get("inputs", []))
    for rec in reversed(compute):
        v, op = rec["id"], rec["op"]
        parts = list(dict.fromkeys(grads.get(v, ())))  # a gradient passed through twice is read once
        if not parts:
            continue
        if len(parts) == 1:
            g = parts[0]
        else:
            g = add({"id": f"gsum:{v}", "op": "add_n", "bytes": rec["bytes"], "inputs": parts,
                     "cost": roofline(0, moved(parts, rec["bytes"]))})
        acts = [u for u in rec.get("inputs", []) if needs_grad.get(u, False)]
        params = [u for u in rec.get("inputs", []) if kinds.get(u) == "param"]
        low = op.lower()
        if low in _PASS_THROUGH:
            for u in acts:
                grads.setdefault(u, []).append(g)
            continue
        if low.startswith(_SAVES_OUTPUT) and rec["bytes"] > 0:
            saved = [v]
        else:  # an in-place activation (0 bytes, torchvision's ReLU(inplace=True)) saves the tensor it wrote
            saved = [u for u in rec.get("inputs", []) if kinds.get(u) != "stat"]
        fcost = float(rec.get("cost", 0.0))
        if acts:
            b = sum(by_id[u]["bytes"] for u in acts)
            dx = add({"id": f"bwd:{v}", "op": f"{op}_grad", "bytes": b, "inputs": list(dict.fromkeys([g] + saved)),
                      "cost": fcost, **({"temp_bytes": rec["temp_bytes"]} if rec.get("temp_bytes") else {})})
            for u in acts:
                grads.setdefault(u, []).append(dx)
        if params:
            w_in = list(dict.fromkeys([g] + [u for u in rec["inputs"] if kinds.get(u) not in ("param", "stat")]))
            b = sum(by_id[p]["bytes"] for p in params)
            dw = add({"id": f"wgrad:{v}", "op": f"{op}_wgrad", "bytes": b, "inputs": w_in, "cost": fcost})
            for p in params:
                states = []
                for s in range(n_state):
                    sid = f"{p}.state{s}"
                    if sid not in by_id:
                        out.insert(0, {"id": sid, "op": "optimizer_state", "bytes": by_id[p]["bytes"], "resident": True})
                        by_id[sid] = out[0]
                    states.append(sid)
                pb = by_id[p]["bytes"]
                add({"id": f"update:{p}:{v}", "op": f"{optimizer}_update", "bytes": pb * (1 + n_state),
                     "inputs": [p, dw] + states, "cost": roofline(0, pb * (3 + 2 * n_state))})
    meta = dict(fwd.meta, mode="train", optimizer=optimizer, backward="mirrored layers (data.layer_graphs)")
    return Graph.from_records(out, name=name, meta=meta, source=name)


def build(name: str, out_dir: str) -> list[dict]:
    family, make, inputs, wrap, optimizer, notes = MODELS[name]
    torch.manual_seed(0)
    model = make()
    if wrap is not None:
        model = wrap(model)
    model.eval()
    args = inputs()
    t0 = time.perf_counter()
    with torch.no_grad():
        ep = torch.export.export(model, args)
    fwd, kinds = layer_graph(ep, model, f"layers_{name}_fwd")
    train = mirror_training_step(fwd, kinds, optimizer, f"layers_{name}_train")
    secs = time.perf_counter() - t0
    records = []
    for mode, g in (("fwd", fwd), ("train", train)):
        rec = {"name": g.name, "nodes": g.num_nodes, "seconds": round(secs, 1)}
        if not MIN_NODES <= g.num_nodes <= MAX_NODES:
            records.append(dict(rec, status="out of range"))
            continue
        split = LAYER_FAMILY_SPLIT[family]
        batch = int(args[0].shape[0])
        g.meta.update(family=family, variant=name, batch=batch, mode=mode, split=split, description=notes,
                      framework="pytorch", torch_version=torch.__version__.split("+")[0])
        file_bytes = save_graph(g, os.path.join(out_dir, f"{g.name}.json.gz"))
        records.append(dict(rec, status="kept", path=f"{os.path.basename(out_dir)}/{g.name}.json.gz", family=family,
                            variant=name, batch=batch, mode=mode, split=split, granularity="layer",
                            edges=g.num_data_edges, control_edges=g.num_control_edges,
                            total_bytes=int(g.bytes.sum()), file_bytes=file_bytes))
    return records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.layer_graphs", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="data/graphs/layers", help="output folder")
    p.add_argument("--only", action="append", default=None, metavar="MODEL")
    p.add_argument("--manifest", default=None, help="default: <folder holding the graphs folder>/manifest_layers.json")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    out_abs = os.path.abspath(a.out)
    graphs_root = os.path.dirname(out_abs)
    manifest_path = a.manifest or os.path.join(os.path.dirname(graphs_root), "manifest_layers.json")
    t0 = time.perf_counter()
    kept: dict[str, dict] = {}
    for name in MODELS:
        if a.only and name not in a.only:
            continue
        try:
            recs = build(name, a.out)
        except Exception as e:  # a model that does not export: log it, keep building
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        for r in recs:
            print(f"[{time.perf_counter() - t0:5.0f}s] {r['name']}: {r['status']} ({r['nodes']} nodes)", flush=True)
            if r["status"] == "kept":
                kept[r["name"]] = {k: v for k, v in r.items() if k not in ("name", "status", "seconds")}
    kept = write_source_manifest(kept, a.out, manifest_path, a.only, description=__doc__.split("\n")[0],
                                 node_range=(MIN_NODES, MAX_NODES), split_policy="by family (LAYER_FAMILY_SPLIT)",
                                 families=LAYER_FAMILY_SPLIT)
    print(f"wrote {len(kept)} graphs to {a.out} and {manifest_path}; {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
