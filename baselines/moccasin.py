"""Moccasin (Bartan et al., "Moccasin: Efficient Tensor Rematerialization for Neural Networks",
ICML 2023): the least recomputation cost under a memory limit, for a FIXED order, by CP-SAT.

Moccasin's formulation: a fixed topological order; each node computed at most C = 2 times;
one interval per computation holding its output from that computation to its last reader; a
cumulative constraint keeps the bytes of the overlapping intervals within the limit M; the
objective is the total cost of the recomputations. Here it is written so that its solutions are
exactly SPEC.md section 3b's sequences "the fixed order with at most one recomputation of each
node inserted" (one device), the recomputations inserted before one position running in the
order's order (an input's before its reader's, as in section 5b):

Time. The order σ has positions 0..n-1 (P(v): v's). Time is a grid of W = n + 1 slots per
position: v's first computation runs at F(v) = W P(v) + n (the last slot of its position), a
recomputation of v inserted before position t at R(v) = W t + P(v). Slots before a position
thus run in σ's order, and every instance has a time of its own.

Variables, for each node v that may run again (not resident, not a graph output, not
`recompute: false`, bytes > 0; a node without bytes is never worth making again) and that has
room to: t[v] in [lo(v), hi(v)] or the sentinel n (not recomputed), b[v] <=> t[v] < n.
lo(v) = 1 + the first consumer's position (the first instance must keep a reader; SPEC 3b);
hi(v) = the last consumer's position, or a recomputable consumer's hi, whichever is larger
(the second instance must have a reader), and at most the first control successor's position
(every instance runs before it). A node with lo > hi never runs again.

Intervals (demand: bytes, one cumulative of capacity M - resident bytes):
- first instance of non-resident u: [F(u), E1[u]); a graph output (marked, or unread) to the
  horizon; its temp bytes in [F(u), F(u) + 1);
- second instance (optional, present iff b[u]): [R(u), E2[u]), its temp in [R(u), R(u) + 1).
Readers (SPEC 3b: an instance reads the latest instance of its input before it), for each data
edge u -> w, with u non-resident, not an output, bytes > 0:
- w's first instance reads u's second iff t[u] <= P(w) (literal c): E2[u] >= F(w) + 1 if c,
  else E1[u] >= F(w) + 1;
- w's recomputation (if b[w]) reads u's second iff t[w] >= t[u] (literal d; equal t: u's
  slot comes first): E2[u] >= R(w) + 1 if b[w] and d, else E1[u] >= R(w) + 1 if b[w];
- b[u] => some reader of the second instance: c for the last consumer, or b[w] and d for a
  consumer w that may run again.
Redundant cover constraints (they cut no solution; they give CP-SAT's linear relaxation a
bound): at a step t where the order without recomputation holds E bytes more than the
capacity, only a first instance made before t and read at or after t can leave t's count, and
only if its node runs again, while nothing else holds fewer bytes at t than without
recomputation: sum of bytes(v) b[v] over those v >= E (at the MAX_COVERS steps furthest over).
Objective: minimize sum over v of weight(v) b[v], weight = op_costs (the graph's `cost` or the
stand-in of SPEC 3b) scaled so the costliest recomputable node weighs WEIGHT_RESOLUTION
(rounded: the proven bound and optimum are those of the rounded weights); then, among
equal costs, the fewest recomputations (the objective is K * that sum + the count, K = one
more than the nodes that may run again), so a node of cost 0 does not run again for nothing.

The ends are only bounded below: a longer life only adds bytes, so the tight ends (each
instance freed after its last reader, as SPEC does) are feasible whenever any are. At every
integer time the cumulative counts the instances alive at the next step, so its maximum is
SPEC 3's peak of the sequence on one device for a graph without `reuse` fields: the model is
exact there. The field `reuse` (take-over) is ignored: it only lowers SPEC's bytes at a step,
so with it the model's memory is an upper bound on SPEC's (the model may call a limit
infeasible that some sequence meets; its solutions still fit). The returned Solution is
re-simulated by regal.simulate, as for every method.

CP-SAT's first guess (`hint=True`, the default; not in the paper, which starts from nothing) is
the cheaper of the two simple baselines' sequences over the same order (checkpoint-sqrt,
recompute-pointwise; section 5b's, which are of the model's form) that fits M in the model's
count, else the one nearest to fitting. Of the two, the cheaper whose real (SPEC 3b) peak fits M
is returned (info["source"] = "hint") when CP-SAT finds nothing cheaper: nothing in time
(UNKNOWN), or no model solution (INFEASIBLE; with `reuse` the model counts more than SPEC). When
neither CP-SAT nor a guess fits, the order is returned without recomputation, info["feasible"] =
False, with its real peak. When the order fits M as it is, no recomputation is needed: it is
returned at once (OPTIMAL, cost 0). info["status"] is always CP-SAT's, on the model.

Scale (2 workers, torch training graphs of data/graphs/torch, 30 s): ResNet-18 (553 nodes) at a
limit halfway between the lower bound and the traced order's peak: 11.6 % extra compute, the
cover bound 10.9 %; GPT-2 and BERT (4 layers, ~1,000 nodes) at the peak checkpoint-sqrt
reaches: 3-6 % extra (checkpoint-sqrt: 68-72 %), at the halfway limit often nothing found in
30 s (docs/recompute-baselines.md). XLA training graphs of 14-17k nodes: the model (~80k
variables) builds in ~8 s, and CP-SAT finds nothing in 20 s.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
from ortools.sat.python import cp_model
from ortools.util.python import sorted_interval_list

from regal.graph import Graph
from regal.recompute import op_costs, recompute_stats
from regal.simulate import simulate
from regal.solution import Solution
from regal_baselines.recompute import check_graph, check_one_device, finish, fixed_order

__all__ = ["solve", "MoccasinModel", "DEFAULT_TIME_LIMIT_S", "WEIGHT_RESOLUTION"]

DEFAULT_TIME_LIMIT_S = 10.0
WEIGHT_RESOLUTION = 1_000_000  # the costliest recomputable node's integer weight in the objective
METHOD = "moccasin"
MAX_COVERS = 256  # cover constraints: at most this many steps (the furthest over the limit)


class MoccasinModel:
    """The CP-SAT model of one graph, fixed order and memory limit (module docstring)."""

    def __init__(self, graph: Graph, order: np.ndarray, memory_limit_bytes: int, cost: np.ndarray):
        g = graph
        n = g.num_nodes
        self.g, self.n, self.order = g, n, np.asarray(order, dtype=np.int64)
        pos = np.empty(n, dtype=np.int64)
        pos[self.order] = np.arange(n)
        self.pos = pos
        W = n + 1
        F = W * pos + n
        H = W * n + n + 1
        nbytes = g.bytes.astype(np.int64)
        temp = g.temp_bytes.astype(np.int64)
        kept, res = g.kept, g.resident
        m = self.m = cp_model.CpModel()
        # which nodes may run again, and where (consumers first: they come later in the order)
        lo = np.zeros(n, dtype=np.int64)
        hi = np.full(n, -1, dtype=np.int64)
        may = np.zeros(n, dtype=bool)
        for v in self.order[::-1].tolist():
            if kept[v] or g.no_recompute[v] or nbytes[v] == 0:
                continue
            cons = g.consumers(v)
            pc = pos[cons]
            lo[v], hi[v] = int(pc.min()) + 1, int(pc.max())
            for w in cons[may[cons]].tolist():
                hi[v] = max(hi[v], hi[w])
            succ = g.ctrl_out_idx[g.ctrl_out_ptr[v]:g.ctrl_out_ptr[v + 1]]
            if succ.size:   # every instance before a control successor (SPEC 3b)
                hi[v] = min(hi[v], int(pos[succ].min()))
            may[v] = lo[v] <= hi[v]
        self.may = may
        self.t, self.b = {}, {}
        for v in np.flatnonzero(may).tolist():
            dom = sorted_interval_list.Domain.from_intervals([[int(lo[v]), int(hi[v])], [n, n]])
            t = self.t[v] = m.new_int_var_from_domain(dom, f"t{v}")
            b = self.b[v] = m.new_bool_var(f"b{v}")
            m.add(t <= int(hi[v])).only_enforce_if(b)
            m.add(t == n).only_enforce_if(~b)
        intervals, demands = [], []
        E1, E2 = {}, {}
        for v in np.flatnonzero(~res).tolist():
            f = int(F[v])
            if nbytes[v] > 0:
                if kept[v]:
                    intervals.append(m.new_fixed_size_interval_var(f, H - f, f"out{v}"))
                else:
                    E1[v] = m.new_int_var(f + 1, H, f"e1_{v}")
                    intervals.append(m.new_interval_var(f, E1[v] - f, E1[v], f"i1_{v}"))
                demands.append(int(nbytes[v]))
            if temp[v] > 0:
                intervals.append(m.new_fixed_size_interval_var(f, 1, f"tmp1_{v}"))
                demands.append(int(temp[v]))
            if may[v]:
                r = W * self.t[v] + int(pos[v])
                E2[v] = m.new_int_var(0, H, f"e2_{v}")
                size = m.new_int_var(1, H, f"s2_{v}")
                intervals.append(m.new_optional_interval_var(r, size, E2[v], self.b[v], f"i2_{v}"))
                demands.append(int(nbytes[v]))
                if temp[v] > 0:
                    intervals.append(m.new_optional_fixed_size_interval_var(r, 1, self.b[v], f"tmp2_{v}"))
                    demands.append(int(temp[v]))
        for u in E1:  # the readers of each instance
            cons = g.consumers(u).tolist()
            last = max(cons, key=lambda w: pos[w])
            second_read = []
            for w in cons:
                fw = int(F[w]) + 1
                if not may[u] or pos[w] < lo[u]:  # w's first instance reads u's first
                    m.add(E1[u] >= fw)
                else:
                    c = m.new_bool_var(f"c{u}_{w}")
                    m.add(self.t[u] <= int(pos[w])).only_enforce_if(c)
                    m.add(self.t[u] > int(pos[w])).only_enforce_if(~c)
                    m.add(E2[u] >= fw).only_enforce_if(c)
                    m.add(E1[u] >= fw).only_enforce_if(~c)
                    if w == last:
                        second_read.append(c)
                if not may[w]:
                    continue
                rw = W * self.t[w] + int(pos[w]) + 1
                bw = self.b[w]
                if not may[u]:
                    m.add(E1[u] >= rw).only_enforce_if(bw)
                    continue
                d = m.new_bool_var(f"d{u}_{w}")
                m.add(self.t[w] >= self.t[u]).only_enforce_if(d)
                m.add(self.t[w] < self.t[u]).only_enforce_if(~d)
                m.add(E2[u] >= rw).only_enforce_if([bw, d])
                m.add(E1[u] >= rw).only_enforce_if([bw, ~d])
                e = m.new_bool_var(f"r{u}_{w}")
                m.add_implication(e, bw)
                m.add_implication(e, d)
                second_read.append(e)
            if may[u]:
                m.add_bool_or([~self.b[u]] + second_read)
        self.capacity = int(memory_limit_bytes) - int(nbytes[res].sum())
        if intervals:
            m.add_cumulative(intervals, demands, self.capacity)
        self._covers(nbytes, temp)
        recomputable = np.flatnonzero(may)
        top = float(cost[recomputable].max()) if recomputable.size else 0.0
        self.scale = WEIGHT_RESOLUTION / top if top > 0 else 0.0
        self.weight = {v: int(round(float(cost[v]) * self.scale)) for v in recomputable.tolist()}
        self.ties = len(self.weight) + 1  # the count of recomputations breaks ties of cost
        m.minimize(sum((self.ties * self.weight[v] + 1) * self.b[v] for v in self.weight))

    def cost_of(self, objective: float) -> float:
        """The extra cost (op_costs units, the rounded weights') of a value of the objective (or of
        its bound: rounded down to the weights' units, so still a bound)."""
        return float(np.floor(objective / self.ties + 1e-9)) / self.scale if self.scale > 0 else 0.0

    def _covers(self, nbytes: np.ndarray, temp: np.ndarray) -> None:
        """Redundant cover constraints (module docstring): at each step t of the order over the
        capacity without recomputation (the MAX_COVERS furthest over), sum of bytes(v) b[v] over
        the nodes v that may run again and are held across t (made before t, read at or after t)
        >= the excess."""
        g, n, pos, m = self.g, self.n, self.pos, self.m
        run = np.flatnonzero(~g.resident & (nbytes > 0))
        last = np.full(n, -1, dtype=np.int64)
        for v in run.tolist():
            last[v] = n - 1 if g.kept[v] else int(pos[g.consumers(v)].max())
        diff = np.zeros(n + 1, dtype=np.int64)
        np.add.at(diff, pos[run], nbytes[run])
        np.add.at(diff, last[run] + 1, -nbytes[run])
        mem = np.cumsum(diff)[:n] + np.where(g.resident[self.order], 0, temp[self.order])
        over = np.flatnonzero(mem > self.capacity)
        over = over[np.argsort(-mem[over], kind="stable")[:MAX_COVERS]]  # the steps furthest over first
        may = np.flatnonzero(self.may)
        self.covers = 0
        for t in over.tolist():
            held = may[(pos[may] < t) & (last[may] >= t)]
            need = int(mem[t]) - self.capacity
            if held.shape[0] == 0:
                m.add_bool_or([])  # nothing held across t can go: no sequence fits
            else:
                m.add(sum(int(nbytes[v]) * self.b[v] for v in held.tolist()) >= need)
            self.covers += 1

    def hint(self, seq: np.ndarray) -> None:
        """A sequence of the model's form (the order with recomputations inserted before positions,
        as section 5b's `recompute_sequence` makes) as CP-SAT's first guess; a recomputation the
        model leaves out (a node without bytes) is left out of the guess."""
        at = insertion_points(self.order, self.pos, seq)
        for v, t in self.t.items():
            self.m.add_hint(t, at.get(v, self.n))
            self.m.add_hint(self.b[v], v in at)

    def extract(self, solver: cp_model.CpSolver) -> np.ndarray:
        """int32[m]: the fixed order with each recomputation inserted before its position t
        (several before one position in the order's order)."""
        before = [[] for _ in range(self.n)]
        for v, b in self.b.items():
            if solver.boolean_value(b):
                before[int(solver.value(self.t[v]))].append(v)
        seq = []
        for t, v in enumerate(self.order.tolist()):
            seq.extend(sorted(before[t], key=lambda x: self.pos[x]))
            seq.append(v)
        return np.asarray(seq, dtype=np.int32)


def insertion_points(order: np.ndarray, pos: np.ndarray, seq) -> dict[int, int]:
    """{node: position in `order` before which it runs again} of a sequence that is `order` with
    recomputations inserted (each node at most twice)."""
    seen, at, pending = set(), {}, []
    for x in np.asarray(seq).tolist():
        if x in seen:
            pending.append(x)
            continue
        seen.add(x)
        for v in pending:
            at[v] = int(pos[x])
        pending = []
    return at


class _Hint(NamedTuple):
    method: str
    sequence: np.ndarray
    extra_cost: float
    model_peak: int   # the model's count (reuse ignored)
    peak: int         # SPEC 3b's


def _hints(graph: Graph, order: np.ndarray) -> list[_Hint]:
    """The two simple baselines' sequences over `order` (checkpoint-sqrt, recompute-pointwise) that
    recompute something."""
    from regal.recompute import recompute_stats
    from regal.recompute_search import recompute_sequence
    from regal_baselines.recompute import pointwise_nodes, sqrt_checkpoints
    zeros = np.zeros(graph.num_nodes, dtype=np.int32)
    found = []
    for name, chosen in (("checkpoint-sqrt", ~sqrt_checkpoints(graph, order)[0]),
                         ("recompute-pointwise", pointwise_nodes(graph, order))):
        seq = recompute_sequence(graph, order, chosen)
        if seq.shape[0] > graph.num_nodes:
            found.append(_Hint(name, seq, recompute_stats(graph, seq).extra_cost, _model_peak(graph, seq),
                               int(simulate(graph, zeros, seq, 1).peak_bytes)))
    return found


def _model_peak(graph: Graph, seq: np.ndarray) -> int:
    """The peak the model counts for a sequence: SPEC 3b's with the field `reuse` ignored."""
    if not graph.has_reuse:
        return int(simulate(graph, np.zeros(graph.num_nodes, dtype=np.int32), seq, 1).peak_bytes)
    recs = [{k: val for k, val in rec.items() if k != "reuse"} for rec in graph.to_records()]
    plain = Graph.from_records(recs, name=graph.name)
    return int(simulate(plain, np.zeros(graph.num_nodes, dtype=np.int32), seq, 1).peak_bytes)


def _timed(graph: Graph, sol: Solution, device_model, limit: int) -> dict:
    """info["timed"]: the timed model (SPEC.md 4) of the sequence's instance graph, as regal's
    own runtime search with recomputation reports it (one device: the step time is the sum of the
    instances' costs)."""
    from regal.solution import instance_solution
    from regal.timed import check_device_model, simulate_timed, timed_info
    inst, isol = instance_solution(graph, sol)
    model = check_device_model(device_model, 1)
    sim = simulate_timed(inst, isol.placement, isol.order, 1, model)
    return timed_info(inst, sim, 1, model, limit)


def solve(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
          memory_limit_bytes=None, order=None, num_workers: int = 2, device_model=None,
          hint: bool = True, log: bool = False) -> Solution:
    """Moccasin: the least extra recomputation cost with peak <= memory_limit_bytes, over a fixed
    order (module docstring), one device.

    order: node ids or indices (default: node order when topological, else the topological
    order: `regal_baselines.recompute.traced_order`). time_limit_s: CP-SAT's wall time (default
    10 s). num_workers: CP-SAT threads. device_model: the timed model's, for info["timed"].
    hint: give CP-SAT the cheaper of checkpoint-sqrt's and recompute-pointwise's sequences over the
    order that fits the limit in the model's count (else the one nearest to fitting) as its
    first guess (info["hint"]); the cheaper of them whose real peak fits is returned when CP-SAT
    finds nothing cheaper (info["source"] = "hint"; otherwise "cpsat").
    Returns a Solution whose order may list nodes again (info["recompute"]); info: status
    (CP-SAT's on the model: OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN), feasible, source, objective
    and bound (extra cost, in the units of info["recompute"], of the model's rounded weights; with
    `reuse` the bound is the model's, not one of SPEC's problem), solve_seconds, model_peak_bytes
    (the model's count: the peak with `reuse` ignored), memory_limit_bytes, timed.
    """
    t0 = time.perf_counter()
    check_graph(graph, METHOD)
    check_one_device(devices, METHOD)
    if memory_limit_bytes is None:
        raise ValueError(f"{METHOD} needs memory_limit_bytes (the peak its recomputations must fit under)")
    from regal.timed import memory_limits
    limit = int(memory_limits(memory_limit_bytes, 1)[0])
    if time_limit_s is not None and (isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float))
                                     or not time_limit_s > 0):
        raise ValueError(f"{METHOD}: time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise ValueError(f"{METHOD}: num_workers must be a positive integer, got {num_workers!r}")
    fixed, source = fixed_order(graph, order, METHOD)
    cost, cost_model = op_costs(graph)
    info = {"seed": seed, "memory_limit_bytes": limit, "order_source": source, "cost_model": cost_model,
            "reuse": "ignored by the model (its memory is an upper bound on SPEC's)" if graph.has_reuse else "none"}
    zeros = np.zeros(graph.num_nodes, dtype=np.int32)
    plain_peak = int(simulate(graph, zeros, fixed, 1).peak_bytes)

    def done(seq, **more):
        sol = finish(graph, seq, METHOD, t0, {**info, **more})
        sol.info["timed"] = _timed(graph, sol, device_model, limit)
        return sol

    if plain_peak <= limit:
        return done(fixed, status="OPTIMAL", feasible=True, objective=0.0, bound=0.0, solve_seconds=0.0,
                    model_peak_bytes=_model_peak(graph, fixed), note="the order fits the limit without recomputation")
    t_build = time.perf_counter()
    built = MoccasinModel(graph, fixed, limit, cost)
    build_s = time.perf_counter() - t_build
    info.update(build_seconds=build_s, recomputable=int(built.may.sum()),
                num_variables=len(built.m.proto.variables), num_constraints=len(built.m.proto.constraints))
    if built.capacity < 0:  # the resident bytes alone are over the limit
        return done(fixed, status="INFEASIBLE", feasible=False, objective=None, bound=None, solve_seconds=0.0,
                    model_peak_bytes=None)
    hints = _hints(graph, fixed) if hint else []
    if hints:  # CP-SAT's guess: the cheapest that fits its count, else the nearest to fitting
        guess = min(hints, key=lambda h: (h.model_peak > limit, h.extra_cost if h.model_peak <= limit else h.model_peak))
        built.hint(guess.sequence)
        info["hint"] = {"method": guess.method, "extra_cost": float(guess.extra_cost),
                        "model_peak_bytes": int(guess.model_peak), "fits": guess.model_peak <= limit}
    fits = [h for h in hints if h.peak <= limit]  # what is returned if CP-SAT finds nothing cheaper
    fallback = min(fits, key=lambda h: h.extra_cost) if fits else None
    solver = cp_model.CpSolver()
    limit_s = DEFAULT_TIME_LIMIT_S if time_limit_s is None else float(time_limit_s)
    solver.parameters.max_time_in_seconds = max(0.1, limit_s - (time.perf_counter() - t0))
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed)
    solver.parameters.log_search_progress = bool(log)
    status = solver.solve(built.m)
    name = solver.status_name(status)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"{METHOD}: CP-SAT rejects the model of graph '{graph.name}': "
                           f"{built.m.validate().splitlines()[0]}")
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    objective = built.cost_of(solver.objective_value) if found else None
    bound = built.cost_of(solver.best_objective_bound) if found else None
    if found:
        seq = built.extract(solver)
        model_peak = _model_peak(graph, seq)
        if model_peak > limit:  # the model under-counts some sequence: a bug
            raise AssertionError(f"{METHOD}: graph '{graph.name}': the model's sequence holds {model_peak} bytes, "
                                 f"over the limit {limit}")
        if fallback is None or recompute_stats(graph, seq).extra_cost <= fallback.extra_cost:
            return done(seq, status=name, feasible=True, source="cpsat", objective=objective, bound=bound,
                        solve_seconds=solver.wall_time, model_peak_bytes=model_peak)
    if fallback is not None:
        return done(fallback.sequence, status=name, feasible=True, source="hint", objective=objective, bound=bound,
                    solve_seconds=solver.wall_time, model_peak_bytes=int(fallback.model_peak))
    return done(fixed, status=name, feasible=False, objective=None, bound=None, solve_seconds=solver.wall_time,
                model_peak_bytes=None)
