"""CP-SAT baseline: placement and order together, minimum peak memory (SPEC.md section 3).

An OR-Tools CP-SAT model in the style of the OR-Tools scheduling samples (REGAL's Table 1 row
"CP-SAT"). Steps are positions in the global order; every tensor copy is an interval of steps
on one device; a cumulative constraint per device caps the bytes of overlapping intervals at
the peak variable, which is minimised. A heuristic solution (plain BRKGA, or a given `hint`)
is passed to CP-SAT as a hint and is returned when CP-SAT finds nothing better.

The model, for m non-resident nodes (resident nodes run first and have no position):
    pos[v] in 0..m-1, all different; pos[u] < pos[v] for data and control edges
    x[v, k]      v placed on device k, exactly one per node (absent when d = 1)
    home copy of non-resident u on p(u):   [pos[u], home_end[u]]        bytes(u)
        home_end[u] >= pos[c] for every consumer c on p(u)
        home_end[u] >= first[u, q] for every other device q hosting a consumer
        no consumers, or marked `output`: home_end[u] = m - 1 (a graph output is never freed)
    copy of u on q != p(u), present iff a consumer of u is on q:
        [first[u, q], last[u, q]],  first/last = min/max of pos over consumers on q (exact)
    resident u on p(u): the whole horizon;   temp of v: [pos[v], pos[v]]  on p(v)
    cumulative(device k, capacity = peak); minimise peak; peak >= graph.lower_bound(d)

Why the cumulative is exact. Every interval on device k starts at step 0 (resident) or at a
step that runs on k (the node itself, or the first consumer on k that copies it in), so the
bytes on k at any step t are at most the bytes at the last k-step <= t: the max over all times
equals the max over k's own steps, which is what SPEC records as peak[k]. With the tight
interval ends, the bytes at a k-step are exactly SPEC's resident[k] while that step runs.
A graph output (field `output`) holds its home copy to the horizon; its copies on other devices
go as any other's, and no step takes it over (its home copy is never freed).

In-place reuse (a graph's `reuse` field, SPEC.md section 3). d = 1 models it exactly: for each
listed input u of v, a boolean dies[v, u] <=> end[u] <= pos[v] (v is u's last consumer) and
taken[v, u] <=> dies[v, u] and the bytes taken before it plus bytes(u) fit in bytes(v) (the
preference order, reified step by step); u's interval then ends one step earlier, at pos[v]
exclusive, so at v's step the cumulative holds v's output and not u's, as SPEC does. d > 1
ignores the field: every model solution still bounds its simulated peak from above (taking over
only lowers a peak), but the model's optimum and CP-SAT's bound are those of the problem without
reuse, so the reported bound is then the graph's lower bound (`info["reuse"]` says which).

Why inequalities suffice for the ends. home_end[u] is only bounded from below, so the model may
hold a home copy longer than SPEC does; that only adds bytes, so every model solution's
objective is >= the simulated peak of its placement and order, and the tight choice (the SPEC
free step) is feasible with objective equal to the simulated peak; at the optimum the two
coincide. The copy-in step first[u, q] is NOT a free choice: an earlier copy-in would move bytes
from the home device to q (the home copy could be freed early), so it is an exact min.
d = 1 uses exact max equalities for the ends (no x, no copies): fewer free variables to search.

Scale (2 workers; random DAGs of tests/randgraph.py and the XLA graphs of data/graphs/real).
d = 1: proves optima on random DAGs of 20-30 nodes in about a second; at 40-80 nodes some in
seconds, others not within 20 s. Chain-like inference graphs prove up to a few hundred nodes
(resnet18 fwd, 167 nodes: 0.8 s; mobilenet_v2 fwd, 422 nodes: 10 s); training graphs, whose
many independent update ops make the order space huge, are not proven even at ~100 nodes
(gap to the bound ~10%). d = 2: random DAGs up to 20-30 nodes; on real graphs only when the
optimum meets the lower bound. Beyond that it returns the hint improved by whatever CP-SAT
finds within the limit, and CP-SAT's bound in `info["bound_bytes"]`. The model stays small:
about 2 variables per node for d = 1 and 11 for d = 2; a 14,367-node graph builds in 1 s
(d = 1) or 10 s (d = 2) and solves in under 1 GB.
"""

from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from regal.graph import Graph, check_devices
from regal.solution import Solution, make_solution

__all__ = ["solve", "build_model"]

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_HINT_BUDGET = 1000


def solve(graph: Graph, devices: int, *, time_limit_s: float | None = None, seed: int = 0,
          hint: Solution | None = None, hint_budget: int = DEFAULT_HINT_BUDGET,
          num_workers: int = 2, log: bool = False, **options) -> Solution:
    """Minimum-peak placement and order of `graph` on `devices` devices by CP-SAT.

    time_limit_s: wall time for the whole call (hint included), default 10 s; the BRKGA hint
        gets at most a quarter of it. hint: a Solution to start from (skips BRKGA);
        hint_budget: BRKGA evaluations for the hint otherwise. num_workers: CP-SAT threads.
    Returns the best Solution (re-simulated); `info` holds status, optimal, bound_bytes,
    objective_bytes, hint_peak_bytes, source ("cpsat" or "hint"), model size and timings.
    """
    if options:
        raise TypeError(f"cpsat: unknown options {sorted(options)}")
    devices = check_devices(devices)
    t0 = time.perf_counter()
    limit = DEFAULT_TIME_LIMIT_S if time_limit_s is None else float(time_limit_s)

    # 1. Hint: a heuristic solution (plain BRKGA unless one is given).
    if hint is None:
        from regal.search import brkga_search
        hint = brkga_search(graph, devices, budget=hint_budget, seed=seed, time_limit_s=limit / 4)
        hint_source = f"brkga-{hint_budget}"
    else:
        if hint.num_devices != devices or len(hint.node_ids) != graph.num_nodes:
            raise ValueError(f"cpsat: the hint is for {hint.num_devices} devices and {len(hint.node_ids)} "
                             f"nodes; graph '{graph.name}' on {devices} devices needs {graph.num_nodes}")
        hint = make_solution(graph, hint.placement, hint.order, devices, method=hint.method)
        hint_source = "given"
    hint_peak = int(hint.peak_bytes)

    # 2. The model, with the hint's values for every variable.
    t_build = time.perf_counter()
    built = build_model(graph, devices, upper_bound=hint_peak)
    built.add_hint(hint.placement, hint.order)
    model = built.model
    build_s = time.perf_counter() - t_build

    # 3. Solve.
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.5, limit - (time.perf_counter() - t0))
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed)
    solver.parameters.log_search_progress = bool(log)
    status = solver.solve(model)
    status_name = solver.status_name(status)
    if status == cp_model.INFEASIBLE:  # the hint itself is a solution: this is a model bug
        raise RuntimeError(f"cpsat: model of graph '{graph.name}' is infeasible although the hint "
                           f"(peak {hint_peak}) is a solution")

    # 4. Extract, re-simulate, and keep the hint when CP-SAT did not beat it.
    proven = status == cp_model.OPTIMAL and built.reuse != "ignored"  # optimal for the problem itself
    info = {"seed": seed, "status": status_name, "optimal": proven,
            "hint_source": hint_source, "hint_peak_bytes": hint_peak,
            "lower_bound_bytes": built.lower_bound,
            "num_variables": len(model.proto.variables), "num_constraints": len(model.proto.constraints),
            "build_seconds": build_s, "solve_seconds": solver.wall_time,
            "num_workers": int(num_workers), "time_limit_s": limit}
    bound = built.lower_bound
    if built.reuse != "ignored":  # a bound without reuse does not hold for the problem with it
        bound = max(bound, int(np.ceil(solver.best_objective_bound - 1e-9)))
    info["reuse"] = built.reuse
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        objective = int(round(solver.objective_value))
        placement, order = built.extract(solver)
        sol = make_solution(graph, placement, order, devices, method="cpsat")
        if sol.peak_bytes > objective:  # the model would under-count some schedule: a bug
            raise AssertionError(f"cpsat: graph '{graph.name}': simulated peak {sol.peak_bytes} "
                                 f"exceeds the model objective {objective}")
        info["objective_bytes"] = objective
        if proven or sol.peak_bytes < hint_peak:
            info["source"] = "cpsat"
        else:
            sol, info["source"] = hint, "hint"
    else:
        sol, info["source"], info["objective_bytes"] = hint, "hint", None
    info["bound_bytes"] = bound
    info["optimal"] = info["optimal"] or bound >= sol.peak_bytes  # e.g. the hint proven optimal
    return make_solution(graph, sol.placement, sol.order, devices, method="cpsat",
                         evaluations=hint.evaluations, seconds=time.perf_counter() - t0, info=info)


class _Built:
    """A CP-SAT model of one graph and its variables; `add_hint` and `extract` map to schedules."""

    def __init__(self, graph: Graph, devices: int):
        self.graph = graph
        self.devices = devices
        self.model = cp_model.CpModel()
        self.nodes = np.flatnonzero(~graph.resident)       # non-resident, index order
        self.rank = {int(v): i for i, v in enumerate(self.nodes)}
        self.pos: dict[int, cp_model.IntVar] = {}
        self.pos_lo: dict[int, int] = {}
        self.x: dict[tuple[int, int], cp_model.IntVar] = {}
        self.peak = None
        self.lower_bound = 0
        self.reuse = "modelled" if graph.has_reuse else "none"  # "ignored" for d > 1
        self._aux = []  # (var, fn(pos: dict, place: array) -> int): hint values of derived variables

    def add_hint(self, placement, order, fix: bool = False) -> None:
        """Hint every variable with the value it takes for this placement and order.

        fix: also constrain positions and placement to it (checks that the model scores one
        schedule exactly as SPEC.md section 3 does).
        """
        placement = np.asarray(placement)
        if self.devices > 1:
            placement = _canonical_devices(placement, self.devices)
        steps = [int(v) for v in order if not self.graph.resident[v]]
        pos = {v: t for t, v in enumerate(steps)}
        m = self.model
        for v, var in self.pos.items():
            m.add_hint(var, pos[v])
            if fix:
                m.add(var == pos[v])
        for (v, k), var in self.x.items():
            m.add_hint(var, int(placement[v] == k))
            if fix:
                m.add(var == int(placement[v] == k))
        for var, fn in self._aux:
            m.add_hint(var, int(fn(pos, placement)))

    def extract(self, solver: cp_model.CpSolver) -> tuple[np.ndarray, np.ndarray]:
        """Placement int32[n] and order int32[n] (resident nodes first) of the solver's solution."""
        g = self.graph
        placement = np.zeros(g.num_nodes, dtype=np.int32)
        for (v, k), var in self.x.items():
            if solver.boolean_value(var):
                placement[v] = k
        steps = sorted(self.pos, key=lambda v: solver.value(self.pos[v]))
        order = np.concatenate([np.flatnonzero(g.resident), np.asarray(steps, dtype=np.int64)])
        return placement, order.astype(np.int32)


def _canonical_devices(placement: np.ndarray, devices: int) -> np.ndarray:
    """Relabel devices by first use in node-index order (the model's symmetry breaking)."""
    relabel: dict[int, int] = {}
    for k in placement.tolist():
        relabel.setdefault(int(k), len(relabel))
    for k in range(devices):
        relabel.setdefault(k, len(relabel))
    return np.asarray([relabel[int(k)] for k in placement], dtype=np.int32)


def _ancestor_counts(graph: Graph, nodes: np.ndarray) -> tuple[dict, dict]:
    """Non-resident ancestors and descendants of each non-resident node (tighter pos domains)."""
    order = [int(v) for v in graph.topological_order() if not graph.resident[v]]
    anc: dict[int, int] = {}
    for v in order:
        a = 0
        for u in graph.pred_idx[graph.pred_ptr[v]:graph.pred_ptr[v + 1]]:
            if not graph.resident[u]:
                a |= anc[int(u)] | (1 << int(u))
        anc[v] = a
    desc: dict[int, int] = {}
    for v in reversed(order):
        s = 0
        for w in graph.succ_idx[graph.succ_ptr[v]:graph.succ_ptr[v + 1]]:
            s |= desc[int(w)] | (1 << int(w))
        desc[v] = s
    return ({v: anc[v].bit_count() for v in order}, {v: desc[v].bit_count() for v in order})


def build_model(graph: Graph, devices: int, upper_bound: int | None = None) -> _Built:
    """The CP-SAT model of SPEC.md section 3 for `graph` on `devices` devices (see module doc)."""
    b = _Built(graph, devices)
    m = b.model
    g = graph
    d = devices
    nbytes = [int(x) for x in g.bytes]
    temp = [int(x) for x in g.temp_bytes]
    resident = g.resident
    steps = b.nodes
    horizon = max(len(steps), 1)
    last_step = horizon - 1
    consumers = {u: [int(c) for c in g.consumers(u)] for u in range(g.num_nodes)}

    # Step 1: positions, all different, precedence on data and control edges.
    num_anc, num_desc = _ancestor_counts(g, steps)
    for v in steps:
        v = int(v)
        b.pos_lo[v] = num_anc[v]
        b.pos[v] = m.new_int_var(num_anc[v], last_step - num_desc[v], f"pos_{v}")
    if b.pos:
        m.add_all_different(list(b.pos.values()))
    for v in steps:
        for u in g.pred_idx[g.pred_ptr[v]:g.pred_ptr[v + 1]]:
            if not resident[u]:
                m.add(b.pos[int(u)] < b.pos[int(v)])

    # Step 2: peak variable, bounded by the trivial lower bound and the hint.
    b.lower_bound = int(g.lower_bound(d))
    if d > 1 and g.has_reuse:  # the model ignores reuse: its peaks are those of the graph without it
        b.reuse, upper_bound = "ignored", None
    ub = int(upper_bound) if upper_bound is not None else int(g.bytes.sum() + g.temp_bytes.max(initial=0)) * 2
    ub = max(ub, b.lower_bound)
    b.peak = m.new_int_var(b.lower_bound, ub, "peak")
    scored = _without_reuse(g) if b.reuse == "ignored" else g
    b._aux.append((b.peak, lambda p, pl: _hint_peak(scored, pl, p, d)))

    if d == 1:
        _single_device(b, nbytes, temp, consumers, horizon)
    else:
        _multi_device(b, nbytes, temp, consumers, horizon)
    m.minimize(b.peak)
    return b


def _without_reuse(graph: Graph) -> Graph:
    """The same graph without `reuse` fields (what the d > 1 model scores)."""
    def make():
        recs = graph.to_records()
        for r in recs:
            r.pop("reuse", None)
        return Graph.from_records(recs, name=graph.name, meta=graph.meta)
    return graph.cached("cpsat_without_reuse", make)


def _hint_peak(graph, placement, pos, d) -> int:
    from regal.simulate import simulate
    order = np.concatenate([np.flatnonzero(graph.resident), np.asarray(sorted(pos, key=pos.get), dtype=np.int64)])
    return simulate(graph, placement, order.astype(np.int32), d).peak_bytes


def _single_device(b: _Built, nbytes, temp, consumers, horizon) -> None:
    """d = 1: one cumulative over output lifetimes and temps; resident bytes lower the capacity."""
    m, pos, g = b.model, b.pos, b.graph
    intervals, demands = [], []
    # Step 3: output lifetimes [pos[u], end[u]] with end = last consumer (exact), or the horizon
    # for nodes without consumers and graph outputs (never freed).
    ends = {}
    for u in b.nodes:
        u = int(u)
        cons = consumers[u]
        if nbytes[u] > 0 and cons and not g.output[u]:
            if len(cons) == 1:
                ends[u] = pos[cons[0]]
            else:
                lo = max(b.pos_lo[c] for c in cons)
                ends[u] = m.new_int_var(lo, horizon - 1, f"end_{u}")
                m.add_max_equality(ends[u], [pos[c] for c in cons])
                b._aux.append((ends[u], lambda p, pl, cons=cons: max(p[c] for c in cons)))
    taken = _taken_over(b, nbytes, consumers, ends)  # u -> 1 when its last consumer takes it over
    for u in b.nodes:
        u = int(u)
        cons = consumers[u] if u in ends else []  # kept to the horizon: as if nobody read it
        if nbytes[u] > 0:
            end = ends.get(u, horizon - 1)
            size = m.new_int_var(1, horizon, f"size_{u}")
            if u in taken:  # taken over: the lifetime ends as its last consumer's step starts
                stop = m.new_int_var(1, horizon, f"stop_{u}")  # exclusive end
                m.add(stop == end + 1 - taken[u])
                b._aux.append((size, _taken_size_hint(g, u, cons)))
                b._aux.append((stop, lambda p, pl, f=_taken_size_hint(g, u, cons), u=u: p[u] + f(p, pl)))
                intervals.append(m.new_interval_var(pos[u], size, stop, f"out_{u}"))
            else:
                b._aux.append((size, _size_hint(u, cons, horizon)))
                intervals.append(m.new_interval_var(pos[u], size, end + 1, f"out_{u}"))
            demands.append(nbytes[u])
        # Step 4: temp bytes only during the node's own step.
        if temp[u] > 0:
            intervals.append(m.new_fixed_size_interval_var(pos[u], 1, f"temp_{u}"))
            demands.append(temp[u])
    # Step 5: the cumulative; capacity = peak minus the bytes resident the whole time.
    resident_bytes = int(g.bytes[g.resident].sum())
    if intervals:
        m.add_cumulative(intervals, demands, b.peak - resident_bytes)


def _taken_over(b: _Built, nbytes, consumers, ends) -> dict:
    """d = 1, SPEC.md section 3 step 2: {u: sum of taken[v, u] over the v listing u} (0 or 1).

    For each v, its candidates in preference order (neither resident nor outputs, bytes > 0):
    dies[v, u] <=> end[u] <= pos[v]; taken[v, u] <=> dies[v, u] and (bytes taken before u) +
    bytes(u) <= bytes(v).
    """
    m, pos, g = b.model, b.pos, b.graph
    out: dict = {}
    for v in b.nodes:
        v = int(v)
        cands = [int(u) for u in g.reuse(v) if not (g.resident[u] or g.output[u]) and nbytes[int(u)] > 0]
        if not cands:
            continue
        all_fit = sum(nbytes[u] for u in cands) <= nbytes[v]
        before = []  # (bytes, taken var) of the earlier candidates
        for u in cands:
            if nbytes[u] > nbytes[v]:
                continue  # never fits
            cons = consumers[u]
            if len(cons) == 1:
                dies = m.new_constant(1)
            else:
                dies = m.new_bool_var(f"dies_{v}_{u}")
                m.add(ends[u] <= pos[v]).only_enforce_if(dies)
                m.add(ends[u] > pos[v]).only_enforce_if(dies.Not())
                b._aux.append((dies, lambda p, pl, u=u, v=v, cons=cons: int(max(p[c] for c in cons) <= p[v])))
            if all_fit or not before:
                t = dies
            else:
                fits = m.new_bool_var(f"fits_{v}_{u}")
                room = sum(w * x for w, x in before) + nbytes[u]
                m.add(room <= nbytes[v]).only_enforce_if(fits)
                m.add(room > nbytes[v]).only_enforce_if(fits.Not())
                t = m.new_bool_var(f"taken_{v}_{u}")
                m.add_bool_and([dies, fits]).only_enforce_if(t)
                m.add_bool_or([dies.Not(), fits.Not()]).only_enforce_if(t.Not())
                b._aux.append((fits, _fits_hint(g, v, u)))
                b._aux.append((t, _taken_hint(g, v, u)))
            before.append((nbytes[u], t))
            out.setdefault(u, []).append(t)
    return {u: (ts[0] if len(ts) == 1 else sum(ts)) for u, ts in out.items()}


def _reuse_takes(graph, pos, v):
    """{u: taken} of v's candidates under the order `pos` (one device), and each one's room test."""
    done = {u for u in pos if pos[u] <= pos[v]}
    taken, takes, fits = 0, {}, {}
    for u in graph.reuse(v).tolist():
        if graph.resident[u] or graph.output[u] or graph.bytes[u] == 0 or graph.bytes[u] > graph.bytes[v]:
            continue
        fits[u] = taken + int(graph.bytes[u]) <= int(graph.bytes[v])
        dies = all(int(c) in done for c in graph.consumers(u))
        takes[u] = dies and fits[u]
        if takes[u]:
            taken += int(graph.bytes[u])
    return takes, fits


def _fits_hint(graph, v, u):
    return lambda p, pl: int(_reuse_takes(graph, p, v)[1][u])


def _taken_hint(graph, v, u):
    return lambda p, pl: int(_reuse_takes(graph, p, v)[0][u])


def _taken_size_hint(graph, u, cons):
    def fn(p, pl):
        last = max(cons, key=lambda c: p[c])
        t = int(_reuse_takes(graph, p, last)[0].get(u, False)) if u in graph.reuse(last).tolist() else 0
        return max(p[c] for c in cons) - p[u] + 1 - t
    return fn


def _size_hint(u, cons, horizon):
    if not cons:
        return lambda p, pl: horizon - p[u]
    return lambda p, pl: max(p[c] for c in cons) - p[u] + 1


def _multi_device(b: _Built, nbytes, temp, consumers, horizon) -> None:
    """d > 1: placement booleans, home copies, copies on other devices, one cumulative each."""
    m, pos, g, d = b.model, b.pos, b.graph, b.devices
    n = g.num_nodes
    resident = g.resident
    big = horizon  # pos + big * (1 - x) is >= horizon when the consumer is not on the device
    x = b.x
    # Step 3: placement, exactly one device per node.
    for v in range(n):
        for k in range(d):
            x[v, k] = m.new_bool_var(f"x_{v}_{k}")
        m.add_exactly_one([x[v, k] for k in range(d)])
    # Step 4: symmetry breaking: devices are interchangeable, so device k is used only after
    # device k - 1 has been used by an earlier node (node 0 on device 0, and so on).
    used_prev = [x[0, k] for k in range(d)]  # used_prev[k]: some node <= v is on device k
    for k in range(1, d):
        m.add(x[0, k] == 0)
    for v in range(1, n):
        for k in range(1, d):
            m.add_implication(x[v, k], used_prev[k - 1])
        nxt = []
        for k in range(d):
            u = m.new_bool_var(f"used_{v}_{k}")
            m.add_bool_or([used_prev[k].Not(), u])
            m.add_bool_or([x[v, k].Not(), u])
            m.add_bool_or([u.Not(), used_prev[k], x[v, k]])
            b._aux.append((u, lambda p, pl, v=v, k=k: int(k in set(pl[:v + 1].tolist()))))
            nxt.append(u)
        used_prev = nxt

    per_device = [([], []) for _ in range(d)]

    def put(k, interval, demand):
        if demand > 0:
            per_device[k][0].append(interval)
            per_device[k][1].append(demand)

    for u in range(n):
        cons = consumers[u] if nbytes[u] > 0 else []  # a 0-byte tensor needs no lifetimes
        # Step 5: copies on other devices. first/last: first and last consumer step on q.
        first = {}
        copy = {}
        for q in range(d):
            if not cons:
                break
            if len(cons) == 1:
                host = x[cons[0], q]
            else:
                host = m.new_bool_var(f"host_{u}_{q}")
                m.add_max_equality(host, [x[c, q] for c in cons])
                b._aux.append((host, lambda p, pl, cons=cons, q=q: int(any(pl[c] == q for c in cons))))
            c_uq = m.new_bool_var(f"copy_{u}_{q}")  # host and not home
            m.add_implication(c_uq, host)
            m.add_implication(c_uq, x[u, q].Not())
            m.add_bool_or([host.Not(), x[u, q], c_uq])
            b._aux.append((c_uq, lambda p, pl, u=u, cons=cons, q=q:
                           int(pl[u] != q and any(pl[c] == q for c in cons))))
            copy[q] = c_uq
            if len(cons) == 1:
                f = l = pos[cons[0]]
            else:
                f = m.new_int_var(0, horizon - 1 + big, f"first_{u}_{q}")
                m.add_min_equality(f, [pos[c] + big - big * x[c, q] for c in cons])
                b._aux.append((f, lambda p, pl, cons=cons, q=q:
                               min(p[c] + (0 if pl[c] == q else big) for c in cons)))
                l = m.new_int_var(-big, horizon - 1, f"last_{u}_{q}")
                m.add_max_equality(l, [pos[c] - big + big * x[c, q] for c in cons])
                b._aux.append((l, lambda p, pl, cons=cons, q=q:
                               max(p[c] - (0 if pl[c] == q else big) for c in cons)))
            first[q] = f
            size = m.new_int_var(1, horizon, f"csize_{u}_{q}")
            b._aux.append((size, _copy_size_hint(u, cons, q)))
            put(q, m.new_optional_interval_var(f, size, l + 1, c_uq, f"copy_{u}_{q}"), nbytes[u])

        # Step 6: the home copy.
        if resident[u]:
            for k in range(d):
                put(k, m.new_optional_fixed_size_interval_var(0, horizon, x[u, k], f"res_{u}_{k}"), nbytes[u])
            continue
        if nbytes[u] > 0:
            kept = not cons or g.output[u]  # no consumers, or a graph output: never freed
            if kept:
                end = horizon - 1
            else:
                lo = min(b.pos_lo[c] for c in cons)
                end = m.new_int_var(lo, horizon - 1, f"home_end_{u}")
                for c in cons:  # consumers on the home device
                    for k in range(d):
                        m.add(end >= pos[c]).only_enforce_if([x[u, k], x[c, k]])
                for q in range(d):  # every other device hosting a consumer has received its copy
                    m.add(end >= first[q]).only_enforce_if(copy[q])
                b._aux.append((end, _home_end_hint(u, cons)))
            size = m.new_int_var(1, horizon, f"hsize_{u}")
            m.add(size == end - pos[u] + 1)
            # every name the hint reads is bound now: a free `cons` would be read after the loop
            # (the last node's consumers), which raised on graphs whose last node has consumers
            b._aux.append((size, lambda p, pl, u=u, kept=kept, f=_home_end_hint(u, cons), last=horizon - 1:
                           (last if kept else f(p, pl)) - p[u] + 1))
            for k in range(d):
                put(k, m.new_optional_interval_var(pos[u], size, end + 1, x[u, k], f"home_{u}_{k}"), nbytes[u])
        # Step 7: temp bytes during the node's own step, on its device.
        if temp[u] > 0:
            for k in range(d):
                put(k, m.new_optional_fixed_size_interval_var(pos[u], 1, x[u, k], f"temp_{u}_{k}"), temp[u])

    # Step 8: one cumulative per device, capacity = peak.
    for k in range(d):
        ivs, dem = per_device[k]
        if ivs:
            m.add_cumulative(ivs, dem, b.peak)


def _copy_size_hint(u, cons, q):
    def fn(p, pl):
        on_q = [p[c] for c in cons if pl[c] == q]
        return max(on_q) - min(on_q) + 1 if on_q and pl[u] != q else 1
    return fn


def _home_end_hint(u, cons):
    """SPEC's free step of u's home copy: last home consumer and first consumer on every other device."""
    def fn(p, pl):
        h = pl[u]
        ends = [p[c] for c in cons if pl[c] == h]
        firsts: dict[int, int] = {}
        for c in cons:
            if pl[c] != h:
                firsts[pl[c]] = min(firsts.get(pl[c], p[c]), p[c])
        return max(ends + list(firsts.values()))
    return fn
