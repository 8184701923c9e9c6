"""The naive twin of `regal.kernels.timed.simulate_timed`: SPEC.md section 4 as docs/timed-model.md
settles it, transcribed with sets and lists, one instant at a time, no heaps or counters."""

from __future__ import annotations


def simulate_timed(graph, placement, prio, tprio, num_devices, speed, bandwidth, latency, instance_of=None):
    """Returns (makespan, device_peak list, start dict, finish dict, transfers dict (u, q) -> (start, finish)).

    prio[v]: scheduling priority (higher first, ties to the lower node); tprio[u][q]: priority of
    the transfer of u to device q (higher first, ties to the lower node). instance_of: for an
    instance graph (SPEC.md section 3b; node i is entry i of the sequence), the node each entry
    runs: an entry whose node ran at an earlier entry (a recomputation) is ready only once every
    earlier entry on its device that is not resident has started (section 4).
    """
    n, d = graph.num_nodes, num_devices
    nbytes = [int(b) for b in graph.bytes]
    temp = [int(b) for b in graph.temp_bytes]
    cost = [float(c) for c in graph.cost]
    res = [bool(r) for r in graph.resident]
    out = [bool(o) for o in graph.output]  # graph outputs: the home copy is never freed
    inputs = {v: [int(u) for u in graph.inputs(v)] for v in range(n)}
    preds = {v: set(graph.inputs(v).tolist()) | set(graph.control_inputs(v).tolist()) for v in range(n)}
    consumers = {u: [int(c) for c in graph.consumers(u)] for u in range(n)}
    p = [int(x) for x in placement]
    reuse = {v: [int(u) for u in graph.reuse(v)] for v in range(n)} if hasattr(graph, "reuse") else {}
    taken = {}

    mem = [0] * d
    peak = [0] * d
    present = {u: set() for u in range(n)}   # devices where u's output is (arrived copies, home)
    home_freed: set[int] = set()
    finished: set[int] = set()               # nodes finished (resident ones from the start)
    queued: dict[tuple[int, int], list[int]] = {}  # link (p, q) -> tensors waiting to go
    arrived: set[tuple[int, int]] = set()
    start, finish, transfers = {}, {}, {}
    running: dict[int, tuple[int, float]] = {}          # device -> (node, finish time)
    sending: dict[tuple[int, int], tuple[int, float]] = {}  # link -> (tensor, finish time)
    started: set[int] = set()

    def targets(u):
        return sorted({p[c] for c in consumers[u]} - {p[u]})

    def queue_transfers(u):
        for q in targets(u):
            queued.setdefault((p[u], q), []).append(u)

    for u in range(n):
        if res[u]:
            mem[p[u]] += nbytes[u]
            present[u].add(p[u])
    peak = list(mem)
    for u in range(n):
        if res[u]:
            finished.add(u)
            start[u] = finish[u] = 0.0
            queue_transfers(u)

    def recomputation(v):
        return instance_of is not None and instance_of[v] in instance_of[:v]

    def in_place(v):  # a recomputation waits for every entry before it on its device to start
        return all(w in started for w in range(v) if p[w] == p[v] and not res[w])

    def ready(v):
        return (v not in started and not res[v] and preds[v] <= finished
                and all(p[v] in present[u] for u in inputs[v])
                and (not recomputation(v) or in_place(v)))

    def try_free_home(u):
        if res[u] or out[u] or u in home_freed:
            return
        home_done = all(c in finished for c in consumers[u] if p[c] == p[u])
        sent = all((u, q) in arrived for q in targets(u))
        if home_done and sent and consumers[u]:
            home_freed.add(u)
            present[u].discard(p[u])
            mem[p[u]] -= nbytes[u]

    t = 0.0
    while True:
        for k in range(d):  # start phase
            if k in running:
                continue
            cands = [v for v in range(n) if p[v] == k and ready(v)]
            if cands:
                v = max(cands, key=lambda v: (prio[v], -v))
                started.add(v)
                running[k] = (v, t + cost[v] / speed[k])
                start[v] = t
                taken[v] = 0  # inputs v takes over: their home copy goes when v is done
                for u in reuse.get(v, []):
                    last_home = [c for c in consumers[u] if p[c] == k and c not in finished] == [v]
                    sent = all((u, q) in arrived for q in targets(u))
                    if (p[u] == k and not res[u] and not out[u] and last_home and sent
                            and taken[v] + nbytes[u] <= nbytes[v]):
                        taken[v] += nbytes[u]
                mem[k] += nbytes[v] + temp[v] - taken[v]
                peak[k] = max(peak[k], mem[k])
        for link, waiting in queued.items():
            if link in sending or not waiting:
                continue
            q = link[1]
            u = max(waiting, key=lambda u: (tprio[u][q], -u))
            waiting.remove(u)
            sending[link] = (u, t + (latency + nbytes[u] / bandwidth))
            transfers[(u, q)] = (t, None)
            mem[q] += nbytes[u]
            peak[q] = max(peak[q], mem[q])
        if not running and not sending:
            break
        t = min([f for _, f in running.values()] + [f for _, f in sending.values()])
        done_nodes = [(k, v) for k, (v, f) in running.items() if f == t]
        done_transfers = [(link, u) for link, (u, f) in sending.items() if f == t]
        for k, v in done_nodes:
            del running[k]
            finished.add(v)
            finish[v] = t
            present[v].add(k)
            mem[k] += taken[v] - temp[v]
            queue_transfers(v)
        for link, u in done_transfers:
            del sending[link]
            arrived.add((u, link[1]))
            present[u].add(link[1])
            transfers[(u, link[1])] = (transfers[(u, link[1])][0], t)
        for k, v in done_nodes:  # frees: copies after their last local consumer, then homes
            for u in inputs[v]:
                if p[u] != k and all(c in finished for c in consumers[u] if p[c] == k):
                    if k in present[u]:
                        present[u].discard(k)
                        mem[k] -= nbytes[u]
                try_free_home(u)
        for link, u in done_transfers:
            try_free_home(u)
    makespan = max([finish[v] for v in range(n) if not res[v]], default=0.0)
    assert len(finished) == n, "every node of a DAG runs"
    return makespan, peak, start, finish, transfers
