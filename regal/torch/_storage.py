"""The traced program's tensors by storage, for the placed plans of `regal.torch.dist`: which
FX node allocates, reads and writes (in place) which storage, from the fake tensors in
`meta["val"]`. The writes an op's schema does not declare are `regal.torch.UNDECLARED_WRITES`."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.fx

from regal.torch.importer import Traced, _written_args

# ---------------------------------------------------------------------------- storages


class _Tensor(NamedTuple):
    """One tensor in an FX node's value: where it sits in the value, and over which storage."""
    path: tuple                  # indices into nested tuples/lists; () for a lone tensor
    storage: int                 # storage index (`_Alias.nbytes`)
    dtype: Any
    size: tuple
    stride: tuple
    offset: int


class _Alias(NamedTuple):
    """The traced program's tensors by storage (from the fake tensors in `meta["val"]`)."""
    tensors: dict                # fx node -> [_Tensor]
    nbytes: list                 # storage -> bytes
    kind: list                   # storage -> "arg" (a placeholder's), "const" (get_attr) or "node"
    home_node: list              # storage -> regal node index of its producer
    creates: dict                # fx call node -> [storage] it allocates
    writes: dict                 # fx call node -> [storage] it writes in place
    reads: dict                  # fx call node -> [storage] its arguments' tensors are over
    regal: dict                  # fx node -> regal node index (placeholders, get_attr, regal calls)


def _flat_tensors(val, path=()):
    if isinstance(val, torch.Tensor):
        yield path, val
    elif isinstance(val, (tuple, list)):
        for i, x in enumerate(val):
            yield from _flat_tensors(x, path + (i,))


def _alias(traced: Traced) -> _Alias:
    graph, gm = traced.graph, traced.graph_module
    index = graph.index
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    regal = {ph: index[i] for ph, i in zip(phs, traced.arg_ids)}
    ids: dict = {}     # fake storage -> [storage index]: several for arguments passed twice (tied weights)
    al = _Alias({}, [], [], [], {}, {}, {}, regal)
    for n in gm.graph.nodes:
        if n.op == "get_attr" and str(n.target) in index:
            regal[n] = index[str(n.target)]
        elif n.op == "call_function" and n.name in index and not graph.resident[index[n.name]]:
            regal[n] = index[n.name]
        ts = []
        for path, t in _flat_tensors(n.meta.get("val")):
            key = t.untyped_storage()._cdata
            # Each placeholder is an argument of its own (a plan runs on a copy of each, as
            # `measure_peak` and the worker processes do; SPEC.md counts each resident node):
            # a tied weight passed under two names is two storages, one on each name's device.
            if key not in ids or n.op == "placeholder" and not any(s in al.creates.get(n, ()) for s in ids[key]):
                if n not in regal:
                    raise ValueError(f"FX node '{n.name}' makes a tensor but is no regal node")
                ids.setdefault(key, []).append(len(al.nbytes))
                al.nbytes.append(int(t.untyped_storage().nbytes()))
                al.kind.append({"placeholder": "arg", "get_attr": "const"}.get(n.op, "node"))
                al.home_node.append(_home(graph, n, path, regal[n]))
                al.creates.setdefault(n, []).append(ids[key][-1])
            s = _which(al, n, ids[key])
            ts.append(_Tensor(path, s, t.dtype, tuple(t.shape), tuple(t.stride()), int(t.storage_offset())))
        al.tensors[n] = ts
    for n in gm.graph.nodes:
        if n.op == "call_function" and n in regal:
            al.reads[n] = sorted({t.storage for a in n.all_input_nodes for t in al.tensors.get(a, ())})
            al.writes[n] = sorted({t.storage for a in _written_args(n) for t in al.tensors.get(a, ())})
    return al


def _home(graph, n, path: tuple, op: int) -> int:
    """The regal node whose bytes a new storage is: with `split_outputs`, output k of a
    multi-output op other than its largest is its alloc node `NAME:k`; else the op itself."""
    if path and n.op == "call_function":
        return graph.index.get(f"{n.name}:{path[0]}", op)
    return op


def _which(al: _Alias, n, candidates: list) -> int:
    """The storage index of a tensor over a fake storage that several arguments share: the one
    `n` makes, else the one one of its inputs holds (a view of the second name reads that one)."""
    if len(candidates) == 1:
        return candidates[0]
    made = [s for s in al.creates.get(n, ()) if s in candidates]
    if made:
        return made[0]
    for a in n.all_input_nodes:
        for t in al.tensors.get(a, ()):
            if t.storage in candidates:
                return t.storage
    return candidates[0]
