"""The peak-memory simulator (SPEC.md section 3): `simulate_peak`, the one objective's kernel.

Every schedule regal scores goes through it: `regal.simulate` (checked), the decoder
(`regal.kernels.decode.decode_simulate`), the local search's climb (`regal.kernels.climb`). It reads the
graph as a `regal.kernels.structs.KernelGraph` (`g`); its naive twin is `tests/naive.py`'s
`simulate`. One device runs a step loop, compiled twice, with and without taking over (`reuse`):
the flag is a compile-time constant, so graphs without the field run no take-over branch per
step. Several devices run `_sweep` (issue 36), which replaced a step loop over per-tensor device
records: 32 % / 18 % less time at d = 2 / 4 without a trace, 21 % / 8 % with one (a 990-node
graph), the same peaks and traces (benchmarks/results/decoder_profile.md).
"""

import numba
import numpy as np

from regal._jit import JIT as _JIT, UINDEX as _U
from regal._takeover import taken_over


def _one_device(with_reuse):
    """The one-device step loop, with or without taking over (compiled for each)."""

    @numba.njit(inline="always", **_JIT)
    def one_device(g, order, placement, r, device_peak, trace):
        """One device: no copies; a tensor is freed when its last consumer has run. r: the
        resident bytes; placement: all 0; writes device_peak[0] and returns it."""
        n = g.num_nodes
        tracing = trace.shape[0] > 0
        remaining = np.empty(n, dtype=np.int32)
        for u in range(n):
            remaining[u] = g.out_ptr[u + 1] - g.out_ptr[u]
        peak = device_peak[0]
        for t in range(n):
            v = order[t]
            if g.resident[v]:
                if tracing:
                    trace[t, 0] = r
                continue
            taken = 0
            if with_reuse:
                taken = taken_over(v, 0, g.reuse_ptr, g.reuse_idx, g.nbytes, g.resident, placement, remaining)
            r += g.nbytes[v] + g.temp[v] - taken
            if r > peak:
                peak = r
            if tracing:
                trace[t, 0] = r
            r += taken - g.temp[v]
            for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
                u = g.in_idx[e]
                remaining[u] -= 1
                if remaining[u] == 0 and not g.in_resident[e]:  # resident or a graph output: kept
                    r -= g.nbytes[u]
        device_peak[0] = peak
        return peak

    return one_device


@numba.njit(**_JIT)
def _sweep(g, order, placement, d, device_peak, trace):
    """d > 1 devices (SPEC.md section 3). From each tensor's
    consumers' steps it first finds when each copy arrives and goes and when the home copy goes
    (section 3's rules: a copy on q arrives at the first step of a consumer on q and goes after
    the last; the home copy goes after the last home consumer and every copy's arrival), as bytes
    added at a step (`add`, counted in that step's peak on its device) and bytes freed after a
    step (`free`, per device); then one pass over the steps keeps each device's bytes and peak
    (`_sweep_traced` when `trace` has rows). Taking over: the bytes each step takes over, from
    the same freeing steps (`_taken`).
    """
    n = g.num_nodes
    pos = np.empty(n, dtype=np.int32)
    for t in range(n):
        pos[order[t]] = t
    add = np.zeros(n, dtype=np.int64)
    free = np.zeros((n + 1) * d, dtype=np.int64)  # after step t on device q: [(t + 1) * d + q]
    res = np.zeros(d, dtype=np.int64)
    with_reuse = g.reuse_idx.shape[0] > 0
    home_free = np.empty(n if with_reuse else 0, dtype=np.int32)  # the step freeing u's home copy
    first = np.full(d, n, dtype=np.int32)  # u's consumers' first and last steps on each device
    last = np.full(d, -1, dtype=np.int32)
    hosts = np.empty(d, dtype=np.int32)    # the devices hosting a consumer of u
    for u in range(n):
        h = _U(placement[u])
        b = g.nbytes[u]
        if g.resident[u]:
            res[h] += b
        else:
            add[_U(pos[u])] += b
        m = 0
        for e in range(_U(g.out_ptr[u]), _U(g.out_ptr[u + 1])):
            w = _U(g.out_idx[e])
            q = _U(placement[w])
            tw = pos[w]
            hosts[m] = q
            m += first[q] == n
            first[q] = min(first[q], tw)
            last[q] = max(last[q], tw)
        hf = -1  # no consumer: never freed (a graph output)
        for i in range(m):
            q = _U(hosts[i])
            remote = q != h
            add[_U(first[q])] += b * remote                   # the copy arrives on q
            free[_U((last[q] + 1) * d) + q] += b * remote  # and goes after its last consumer there
            hf = max(hf, first[q] if remote else last[q])
            first[q] = n
            last[q] = -1
        kept = g.resident[u] or g.output[u]
        free[_U((hf + 1) * d) + h] += b * (not kept)
        if with_reuse:
            home_free[u] = -1 if kept else hf
    taken = _taken(g, placement, pos, home_free)
    mem = res.copy()
    for k in range(d):
        device_peak[k] = res[k]
    if trace.shape[0] > 0:
        return _sweep_traced(g, order, placement, d, add, free, taken, mem, device_peak, trace)
    for t in range(n):
        v = _U(order[t])
        if not g.resident[v]:
            k = _U(placement[v])
            cur = mem[k] + add[t]
            x = cur + g.temp[v]
            if with_reuse:
                x -= taken[v]
            device_peak[k] = max(device_peak[k], x)
            mem[k] = cur
        row = _U((t + 1) * d)
        for q in range(d):
            mem[q] -= free[row + _U(q)]
    return device_peak.max()


@numba.njit(inline="always", **_JIT)
def _sweep_traced(g, order, placement, d, add, free, taken, mem, device_peak, trace):
    """`_sweep`'s pass over the steps writing the trace: row t holds every device's bytes while
    step t runs (temp included on the running device); a home copy that step t frees on another
    device is already gone in row t (as in section 3, where the step frees it), the frees on the
    running device come after its row."""
    with_reuse = taken.shape[0] > 0
    for t in range(g.num_nodes):
        v = _U(order[t])
        running = not g.resident[v]
        k = _U(placement[v])
        row = _U((t + 1) * d)
        for q in range(d):
            if not (running and q == k):
                mem[q] -= free[row + _U(q)]
            trace[t, q] = mem[q]
        if running:
            cur = mem[k] + add[t]
            x = cur + g.temp[v]
            if with_reuse:
                x -= taken[v]
            device_peak[k] = max(device_peak[k], x)
            trace[t, k] = x
            mem[k] = cur - free[row + k]
    return device_peak.max()


@numba.njit(inline="always", **_JIT)
def _taken(g, placement, pos, home_free):
    """int64[n] (empty without `reuse`): the bytes each node takes over (`taken_over`'s rule:
    u is on v's device, v's step frees u's home copy, u not resident, and it still fits), in one
    flat pass over the entries in each node's preference order. The rule restated, for speed:
    `taken_over` called per node, the step freeing u's home copy as its mark, was 6-16 % slower
    per decode at d = 2 and 4 (docs/engine-speed.md); tests/naive.py's twin checks both."""
    taken = np.zeros(g.num_nodes if g.reuse_idx.shape[0] > 0 else 0, dtype=np.int64)
    for e in range(g.reuse_idx.shape[0]):
        v = _U(g.reuse_own[e])
        u = _U(g.reuse_idx[e])
        nb = g.nbytes[u]
        tv = taken[v]
        ok = (placement[u] == placement[v]) & (home_free[u] == pos[v]) & (not g.resident[u]) & (tv + nb <= g.nbytes[v])
        taken[v] = tv + nb * ok
    return taken


_one_device_plain = _one_device(False)
_one_device_reuse = _one_device(True)


@numba.njit(**_JIT)
def simulate_peak(g, order, placement, d, device_peak, trace):
    """Peak memory of a placement and global order under SPEC.md section 3.

    g: the `KernelGraph`; order: int32[n] topological; placement: int32[n] in [0, d). Writes
    device_peak: int64[d] and returns max(device_peak). trace: int64[n, d] or int64[0, d]; when
    it has n rows, row t receives every device's bytes while step t runs (temp included on the
    running device).

    Taking over (`reuse`): a step that takes over inputs holds `taken` bytes fewer while it runs;
    after it, the bytes are as without the field (the taken inputs' bytes now belong to its
    output instead of being freed). One device runs the step loop (`_plain` for a graph without
    the field), several `_sweep`.
    """
    if d > 1:
        return _sweep(g, order, placement, d, device_peak, trace)
    r = 0
    for v in range(g.num_nodes):
        if g.resident[v]:
            r += g.nbytes[v]
    device_peak[0] = r
    if g.reuse_idx.shape[0] > 0:
        return _one_device_reuse(g, order, placement, r, device_peak, trace)
    return _one_device_plain(g, order, placement, r, device_peak, trace)
