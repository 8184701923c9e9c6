"""Taking over (`reuse`, SPEC.md section 3, step 2): the rule, in one place.

A node v may take over some of its inputs: write its output into their memory instead of new
memory. Which inputs it takes is decided here, in two forms of the one rule:

- `taken_over`, the kernel: one step at a time, inside a simulation. Each simulator (one
  device, several devices, the greedy scheduler's running state, the timed model) adapts its own
  state to the two arrays it reads: where each tensor lives (`home`) and a per-tensor mark that
  equals 1 exactly when v's step frees that tensor's home copy (`last`).
- `takeovers` / `takers`, its vectorized twin: the whole of a finished schedule (placement and
  order) at once, in NumPy, for whatever asks "who takes whom" after the search: the XLA-style
  allocation (`regal.allocation`: a taken-over value shares its taker's buffer), the memory plan
  (`regal.memory_plan`: a same-size take-over is one block), the plan run in PyTorch
  (`regal.torch.plan`: the `out=` variant writes the taken input's buffer). The peak simulator
  keeps its own flat loop over the entries (`regal.kernels.peak_memory._taken`, the same rule on the
  step that frees each home copy) because it runs inside every evaluation.

The exact solvers state the same rule in their own terms: the exact DP over sets of nodes run
(`regal_baselines.exact._taken`: an input is taken when all its consumers are in the set) and the
CP-SAT model (`regal_baselines.cpsat._taken_over`: taken[v, u] <=> v's step frees u and the bytes
taken before plus bytes(u) fit in bytes(v)). A change of the rule changes this module, those two,
`kernels.peak_memory._taken`, SPEC.md section 3 and tests/naive.py; tests/test_takeover.py runs every
consumer against the naive twin on the same random graphs.
"""

import numba
import numpy as np

from regal._jit import JIT


@numba.njit(inline="always", **JIT)
def taken_over(v, k, reuse_ptr, reuse_idx, nbytes, resident, home, last):
    """Bytes of v's inputs that v, running on device k, takes over (SPEC.md section 3, step 2).

    Walks v's candidates u = reuse_idx[reuse_ptr[v] : reuse_ptr[v + 1]] in that (preference)
    order and takes u when all hold:
      home[u] == k      u's home copy is on v's device,
      last[u] == 1      v's step frees that home copy (it is u's last pending reader there),
      not resident[u]   a resident tensor is never freed, so never taken over,
      taken + nbytes[u] <= nbytes[v]   it still fits in v's output;
    a candidate that fails is skipped and the walk goes on. Returns `taken`, the bytes taken:
    the step holds `taken` bytes fewer while it runs, and afterwards the taken inputs' bytes
    belong to v's output instead of being freed.

    v, k: int; reuse_ptr: int64[n+1], reuse_idx: int32[*] (graph outputs already dropped:
    their home copy is never freed); nbytes: int64[n]; resident: bool[n];
    home: int[n], each tensor's device (any int array, a strided view included);
    last: int[n], the caller's "this step frees u's home copy" mark (1 = yes), e.g. the count of
    u's readers that have not run yet, v included, on one device, or a freed-at-this-step flag.
    """
    taken = 0
    for e in range(reuse_ptr[v], reuse_ptr[v + 1]):
        u = reuse_idx[e]
        if home[u] == k and last[u] == 1 and not resident[u] and taken + nbytes[u] <= nbytes[v]:
            taken += nbytes[u]
    return taken


def home_free_steps(graph, placement, pos) -> np.ndarray:
    """int64[n]: the step (position in the order) that frees each node's home copy (SPEC.md
    section 3, step 3): its last consumer on its home device or the first on each other device,
    whichever comes last (its own step without consumers); n (never) for a resident node or a
    graph output (`graph.kept`). graph: a `regal.Graph` (out_ptr, out_idx, kept); placement,
    pos: int[n], pos[v] the position of v in the order."""
    n = graph.num_nodes
    p = np.asarray(placement, dtype=np.int64)
    pos = np.asarray(pos, dtype=np.int64)
    src = np.repeat(np.arange(n), np.diff(graph.out_ptr))   # each data edge: producer -> consumer
    dst = np.asarray(graph.out_idx, dtype=np.int64)
    home = p[src] == p[dst]
    end = pos.copy()
    np.maximum.at(end, src[home], pos[dst[home]])           # the last consumer at home
    if not home.all():                                       # the first consumer on each other device
        remote = ~home
        d = int(p.max()) + 1
        first = np.full(n * d, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, src[remote] * d + p[dst[remote]], pos[dst[remote]])
        first = first.reshape(n, d)
        first[first == np.iinfo(np.int64).max] = -1
        end = np.maximum(end, first.max(axis=1))
    end[graph.kept] = n
    return end


def takeovers(graph, placement, order) -> np.ndarray:
    """bool[len(graph.reuse_idx)]: whether each entry of the `reuse` lists is taken over on this
    finished schedule (v = the entry's node takes u = graph.reuse_idx[e] over), the vectorized
    twin of `taken_over`: u is not resident nor a graph output, lives on v's device, v's step
    frees its home copy, and it still fits in v's output after v's earlier candidates taken.
    graph: a `regal.Graph`; placement: int[n] (any device count), order: int[n], topological."""
    n = graph.num_nodes
    ptr = np.asarray(graph.reuse_ptr, dtype=np.int64)
    cand = np.asarray(graph.reuse_idx, dtype=np.int64)
    taken = np.zeros(cand.shape[0], dtype=bool)
    if cand.shape[0] == 0:
        return taken
    p = np.asarray(placement, dtype=np.int64)
    pos = np.empty(n, dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(n)
    owner = np.repeat(np.arange(n), np.diff(ptr))
    nbytes = np.asarray(graph.bytes, dtype=np.int64)
    ok = (~graph.kept[cand]) & (p[cand] == p[owner]) & (home_free_steps(graph, p, pos)[cand] == pos[owner])
    rank = np.arange(cand.shape[0]) - ptr[owner]             # the entry's place in its node's list
    used = np.zeros(n, dtype=np.int64)                       # bytes each node has taken so far
    for r in range(int(rank.max()) + 1):                     # one candidate per node at a time, in order
        e = np.flatnonzero(ok & (rank == r))
        fits = used[owner[e]] + nbytes[cand[e]] <= nbytes[owner[e]]
        e = e[fits]
        used[owner[e]] += nbytes[cand[e]]
        taken[e] = True
    return taken


def takers(graph, placement, order) -> np.ndarray:
    """int64[n]: the node that takes each node's output over on this finished schedule
    (`takeovers`), -1 where none does."""
    owner = np.repeat(np.arange(graph.num_nodes), np.diff(np.asarray(graph.reuse_ptr, dtype=np.int64)))
    out = np.full(graph.num_nodes, -1, dtype=np.int64)
    taken = takeovers(graph, placement, order)
    out[np.asarray(graph.reuse_idx, dtype=np.int64)[taken]] = owner[taken]
    return out
