"""An independent checker: SPEC.md section 3's peak-memory model written plainly, beside the solver.

`regal.simulate` (the Numba kernels every search calls) is fast; this is its second opinion, in
plain Python over lists, dicts and sets, sharing no code with it (nor with tests/naive.py): each
step of section 3 is written as the page states it, and a sequence that runs a node more than
once (section 3b) is first expanded into its instances, as the page defines them. `regal
evaluate --check` runs it on a solution file and fails, naming the difference, when the two
simulators disagree; the tests run it against the fast simulator on random graphs.

    checked = check(graph, placement, order, devices)   # Checked(peak_bytes, device_peak_bytes)
    check_solution(graph, solution)                      # raises CheckError when the numbers differ

It costs O((n + e) d) time in Python: 0.50 s of CPU on ResNet-152's training step (17,086 nodes,
26,204 edges, d = 2; measured under load 12 on 2 cores), about 1.2 s per 100,000 nodes and edges.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Checked", "CheckError", "check", "check_solution"]


class CheckError(ValueError):
    """The schedule is invalid under SPEC.md section 3 / 3b, or its numbers are not the checker's."""


class Checked(NamedTuple):
    peak_bytes: int
    device_peak_bytes: list[int]
    instances: int   # entries of the order (the number of nodes when no node runs twice)


class _Plain(NamedTuple):
    """A graph as plain lists, one entry per node (or per instance): what section 3 reads."""
    nbytes: list[int]
    temp: list[int]
    resident: list[bool]
    output: list[bool]       # marked `output` (a node without consumers is never freed either)
    inputs: list[list[int]]  # data inputs, in their order
    reuse: list[list[int]]   # inputs it may take over, in their order
    device: list[int]        # p(v)


def check(graph, placement, order, devices: int) -> Checked:
    """Section 3's peaks of (placement, order) on `graph`, for `devices` devices; an order that
    lists a node again is run as section 3b's instance graph. Raises CheckError (one line) when
    the schedule is not valid under those sections."""
    n = int(graph.num_nodes)
    placement = [int(x) for x in placement]
    order = [int(x) for x in order]
    if len(placement) != n:
        raise CheckError(f"the placement has {len(placement)} entries, the graph {n} nodes")
    for v, k in enumerate(placement):
        if not 0 <= k < devices:
            raise CheckError(f"node {graph.ids[v]!r} is placed on device {k}, outside 0..{devices - 1}")
    for v in order:
        if not 0 <= v < n:
            raise CheckError(f"the order names node index {v}, outside 0..{n - 1}")
    plain = _expand(graph, placement, order)
    peaks = _simulate(plain, devices)
    return Checked(max(peaks), peaks, len(order))


def check_solution(graph, solution) -> Checked:
    """`check` of a `regal.Solution` (or anything with placement, order, num_devices,
    peak_bytes, device_peak_bytes), compared with the numbers it claims: CheckError when they
    differ."""
    got = check(graph, solution.placement, solution.order, int(solution.num_devices))
    claimed = [int(x) for x in solution.device_peak_bytes]
    if got.device_peak_bytes != claimed or got.peak_bytes != int(solution.peak_bytes):
        raise CheckError(f"the independent simulator gives peak {got.peak_bytes:,} B (devices "
                         f"{got.device_peak_bytes}), the solution says {int(solution.peak_bytes):,} B ({claimed})")
    return got


def _expand(graph, placement: list[int], order: list[int]) -> _Plain:
    """Section 3b's instance graph of `order`, checked: instance i (the i-th entry) of node v reads,
    for each data input u of v, the latest instance of u before it; its `reuse`, the instances it
    reads of v's `reuse` entries. An order without repeats gives the graph itself, node by node
    in the order's positions."""
    n = int(graph.num_nodes)
    ids = list(graph.ids)
    inputs = [[int(u) for u in graph.inputs(v)] for v in range(n)]
    controls = [[int(u) for u in graph.control_inputs(v)] for v in range(n)]
    reuse = [[int(u) for u in graph.reuse(v)] for v in range(n)]
    has_consumer = [False] * n
    for v in range(n):
        for u in inputs[v]:
            has_consumer[u] = True
    resident = [bool(x) for x in graph.resident]
    output = [bool(x) for x in graph.output]
    no_recompute = [bool(x) for x in graph.no_recompute]

    runs: dict[int, list[int]] = {}   # node -> its instances (positions in the order)
    latest: dict[int, int] = {}
    read: list[bool] = []             # instance i is read by a later instance
    plain = _Plain([], [], [], [], [], [], [])
    for i, v in enumerate(order):
        reads = {}
        for u in inputs[v]:
            if u not in latest:
                raise CheckError(f"{ids[v]!r} (entry {i} of the order) runs before any run of its input {ids[u]!r}")
            reads[u] = latest[u]
            read[latest[u]] = True
        if v not in runs:
            for c in controls[v]:
                if c not in runs:
                    raise CheckError(f"{ids[v]!r} runs before its control input {ids[c]!r}")
        runs.setdefault(v, []).append(i)
        latest[v] = i
        read.append(False)
        plain.nbytes.append(int(graph.bytes[v]))
        plain.temp.append(int(graph.temp_bytes[v]))
        plain.resident.append(resident[v])
        plain.output.append(output[v])
        plain.inputs.append([reads[u] for u in inputs[v]])
        plain.reuse.append([reads[u] for u in reuse[v] if u in reads])
        plain.device.append(placement[v])
    for v in range(n):
        if v not in runs:
            raise CheckError(f"node {ids[v]!r} never runs")
        if len(runs[v]) > 1:
            for c in controls[v]:   # every run of a control input before the node's first
                if runs[c][-1] > runs[v][0]:
                    raise CheckError(f"{ids[c]!r} runs again after {ids[v]!r}, which it must precede (control edge)")
            why = ("resident" if resident[v] else "a graph output" if output[v] or not has_consumer[v]
                   else "marked recompute: false" if no_recompute[v] else None)
            if why:
                raise CheckError(f"{ids[v]!r} runs {len(runs[v])} times, but it is {why}: once only")
            for i in runs[v]:
                if not read[i]:
                    raise CheckError(f"a run of {ids[v]!r} (entry {i} of the order) is read by no later run")
        elif controls[v]:
            for c in controls[v]:
                if runs[c][-1] > runs[v][0]:
                    raise CheckError(f"{ids[c]!r} runs again after {ids[v]!r}, which it must precede (control edge)")
    return plain


def _simulate(g: _Plain, d: int) -> list[int]:
    """Section 3, step by step, over the (instance) graph g in its own order 0..m-1."""
    m = len(g.nbytes)
    consumers: list[list[int]] = [[] for _ in range(m)]
    for v in range(m):
        for u in g.inputs[v]:
            if v not in consumers[u]:
                consumers[u].append(v)
    # per input u and device k: how many of u's consumers placed on k have not run yet
    waiting = [dict() for _ in range(m)]
    for u in range(m):
        for c in consumers[u]:
            waiting[u][g.device[c]] = waiting[u].get(g.device[c], 0) + 1
    received = [set() for _ in range(m)]   # devices other than u's home where a consumer of u ran
    present = [set() for _ in range(m)]    # devices holding u (its home included)
    home_freed = [False] * m
    held = [0] * d
    for u in range(m):   # before the first step: every resident node on its home device
        if g.resident[u]:
            present[u].add(g.device[u])
            held[g.device[u]] += g.nbytes[u]
    peak = list(held)

    def home_copy_goes(u: int, waiting_u: dict) -> bool:
        """Step 3's second rule, with waiting_u the consumers of u not yet run per device: every
        consumer of u on its home has run, and every other device hosting a consumer of u has
        received its copy (a consumer of u there has run)."""
        home = g.device[u]
        others = {k for k in waiting[u] if k != home}
        return waiting_u.get(home, 0) == 0 and others <= received[u]

    for v in range(m):
        if g.resident[v]:
            continue
        k = g.device[v]
        for u in g.inputs[v]:                          # 1. copy in
            if k not in present[u]:
                present[u].add(k)
                held[k] += g.nbytes[u]
        # 2. run, taking over each input of `reuse` whose home copy is on k and is freed by
        # this step's step 3 (the consumers of u left once v has run: `after`)
        taken, taken_over = 0, []
        for u in g.reuse[v]:
            if u in taken_over:
                continue
            after = dict(waiting[u])
            after[k] -= 1
            frees_home = (not g.resident[u] and not g.output[u] and not home_freed[u] and g.device[u] == k
                          and home_copy_goes(u, after))
            if frees_home and taken + g.nbytes[u] <= g.nbytes[v]:
                taken += g.nbytes[u]
                taken_over.append(u)
        held[k] += g.nbytes[v] - taken + g.temp[v]
        peak[k] = max(peak[k], held[k])
        held[k] -= g.temp[v]
        present[v].add(k)
        for u in taken_over:                           # its bytes are v's output now
            home_freed[u] = True
            present[u].discard(k)
        for u in set(g.inputs[v]):                     # 3. free
            waiting[u][k] -= 1
            if k != g.device[u]:
                received[u].add(k)
        for u in g.inputs[v]:
            home = g.device[u]
            if k != home and k in present[u] and waiting[u][k] == 0:
                present[u].discard(k)
                held[k] -= g.nbytes[u]
            if g.resident[u] or g.output[u] or home_freed[u]:
                continue
            if home_copy_goes(u, waiting[u]):
                home_freed[u] = True
                present[u].discard(home)
                held[home] -= g.nbytes[u]
    return peak
