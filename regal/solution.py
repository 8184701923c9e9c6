"""`Solution`: what every solver returns, and the `regal-solution/1` file (SPEC.md section 2).

A Solution is always built by `make_solution`, which re-simulates the placement and order with
`regal.simulate`, so its peak is the SPEC.md section 3 value and never a number carried from
inside a search. `load_solution` reads a file from any tool, checks it against the graph and
rejects it, with a one-line reason, when it is not a valid schedule or claims a wrong peak.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from regal._io import FileNotFound, atomic_text, open_text, read_json
from regal.graph import Graph
from regal.simulate import ScheduleError, simulate
from regal.timed import DeviceModel, TimedSimulation, memory_limits, resimulate, timed_info

__all__ = ["FORMAT", "Solution", "SolutionError", "make_solution", "load_solution", "solution_from_json",
           "timed_solution", "instance_solution"]

FORMAT = "regal-solution/1"


class SolutionError(ValueError):
    """A solution file that is malformed or does not fit its graph; the message says why."""


class SolutionFileNotFound(FileNotFound, SolutionError):
    """A solution file that does not exist: a SolutionError and a FileNotFoundError (an OSError)."""


@dataclass(frozen=True, eq=False)
class Solution:
    """A placement and global order with their simulated peak memory.

    placement: int32[n] device of each node; order: int32[n] node indices, topological, or
    int32[m > n] with recomputations (SPEC.md section 3b: a node listed again runs again);
    device_peak_bytes: int64[num_devices]; info: solver-specific extras (seed, bound, status...).
    """
    graph_name: str
    node_ids: tuple
    num_devices: int
    placement: np.ndarray
    order: np.ndarray
    peak_bytes: int
    device_peak_bytes: np.ndarray
    method: str
    evaluations: int = 0
    seconds: float = 0.0
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        # Python numbers, whoever built it (issue 55): `json.dumps` of a field, or of `info`,
        # never meets a NumPy scalar or array (`placement`, `order`, `device_peak_bytes` stay arrays)
        for name, kind in (("num_devices", int), ("peak_bytes", int), ("evaluations", int), ("seconds", float)):
            value = getattr(self, name)
            if isinstance(value, (np.integer, np.floating, np.bool_)):
                object.__setattr__(self, name, kind(value))
        object.__setattr__(self, "info", _python_numbers(self.info))

    @property
    def ids(self) -> tuple:
        """The node ids, index by index: the name `Graph.ids` has (`node_ids` is the same)."""
        return self.node_ids

    @property
    def recomputes(self) -> bool:
        """Whether the order runs some node more than once (SPEC.md section 3b)."""
        return self.order.shape[0] > len(self.node_ids)

    def device_orders(self) -> list[list[str]]:
        """Each device's nodes in the order it runs them: `order` split by `placement`
        (list k: the ids of device k's nodes)."""
        out: list[list[str]] = [[] for _ in range(self.num_devices)]
        for v in self.order.tolist():
            out[int(self.placement[v])].append(self.node_ids[v])
        return out

    def to_json(self) -> dict:
        doc = {
            "format": FORMAT,
            "graph": self.graph_name,
            "devices": int(self.num_devices),
            "placement": dict(zip(self.node_ids, self.placement.tolist())),
            "order": [self.node_ids[v] for v in self.order.tolist()],
            "peak_bytes": int(self.peak_bytes),
            "device_peak_bytes": [int(x) for x in self.device_peak_bytes],
            "method": self.method,
            "evaluations": int(self.evaluations),
            "seconds": round(float(self.seconds), 6),
        }
        if self.info:
            doc["info"] = _jsonable(self.info)
        return doc

    def save(self, path: str | os.PathLike) -> None:
        """Write `regal-solution/1` JSON (gzip-compressed when the path ends in .gz)."""
        with atomic_text(path) as f:
            f.write(_dumps(self.to_json()))
            f.write("\n")


def _dumps(doc: dict) -> str:
    """`json.dumps(doc, indent=1)`, the same text, with the per-node fields ("placement", a dict,
    and "order", a list of strings) rendered by C's string encoder instead of the indenting
    encoder, which is pure Python (issue 36: 0.74 -> 0.57 s at 1M nodes, written after the search)."""
    big = [key for key in ("placement", "order") if doc.get(key)]
    text = json.dumps({k: (0 if k in big else v) for k, v in doc.items()}, indent=1)
    enc = json.encoder.encode_basestring_ascii
    parts, at = [], 0
    for key in big:
        # a top-level field: a raw newline and one space of indent occur nowhere else in the text
        field = f"\n {enc(key)}: 0"
        start = text.index(field, at) + len(field) - 1
        value = doc[key]
        if isinstance(value, dict):
            part = "{\n" + ",\n".join([f"  {enc(k)}: {int(v)}" for k, v in value.items()]) + "\n }"
        else:
            part = "[\n" + ",\n".join(["  " + enc(v) for v in value]) + "\n ]"
        parts += [text[at:start], part]
        at = start + 1
    parts.append(text[at:])
    return "".join(parts)


def _python_numbers(x: Any) -> Any:
    """`x` with every NumPy scalar a Python number and every NumPy array a list, through dicts,
    lists and tuples; anything else as it is (NaN stays NaN: `_jsonable` is the file's)."""
    if isinstance(x, dict):
        return {k: _python_numbers(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        out = [_python_numbers(v) for v in x]
        return out if isinstance(x, list) else tuple(out)
    if isinstance(x, (np.ndarray, np.generic)):
        return x.tolist()
    return x


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        x = float(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def make_solution(graph: Graph, placement, order, devices: int, method: str,
                  evaluations: int = 0, seconds: float = 0.0, info: Mapping | None = None) -> Solution:
    """Validate and simulate a placement and order; the Solution carries the simulated peak. An
    order with recomputations (SPEC.md section 3b) gets info["recompute"] (`RecomputeStats`)."""
    sim = simulate(graph, placement, order, devices)
    info = dict(info or {})
    if np.shape(order)[0] > graph.num_nodes:
        from regal.recompute import recompute_stats
        info["recompute"] = recompute_stats(graph, order).to_json()
    return Solution(graph_name=graph.name, node_ids=graph.ids, num_devices=int(devices),
                    placement=np.asarray(placement, dtype=np.int32).copy(),
                    order=np.asarray(order, dtype=np.int32).copy(), peak_bytes=sim.peak_bytes,
                    device_peak_bytes=sim.device_peak_bytes, method=method,
                    evaluations=int(evaluations), seconds=float(seconds), info=info)


def solution_from_json(graph: Graph, doc: Any, source: str = "solution") -> Solution:
    """Check a parsed `regal-solution/1` document against `graph` and re-simulate it.

    Raises `SolutionError` (one line, naming the node or field) when the document is malformed,
    is not a valid schedule of the graph, or claims a peak the simulation does not give.
    """
    def fail(msg: str):
        raise SolutionError(f"{source}: {msg}")

    claimed, d = _check_header(graph, doc, fail)
    placement = _read_placement(graph, doc.get("placement"), d, fail)
    order = _read_order(graph, doc.get("order"), fail)
    try:
        sol = make_solution(graph, placement, order, d, method=str(doc.get("method", "unknown")),
                            evaluations=int(doc.get("evaluations") or 0),
                            seconds=float(doc.get("seconds") or 0.0), info=doc.get("info") or {})
    except ScheduleError as e:
        fail(str(e))
    if claimed != sol.peak_bytes:
        fail(f"claims peak_bytes {claimed} but the simulation gives {sol.peak_bytes}")
    claimed_dev = doc.get("device_peak_bytes")
    if claimed_dev is not None and list(claimed_dev) != [int(x) for x in sol.device_peak_bytes]:
        fail(f"claims device_peak_bytes {list(claimed_dev)} but the simulation gives "
             f"{[int(x) for x in sol.device_peak_bytes]}")
    if isinstance(sol.info.get("timed"), Mapping):
        _check_timed(graph, sol, sol.info["timed"], fail)
    if doc.get("memory_plan") is not None:  # the optional offsets (regal.memory_plan, issue 35)
        from regal.memory_plan import check_plan_json
        inst, isol = instance_solution(graph, sol)  # with recomputations: instance ids ("id#2") name the buffers
        try:
            check_plan_json(inst, isol.placement, isol.order, sol.num_devices, doc["memory_plan"])
        except ValueError as e:
            fail(str(e))
    return sol


def _check_header(graph: Graph, doc: Any, fail) -> tuple[int, int]:
    """The document's format, graph name and scalar fields checked; (claimed peak, devices)."""
    if not isinstance(doc, Mapping):
        fail("not a regal-solution/1 document (top level is not an object)")
    if doc.get("format") != FORMAT:
        fail(f"not a {FORMAT} file (format is {doc.get('format')!r})")
    if "graph" in doc and doc["graph"] != graph.name:
        fail(f"is a solution of graph {doc['graph']!r}, not of {graph.name!r}")
    for key, kind in (("device_peak_bytes", list), ("info", Mapping), ("method", str)):
        if doc.get(key) is not None and not isinstance(doc[key], kind):
            fail(f"'{key}' must be a {'list' if kind is list else 'string' if kind is str else 'object'}, "
                 f"got {type(doc[key]).__name__}")
    claimed = doc.get("peak_bytes")
    if claimed is None:
        fail("'peak_bytes' is missing (the peak the schedule claims, SPEC.md section 2)")
    if isinstance(claimed, bool) or not isinstance(claimed, int) or claimed < 0:
        fail(f"'peak_bytes' must be a non-negative integer number of bytes, got {claimed!r} "
             f"({type(claimed).__name__})")
    for key in ("evaluations", "seconds"):
        x = doc.get(key)
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0):
            fail(f"'{key}' must be a non-negative number, got {x!r}")
    d = doc.get("devices")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        fail(f"'devices' must be a positive integer, got {d!r}")
    if d > graph.num_nodes:
        fail(f"'devices' is {d:,}, more than the graph's {graph.num_nodes:,} nodes can use")
    return claimed, d


def _read_placement(graph: Graph, raw_place: Any, d: int, fail) -> np.ndarray:
    """int64[n]: the device of every node, from the 'placement' object."""
    index = graph.index
    if not isinstance(raw_place, Mapping):
        fail("'placement' must be an object mapping node ids to devices")
    placement = np.full(graph.num_nodes, -1, dtype=np.int64)
    for nid, dev in raw_place.items():
        if nid not in index:
            fail(f"placement names node {nid!r}, which is not in graph {graph.name!r}")
        if isinstance(dev, bool) or not isinstance(dev, int):
            fail(f"node {nid!r} is placed on {dev!r}, not a device number")
        if not 0 <= dev < d:
            fail(f"node {nid!r} is placed on device {dev}, outside 0..{d - 1}")
        placement[index[nid]] = dev
    unplaced = np.flatnonzero(placement < 0)
    if unplaced.size:
        fail(f"node {graph.ids[unplaced[0]]!r} is not placed ({unplaced.size} unplaced)")
    return placement


def _read_order(graph: Graph, raw_order: Any, fail) -> np.ndarray:
    """int64[m]: the node indices of the 'order' list: each node once, or (SPEC.md section 3b) a
    sequence that runs some nodes again, checked by the simulation."""
    index = graph.index
    if not isinstance(raw_order, list):
        fail("'order' must be a list of node ids")
    seen = set()
    for nid in raw_order:
        if not isinstance(nid, str) or nid not in index:
            fail(f"order names node {nid!r}, which is not in graph {graph.name!r}")
        seen.add(nid)
    if len(seen) != graph.num_nodes:
        missing = next(nid for nid in graph.ids if nid not in seen)
        fail(f"order misses node {missing!r} ({graph.num_nodes - len(seen)} missing)")
    return np.fromiter((index[nid] for nid in raw_order), dtype=np.int64, count=len(raw_order))


def _check_timed(graph: Graph, sol: Solution, timed: Mapping, fail) -> None:
    """A runtime solution's info["timed"] (regal.timed.timed_info) must be what the timed model
    gives for its placement, order, transfer order and device model."""
    try:
        sim = resimulate(graph, sol)
        limits = memory_limits(timed.get("memory_limit_bytes"), sol.num_devices)
    except (ValueError, TypeError) as e:
        fail(f"info.timed: {str(e).splitlines()[0]}")
    claimed = timed.get("makespan_s")
    if claimed is not None and claimed != sim.makespan_s:
        fail(f"claims makespan_s {claimed} but the timed model gives {sim.makespan_s}")
    claimed = timed.get("device_peak_bytes")
    if claimed is not None and list(claimed) != [int(x) for x in sim.device_peak_bytes]:
        fail(f"claims timed device_peak_bytes {list(claimed)} but the timed model gives "
             f"{[int(x) for x in sim.device_peak_bytes]}")
    feasible = bool(np.all((limits < 0) | (sim.device_peak_bytes <= limits)))
    if timed.get("feasible") is not None and timed["feasible"] != feasible:
        fail(f"claims feasible {timed['feasible']} but the timed model gives {feasible}")


def timed_solution(graph: Graph, placement, sim: TimedSimulation, devices: int, model: DeviceModel,
                   method: str, memory_limit_bytes=None, evaluations: int = 0, seconds: float = 0.0,
                   info: dict | None = None):
    """A Solution of a timed schedule: its order is the dispatch order (which reproduces the
    schedule), `peak_bytes` the section 3 value of that placement and order as for every
    solution, and info["timed"] the section 4 values (`timed_info`)."""
    info = dict(info or {})
    info["timed"] = timed_info(graph, sim, devices, model, memory_limit_bytes)
    return make_solution(graph, placement, sim.order, devices, method=method, evaluations=evaluations,
                         seconds=seconds, info=info)


def load_solution(path: str | os.PathLike, graph: Graph) -> Solution:
    """Read a `regal-solution/1` file and check it against `graph` (see `solution_from_json`).

    The two arguments may come in either order, `load_solution(graph, path)` too: one is a
    `Graph`, the other a path (a TypeError says so when neither or both are)."""
    if isinstance(path, Graph) and not isinstance(graph, Graph):
        path, graph = graph, path
    if not isinstance(graph, Graph) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_solution takes a solution file's path and a regal.Graph (in either order), got "
                        f"{type(path).__name__} and {type(graph).__name__}")
    p = os.fspath(path)
    try:
        with open_text(p) as f:
            doc = read_json(f)
    except FileNotFoundError:
        raise SolutionFileNotFound(p) from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as e:
        raise SolutionError(f"{p}: not a JSON file ({type(e).__name__})") from None
    except RecursionError:
        raise SolutionError(f"{p}: not a {FORMAT} file (JSON nested too deep)") from None
    return solution_from_json(graph, doc, source=p)


def instance_solution(graph: Graph, solution):
    """(instance graph, the Solution on it): a solution with recomputations seen as a schedule of
    its instance graph (each instance once, in `order`'s order, on its node's device), for what
    reads schedules without repeats (the allocation, the memory plan, the packer, the timed
    model). A solution without repeats comes back as it is, with `graph`."""
    if solution.order.shape[0] <= graph.num_nodes:
        return graph, solution
    from regal.recompute import instance_graph
    inst, nodes = instance_graph(graph, solution.order, checked=True)   # checked when the Solution was made
    sol = make_solution(inst, solution.placement[nodes], np.arange(nodes.shape[0]), solution.num_devices,
                        method=solution.method, evaluations=solution.evaluations, seconds=solution.seconds,
                        info=solution.info)
    return inst, sol
