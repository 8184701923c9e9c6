"""SPEC.md section 3a (the allocation model), step by step in plain Python: the naive twin of
`regal.allocation`. Slow and literal on purpose; tests compare the two on random graphs."""


def post_order(graph):
    n = graph.num_nodes
    outs = [graph.index[i] for i in graph.meta.get("outputs", []) if i in graph.index]
    kept = [v for v in range(n) if not graph.resident[v] and (graph.output[v] or len(graph.consumers(v)) == 0)]
    leaves = [v for v in range(n) if len(graph.consumers(v)) == 0]
    seen, rank = set(), {}

    def visit(v):  # recursive DFS, operands in order
        seen.add(v)
        for u in graph.inputs(v).tolist():
            if u not in seen:
                visit(u)
        rank[v] = len(rank)

    for r in outs + kept + leaves + list(range(n)):
        if r not in seen:
            visit(r)
    return rank


def allocation(graph, placement, order, num_devices, alignment=64):
    """Returns (allocation_bytes, per-device totals list)."""
    n, d = graph.num_nodes, num_devices
    placement = [int(p) for p in placement]
    order = [int(v) for v in order]
    step = {v: i for i, v in enumerate(order)}
    nbytes = [int(b) for b in graph.bytes]
    resident = [bool(r) for r in graph.resident]
    out = [not resident[v] and (bool(graph.output[v]) or len(graph.consumers(v)) == 0) for v in range(n)]
    cons = {v: [int(c) for c in graph.consumers(v)] for v in range(n)}
    rank = post_order(graph)

    # when section 3 frees each home copy, and each copy
    home_end = {}
    for u in range(n):
        if out[u]:
            home_end[u] = n
            continue
        k = placement[u]
        last = step[u]
        for c in cons[u]:
            if placement[c] == k:
                last = max(last, step[c])
        for q in set(placement[c] for c in cons[u]) - {k}:
            last = max(last, min(step[c] for c in cons[u] if placement[c] == q))
        home_end[u] = last

    taker = {}
    for v in order:
        if resident[v]:
            continue
        taken = 0
        for u in graph.reuse(v).tolist():
            if (not resident[u] and not out[u] and placement[u] == placement[v] and u not in taker
                    and home_end[u] == step[v] and taken + nbytes[u] <= nbytes[v]):
                taken += nbytes[u]
                taker[u] = v

    totals = []
    for k in range(d):
        args = sum(nbytes[u] for u in range(n) if resident[u] and placement[u] == k)
        bufs = []  # dicts: size, start, end, live, key, node, kind
        for v in range(n):
            if placement[v] == k and not resident[v] and (nbytes[v] > 0 or out[v]):
                bufs.append(dict(size=nbytes[v], start=step[v], end=home_end[v], live=out[v], key=rank[v],
                                 node=v, kind="home"))
        for u in range(n):
            on_k = [step[c] for c in cons[u] if placement[c] == k]
            if placement[u] != k and on_k and nbytes[u] > 0:
                bufs.append(dict(size=nbytes[u], start=min(on_k), end=max(on_k), live=False, key=rank[u],
                                 node=u, kind="copy"))
        for v in range(n):
            if placement[v] == k and not resident[v] and graph.temp_bytes[v] > 0:
                bufs.append(dict(size=int(graph.temp_bytes[v]), start=step[v], end=step[v], live=False,
                                 key=rank[v], node=v, kind="temp"))
        home = {b["node"]: i for i, b in enumerate(bufs) if b["kind"] == "home"}
        copy = {b["node"]: i for i, b in enumerate(bufs) if b["kind"] == "copy"}

        def may_share(user, operand):  # buffer indices
            bu, bo = bufs[user], bufs[operand]
            return (bu["kind"] == "home" and bo["kind"] == "home" and not bo["live"]
                    and bo["node"] in graph.reuse(bu["node"]).tolist() and bo["end"] == bu["start"])

        def overlap(a, b):
            A, B = bufs[a], bufs[b]
            if A["end"] < B["start"] or B["end"] < A["start"]:
                return False
            if A["end"] == B["start"] and may_share(b, a):
                return False
            if B["end"] == A["start"] and may_share(a, b):
                return False
            return True

        ranked = sorted(range(len(bufs)), key=lambda i: (-bufs[i]["size"], not bufs[i]["live"], bufs[i]["key"]))
        allocs = []   # [size, [buffer indices]]
        where = {}
        for b in ranked:
            B = bufs[b]
            if B["live"]:
                where[b] = len(allocs)
                allocs.append([B["size"], [b]])
                continue
            tries = []
            if B["kind"] == "home":
                for u in graph.inputs(B["node"]).tolist():
                    i = home.get(u, copy.get(u))
                    if i is not None and i in where:
                        tries.append(where[i])
            tries += list(range(len(allocs) - 1, -1, -1))
            for a in tries:
                if B["size"] <= allocs[a][0] and not any(overlap(x, b) for x in allocs[a][1]):
                    allocs[a][1].append(b)
                    where[b] = a
                    break
        outputs = sum(b["size"] for b in bufs if b["live"])

        # heap: chains of take-overs are one buffer
        deferred = [b for b in range(len(bufs)) if b not in where]
        group = {b: b for b in deferred}

        def find(b):
            return b if group[b] == b else find(group[b])

        for b in deferred:
            B = bufs[b]
            if B["kind"] == "home" and B["node"] in taker and home.get(taker[B["node"]]) in group:
                ra, rb = find(b), find(home[taker[B["node"]]])
                if ra != rb:
                    group[rb] = ra
        events = sorted([(bufs[b]["start"] * 2, i, b, 0) for i, b in enumerate(deferred)]
                        + [(bufs[b]["end"] * 2 + 1, i, b, 1) for i, b in enumerate(deferred)])
        tick = {}
        for t, (_, _, b, which) in enumerate(events):
            tick[(b, which)] = t
        chains = {}
        for b in deferred:
            chains.setdefault(find(b), []).append(b)
        items = []
        for members in chains.values():
            first = min(members, key=lambda b: (bufs[b]["start"], b))
            size = max(bufs[b]["size"] for b in members)
            items.append(dict(size=(size + alignment - 1) // alignment * alignment,
                              start=min(bufs[b]["start"] for b in members), end=max(bufs[b]["end"] for b in members),
                              own=tick[(first, 1)] - tick[(first, 0)],
                              span=max(tick[(b, 1)] for b in members) - min(tick[(b, 0)] for b in members),
                              key=min(bufs[b]["key"] for b in members)))

        def best_fit(seq):
            placed, top = [], 0
            for it in seq:
                busy = sorted((o, o + p["size"]) for o, p in placed
                              if p["start"] <= it["end"] and p["end"] >= it["start"])
                gaps, cur = [], 0
                for lo, hi in busy:
                    if lo > cur:
                        gaps.append((lo - cur, cur))
                    cur = max(cur, hi)
                fitting = [(g, o) for g, o in gaps if g >= it["size"]]
                offset = min(fitting)[1] if fitting else cur
                placed.append((offset, it))
                top = max(top, offset + it["size"])
            return top

        heap = 0
        if items:
            spatial = sorted(items, key=lambda it: (-it["size"], -it["own"], it["key"]))
            temporal = sorted(items, key=lambda it: (-it["span"], -it["size"], it["key"]))
            heap = min(best_fit(spatial), best_fit(temporal))
        totals.append(args + outputs + heap)
    return max(totals), totals
