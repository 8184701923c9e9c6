"""Node records (the `nodes` of a `regal-graph/1` file) checked field by field, their edges as
CSR arrays, `GraphError`, and what importers share (`mark_outputs`); see `regal.graph`."""

from __future__ import annotations

import math
from itertools import chain
from typing import Mapping, NamedTuple, Sequence

import numpy as np


#: The most bytes a graph may hold: every node's bytes and temp_bytes together. Below 2**53 a
#: float64 (the BRKGA's fitness) holds every peak exactly, and no int64 sum can overflow; every
#: device peak is at most this total (a device holds each tensor at most once).
MAX_TOTAL_BYTES = 2**53 - 1


def check_devices(devices, name: str = "devices") -> int:
    """The device count as an int; ValueError naming `name` unless it is a positive integer."""
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise ValueError(f"{name} must be a positive integer, got {devices!r}")
    return int(devices)


class GraphError(ValueError):
    """A graph (file or in-memory) that breaks SPEC.md section 1; the message names the culprit."""


def csr(num_nodes: int, lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists]) if num_nodes else []
    idx = np.fromiter((u for x in lists for u in x), dtype=np.int32, count=int(ptr[-1]))
    return ptr, idx


def _transpose(num_nodes: int, ptr: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the reversed edges; each row lists sources in increasing node order."""
    dst = np.repeat(np.arange(num_nodes, dtype=np.int32), np.diff(ptr))
    order = np.lexsort((dst, idx))  # group by source, then by consumer index
    tptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(idx, minlength=num_nodes), out=tptr[1:])
    return tptr, dst[order].astype(np.int32)


def _union_csr(num_nodes: int, a_ptr: np.ndarray, a_idx: np.ndarray, b_ptr: np.ndarray,
               b_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR whose row v holds the sources of row v of `a` and of `b`, without repeats, increasing.
    Vectorized (issue 36): every (row, source) pair sorted, repeats dropped; O(e log e)."""
    rows = np.concatenate([np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(a_ptr)),
                           np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(b_ptr))])
    idx = np.concatenate([np.asarray(a_idx, dtype=np.int64), np.asarray(b_idx, dtype=np.int64)])
    keep = np.lexsort((idx, rows))
    rows, idx = rows[keep], idx[keep]
    first = np.ones(rows.shape[0], dtype=bool)
    first[1:] = (rows[1:] != rows[:-1]) | (idx[1:] != idx[:-1])
    rows, idx = rows[first], idx[first]
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=ptr[1:])
    return ptr, idx.astype(np.int32)


def _int_field(rec: Mapping, key: str, nid: str, source: str, required: bool) -> int:
    if key not in rec:
        if required:
            raise GraphError(f"{source}: node {nid!r} has no '{key}'")
        return 0
    x = rec[key]
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, float) and not x.is_integer()):
        raise GraphError(f"{source}: node {nid!r}: '{key}' must be a non-negative integer, got {x!r}")
    if x < 0:
        raise GraphError(f"{source}: node {nid!r}: '{key}' must be a non-negative integer, got {x!r}")
    if x > MAX_TOTAL_BYTES:
        raise GraphError(f"{source}: node {nid!r}: '{key}' is too large ({x!r} > 2**53 - 1)")
    return int(x)


def _id_list(rec: Mapping, key: str, nid: str, index: Mapping[str, int], source: str) -> list[int]:
    raw = rec.get(key, [])
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise GraphError(f"{source}: node {nid!r}: '{key}' must be a list of node ids")
    try:  # a valid list checked in bulk (issue 36: the loop below was a third of a 300K-node load)
        out = [index[u] for u in raw if type(u) is str]
        if len(out) == len(raw) and len(set(out)) == len(out) and index[nid] not in out:
            return out
    except (KeyError, TypeError):
        pass
    out = []
    seen = set()
    for u in raw:
        if not isinstance(u, str):
            raise GraphError(f"{source}: node {nid!r}: '{key}' holds {u!r}, not a node id")
        if u not in index:
            raise GraphError(f"{source}: node {nid!r}: {key[:-1].replace('_', ' ')} {u!r} does not exist")
        if u in seen:
            raise GraphError(f"{source}: node {nid!r}: '{key}' lists {u!r} twice")
        if u == nid:
            raise GraphError(f"{source}: the graph has a cycle through node {nid!r}: {nid!r} -> {nid!r}")
        seen.add(u)
        out.append(index[u])
    return out


def _reuse_list(rec: Mapping, nid: str, index: Mapping[str, int], inputs: list[int], source: str) -> list[int]:
    """The node's `reuse` field as node indices: a list of its own data inputs, each once."""
    raw = rec["reuse"]
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise GraphError(f"{source}: node {nid!r}: 'reuse' must be a list of input ids, got {raw!r}")
    out: list[int] = []
    for u in raw:
        if not isinstance(u, str):
            raise GraphError(f"{source}: node {nid!r}: 'reuse' holds {u!r}, not a node id")
        if u not in index or index[u] not in inputs:
            raise GraphError(f"{source}: node {nid!r}: 'reuse' lists {u!r}, which is not one of its data inputs")
        if index[u] in out:
            raise GraphError(f"{source}: node {nid!r}: 'reuse' lists {u!r} twice")
        out.append(index[u])
    return out


_NO_IDS: list = []   # the default of a missing id list, shared: a new [] per record costs 0.1 s per 100K


class Fields(NamedTuple):
    """The node records' fields as arrays (n = len(records)); edges as CSR (`csr`'s dtypes)."""
    index: dict          # node id -> index
    bytes: np.ndarray    # int64[n]
    temp: np.ndarray     # int64[n]
    cost: np.ndarray     # float64[n]
    resident: np.ndarray  # bool[n]
    output: np.ndarray   # bool[n]
    ops: list            # str, n of them
    data_in: tuple       # (ptr int64[n + 1], idx int32[e])
    ctrl_in: tuple
    reuse: tuple
    no_recompute: np.ndarray  # bool[n]: the records that say "recompute": false (SPEC.md section 1)


def bulk_fields(nodes: Sequence) -> Fields | None:
    """Every record's fields checked column by column (issue 36: the record-by-record checks
    took 20-29 us per node): the Fields when every record is a dict holding only plainly valid
    values (integers as ints, lists as lists); None for anything else, valid or not, so that
    `record_fields` decides and names the culprit with its own message. Linear in the records
    and edges, but for sorting the (node, input) pairs to find repeats."""
    index = _bulk_index(nodes)
    if index is None:
        return None
    try:
        scalars = _scalar_columns(nodes)
        if scalars is None:
            return None
        data_in, ctrl_in = (_id_column([rec.get(key, _NO_IDS) for rec in nodes], index) for key in
                            ("inputs", "control_inputs"))
        if data_in is None or ctrl_in is None or (scalars[3] & ((np.diff(data_in[0]) > 0) |
                                                                 (np.diff(ctrl_in[0]) > 0))).any():
            return None  # an invalid id list, or a resident node with inputs
        reuse = _reuse_column(nodes, index, data_in)
        recompute = [rec.get("recompute", True) for rec in nodes]
        if not set(map(type, recompute)) <= {bool}:
            return None
    except (KeyError, TypeError, OverflowError, ValueError):  # a missing key, an id that is none
        return None
    return None if reuse is None else Fields(index, *scalars, data_in, ctrl_in, reuse,
                                             ~np.array(recompute, dtype=bool))


def _bulk_index(nodes: Sequence) -> dict | None:
    """Node id -> index, when every record is a dict with a distinct non-empty str id."""
    if set(map(type, nodes)) != {dict}:
        return None
    ids = [rec.get("id") for rec in nodes]
    if set(map(type, ids)) != {str} or not all(ids) or not _utf8("".join(ids)):
        return None
    index = dict(zip(ids, range(len(ids))))
    return index if len(index) == len(ids) else None


def _scalar_columns(nodes: Sequence) -> tuple | None:
    """(bytes, temp, cost, resident, output, ops) as in `Fields`, when every value is plainly
    valid and the bytes add up to at most MAX_TOTAL_BYTES."""
    nbytes = _int_column([rec["bytes"] for rec in nodes])
    temp = _int_column([rec.get("temp_bytes", 0) for rec in nodes])
    if nbytes is None or temp is None or \
            int(nbytes.sum(dtype=object)) + int(temp.sum(dtype=object)) > MAX_TOTAL_BYTES:
        return None
    cost = [rec.get("cost", 0.0) for rec in nodes]
    resident, output = ([rec.get(key, False) for rec in nodes] for key in ("resident", "output"))
    ops = [rec.get("op", "op") for rec in nodes]
    if not (set(map(type, cost)) <= {int, float} and set(map(type, resident)) <= {bool}
            and set(map(type, output)) <= {bool} and set(map(type, ops)) <= {str}):
        return None
    cost = np.array(cost, dtype=np.float64)
    if not (np.isfinite(cost) & (cost >= 0)).all():
        return None
    return nbytes, temp, cost, np.array(resident, dtype=bool), np.array(output, dtype=bool), ops


def record_fields(nodes: Sequence, source: str) -> Fields:
    """The records' fields checked record by record: GraphError on the first invalid one, with a
    message that names it."""
    index = _record_index(nodes, source)
    n = len(nodes)
    nbytes = np.zeros(n, dtype=np.int64)
    temp = np.zeros(n, dtype=np.int64)
    cost = np.zeros(n, dtype=np.float64)
    resident = np.zeros(n, dtype=bool)
    output = np.zeros(n, dtype=bool)
    no_recompute = np.zeros(n, dtype=bool)
    ops: list[str] = []
    data_in: list[list[int]] = []
    ctrl_in: list[list[int]] = []
    reuse: list[list[int]] = []
    total = 0
    for i, rec in enumerate(nodes):
        nid = rec["id"]
        nbytes[i] = _int_field(rec, "bytes", nid, source, required=True)
        temp[i] = _int_field(rec, "temp_bytes", nid, source, required=False)
        total += int(nbytes[i]) + int(temp[i])
        if total > MAX_TOTAL_BYTES:
            raise GraphError(f"{source}: node {nid!r}: the graph's bytes and temp_bytes add up to more "
                             f"than {MAX_TOTAL_BYTES:,} (2**53 - 1), the most regal computes exactly")
        c = rec.get("cost", 0.0)
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
            raise GraphError(f"{source}: node {nid!r}: 'cost' must be a finite number >= 0, got {c!r}")
        cost[i] = float(c)
        r = rec.get("resident", False)
        if not isinstance(r, bool):
            raise GraphError(f"{source}: node {nid!r}: 'resident' must be true or false, got {r!r}")
        resident[i] = r
        o = rec.get("output", False)
        if not isinstance(o, bool):
            raise GraphError(f"{source}: node {nid!r}: 'output' must be true or false, got {o!r}")
        output[i] = o
        rc = rec.get("recompute", True)
        if not isinstance(rc, bool):
            raise GraphError(f"{source}: node {nid!r}: 'recompute' must be true or false, got {rc!r}")
        no_recompute[i] = not rc
        op = rec.get("op", "op")
        if not isinstance(op, str):
            raise GraphError(f"{source}: node {nid!r}: 'op' must be a string, got {op!r}")
        ops.append(op)
        data_in.append(_id_list(rec, "inputs", nid, index, source))
        ctrl_in.append(_id_list(rec, "control_inputs", nid, index, source))
        if r and (data_in[-1] or ctrl_in[-1]):
            raise GraphError(f"{source}: node {nid!r} is resident but has inputs")
        reuse.append(_reuse_list(rec, nid, index, data_in[-1], source) if "reuse" in rec else [])

    return Fields(index, nbytes, temp, cost, resident, output, ops, csr(n, data_in), csr(n, ctrl_in),
                  csr(n, reuse), no_recompute)


def _record_index(nodes: Sequence, source: str) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, rec in enumerate(nodes):
        if type(rec) is not dict and not isinstance(rec, Mapping):  # a dict skips the ABC check
            raise GraphError(f"{source}: node #{i} is not an object")
        nid = rec.get("id")
        if not isinstance(nid, str) or not nid:
            raise GraphError(f"{source}: node #{i} has no string 'id'")
        if nid in index:
            raise GraphError(f"{source}: duplicate node id {nid!r}")
        if not _utf8(nid):
            raise GraphError(f"{source}: node id {nid!r} is not valid Unicode (a lone surrogate)")
        index[nid] = i
    return index


def _int_column(values: list) -> np.ndarray | None:
    """int64[n] of non-negative ints of at most MAX_TOTAL_BYTES; None unless all are (an integral
    float such as 4.0 is left to the record checks, which accept it)."""
    if not set(map(type, values)) <= {int}:
        return None
    out = np.array(values, dtype=np.int64)
    if not ((out >= 0) & (out <= MAX_TOTAL_BYTES)).all():
        return None
    return out


def _id_column(lists: list, index: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """CSR (ptr int64[n + 1], idx int32[e]) of lists of node ids; None unless every entry is a
    list of existing ids, none twice in a list, none the record's own (KeyError, TypeError on
    an id that is not one)."""
    if not set(map(type, lists)) <= {list}:
        return None
    n = len(lists)
    lens = np.fromiter(map(len, lists), dtype=np.int64, count=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    idx = np.fromiter(map(index.__getitem__, chain.from_iterable(lists)), dtype=np.int64, count=int(ptr[-1]))
    rows = np.repeat(np.arange(n, dtype=np.int64), lens)
    if (idx == rows).any():
        return None
    pairs = np.sort(rows * n + idx)
    if (pairs[1:] == pairs[:-1]).any():
        return None
    return ptr, idx.astype(np.int32)


def _reuse_column(nodes: Sequence, index: Mapping[str, int], data_in: tuple) -> tuple | None:
    """CSR of the `reuse` fields; None unless each is a list of the record's own data inputs,
    each once."""
    n = len(nodes)
    rows = np.fromiter((i for i, rec in enumerate(nodes) if "reuse" in rec), dtype=np.int64)
    lists = [nodes[i]["reuse"] for i in rows.tolist()]
    if not set(map(type, lists)) <= {list}:
        return None
    lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    idx = np.fromiter(map(index.__getitem__, chain.from_iterable(lists)), dtype=np.int64, count=int(lens.sum()))
    pairs = np.repeat(rows, lens) * n + idx
    in_ptr, in_idx = data_in
    if not np.isin(pairs, np.repeat(np.arange(n, dtype=np.int64), np.diff(in_ptr)) * n + in_idx).all():
        return None
    pairs = np.sort(pairs)
    if (pairs[1:] == pairs[:-1]).any():
        return None
    counts = np.zeros(n, dtype=np.int64)
    counts[rows] = lens
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, idx.astype(np.int32)


def mark_outputs(records: list[dict], outputs) -> None:
    """For importers: mark the records at indices `outputs` (what the graph returns) `output`,
    resident ones excepted (never freed anyway), and drop them from every `reuse` list (an
    output's buffer is never taken over). `reuse` entries are indices or ids, as `outputs` are."""
    returned = set(outputs)
    for i in returned:
        if not records[i].get("resident"):
            records[i]["output"] = True
    ids = {records[i]["id"] for i in returned}
    for r in records:
        if "reuse" in r:
            keep = [u for u in r["reuse"] if u not in returned and u not in ids]
            if keep:
                r["reuse"] = keep
            else:
                del r["reuse"]


def _utf8(text: str) -> bool:
    """Whether `text` can be written as UTF-8 (JSON's "\\ud800" reads as a lone surrogate, which cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
