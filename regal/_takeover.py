"""Taking over (`reuse`, SPEC.md section 3, step 2): the rule, in one place for every simulator.

A node v may take over some of its inputs: write its output into their memory instead of new
memory. Which inputs it takes is decided here, once; each simulator (one device, several
devices, the greedy scheduler's running state, the timed model) adapts its own state to the two
arrays this rule reads: where each tensor lives (`home`) and a per-tensor mark that equals 1
exactly when v's step frees that tensor's home copy (`last`).
"""

import numba

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
