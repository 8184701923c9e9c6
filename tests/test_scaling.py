"""Large graphs (issue 36): the heuristic starts' kernels that replaced per-node Python loops
give the same answers as the loops (their naive twins in tests/naive.py) on many random DAGs;
benchmarks/bench_scaling.py measures the times."""

import numpy as np

import naive
from randgraph import random_dag
from regal import heuristics
from regal.kernels import orders as _orders


def test_xla_dfs_weights_kernel_agrees_with_naive_twin():
    """XLA DFS's extra-users and total-sizes kernel equals the per-node loop on 200 random DAGs."""
    mismatches = []
    for seed in range(200):
        g = random_dag(seed, max_nodes=40, control_fraction=0.3)
        post = heuristics.xla_post_order(g)
        extra = np.zeros(g.num_nodes, dtype=np.int64)
        total = np.zeros(g.num_nodes, dtype=np.int64)
        _orders.xla_dfs_weights(post.astype(np.int64), g.num_nodes, g.resident, g.bytes.astype(np.int64),
                                 np.diff(g.out_ptr).astype(np.int64), g.in_ptr.astype(np.int64),
                                 g.in_idx.astype(np.int64), extra, total)
        want_extra, want_total = naive.xla_dfs_weights(g, post)
        if not (np.array_equal(extra, want_extra) and np.array_equal(total, want_total)):
            mismatches.append(seed)
    assert mismatches == []

