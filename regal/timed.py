"""The timed model (SPEC.md section 4; every choice the SPEC leaves open is in docs/timed-model.md).

A placement, a scheduling priority per node and a transfer priority per (node, device) run as an
event-driven simulation: each device runs one node at a time, `cost / speed` seconds, taking the
ready node of highest priority; a finished node's output goes to every other device that hosts a
consumer, over the link p -> q, one transfer at a time per link in transfer-priority order, each
taking `latency + bytes / bandwidth`; a copy occupies memory on its device from the transfer's
start. The result is the makespan and every device's peak memory over time (section 3's rules,
applied in event-time order).

- `DeviceModel`: bandwidth, latency, per-device speed, with the defaults stated below.
- `simulate_timed(graph, placement, order, devices, model, transfers=None)`: a schedule given as
  a placement and an order (the order's positions are the priorities, so a solution's own order
  reproduces its schedule exactly); `run_timed`: explicit priorities.
- The timed chromosome (section 5): `timed_chromosome_length`, `decode_timed`, `encode_timed`,
  `evaluate_population_timed` (parallel), and the runtime objective's `runtime_fitness`: the
  makespan when every device fits its memory limit, else a value above every feasible makespan
  that grows with the bytes over the limits.
- `regal.solution.timed_solution`: a `Solution` whose `info["timed"]` holds the makespan, the timed peaks, the
  memory limit, the device model and the transfer order (`solution.load_solution` re-checks it).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import NamedTuple

import numpy as np

from regal.kernels import timed as _timed
from regal.graph import Graph
from regal.simulate import check_schedule, kernel_graph

__all__ = ["DeviceModel", "TimedSimulation", "DEFAULT_BANDWIDTH_BYTES_PER_S", "DEFAULT_LATENCY_S",
           "simulate_timed", "run_timed", "timed_chromosome_length", "decode_timed", "encode_timed",
           "evaluate_population_timed", "runtime_fitness", "simulation_fitness", "makespan_bound", "memory_limits",
           "timed_info", "resimulate", "instance_schedule", "check_device_model", "excess_bytes", "parse_bytes",
           "parse_rate", "parse_seconds"]

#: Default link bandwidth: 100 GB/s per direction between any two devices (an NVLink-class link,
#: a tenth of the 1 TB/s memory bandwidth of the nominal device that `cost` is measured on,
#: `regal.hlo.COST_MODEL` and `regal._ops`).
DEFAULT_BANDWIDTH_BYTES_PER_S = 100e9
#: Default per-transfer latency: 5 microseconds (a device-to-device copy's launch and handshake).
DEFAULT_LATENCY_S = 5e-6


class DeviceModel(NamedTuple):
    """Devices and links of the timed model.

    bandwidth_bytes_per_s: every directed link p -> q (p != q), one transfer at a time.
    latency_s: added to every transfer. speed: per device, a multiple of the nominal device's
    speed (a node runs cost / speed seconds); None: 1.0 everywhere.
    """
    bandwidth_bytes_per_s: float = DEFAULT_BANDWIDTH_BYTES_PER_S
    latency_s: float = DEFAULT_LATENCY_S
    speed: tuple | None = None

    def validate(self, devices: int) -> "DeviceModel":
        """The model with its fields checked (ValueError naming the field) and speed as a tuple."""
        b, lat = self.bandwidth_bytes_per_s, self.latency_s
        if not _real(b) or not math.isfinite(b) or b <= 0:
            raise ValueError(f"device_model.bandwidth_bytes_per_s must be a finite number > 0, got {b!r}")
        if not _real(lat) or not math.isfinite(lat) or lat < 0:
            raise ValueError(f"device_model.latency_s must be a finite number >= 0, got {lat!r}")
        speed = self.speed
        if speed is None:
            speed = (1.0,) * devices
        else:
            try:
                speed = tuple(speed)
            except TypeError:
                raise ValueError(f"device_model.speed must be a list of {devices} numbers, got {speed!r}") from None
            if len(speed) != devices:
                raise ValueError(f"device_model.speed has {len(speed)} entries for {devices} devices")
            for k, s in enumerate(speed):
                if not _real(s) or not math.isfinite(s) or s <= 0:
                    raise ValueError(f"device_model.speed[{k}] must be a finite number > 0, got {s!r}")
        return DeviceModel(float(b), float(lat), tuple(float(s) for s in speed))

    def speeds(self, devices: int) -> np.ndarray:
        return np.asarray(self.validate(devices).speed, dtype=np.float64)

    def to_json(self, devices: int) -> dict:
        m = self.validate(devices)
        return {"bandwidth_bytes_per_s": m.bandwidth_bytes_per_s, "latency_s": m.latency_s, "speed": list(m.speed)}

    @classmethod
    def from_json(cls, doc, devices: int) -> "DeviceModel":
        if not isinstance(doc, dict):
            raise ValueError(f"device_model must be an object, got {type(doc).__name__}")
        unknown = set(doc) - {"bandwidth_bytes_per_s", "latency_s", "speed"}
        if unknown:
            raise ValueError(f"device_model has an unknown field {sorted(unknown)[0]!r}")
        return cls(doc.get("bandwidth_bytes_per_s", DEFAULT_BANDWIDTH_BYTES_PER_S),
                   doc.get("latency_s", DEFAULT_LATENCY_S), doc.get("speed")).validate(devices)

    def describe(self) -> str:
        """One line for reports: '100 GB/s links, 5 us latency, speeds 1, 1'."""
        sp = "" if self.speed is None or all(s == 1.0 for s in self.speed) else \
            ", speeds " + ", ".join(f"{s:g}" for s in self.speed)
        return f"{self.bandwidth_bytes_per_s / 1e9:g} GB/s links, {self.latency_s * 1e6:g} us latency{sp}"


def _real(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def check_device_model(model, devices: int) -> DeviceModel:
    """None -> the defaults; a dict -> its fields; a DeviceModel -> validated."""
    if model is None:
        return DeviceModel().validate(devices)
    if isinstance(model, dict):
        return DeviceModel.from_json(model, devices)
    if not isinstance(model, DeviceModel):
        raise TypeError(f"device_model must be a regal.timed.DeviceModel or a dict, got {type(model).__name__}")
    return model.validate(devices)


class TimedSimulation(NamedTuple):
    """What the timed model gives for one schedule (n nodes, d devices, T transfers)."""
    makespan_s: float
    peak_bytes: int                 # max over devices, over time
    device_peak_bytes: np.ndarray   # int64[d]
    order: np.ndarray               # int32[n] dispatch order: resident nodes, then as nodes start
    start_s: np.ndarray             # float64[n]
    finish_s: np.ndarray            # float64[n]
    transfer_node: np.ndarray       # int32[T] the tensor sent, transfers in the order they start
    transfer_device: np.ndarray     # int32[T] its destination
    transfer_start_s: np.ndarray    # float64[T]
    transfer_finish_s: np.ndarray   # float64[T]
    trace_s: np.ndarray | None = None      # float64[R] instants (when asked for: `trace=True`)
    trace_bytes: np.ndarray | None = None  # int64[R, d] every device's bytes from each instant on


# ---------------------------------------------------------------------------- simulation
def kernel_devices(model: DeviceModel, devices: int) -> _timed.TimedDevices:
    """The device model as the `regal.kernels.timed` kernels read it (model validated)."""
    return _timed.TimedDevices(model.speeds(devices), model.bandwidth_bytes_per_s, model.latency_s)


def run_timed(graph: Graph, placement, prio, tprio, devices: int, model: DeviceModel,
              trace: bool = False) -> TimedSimulation:
    """The timed model with explicit priorities, unchecked placement (int32[n] in range).

    prio: float64[n] (higher first); tprio: float64[n, d] (tprio[u, q]: the transfer of u to q).
    trace: also return the memory of every device over time (trace_s, trace_bytes).
    """
    n, d = graph.num_nodes, devices
    placement = np.ascontiguousarray(placement, dtype=np.int32)
    prio = np.ascontiguousarray(prio, dtype=np.float64)
    tprio = np.ascontiguousarray(tprio, dtype=np.float64).reshape(n, d)
    device_peak = np.empty(d, dtype=np.int64)
    start = np.zeros(n, dtype=np.float64)
    finish = np.zeros(n, dtype=np.float64)
    seq = np.full(n, -1, dtype=np.int32)
    tr_start = np.full(n * d, np.nan)
    tr_seq = np.full(n * d, -1, dtype=np.int32)
    rows = n * d + 1 if trace else 0
    trace_t = np.full(rows, np.nan)
    trace_m = np.zeros((rows, d), dtype=np.int64)
    rec = _timed.TimedRecord(device_peak, start, finish, seq, tr_start, tr_seq, trace_t, trace_m)
    makespan = _timed.simulate_timed(kernel_graph(graph), kernel_devices(model, d), placement, prio, tprio, rec)
    sim = _result(graph, d, model, float(makespan), device_peak, start, finish, seq, tr_start, tr_seq)
    if trace:
        used = int(np.count_nonzero(~np.isnan(trace_t)))
        sim = sim._replace(trace_s=trace_t[:used], trace_bytes=trace_m[:used])
    return sim


def _result(graph, d, model, makespan, device_peak, start, finish, seq, tr_start, tr_seq) -> TimedSimulation:
    assert (seq >= 0).all(), "every node of a DAG runs"
    order = np.argsort(seq, kind="stable").astype(np.int32)
    slots = np.flatnonzero(tr_seq >= 0)
    slots = slots[np.argsort(tr_seq[slots], kind="stable")]
    node = (slots // d).astype(np.int32)
    dst = (slots % d).astype(np.int32)
    tstart = tr_start[slots]
    tfinish = tstart + (model.latency_s + graph.bytes[node].astype(np.float64) / model.bandwidth_bytes_per_s)
    return TimedSimulation(makespan, int(device_peak.max()), device_peak, order, start, finish, node, dst,
                           tstart, tfinish)


def _rank_priorities(n: int, order: np.ndarray) -> np.ndarray:
    """float64[n]: higher for earlier positions of `order`."""
    prio = np.empty(n, dtype=np.float64)
    prio[order] = n - np.arange(n, dtype=np.float64)
    return prio


def _transfer_priorities(graph: Graph, order: np.ndarray, devices: int, transfers) -> np.ndarray:
    """float64[n, d]: by rank in `transfers` ((node, device) pairs, first = highest), or by default
    the producer's position in `order` (an earlier producer's tensor goes first)."""
    n = graph.num_nodes
    base = np.repeat(_rank_priorities(n, order)[:, None], devices, axis=1)
    if transfers is None:
        return base
    nodes, dsts = transfers
    nodes = np.asarray(nodes, dtype=np.int64)
    dsts = np.asarray(dsts, dtype=np.int64)
    tprio = base - (n + 1.0)  # unlisted transfers after every listed one, by producer position
    tprio[nodes, dsts] = (n + 1.0) + (nodes.shape[0] - np.arange(nodes.shape[0]))
    return tprio


def simulate_timed(graph: Graph, placement, order, devices: int, device_model: DeviceModel | dict | None = None,
                   transfers=None, trace: bool = False) -> TimedSimulation:
    """The timed model of a placement and an order (SPEC.md section 4).

    The order's positions are the scheduling priorities (earlier first). transfers: the order in
    which transfers take their links, as (node int[T], destination int[T]); None (or a transfer
    left out): by the producer's position in `order`. A TimedSimulation's own order and
    transfers, given back, reproduce its schedule exactly. trace: also the memory over time.
    """
    placement, order = check_schedule(graph, placement, order, devices)
    model = check_device_model(device_model, devices)
    if transfers is not None:
        nodes, dsts = (np.asarray(x) for x in transfers)
        if nodes.shape != dsts.shape or nodes.ndim != 1:
            raise ValueError("transfers must be two equal-length lists: nodes and destination devices")
        if nodes.size and (nodes.min() < 0 or nodes.max() >= graph.num_nodes or dsts.min() < 0
                           or dsts.max() >= devices):
            raise ValueError("transfers name a node or a device out of range")
        transfers = (nodes, dsts)
    return run_timed(graph, placement, _rank_priorities(graph.num_nodes, order),
                     _transfer_priorities(graph, order, devices, transfers), devices, model, trace)


# ---------------------------------------------------------------------------- chromosome
def timed_chromosome_length(num_nodes: int, devices: int) -> int:
    """n * (2d + 1): per node d affinities, one priority, d transfer priorities (SPEC.md section 5)."""
    return num_nodes * (2 * devices + 1)


def _check_timed_keys(graph: Graph, keys, devices: int) -> np.ndarray:
    keys = np.ascontiguousarray(keys, dtype=np.float64)
    want = timed_chromosome_length(graph.num_nodes, devices)
    if keys.shape[-1] != want:
        raise ValueError(f"a timed chromosome for {graph.num_nodes} nodes and {devices} devices has "
                         f"{want} keys, got {keys.shape[-1]}")
    return keys


def decode_timed(graph: Graph, keys, devices: int, device_model=None) -> tuple[np.ndarray, TimedSimulation]:
    """Decode one timed chromosome: (placement int32[n], its TimedSimulation).

    Layout, node-major: node v's row keys[v*(2d+1) : (v+1)*(2d+1)] holds its d device affinities,
    its scheduling priority, then the priorities of sending its output to devices 0..d-1 (the
    first d + 1 columns mean what they mean in the peak-memory chromosome, `regal.decode`).
    """
    keys = _check_timed_keys(graph, keys, devices)
    model = check_device_model(device_model, devices)
    n, d = graph.num_nodes, devices
    row = keys.reshape(n, 2 * d + 1)
    placement = np.argmax(row[:, :d], axis=1).astype(np.int32)  # argmax: the first maximum
    return placement, run_timed(graph, placement, row[:, d], row[:, d + 1:], d, model)


def encode_timed(placement, order, devices: int, transfers=None) -> np.ndarray:
    """A timed chromosome that decodes to exactly this placement, with priorities falling along
    `order` and transfer priorities falling along `transfers` ((node[T], device[T]) in the
    order they should take their links; None or left out: by the producer's position in order).
    Encoding a TimedSimulation's order and transfers reproduces its schedule."""
    placement = np.asarray(placement)
    order = np.asarray(order)
    n, d = placement.shape[0], devices
    keys = np.full((n, 2 * d + 1), 0.25)
    keys[np.arange(n), placement] = 0.75
    pos = np.empty(n, dtype=np.float64)
    pos[order] = np.arange(n)
    keys[:, d] = 1.0 - (pos + 1.0) / (n + 1.0)
    # transfers: listed ones in (0.5, 1), ranked; the rest in (0, 0.5), by producer position
    keys[:, d + 1:] = (0.5 * (1.0 - (pos + 1.0) / (n + 1.0)))[:, None]
    if transfers is not None:
        nodes, dsts = (np.asarray(x, dtype=np.int64) for x in transfers)
        T = nodes.shape[0]
        keys[nodes, d + 1 + dsts] = 1.0 - 0.5 * (np.arange(T) + 1.0) / (T + 1.0)
    return keys.reshape(-1)


def memory_limits(memory_limit_bytes, devices: int) -> np.ndarray:
    """int64[d] limits (-1: none) from None, one integer for every device, or one per device."""
    if memory_limit_bytes is None:
        return np.full(devices, -1, dtype=np.int64)
    vals = [memory_limit_bytes] * devices if np.ndim(memory_limit_bytes) == 0 else list(memory_limit_bytes)
    if len(vals) != devices:
        raise ValueError(f"memory_limit_bytes has {len(vals)} entries for {devices} devices")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 < v < 2**62:
            raise ValueError(f"memory_limit_bytes must be a positive integer number of bytes, got {v!r}")
    return np.asarray(vals, dtype=np.int64)


def makespan_bound(graph: Graph, devices: int, model: DeviceModel) -> float:
    """An upper bound on the makespan of any schedule: every node on the slowest device plus
    every possible transfer, one after another. (At every instant before the end some node or
    transfer runs: a ready node's device or a queued transfer's link is never idle.)"""
    speed = model.speeds(devices)
    compute = float(graph.cost[~graph.resident].sum()) / float(speed.min())
    fanout = np.minimum(np.diff(graph.out_ptr), devices - 1)
    sends = float((fanout * (model.latency_s + graph.bytes / model.bandwidth_bytes_per_s)).sum())
    return compute + sends


def runtime_fitness(makespan, excess, bound: float, limits: np.ndarray):
    """The runtime objective (lower is better): the makespan when no device is over its limit,
    else (2 bound + 1) (1 + excess / sum of limits), above every feasible makespan and growing
    with the bytes over the limits, so an infeasible schedule never beats a feasible one."""
    makespan = np.asarray(makespan, dtype=np.float64)
    excess = np.asarray(excess, dtype=np.float64)
    total = float(limits[limits >= 0].sum()) or 1.0
    return np.where(excess > 0, (2.0 * bound + 1.0) * (1.0 + excess / total), makespan)


def simulation_fitness(sim: TimedSimulation, bound: float, limits: np.ndarray) -> float:
    """`runtime_fitness` of one simulated schedule against int64[d] `limits` (-1: none)."""
    return float(runtime_fitness(sim.makespan_s, excess_bytes(sim.device_peak_bytes, limits), bound, limits))


def evaluate_population_timed(graph: Graph, population, devices: int, device_model=None,
                              memory_limit_bytes=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fitness float64[m], makespan float64[m], excess int64[m]) of population float64[m, n(2d+1)].

    Decoded in parallel on Numba's threads, each chromosome on its own (thread-count invariant).
    """
    population = _check_timed_keys(graph, population, devices)
    if population.ndim != 2:
        raise ValueError("population must be a 2-D array (individuals x keys)")
    model = check_device_model(device_model, devices)
    limits = memory_limits(memory_limit_bytes, devices)
    m = population.shape[0]
    makespan = np.empty(m, dtype=np.float64)
    excess = np.empty(m, dtype=np.int64)
    _timed.evaluate_population_timed(population, kernel_graph(graph), kernel_devices(model, devices), limits,
                                     makespan, excess)
    bound = graph.cached(("makespan_bound", devices, model), lambda: makespan_bound(graph, devices, model))
    return runtime_fitness(makespan, excess, bound, limits), makespan, excess


def excess_bytes(device_peak, limits: np.ndarray) -> int:
    over = np.where(limits >= 0, np.maximum(np.asarray(device_peak) - limits, 0), 0)
    return int(over.sum())


# ---------------------------------------------------------------------------- solutions
def timed_info(graph: Graph, sim: TimedSimulation, devices: int, model: DeviceModel,
               memory_limit_bytes=None) -> dict:
    """The `info["timed"]` block of a solution (docs/timed-model.md)."""
    limits = memory_limits(memory_limit_bytes, devices)
    ids = graph.ids
    return {
        "makespan_s": float(sim.makespan_s),
        "peak_bytes": int(sim.peak_bytes),
        "device_peak_bytes": [int(x) for x in sim.device_peak_bytes],
        "memory_limit_bytes": None if memory_limit_bytes is None else [int(x) for x in limits],
        "feasible": excess_bytes(sim.device_peak_bytes, limits) == 0,
        "device_model": model.to_json(devices),
        "transfers": [[ids[u], int(q)] for u, q in zip(sim.transfer_node, sim.transfer_device)],
    }


def instance_schedule(graph: Graph, placement, sequence, checked: bool = False) -> tuple[Graph, np.ndarray,
                                                                                       np.ndarray]:
    """(timed graph, int64[m] node of each instance, int32[m] instance placement) of a sequence
    with recomputations (SPEC.md sections 3b and 4): the instance graph
    (`regal.recompute.instance_graph`; checked=True: the sequence is known valid), plus what
    section 4 adds for the timed model: an instance after its node's first is ready only once
    every entry before it in the sequence on its device has started. On one device a node that
    has started and is not running has finished, so that rule is a control edge into the
    instance from each of those entries; from the previous recomputation on the device and the
    entries since (the earlier ones it waited for itself), O(m) edges. Simulated with
    `np.arange(m)` as its order, the sequence its dispatch priorities."""
    from regal.recompute import instance_graph
    inst, nodes = instance_graph(graph, sequence, checked=checked)
    place = np.asarray(placement, dtype=np.int32)[nodes]
    return _gated(inst, nodes, place), nodes, place


def _gated(inst: Graph, nodes: np.ndarray, place: np.ndarray) -> Graph:
    """The instance graph with section 4's gate edges into each recomputation (`instance_schedule`)."""
    m = nodes.shape[0]
    again = np.ones(m, dtype=bool)   # an instance after its node's first
    again[np.unique(nodes, return_index=True)[1]] = False
    runs = np.flatnonzero(~inst.resident)
    runs = runs[np.argsort(place[runs], kind="stable")]   # each device's entries, in sequence order
    if not again[runs].any():
        return inst
    dev = place[runs]
    pos = np.arange(runs.shape[0])
    head = np.r_[True, dev[1:] != dev[:-1]]   # a device's first entry
    lo = np.maximum.accumulate(np.where(head, pos, 0))   # the device's first entry's position
    rec = again[runs]
    # from the previous recomputation on the device (itself gated on what came before it), else
    # from the device's first entry, up to the recomputation
    prev_rec = np.maximum.accumulate(np.where(rec, pos, -1))
    prev_rec = np.r_[-1, prev_rec[:-1]]
    start = np.where(prev_rec >= lo, prev_rec, lo)[rec]
    cnt = pos[rec] - start
    dst = np.repeat(runs[rec], cnt)
    src = runs[np.repeat(start, cnt) + np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)]
    owner = np.concatenate([np.repeat(np.arange(m), np.diff(inst.ctrl_in_ptr)), dst])
    idx = np.concatenate([np.asarray(inst.ctrl_in_idx, dtype=np.int64), src])
    keep = np.lexsort((idx, owner))
    owner, idx = owner[keep], idx[keep]
    first = np.r_[True, (owner[1:] != owner[:-1]) | (idx[1:] != idx[:-1])]
    owner, idx = owner[first], idx[first]
    ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=m), out=ptr[1:])
    return dataclasses.replace(inst, ctrl_in_ptr=ptr, ctrl_in_idx=idx.astype(np.int32))


def resimulate(graph: Graph, solution, device_model=None, trace: bool = False) -> TimedSimulation:
    """The timed model of a Solution, with the transfer order its info["timed"] names (if any)
    and its device model unless another is given. A solution with recomputations (SPEC.md
    section 3b) runs as its instance graph with section 4's gates (`instance_schedule`),
    `order` its dispatch order."""
    placement, order = solution.placement, solution.order
    if order.shape[0] > graph.num_nodes:   # a Solution's order was checked when it was made
        graph, nodes, placement = instance_schedule(graph, placement, order, checked=True)
        order = np.arange(nodes.shape[0])
    timed = solution.info.get("timed") or {}
    d = solution.num_devices
    model = check_device_model(device_model if device_model is not None else timed.get("device_model"), d)
    transfers = None
    if timed.get("transfers") is not None:
        index = graph.index
        raw = timed["transfers"]
        try:
            nodes = [index[u] for u, _ in raw]
            dsts = [int(q) for _, q in raw]
        except (KeyError, TypeError, ValueError):
            raise ValueError("info.timed.transfers must be a list of [node id, device] pairs of this graph") from None
        transfers = (nodes, dsts)
    return simulate_timed(graph, placement, order, d, model, transfers, trace)


# ---------------------------------------------------------------------------- parsing (CLI)
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"


def parse_bytes(text: str) -> int:
    """'16GiB', '1.5 GB', '512M', '17179869184' -> bytes (KB/MB/GB/TB powers of 1000; KiB/MiB/GiB/TiB
    and K/M/G/T powers of 1024). ValueError (one line) for anything else."""
    m = re.fullmatch(_NUMBER + r"([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 16GiB, 1.5GB, 512MiB or a number of bytes)")
    value = float(m.group(1)) * _SIZE_UNITS[unit]
    if not math.isfinite(value) or value < 1 or value >= 2**62:
        raise ValueError(f"{text!r} is not a size between 1 byte and 4 EiB")
    return int(round(value))


def parse_rate(text: str) -> float:
    """'100GB/s', '25 GiB/s', '1e11' -> bytes per second (the units of `parse_bytes`, '/s' optional)."""
    s = str(text).strip()
    body = s[:-2] if s.lower().endswith("/s") else s
    try:
        value = float(parse_bytes(body)) if re.search(r"[A-Za-z]", body) else float(body)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} is not a bandwidth (e.g. 100GB/s, 25GiB/s or bytes per second)")
    return value


_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "ns": 1e-9}


def parse_seconds(text: str) -> float:
    """'5us', '0.01ms', '1e-5', '2 s' -> seconds (finite, >= 0)."""
    m = re.fullmatch(_NUMBER + r"(\S*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _TIME_UNITS:
        raise ValueError(f"{text!r} is not a time (e.g. 5us, 0.01ms or seconds)")
    return float(m.group(1)) * _TIME_UNITS[unit]
