"""What the backward recomputes, chosen by regal (the partitioner hook of `regal.torch.compile`).

AOTAutograd traces the forward and the backward of a compiled region as one joint graph and
splits it with a partitioner into a forward graph, which saves values, and a backward graph,
which reads them or computes them again. `tag_joint_graph` makes a regal `Graph` of the joint
graph, runs regal's search with recomputation on it (`regal.optimize(..., recompute_budget=B)`,
SPEC.md sections 3b and 5b) and writes its decision on the joint graph's nodes as selective
activation checkpointing does (`node.meta["recompute"]`, `torch.utils.checkpoint.CheckpointPolicy`):
a forward op regal runs again after the forward has ended is `MUST_RECOMPUTE`, a forward value
such a recomputation reads where the forward made it is `MUST_SAVE`. Inductor's partitioner
(`min_cut_rematerialization_partition`) honours both tags and decides the rest as it always does
(it recomputes cheap pointwise ops that fuse into their readers, which regal's graph cannot see).

The graph: the joint graph's parameters and inputs (`primals`) are resident; every op's bytes are
its output's (`_size_of`, the partitioner's own size, symbolic sizes at their hints); a view and
a `getitem` hold no bytes of their own and their readers read the value they alias as well; a
zero-byte `forward_done` node reads the forward's outputs and the backward's incoming gradients
(`tangents`) read it, so the backward runs after the forward as in the program; a random draw or
an op that writes an input may not run twice, nor may a convolution (below). Each op's cost is a roofline of the partitioner's
own runtime estimate (`torch._functorch.partitioners.estimate_runtime`: FLOPs by default) and the
bytes it reads and writes (`CompileConfig.flops_per_s`, `bytes_per_s`).

No convolution is recomputed. Inductor decides the memory layout of a compiled graph from its
forward convolutions alone (`GraphLowering.decide_layout_opt`: none, contiguous; on the CPU with
oneDNN, any, channels-last for the whole graph): a backward graph holds none unless one is
recomputed, and one recomputed convolution turns the whole backward channels-last. On the CPU a
grouped (depthwise) convolution's backward in channels-last then allocates a workspace that
neither regal's graph nor Inductor's estimate counts: 14.8 MB for one 5x5 depthwise convolution
of 576 channels at 2x2 (batch 8) against 0.4 MB contiguous, which made MNASNet-0.5's step 39 %
worse than torch.compile's (experiments/results/torch-compile/README.md).

`choose_partition` returns the lower of two partitions: Inductor's min-cut partition of the
untagged graph (torch.compile's own) and of the tagged one, each scored with regal's simulator
on the joint graph (`partition_peak`: the forward module's order, then the backward module's,
SPEC.md section 3b); a tie keeps torch.compile's.
"""

from __future__ import annotations

import operator
import time
from typing import NamedTuple

import numpy as np
import torch

from regal.graph import Graph


class JointResult(NamedTuple):
    """What the partitioner hook did on one joint graph (kept in `RegalCompiled.records`)."""
    nodes: int               # ops of the joint graph
    recompute: int           # forward ops tagged MUST_RECOMPUTE
    save: int                # forward values tagged MUST_SAVE
    model_peak_bytes: int    # regal's peak (SPEC.md section 3b) of its schedule of the joint graph
    flagship_peak_bytes: int  # the same without recomputation
    extra_fraction: float    # regal's extra compute, a fraction of the joint graph's cost
    seconds: float
    min_cut_model_bytes: int = -1   # regal's peak of torch.compile's own partition (partition_peak)
    tagged_model_bytes: int = -1    # regal's peak of the min-cut partition of the tagged graph
    adopted: bool = False           # the tagged partition was returned (lower than min-cut's own)


def _is_alias(node) -> bool:
    if node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    info = schema.returns[0].alias_info
    return info is not None and not info.is_write


#: ops never recomputed (module docstring: a recomputed convolution changes the backward's layout)
_NEVER_AGAIN = ("aten::convolution", "aten::_convolution", "aten::mkldnn_convolution", "aten::cudnn_convolution")


def _no_recompute(node) -> bool:
    target = node.target
    if getattr(target, "is_view", False):
        return False
    schema = getattr(target, "_schema", None)
    if schema is not None and schema.name in _NEVER_AGAIN:
        return True
    tags = getattr(target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return True
    return bool(schema is not None and schema.is_mutable)


def _cost(node, nbytes: int, config) -> float:
    from torch._functorch.partitioners import estimate_runtime
    try:
        flops = float(estimate_runtime(node))
    except Exception:  # noqa: BLE001 - an op the estimator cannot run is charged its bytes alone
        flops = 0.0
    return max(flops / config.flops_per_s, nbytes / config.bytes_per_s)


def joint_records(gm, num_fwd_outputs: int, config) -> tuple[list, dict, set]:
    """(records, fx node of each record id, the ids of the forward's ops) for the joint graph
    `gm` (module docstring)."""
    from torch._functorch.partitioners import _size_of
    graph = gm.graph
    out_node = next(n for n in graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    fw_outs = [o for o in outs[:num_fwd_outputs] if isinstance(o, torch.fx.Node)]
    grads = [o for o in outs[num_fwd_outputs:] if isinstance(o, torch.fx.Node)]
    fw = set()
    stack = list(fw_outs)
    while stack:
        n = stack.pop()
        if n in fw or n.op == "placeholder":
            continue
        fw.add(n)
        stack.extend(n.all_input_nodes)
    root = {}

    def base(n):
        if n not in root:
            ins = [a for a in n.all_input_nodes] if _is_alias(n) else []
            root[n] = base(ins[0]) if ins else n
        return root[n]

    kept = {base(o) for o in fw_outs + grads} | set(fw_outs) | set(grads)
    records, fx_of, size = [], {}, {}
    for n in graph.nodes:
        if n.op in ("output", "get_attr"):
            continue
        rec = {"id": n.name, "op": str(getattr(n.target, "__name__", n.target))}
        fx_of[n.name] = n
        alias = n.op == "call_function" and _is_alias(n)
        try:
            nbytes = 0 if alias else int(_size_of(n))
        except Exception:  # noqa: BLE001 - a value without a size (an opaque object) holds none here
            nbytes = 0
        size[n] = nbytes
        rec["bytes"] = nbytes
        if n.op == "placeholder":
            if "tangents" in str(n.target):
                rec["inputs"] = ["forward_done"]
            else:
                rec["resident"] = True
        else:
            inputs = []
            for u in n.all_input_nodes:
                for w in (u, base(u)):
                    if w.op != "get_attr" and w.name not in inputs:
                        inputs.append(w.name)
            rec["inputs"] = inputs
            if n not in fw:
                rec["control_inputs"] = ["forward_done"]
            if _no_recompute(n):
                rec["recompute"] = False
            moved = nbytes + sum(size.get(u, 0) for u in n.all_input_nodes)
            rec["cost"] = 0.0 if alias else _cost(n, moved, config)
        if n in kept:
            rec["output"] = True
        records.append(rec)
    records.append({"id": "forward_done", "op": "forward_done", "bytes": 0,
                    "inputs": list(dict.fromkeys(o.name for o in fw_outs))})
    return _topological(records), fx_of, {n.name for n in fw}


def _topological(records: list) -> list:
    """The records in a topological order (inputs and control inputs first), stable otherwise:
    the search's starts read the graph's own order."""
    import heapq
    position = {r["id"]: i for i, r in enumerate(records)}
    preds = [[position[u] for u in r.get("inputs", []) + r.get("control_inputs", [])] for r in records]
    succs = [[] for _ in records]
    for v, ps in enumerate(preds):
        for u in ps:
            succs[u].append(v)
    missing = [len(ps) for ps in preds]
    ready = [v for v, k in enumerate(missing) if k == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        v = heapq.heappop(ready)
        out.append(records[v])
        for w in succs[v]:
            missing[w] -= 1
            if missing[w] == 0:
                heapq.heappush(ready, w)
    return out


def tag_joint_graph(gm, num_fwd_outputs: int, recompute_budget: float, config) -> JointResult:
    """Search the joint graph `gm` (module docstring) and tag its forward ops; returns what was done."""
    from torch.utils.checkpoint import CheckpointPolicy

    from regal.flagship import optimize

    t0 = time.perf_counter()
    records, fx_of, fw = joint_records(gm, num_fwd_outputs, config)
    graph = Graph.from_records(records, name="joint_graph")
    solution = optimize(graph, 1, budget=config.evaluations, seed=config.seed, time_limit_s=config.time_limit_s,
                        recompute_budget=float(recompute_budget))
    seq = np.asarray(solution.order).tolist()
    boundary = seq.index(list(graph.ids).index("forward_done"))
    latest, again, read_late = {}, set(), set()
    for t, v in enumerate(seq):
        if t > boundary and v in latest:   # a recomputation in the backward: what it reads was saved
            again.add(v)
            for u in graph.inputs(v).tolist():
                if latest.get(u, -1) <= boundary:
                    read_late.add(u)
        latest[v] = t
    recompute = save = 0
    for v in range(graph.num_nodes):
        name = graph.ids[v]
        if name not in fw:
            continue
        node = fx_of[name]
        if node.op != "call_function" or _is_alias(node):
            continue
        if v in again and node.meta.get("recompute") is None:   # a tag the partitioner set itself stays
            node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
            recompute += 1
    for v in read_late:
        name = graph.ids[v]
        node = fx_of.get(name)
        if (name in fw and node is not None and node.op == "call_function" and not _is_alias(node)
                and v not in again and node.meta.get("recompute") is None):
            node.meta["recompute"] = CheckpointPolicy.MUST_SAVE
            save += 1
    stats = solution.info.get("recompute", {})
    return JointResult(len(records), recompute, save, int(solution.peak_bytes),
                       int(solution.info.get("flagship_peak_bytes", solution.peak_bytes)),
                       float(stats.get("extra_fraction", 0.0)), time.perf_counter() - t0)


def partition_sequence(graph: Graph, fx_of: dict, fw_module, bw_module) -> tuple[list, int]:
    """(the order on the joint graph `graph` that a partition runs, the number of joint nodes it
    misses): the parameters and inputs, the forward module's ops in its order, `forward_done`,
    the incoming gradients, then the backward module's ops in its order (an op of the forward's
    that the backward runs again is a recomputation). Node names are the joint graph's (the
    partitioner copies nodes with their names); a node of neither module is left out and counted."""
    index = {name: v for v, name in enumerate(graph.ids)}
    seq = [index[n] for n in graph.ids if n in fx_of and fx_of[n].op == "placeholder" and "tangents" not in n]
    for module in (fw_module, "forward_done", bw_module):
        if module == "forward_done":
            seq.append(index["forward_done"])
            seq += [index[n] for n in graph.ids if n in fx_of and fx_of[n].op == "placeholder" and "tangents" in n]
            continue
        seq += [index[n.name] for n in module.graph.nodes if n.op == "call_function" and n.name in index]
    return seq, graph.num_nodes - len(set(seq))


def partition_peak(gm, num_fwd_outputs: int, fw_module, bw_module, config) -> tuple[int, int, str]:
    """(regal's peak of the partition's order on the joint graph `gm` (SPEC.md section 3b), the
    joint nodes the partition's modules miss, "" or why the order is not a valid one (the peak
    then -1))."""
    from regal.simulate import ScheduleError, simulate
    records, fx_of, _ = joint_records(gm, num_fwd_outputs, config)
    in_forward = {n.name for n in fw_module.graph.nodes if n.op == "call_function"}
    for rec in records:   # a backward op that reads no incoming gradient may run in the forward (and be saved)
        if rec["id"] in in_forward:
            rec.pop("control_inputs", None)
    graph = Graph.from_records(records, name="joint_graph")
    seq, missing = partition_sequence(graph, fx_of, fw_module, bw_module)
    try:
        return int(simulate(graph, np.zeros(graph.num_nodes, dtype=np.int32), seq, 1).peak_bytes), missing, ""
    except ScheduleError as e:
        return -1, missing, str(e)


def choose_partition(gm, joint_inputs, kwargs: dict, own: tuple, recompute_budget: float, config):
    """((forward, backward) modules, JointResult): `own` is Inductor's min-cut partition of the
    untagged `gm` (torch.compile's own, already made); tag `gm` (`tag_joint_graph`), partition it
    again with min-cut and return the partition with the lower peak in regal's model
    (`partition_peak`), torch.compile's on a tie or where the tagged one is not a valid order."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    t0 = time.perf_counter()
    n = kwargs["num_fwd_outputs"]
    own_peak = partition_peak(gm, n, *own, config)[0]
    result = tag_joint_graph(gm, n, recompute_budget, config)
    if result.recompute == 0 and result.save == 0:   # no tag: the same partition as torch.compile's
        return own, result._replace(min_cut_model_bytes=own_peak, tagged_model_bytes=own_peak,
                                    seconds=time.perf_counter() - t0)
    tagged = min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
    tagged_peak = partition_peak(gm, n, *tagged, config)[0]
    adopted = 0 <= tagged_peak and (own_peak < 0 or tagged_peak < own_peak)
    return (tagged if adopted else own), result._replace(min_cut_model_bytes=own_peak, tagged_model_bytes=tagged_peak,
                                                        adopted=adopted, seconds=time.perf_counter() - t0)
