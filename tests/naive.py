"""Slow, obviously correct reference implementations (the "naive twins" of regal's kernels).

Each function transcribes SPEC.md, or the rule a heuristic of `regal.heuristics` states, literally,
with dicts and sets and no cleverness, so that the Numba kernels can be checked against it on many
random graphs.
"""

from __future__ import annotations

import itertools

import numpy as np


def decode(graph, keys, num_devices):
    """SPEC.md section 5: placement by argmax of affinities (ties low), order by Kahn on priority."""
    n, d = graph.num_nodes, num_devices
    keys = np.asarray(keys, dtype=np.float64).reshape(n, d + 1)
    placement = []
    for v in range(n):
        aff = list(keys[v, :d])
        placement.append(aff.index(max(aff)))  # list.index returns the first (lowest) maximum
    prio = keys[:, d]
    preds = {v: set(graph.inputs(v).tolist()) | set(graph.control_inputs(v).tolist()) for v in range(n)}
    done: set[int] = set()
    order = []
    while len(order) < n:
        ready = [v for v in range(n) if v not in done and preds[v] <= done]
        best = max(ready, key=lambda v: (prio[v], -v))
        order.append(best)
        done.add(best)
    return placement, order


def simulate(graph, placement, order, num_devices, taken=None):
    """SPEC.md section 3, step by step. Returns (peak_bytes, device_peak_bytes list). taken: a
    dict that, when given, receives {v: [inputs v takes over, in its `reuse` order]} (step 2)."""
    n, d = graph.num_nodes, num_devices
    nbytes = [int(b) for b in graph.bytes]
    temp = [int(t) for t in graph.temp_bytes]
    resident_flag = [bool(r) for r in graph.resident]
    output_flag = [bool(o) for o in graph.output]  # a graph output: its home copy is never freed
    consumers = {u: [int(c) for c in graph.consumers(u)] for u in range(n)}
    inputs = {v: [int(u) for u in graph.inputs(v)] for v in range(n)}

    reuse = {v: [int(u) for u in graph.reuse(v)] for v in range(n)}
    taken_out = taken

    resident = [0] * d
    present = {u: set() for u in range(n)}  # devices holding a copy (home included)
    for u in range(n):
        if resident_flag[u]:
            present[u].add(placement[u])
            resident[placement[u]] += nbytes[u]
    peak = list(resident)
    has_run: set[int] = set()
    home_freed: set[int] = set()

    for v in order:
        if resident_flag[v]:
            continue
        k = placement[v]
        for u in inputs[v]:  # 1. copy in
            if k not in present[u]:
                present[u].add(k)
                resident[k] += nbytes[u]
        ran = has_run | {v}
        taken, taken_over = 0, set()  # 2. run, taking over inputs whose home copy this step frees
        for u in reuse[v]:
            if (not resident_flag[u] and not output_flag[u] and placement[u] == k and u not in home_freed
                    and _home_copy_freed(u, ran, placement, consumers) and taken + nbytes[u] <= nbytes[v]):
                taken += nbytes[u]
                taken_over.add(u)
        if taken_over and taken_out is not None:
            taken_out[v] = [u for u in reuse[v] if u in taken_over]
        resident[k] += nbytes[v] - taken + temp[v]
        peak[k] = max(peak[k], resident[k])
        resident[k] -= temp[v]
        present[v].add(k)
        has_run.add(v)
        for u in taken_over:  # its buffer is v's output now: not freed, not present as u
            home_freed.add(u)
            present[u].discard(k)
        for u in inputs[v]:  # 3. free
            home = placement[u]
            on_k = [c for c in consumers[u] if placement[c] == k]
            if k != home and k in present[u] and all(c in has_run for c in on_k):
                present[u].discard(k)
                resident[k] -= nbytes[u]
            if resident_flag[u] or output_flag[u] or u in home_freed:
                continue
            on_home = [c for c in consumers[u] if placement[c] == home]
            other_devices = {placement[c] for c in consumers[u]} - {home}
            received = all(any(c in has_run for c in consumers[u] if placement[c] == q)
                           for q in other_devices)
            if all(c in has_run for c in on_home) and received:
                home_freed.add(u)
                present[u].discard(home)
                resident[home] -= nbytes[u]
    return max(peak), peak


def _home_copy_freed(u, ran, placement, consumers):
    """SPEC.md section 3, step 3: once `ran` has run, every consumer of u on its home device has
    run and every other device hosting a consumer has received its copy (a consumer there ran)."""
    home = placement[u]
    others = {placement[c] for c in consumers[u]} - {home}
    return (all(c in ran for c in consumers[u] if placement[c] == home)
            and all(any(c in ran for c in consumers[u] if placement[c] == q) for q in others))


def is_topological(graph, order):
    pos = {v: i for i, v in enumerate(order)}
    if sorted(pos) != list(range(graph.num_nodes)):
        return False
    for v in range(graph.num_nodes):
        for u in itertools.chain(graph.inputs(v), graph.control_inputs(v)):
            if pos[int(u)] > pos[v]:
                return False
    return True


def all_topological_orders(graph):
    """Every topological order (only for tiny graphs)."""
    n = graph.num_nodes
    preds = [set(graph.inputs(v).tolist()) | set(graph.control_inputs(v).tolist()) for v in range(n)]

    def rec(done, order):
        if len(order) == n:
            yield list(order)
            return
        for v in range(n):
            if v not in done and preds[v] <= done:
                done.add(v)
                order.append(v)
                yield from rec(done, order)
                order.pop()
                done.discard(v)

    yield from rec(set(), [])


def brute_force_peak(graph, num_devices):
    """Minimum peak over every placement and every topological order (tiny graphs only)."""
    n = graph.num_nodes
    orders = list(all_topological_orders(graph))
    best = None
    for placement in itertools.product(range(num_devices), repeat=n):
        if num_devices > 1 and placement[0] != 0:
            continue  # device symmetry: node 0 on device 0 loses nothing
        for order in orders:
            p, _ = simulate(graph, list(placement), order, num_devices)
            if best is None or p < best:
                best = p
    return best


def ready_nodes(g, done):
    """The nodes not in `done` whose predecessors (data and control) all are."""
    return [v for v in range(g.num_nodes) if v not in done
            and set(g.pred_idx[g.pred_ptr[v]:g.pred_ptr[v + 1]].tolist()) <= done]


def lpmf_order(g):
    """Inductor's LPMF rule, literally: min over ready of (max(live + out + temp, peak), out - freed, v)."""
    nb, res, tmp = g.bytes.tolist(), g.resident.tolist(), g.temp_bytes.tolist()
    left = {u: len(g.consumers(u)) for u in range(g.num_nodes)}
    live = sum(b for b, r in zip(nb, res) if r)
    peak = live + sum(nb[u] for u in range(g.num_nodes) if not res[u] and left[u] == 0)
    done, order = set(), []
    while len(order) < g.num_nodes:
        def key(v):
            out = 0 if res[v] else nb[v]
            freed = sum(nb[u] for u in g.inputs(v).tolist() if not res[u] and left[u] == 1)
            return (max(live + out + tmp[v], peak), out - freed, v), out, freed
        (_, _, v), out, freed = min(key(v) for v in ready_nodes(g, done))
        live += out + tmp[v]
        peak = max(peak, live)
        live -= tmp[v] + freed
        for u in g.inputs(v).tolist():
            left[u] -= 1
        done.add(v)
        order.append(v)
    return order


def xla_list_order(g, scalar_bytes):
    """XLA's list rule, literally: max over ready of (freed - defined, users, insertion stamp)."""
    nb, res = g.bytes.tolist(), g.resident.tolist()
    left = {u: len(g.consumers(u)) for u in range(g.num_nodes)}
    stamp, clock, done, order = {}, 0, set(), []

    def scalar(v):
        return 0 < nb[v] <= scalar_bytes

    def prio(v):
        if scalar(v):
            return (2 ** 62, 2 ** 62)
        freed = sum(nb[u] for u in g.inputs(v).tolist() if not res[u] and left[u] == 1)
        return (freed - (0 if res[v] else nb[v]), len(g.consumers(v)))

    while len(order) < g.num_nodes:
        ready = ready_nodes(g, done)
        for v in ready:  # newly ready nodes get stamps in the order they became ready
            if v not in stamp:
                clock += 1
                stamp[v] = clock
        before = {v: prio(v) for v in ready}
        v = max(ready, key=lambda v: (*before[v], stamp[v]))
        done.add(v)
        order.append(v)
        for u in g.inputs(v).tolist():
            left[u] -= 1
        for u in g.inputs(v).tolist():  # XLA's walk: operands of v, then their users
            for w in g.consumers(u).tolist():
                if w in before and w != v and prio(w) != before[w]:
                    clock += 1
                    stamp[w] = clock
                    before[w] = prio(w)
        for w in g.succ_idx[g.succ_ptr[v]:g.succ_ptr[v + 1]].tolist():
            if w not in stamp and set(g.pred_idx[g.pred_ptr[w]:g.pred_ptr[w + 1]].tolist()) <= done:
                clock += 1
                stamp[w] = clock
    return order


def greedy_schedule(g, d, window=None):
    """The greedy rule, literally, with sets: (placement list, order list). window: score only
    the nodes that became ready last, that many (None: all)."""
    n, nb, res, tmp = g.num_nodes, g.bytes.tolist(), g.resident.tolist(), g.temp_bytes.tolist()
    place, present = {}, {u: set() for u in range(n)}
    left = {u: len(g.consumers(u)) for u in range(n)}
    level, dyn, rbase, peak = [0] * d, [0] * d, [0] * d, 0
    order = [v for v in range(n) if res[v]]

    def taken(v, k):  # inputs homed on k whose last consumer is v, in reuse order, while they fit
        total = 0
        for u in g.reuse(v).tolist():
            if place.get(u) == k and left[u] == 1 and not res[u] and total + nb[u] <= nb[v]:
                total += nb[u]
        return total

    if d == 1:  # one device: every resident tensor is there from the start
        place = {v: 0 for v in order}
        present.update({v: {0} for v in order})
        rbase[0] = peak = sum(nb[v] for v in order)
    done = set(order)
    # the ready nodes in the order they became ready: sources, then what each step readies
    seq = [v for v in range(n) if not res[v] and g.pred_ptr[v] == g.pred_ptr[v + 1]]
    for i, v in enumerate(order):  # the resident nodes, each readying what it was the last input of
        seq += [w for w in g.succ_idx[g.succ_ptr[v]:g.succ_ptr[v + 1]].tolist()
                if set(g.pred_idx[g.pred_ptr[w]:g.pred_ptr[w + 1]].tolist()) <= set(order[:i + 1])]
    while len(order) < n:
        cands = []
        assert sorted(seq) == ready_nodes(g, done)
        for v in (seq if window is None else seq[-window:]):
            ins = g.inputs(v).tolist()
            per_device = []
            for k in range(d):
                extra = sum(nb[u] for u in ins if u not in place)
                copy = sum(nb[u] for u in ins if u in place and k not in present[u])
                freed = sum(nb[u] * len((present[u] | {k}) - ({place[u]} if res[u] else set()))
                            for u in ins if u in place and left[u] == 1)
                run = rbase[k] + extra + level[k] + copy + nb[v] + tmp[v] - taken(v, k)
                per_device.append((max(peak, rbase[k] + extra + dyn[k], run), copy + nb[v] - freed, run, k, extra))
            _, net, run, k, extra = min(per_device)
            cands.append((max(peak, rbase[k] + dyn[k], run - extra), net, run - extra, v, k))
        *_, v, k = min(cands)
        took = taken(v, k)
        place[v] = k
        present[v].add(k)
        for u in g.inputs(v).tolist():
            if u not in place:
                place[u] = k
                present[u].add(k)
                rbase[k] += nb[u]
            elif k not in present[u]:
                present[u].add(k)
                level[k] += nb[u]
        dyn[k] = max(dyn[k], level[k] + nb[v] + tmp[v] - took)
        level[k] += nb[v]
        for u in g.inputs(v).tolist():
            left[u] -= 1
            if left[u] == 0:
                for j in sorted(present[u]):
                    if not (res[u] and j == place[u]):
                        present[u].discard(j)
                        level[j] -= nb[u]
        peak = max(peak, rbase[k] + dyn[k])
        done.add(v)
        order.append(v)
        seq.remove(v)
        seq += [w for w in g.succ_idx[g.succ_ptr[v]:g.succ_ptr[v + 1]].tolist()
                if set(g.pred_idx[g.pred_ptr[w]:g.pred_ptr[w + 1]].tolist()) <= done]
    for v in range(n):
        if v not in place:
            k = min(range(d), key=lambda j: (rbase[j] + dyn[j], j))
            place[v] = k
            rbase[k] += nb[v]
    return [place[v] for v in range(n)], order


def longest_path_levels(graph):
    """(from_sources, to_sinks): each node's longest path, in edges (data and control), from any
    source and to any sink, by relaxing every edge until nothing changes."""
    n = graph.num_nodes
    edges = [(u, v) for v in range(n)
             for u in graph.pred_idx[graph.pred_ptr[v]:graph.pred_ptr[v + 1]].tolist()]
    down, up = [0] * n, [0] * n
    changed = True
    while changed:
        changed = False
        for u, v in edges:
            if down[u] + 1 > down[v]:
                down[v] = down[u] + 1
                changed = True
            if up[v] + 1 > up[u]:
                up[u] = up[v] + 1
                changed = True
    return down, up


def live_across(g, placement, order, t, k):
    """{node: position of its last consumer} for the tensors held on device k across step t:
    non-resident nodes on k with bytes, run before t, with a consumer after t (the directed
    moves of regal.local_search pick from these); a graph output is held to the end (position n)."""
    pos = {v: i for i, v in enumerate(order)}
    out = {}
    for u in order[:t]:
        if placement[u] != k or g.resident[u] or g.bytes[u] == 0:
            continue
        consumers = [pos[c] for c in g.consumers(u)] + ([len(order)] if g.output[u] else [])
        if consumers and max(consumers) > t:
            out[int(u)] = max(consumers)
    return out


def xla_dfs_weights(g, post):
    """(extra, total) of XLA's DFSMemoryScheduler, literally: in post-order, over each node's
    distinct data inputs (np.unique), resident nodes left at 0 (`_orders.xla_dfs_weights`)."""
    n = g.num_nodes
    extra = np.zeros(n, dtype=np.int64)
    total = np.zeros(n, dtype=np.int64)
    users = np.diff(g.out_ptr)
    cumulative = 0
    for v in list(post):
        if g.resident[v]:
            continue
        ops = np.unique(g.inputs(v))
        b = int(g.bytes[v])
        cumulative += b
        extra[v] = min(max(int(users[v]) - 1, 0) + int(extra[ops].sum()), n)
        total[v] = min(b + int(total[ops].sum()), cumulative)
    return extra, total


def expand_instances(graph, sequence):
    """SPEC.md section 3b, literally: the instance graph of a sequence that may run a node more
    than once. Returns (instance graph, instance placement map: instance index -> node index).
    Instance i is the i-th entry of `sequence`; it reads, for each data input, the latest instance
    of that input before it; its control inputs are every instance of its control inputs. Ids: the node's id for
    its first instance, "id#k" for its k-th."""
    from regal.graph import Graph
    latest, every, seen, records = {}, {}, {}, []
    for i, v in enumerate(sequence):
        v = int(v)
        seen[v] = seen.get(v, 0) + 1
        name = graph.ids[v] if seen[v] == 1 else f"{graph.ids[v]}#{seen[v]}"
        reads = {int(u): latest[int(u)] for u in graph.inputs(v)}
        rec = {"id": name, "op": "op", "bytes": int(graph.bytes[v]), "temp_bytes": int(graph.temp_bytes[v]),
               "cost": float(graph.cost[v]), "resident": bool(graph.resident[v]), "output": bool(graph.output[v]),
               "inputs": [records[reads[int(u)]]["id"] for u in graph.inputs(v)],
               "control_inputs": [records[i]["id"] for u in graph.control_inputs(v) for i in every[int(u)]],
               "reuse": [records[reads[int(u)]]["id"] for u in graph.reuse(v)]}
        records.append(rec)
        latest[v] = i
        every.setdefault(v, []).append(i)
    return Graph.from_records(records, name=graph.name + "-instances"), [int(v) for v in sequence]


def simulate_sequence(graph, placement, sequence, num_devices):
    """Section 3b: section 3 (`simulate`) on the instance graph, in the sequence's order."""
    inst, node_of = expand_instances(graph, sequence)
    return simulate(inst, [placement[v] for v in node_of], list(range(len(node_of))), num_devices)
