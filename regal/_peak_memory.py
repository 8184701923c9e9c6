"""The peak-memory simulator (SPEC.md section 3): `simulate_peak`, the one objective's kernel.

Every schedule regal scores goes through it: `regal.simulate` (checked), the decoder
(`regal._kernels.decode_simulate`), the local search's climb (`regal._climb`). It reads the
graph as a `regal._kernel_graph.KernelGraph` (`g`); its naive twin is `tests/naive.py`'s
`simulate`. The step loops are compiled twice, with and without taking over (`reuse`): the flag
is a compile-time constant, so graphs without the field run no take-over branch per step.
"""

import numba
import numpy as np

from regal._jit import JIT as _JIT
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
def _device_state(g, placement, d):
    """One record per node, so that an input's whole state is one cache line: int32[n, 2 + 2d]
      st[u, 0]            u's home device
      st[u, 1]            devices other than home that host a consumer of u and lack the copy
      st[u, 2 + k]        consumers of u on device k that have not run yet
      st[u, 2 + d + k]    for a remote k: u's copy has arrived; for k = home: u has been freed
    """
    n = g.num_nodes
    st = np.zeros((n, 2 + 2 * d), dtype=np.int32)
    for u in range(n):
        h = placement[u]
        st[u, 0] = h
        for e in range(g.out_ptr[u], g.out_ptr[u + 1]):
            k = placement[g.out_idx[e]]
            c = st[u, 2 + k]
            st[u, 1] += (c == 0) & (k != h)
            st[u, 2 + k] = c + 1
    return st


def _many_devices(with_reuse):
    """The d-device step loop, with or without taking over (compiled for each)."""

    @numba.njit(inline="always", **_JIT)
    def many_devices(g, order, placement, d, res, device_peak, trace):
        """d devices; res: int64[d], each device's resident bytes (updated as it runs).

        Each step walks its inputs once: copies in, and the frees it causes, which are applied
        after the peak is taken (an input's state depends only on its own iteration). The updates
        are written without branches: placements are random, so branches would mispredict.
        """
        tracing = trace.shape[0] > 0
        st = _device_state(g, placement, d)
        for t in range(g.num_nodes):
            v = order[t]
            if g.resident[v]:
                if tracing:
                    for j in range(d):
                        trace[t, j] = res[j]
                continue
            k = st[v, 0]
            r = res[k]
            freed = 0
            for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
                u = g.in_idx[e]
                b = g.in_bytes[e]
                h = st[u, 0]
                remote = h != k
                # 1. copy in
                need = remote & (st[u, 2 + d + k] == 0)
                st[u, 2 + d + k] |= need
                r += b * need
                pend = st[u, 1] - need
                st[u, 1] = pend
                # 3. free (deferred): the copy on k after its last consumer there; the home copy
                # once every home consumer has run and every other device has its copy
                left = st[u, 2 + k] - 1
                st[u, 2 + k] = left
                freed += b * (remote & (left == 0))
                free_home = (not g.in_resident[e]) & (pend == 0) & (st[u, 2 + h] == 0) & (st[u, 2 + d + h] == 0)
                st[u, 2 + d + h] |= free_home
                freed += b * (free_home & (not remote))
                res[h] -= b * (free_home & remote)
            # 2. run (less the inputs v takes over: home copies on k that this step frees, which
            # st[u, 2 + d + k] marks: set by this step, since v is one of u's home consumers)
            taken = 0
            if with_reuse:
                taken = taken_over(v, k, g.reuse_ptr, g.reuse_idx, g.nbytes, g.resident, st[:, 0], st[:, 2 + d + k])
            r += g.nbytes[v] - taken
            if r + g.temp[v] > device_peak[k]:
                device_peak[k] = r + g.temp[v]
            if tracing:
                res[k] = r + g.temp[v]
                for j in range(d):
                    trace[t, j] = res[j]
            res[k] = r + taken - freed
        return device_peak.max()

    return many_devices


@numba.njit(**_JIT)
def _sweep(g, order, placement, d, device_peak):
    """d devices, no trace: the step loop of `_many_devices`, computed another way (issue 36:
    32 % / 18 % less time at d = 2 / 4 on a 990-node graph, the same peaks). From each tensor's
    consumers' steps it first finds when each copy arrives and goes and when the home copy goes
    (section 3's rules: a copy on q arrives at the first step of a consumer on q and goes after
    the last; the home copy goes after the last home consumer and every copy's arrival), as bytes
    added at a step (`add`, counted in that step's peak on its device) and bytes freed after a
    step (`free`, per device); then one pass over the steps keeps each device's bytes and peak.
    Taking over: the bytes each step takes over, from the same freeing steps (`_taken`).
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
        h = placement[u]
        b = g.nbytes[u]
        if g.resident[u]:
            res[h] += b
        else:
            add[pos[u]] += b
        m = 0
        for e in range(g.out_ptr[u], g.out_ptr[u + 1]):
            w = g.out_idx[e]
            q = placement[w]
            tw = pos[w]
            hosts[m] = q
            m += first[q] == n
            first[q] = min(first[q], tw)
            last[q] = max(last[q], tw)
        hf = -1  # no consumer: never freed (a graph output)
        for i in range(m):
            q = hosts[i]
            remote = q != h
            add[first[q]] += b * remote                # the copy arrives on q
            free[(last[q] + 1) * d + q] += b * remote  # and goes after its last consumer there
            hf = max(hf, first[q] if remote else last[q])
            first[q] = n
            last[q] = -1
        kept = g.resident[u] or g.output[u]
        free[(hf + 1) * d + h] += b * (not kept)
        if with_reuse:
            home_free[u] = -1 if kept else hf
    taken = _taken(g, placement, pos, home_free)
    mem = res.copy()
    for k in range(d):
        device_peak[k] = res[k]
    for t in range(n):
        v = order[t]
        if not g.resident[v]:
            k = placement[v]
            cur = mem[k] + add[t]
            x = cur + g.temp[v]
            if with_reuse:
                x -= taken[v]
            device_peak[k] = max(device_peak[k], x)
            mem[k] = cur
        for q in range(d):
            mem[q] -= free[(t + 1) * d + q]
    return device_peak.max()


@numba.njit(inline="always", **_JIT)
def _taken(g, placement, pos, home_free):
    """int64[n] (empty without `reuse`): the bytes each node takes over (`taken_over`'s rule:
    u is on v's device, v's step frees u's home copy, u not resident, and it still fits), in one
    flat pass over the entries in each node's preference order."""
    taken = np.zeros(g.num_nodes if g.reuse_idx.shape[0] > 0 else 0, dtype=np.int64)
    for e in range(g.reuse_idx.shape[0]):
        v = g.reuse_own[e]
        u = g.reuse_idx[e]
        nb = g.nbytes[u]
        tv = taken[v]
        ok = (placement[u] == placement[v]) & (home_free[u] == pos[v]) & (not g.resident[u]) & (tv + nb <= g.nbytes[v])
        taken[v] = tv + nb * ok
    return taken


_one_device_plain = _one_device(False)
_one_device_reuse = _one_device(True)
_many_devices_plain = _many_devices(False)
_many_devices_reuse = _many_devices(True)


@numba.njit(**_JIT)
def simulate_peak(g, order, placement, d, device_peak, trace):
    """Peak memory of a placement and global order under SPEC.md section 3.

    g: the `KernelGraph`; order: int32[n] topological; placement: int32[n] in [0, d). Writes
    device_peak: int64[d] and returns max(device_peak). trace: int64[n, d] or int64[0, d]; when
    it has n rows, row t receives every device's bytes while step t runs (temp included on the
    running device).

    Taking over (`reuse`): a step that takes over inputs holds `taken` bytes fewer while it runs;
    after it, the bytes are as without the field (the taken inputs' bytes now belong to its
    output instead of being freed). A graph without the field runs the `_plain` loops. Without
    a trace, d > 1 runs `_sweep`.
    """
    if d > 1 and trace.shape[0] == 0:
        return _sweep(g, order, placement, d, device_peak)
    res = np.zeros(d, dtype=np.int64)
    for v in range(g.num_nodes):
        if g.resident[v]:
            res[placement[v]] += g.nbytes[v]
    for k in range(d):
        device_peak[k] = res[k]
    with_reuse = g.reuse_idx.shape[0] > 0
    if d == 1:
        if with_reuse:
            return _one_device_reuse(g, order, placement, res[0], device_peak, trace)
        return _one_device_plain(g, order, placement, res[0], device_peak, trace)
    if with_reuse:
        return _many_devices_reuse(g, order, placement, d, res, device_peak, trace)
    return _many_devices_plain(g, order, placement, d, res, device_peak, trace)
