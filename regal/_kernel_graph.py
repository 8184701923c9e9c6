"""The graph as the kernels read it: one NamedTuple of flat arrays (jraph style), passed whole.

`regal.simulate.kernel_graph(graph)` builds it once per Graph (cached on the Graph); every
kernel of the memory model (`regal._kernels`, `regal._orders`, `regal._climb`) takes it as its
`g` argument instead of a dozen positional arrays. Numba types a NamedTuple of arrays like a
struct of arrays (no copies, no Python objects in the kernel), and caches kernels that take it:
the class is defined here, at module level, so the type pickles by name.

n nodes, E data edges; CSR pairs index the `*_idx` arrays by node.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class KernelGraph(NamedTuple):
    """The arrays the kernels read, in kernel dtypes (n nodes)."""
    num_nodes: int
    pred_cnt: np.ndarray     # int32[n]    distinct predecessors (data and control)
    pred_ptr: np.ndarray     # int64[n+1]  predecessors (data and control), CSR
    pred_idx: np.ndarray     # int32[*]
    succ_ptr: np.ndarray     # int64[n+1]  successors (data and control), CSR
    succ_idx: np.ndarray     # int32[*]
    in_ptr: np.ndarray       # int64[n+1]  data inputs, CSR
    in_idx: np.ndarray       # int32[E]
    out_ptr: np.ndarray      # int64[n+1]  data consumers, CSR
    out_idx: np.ndarray      # int32[E]
    nbytes: np.ndarray       # int64[n]    output bytes
    temp: np.ndarray         # int64[n]    scratch bytes while the node runs
    resident: np.ndarray     # bool[n]     resident tensors (weights, inputs): never freed
    output: np.ndarray       # bool[n]     graph outputs: never freed at home
    in_bytes: np.ndarray     # int64[E]    bytes of each data edge's producer (nbytes[in_idx])
    in_resident: np.ndarray  # bool[E]     whether each data edge's producer is never freed at home:
    #                                      resident, or a graph output; the simulators free by it
    reuse_ptr: np.ndarray    # int64[n+1]  the inputs each node may take over (SPEC.md section 3), CSR,
    reuse_idx: np.ndarray    # int32[*]    in preference order, graph outputs dropped; empty when the
    #                                      graph has no `reuse`
    reuse_own: np.ndarray    # int32[*]    the node each `reuse_idx` entry belongs to (a flat loop
    #                                      over the entries needs no per-node loop)
    cost: np.ndarray         # float64[n]  compute cost (the timed model, SPEC.md section 4)
