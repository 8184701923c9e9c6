"""Node records (the `nodes` of a `regal-graph/1` file) checked field by field, their edges as
CSR arrays, `GraphError`, and what importers share (`mark_outputs`); see `regal.graph`."""

from __future__ import annotations

from typing import Mapping, Sequence

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


def _csr(num_nodes: int, lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
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
