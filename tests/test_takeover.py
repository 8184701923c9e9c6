"""The take-over rule (SPEC.md section 3, step 2) on a finished schedule: the vectorized twin
(`regal._takeover.takeovers`) and every library place that asks who takes whom, against the naive
twin (tests/naive.py) on the same random graphs."""

import numpy as np
import pytest
from naive import simulate as naive_simulate
from naive_alloc import allocation as naive_allocation
from randgraph import random_dag

from regal._takeover import home_free_steps, takeovers, takers
from regal.allocation import allocation
from regal.heuristics import random_solution
from regal.memory_plan import buffers
from regal.simulate import simulate


def _cases():
    """Random DAGs with `reuse` lists, graph outputs and residents; random schedules, d = 1, 2, 3."""
    for seed in range(36):
        d = 1 + seed % 3
        g = random_dag(seed + 4900, num_nodes=10 + seed, resident_fraction=0.15, control_fraction=0.2,
                       reuse_fraction=0.7, output_fraction=0.1)
        placement, order = random_solution(g, d, seed)
        yield g, d, placement, order


CASES = list(_cases())


def _as_dict(g, taker) -> dict:
    """{v: [inputs v takes over, in its `reuse` order]} from takers' int64[n]."""
    out = {}
    for v in range(g.num_nodes):
        mine = [int(u) for u in g.reuse(v) if taker[u] == v]
        if mine:
            out[v] = mine
    return out


def _blocks_want(g, want) -> np.ndarray:
    """The memory plan's block roots as SPEC.md section 2 says: v continues u's buffer when the
    first input of nonzero size v takes over has v's size (a chain is one block)."""
    parent = np.arange(g.num_nodes)
    for v, taken in want.items():
        first = next((u for u in taken if g.bytes[u] > 0), None)
        if first is not None and g.bytes[first] == g.bytes[v]:
            parent[v] = first
    for _ in range(g.num_nodes):
        parent = parent[parent]
    return parent


def test_every_consumer_of_the_take_over_rule_agrees_with_the_naive_twin():
    """On each schedule the twin's take-overs are the naive simulation's; the peak simulator's
    peak, the XLA-style allocation (whose heap shares taken buffers) and the memory plan's blocks
    (a same-size take-over continues its input's buffer) agree with the naive twins; and on one
    device the PyTorch plan's `taken_over` (when PyTorch is installed) takes the same inputs."""
    plan_taken_over = None
    try:
        from regal.torch.plan import taken_over as plan_taken_over
    except ImportError:
        pass
    seen = 0
    for g, d, placement, order in CASES:
        want = {}
        peak, _ = naive_simulate(g, placement.tolist(), order.tolist(), d, taken=want)
        taker = takers(g, placement, order)
        assert _as_dict(g, taker) == want
        assert takeovers(g, placement, order).sum() == sum(len(x) for x in want.values())
        assert simulate(g, placement, order, d).peak_bytes == peak
        assert allocation(g, placement, order, d).allocation_bytes == naive_allocation(g, placement, order, d)[0]
        root = _blocks_want(g, want)
        block_of = buffers(g, placement, order, d).block_of
        has = np.flatnonzero(g.bytes > 0)
        same_want = root[has][:, None] == root[has][None, :]
        same_got = block_of[has][:, None] == block_of[has][None, :]
        assert (same_want == same_got).all()
        if d == 1 and plan_taken_over is not None:
            assert plan_taken_over(g, order) == want
        seen += len(want)
    assert seen > 50   # the graphs do take inputs over


def test_home_free_steps_match_the_naive_rule_and_kept_nodes_are_never_freed():
    """The step freeing each home copy is the last home consumer's or the first of another
    device's, whichever is later; a resident node or a graph output: n (never)."""
    for g, d, placement, order in CASES[:12]:
        n = g.num_nodes
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        got = home_free_steps(g, placement, pos)
        for u in range(n):
            if g.kept[u]:
                assert got[u] == n
                continue
            cons = g.consumers(u)
            home = [pos[c] for c in cons if placement[c] == placement[u]]
            firsts = [min(pos[c] for c in cons if placement[c] == k) for k in set(placement[cons].tolist())
                      if k != placement[u]]
            assert got[u] == max([pos[u]] + home + firsts)


@pytest.mark.parametrize("d", [1, 2])
def test_a_graph_without_reuse_takes_nothing_over(d):
    """No `reuse` field: no entry, no taker."""
    g = random_dag(7, num_nodes=20)
    placement, order = random_solution(g, d, 0)
    assert takeovers(g, placement, order).shape == (0,)
    assert (takers(g, placement, order) == -1).all()
