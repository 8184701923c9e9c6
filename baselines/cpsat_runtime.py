"""CP-SAT with intervals for the runtime objective (SPEC.md section 4, docs/timed-model.md).

The model (OR-Tools CP-SAT, small graphs):
- a device per node (`x[v, k]`, one true); resident nodes run no time and hold their bytes on
  their device for the whole run;
- per compute node an optional interval on each device, `cost / speed[k]` long, with
  `NoOverlap` per device: one node at a time;
- per tensor `u` and device `q` a transfer (`y[u, q]`: u is sent to q, true when a consumer of u
  is on q and u is not) on the link from u's device to q, `latency + bytes / bandwidth` long,
  after u finishes and before every consumer of u on q starts; `NoOverlap` per link;
- every data and control edge: the consumer starts after the producer finishes;
- with a memory limit, `Cumulative` per device with capacity the limit, section 4's memory
  rules as intervals: a node's output from its start until its last consumer on its device has
  finished and every transfer of it has arrived (never freed if nobody reads it or it is marked
  `output`, a graph output: its home copy lasts to the end), its temp bytes while it runs, a
  copy on another device from its transfer's start until its last consumer there has finished;
- objective: the makespan, the latest finish.

Times are integer ticks of `horizon / TICKS` seconds, durations and start times rounded down, so
every schedule of the timed model is a solution of the model (floor(a) + floor(b) <= floor(a +
b)) and CP-SAT's proven bound, in ticks times the tick, is a lower bound on the makespan of every
schedule (`info["bound_s"]`). With a memory limit this holds only for graphs without `reuse`
fields: the model does not take buffers over (it counts more bytes than section 4 would), so
for those the bound is not reported.

CP-SAT's schedule is then replayed by the timed model itself (its placement, the nodes
prioritised by CP-SAT's start times, the transfers by theirs), which starts every task as soon
as it can (non-delay): the replay's makespan is what is reported, as for every solver. The model
is hinted with HEFT's schedule (`regal.timed_heuristics.heft_schedule`) when that fits the limit;
the HEFT solution is returned (info["source"] = "hint") when CP-SAT finds nothing better.

A replay need not keep CP-SAT's memory: it starts tasks earlier than CP-SAT's times where a
device or a link is idle, so values live at other times, and a schedule within the limit in the
model can break it replayed (16-node graphs of tests/test_cpsat_runtime.py, the limit 0.9 of
HEFT's peak: 10 of 39 runs, OPTIMAL ones too). So every schedule CP-SAT finds is replayed (a
solution callback), and the best replay within the limit is the one returned as "cpsat"; when
none is within it, the replay with the least excess competes with the hint on the timed
fitness, and, chosen, is returned as "cpsat-over-limit" (its `timed` block says not feasible):
a schedule whose replay breaks the limit is never returned as within it.
"""

from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from regal.graph import Graph, check_devices
from regal.solution import Solution, timed_solution
from regal.timed import (check_device_model, excess_bytes, makespan_bound, memory_limits, simulation_fitness,
                         simulate_timed)

__all__ = ["solve"]

DEFAULT_TIME_LIMIT_S = 10.0
TICKS = 1_000_000_000  # the horizon in ticks: the model's time resolution


class _Model:
    """The CP-SAT model of one graph, devices, device model and limits (module docstring)."""

    def __init__(self, graph: Graph, d: int, model, limits: np.ndarray | None):
        g = graph
        n = g.num_nodes
        self.g, self.d, self.n = g, d, n
        self.horizon_s = makespan_bound(g, d, model) * 1.001 + 1e-12
        self.tick = self.horizon_s / TICKS
        H = TICKS + 1
        speed = model.speeds(d)
        m = self.m = cp_model.CpModel()
        res = g.resident
        dur = np.floor(np.where(res[:, None], 0.0, g.cost[:, None] / speed[None, :]) / self.tick).astype(np.int64)
        comm = np.floor((model.latency_s + g.bytes / model.bandwidth_bytes_per_s) / self.tick).astype(np.int64)
        self.x = [[m.new_bool_var(f"x{v}_{k}") for k in range(d)] for v in range(n)]
        for v in range(n):
            m.add_exactly_one(self.x[v])
        self.s = [m.new_int_var(0, 0 if res[v] else H, f"s{v}") for v in range(n)]
        self.e = [m.new_int_var(0, 0 if res[v] else H, f"e{v}") for v in range(n)]
        on_device = [[] for _ in range(d)]
        self.runs = {}
        for v in np.flatnonzero(~res).tolist():
            for k in range(d):
                iv = m.new_optional_interval_var(self.s[v], int(dur[v, k]), self.e[v], self.x[v][k], f"run{v}_{k}")
                on_device[k].append(iv)
                self.runs[v, k] = iv
        for k in range(d):
            m.add_no_overlap(on_device[k])
        for v in range(n):  # every edge, data and control: after the producer
            for u in g.pred_idx[g.pred_ptr[v]:g.pred_ptr[v + 1]].tolist():
                m.add(self.s[v] >= self.e[u])
        # transfers: y[u, q] (u sent to q), on the link p(u) -> q
        self.y, self.t, self.f = {}, {}, {}
        links = {(p, q): [] for p in range(d) for q in range(d) if p != q}
        for u in range(n):
            consumers = g.out_idx[g.out_ptr[u]:g.out_ptr[u + 1]].tolist()
            if not consumers or d == 1:
                continue
            for q in range(d):
                y = self.y[u, q] = m.new_bool_var(f"y{u}_{q}")
                m.add_implication(y, self.x[u][q].Not())
                t = self.t[u, q] = m.new_int_var(0, H, f"t{u}_{q}")
                f = self.f[u, q] = m.new_int_var(0, H, f"f{u}_{q}")
                m.add(t >= self.e[u])
                for v in consumers:
                    m.add_bool_or([y, self.x[v][q].Not(), self.x[u][q]])  # a consumer on q, u elsewhere
                    m.add(self.s[v] >= f).only_enforce_if([self.x[v][q], self.x[u][q].Not()])
                for p in range(d):
                    if p == q:
                        continue
                    z = m.new_bool_var(f"z{u}_{p}_{q}")
                    m.add_bool_and([self.x[u][p], y]).only_enforce_if(z)
                    m.add_bool_or([z, self.x[u][p].Not(), y.Not()])
                    links[p, q].append(m.new_optional_interval_var(t, int(comm[u]), f, z, f"send{u}_{p}_{q}"))
        for ivs in links.values():
            m.add_no_overlap(ivs)
        self.makespan = m.new_int_var(0, H, "makespan")
        compute = np.flatnonzero(~res).tolist()
        if compute:
            m.add_max_equality(self.makespan, [self.e[v] for v in compute])
        else:
            m.add(self.makespan == 0)
        m.minimize(self.makespan)
        if limits is not None:
            self._memory(limits, H)

    def _memory(self, limits: np.ndarray, H: int) -> None:
        """Section 4's memory as Cumulative per device (module docstring)."""
        g, d, m = self.g, self.d, self.m
        nbytes, temp = g.bytes.astype(np.int64), g.temp_bytes.astype(np.int64)
        demand = [[] for _ in range(d)]
        for u in range(self.n):
            consumers = g.out_idx[g.out_ptr[u]:g.out_ptr[u + 1]].tolist()
            if nbytes[u] > 0:  # the home copy
                h = m.new_int_var(0, H, f"h{u}")
                m.add(h >= self.e[u])
                if not consumers or g.resident[u] or g.output[u]:
                    m.add(h == H)  # outputs (read or not) and resident home copies are never freed
                for k in range(d):
                    for v in consumers:
                        m.add(h >= self.e[v]).only_enforce_if([self.x[u][k], self.x[v][k]])
                    if (u, k) in self.f:
                        m.add(h >= self.f[u, k]).only_enforce_if(self.y[u, k])
                    size = m.new_int_var(0, H, f"hs{u}_{k}")
                    iv = m.new_optional_interval_var(self.s[u], size, h, self.x[u][k], f"home{u}_{k}")
                    demand[k].append((iv, int(nbytes[u])))
                for q in range(d):  # the copies
                    if (u, q) not in self.y:
                        continue
                    c = m.new_int_var(0, H, f"c{u}_{q}")
                    for v in consumers:
                        m.add(c >= self.e[v]).only_enforce_if(self.x[v][q])
                    size = m.new_int_var(0, H, f"cs{u}_{q}")
                    iv = m.new_optional_interval_var(self.t[u, q], size, c, self.y[u, q], f"copy{u}_{q}")
                    demand[q].append((iv, int(nbytes[u])))
            if temp[u] > 0 and not g.resident[u]:
                for k in range(d):
                    demand[k].append((self.runs[u, k], int(temp[u])))
        for k in range(d):
            if demand[k]:
                m.add_cumulative([iv for iv, _ in demand[k]], [b for _, b in demand[k]], int(limits[k]))

    def hint(self, placement: np.ndarray, sim) -> None:
        """HEFT's timed schedule as the search's first guess (placement, starts, transfers)."""
        for v in range(self.n):
            for k in range(self.d):
                self.m.add_hint(self.x[v][k], int(placement[v] == k))
            if not self.g.resident[v]:
                self.m.add_hint(self.s[v], int(sim.start_s[v] // self.tick))
        sent = set(zip(sim.transfer_node.tolist(), sim.transfer_device.tolist()))
        for (u, q), y in self.y.items():
            self.m.add_hint(y, int((u, q) in sent))

    def extract(self, solver) -> tuple[np.ndarray, np.ndarray, tuple]:
        """(placement, order by CP-SAT's start times, transfers by theirs) to replay; `solver`: the
        CpSolver after its search, or a solution callback (the solution it is called with)."""
        g, n = self.g, self.n
        placement = np.array([next(k for k in range(self.d) if solver.value(self.x[v][k])) for v in range(n)],
                             dtype=np.int32)
        topo = np.empty(n, dtype=np.int64)
        topo[g.topological_order()] = np.arange(n)
        start = np.array([solver.value(self.s[v]) for v in range(n)], dtype=np.int64)
        compute = np.flatnonzero(~g.resident)
        order = np.concatenate([np.flatnonzero(g.resident),
                                compute[np.lexsort((topo[compute], start[compute]))]]).astype(np.int32)
        sends = [(solver.value(self.t[u, q]), u, q) for (u, q), y in self.y.items() if solver.value(y)]
        sends.sort()
        transfers = (np.array([u for _, u, _ in sends], dtype=np.int64), np.array([q for _, _, q in sends], dtype=np.int64))
        return placement, order, transfers


class _Replays(cp_model.CpSolverSolutionCallback):
    """Every schedule CP-SAT finds, replayed by the timed model (module docstring): the best replay
    within the limits, and the best of all, by the timed fitness."""

    def __init__(self, built: _Model, model, limits: np.ndarray):
        super().__init__()
        self.built, self.model, self.limits = built, model, limits
        self.bound = makespan_bound(built.g, built.d, model)
        self.count = self.within = 0
        self.best_within = self.best = None   # (fitness, placement, sim)

    def on_solution_callback(self) -> None:
        placement, order, transfers = self.built.extract(self)
        sim = simulate_timed(self.built.g, placement, order, self.built.d, self.model, transfers=transfers)
        fit = simulation_fitness(sim, self.bound, self.limits)
        self.count += 1
        if excess_bytes(sim.device_peak_bytes, self.limits) == 0:
            self.within += 1
            if self.best_within is None or fit < self.best_within[0]:
                self.best_within = (fit, placement, sim)
        if self.best is None or fit < self.best[0]:
            self.best = (fit, placement, sim)


def solve(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
          device_model=None, memory_limit_bytes=None, num_workers: int = 2, log: bool = False) -> Solution:
    """Shortest makespan under a memory limit by CP-SAT with intervals (module docstring).

    time_limit_s: CP-SAT's wall time, default 10 s. Returns the replayed Solution (runtime
    solution file, `info["timed"]`); info: status, bound_s (a proven lower bound on every
    schedule's makespan, when valid), optimal (the returned makespan is within the model's
    rounding, a tick per task, of that bound, within the limit), cp_makespan_s (CP-SAT's own
    schedule), hint_makespan_s, source ("cpsat": a replay within the limit; "cpsat-over-limit": the
    least excess, none within it; "hint"), replays (CP-SAT's schedules replayed) and
    replays_within_limit, model size, timings.
    """
    t0 = time.perf_counter()
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a regal.Graph, got {type(graph).__name__}")
    d = check_devices(devices)
    model = check_device_model(device_model, d)
    limits = None if memory_limit_bytes is None else memory_limits(memory_limit_bytes, d)
    from regal.timed_heuristics import heft_schedule
    hint_placement, hint_sim = heft_schedule(graph, d, model)
    built = _Model(graph, d, model, limits)
    hint_fits = limits is None or excess_bytes(hint_sim.device_peak_bytes, limits) == 0
    if hint_fits:
        built.hint(hint_placement, hint_sim)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.5, (DEFAULT_TIME_LIMIT_S if time_limit_s is None
                                                      else float(time_limit_s)) - (time.perf_counter() - t0))
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed)
    solver.parameters.log_search_progress = bool(log)
    lim = limits if limits is not None else np.full(d, -1, dtype=np.int64)
    replays = _Replays(built, model, lim)
    status = solver.solve(built.m, replays)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and replays.best is not None
    bound_valid = limits is None or not graph.has_reuse
    info = {"objective": "runtime", "seed": seed, "status": solver.status_name(status),
            "tick_s": built.tick, "hint_makespan_s": float(hint_sim.makespan_s), "hint_fits": bool(hint_fits),
            "num_variables": len(built.m.proto.variables), "num_constraints": len(built.m.proto.constraints),
            "solve_seconds": solver.wall_time, "num_workers": int(num_workers),
            "bound_s": float(solver.best_objective_bound * built.tick) if bound_valid and status != cp_model.UNKNOWN
            else None}
    if status == cp_model.INFEASIBLE:
        info["bound_s"] = None  # no schedule fits the limit (for the model, which ignores reuse)
    info["replays"], info["replays_within_limit"] = replays.count, replays.within
    choice = (hint_placement, hint_sim, "hint")
    if found:
        info["cp_makespan_s"] = float(solver.objective_value * built.tick)
        best = replays.best_within or replays.best
        if best[0] <= simulation_fitness(hint_sim, replays.bound, lim):
            within = excess_bytes(best[2].device_peak_bytes, lim) == 0
            choice = (best[1], best[2], "cpsat" if within else "cpsat-over-limit")
    placement, sim, info["source"] = choice
    # optimal up to the model's rounding: each task's duration lost less than a tick
    slack = (graph.num_nodes + len(built.y)) * built.tick
    info["optimal"] = bool(info["bound_s"] is not None and sim.makespan_s <= info["bound_s"] + slack
                           and (limits is None or excess_bytes(sim.device_peak_bytes, limits) == 0))
    return timed_solution(graph, placement, sim, d, model, method="cpsat-runtime", memory_limit_bytes=memory_limit_bytes,
                          seconds=time.perf_counter() - t0, info=info)
