"""A move policy's picks for the climb (issue 47) and their credit: which node a move takes, drawn
by the climb's own rule or, with probability `mix` (`ClimbParams.mix`), by the policy's weights,
and the move's outcome turned into REINFORCE's gradient and per-node counts.

A move policy (`regal.moves`) gives each node a weight; with probability `mix` a node pick follows
the weights instead of the climb's own draw (uniform over a pool or over the nodes; by bytes for
a directed move). Each pick is noted in the policy's `pick` (`ClimbState.move_pick`, a
float64[PICK_FIELDS] read through the `PICK_*` field indices below): its kind (`NO_PICK`,
`FROM_POOL`, `FROM_POOL_MOVABLE`, `ANY_NODE`, `DIRECTED`, `ANY_MOVABLE`), the pool size, the
node and q = mix p(node) / P(node), the factor of d log P / d logit (P the mixture's probability,
p the weights' share), the group draw's node, factor and outcome, and the reward's running
mean. The move policy's other arrays are laid out here too, once: the per-node counts
(`STAT_*`), the logits and their gradient (`LOGIT_*`), the gradient of the picks over all nodes
(`GLOB_*`). `credit` turns the move's outcome into REINFORCE's gradient and the per-node counts.
With mix 0 no draw is added: the climb is the climb without a policy, bit for bit.
"""

from typing import NamedTuple

import numba
import numpy as np

from regal._jit import JIT as _JIT

_STEP = dict(inline="always", **_JIT)

#: The fields of a pick (`ClimbState.move_pick`, float64[PICK_FIELDS]), by index.
PICK_KIND = 0          # the kind of the last node pick (below); NO_PICK: nothing to credit
PICK_SIZE = 1          # the size of the pool (or of the node set) it was drawn from
PICK_NODE = 2          # the node (for ANY_NODE / ANY_MOVABLE: its index in the set drawn from)
PICK_Q = 3             # q = mix p(node) / P(node), the factor of d log P / d logit
PICK_GROUP_NODE = 4    # the node of the group draw, -1 when none was made
PICK_GROUP_Q = 5       # the group draw's d log P / d group logit
PICK_GROUPED = 6       # 1.0 when the draw made the move a group move, else 0.0
PICK_BASELINE = 7      # the reward's running mean (REINFORCE's baseline), carried from move to move
PICK_FIELDS = 8

#: The columns of the per-node counts (`ClimbState.move_stats`, float64[n, STATS]): a node's
#: picks and the improvements they made; its device moves grouped and single, and their improvements.
STAT_PICKS, STAT_BETTER, STAT_GROUPED, STAT_GROUPED_BETTER, STAT_SINGLE, STAT_SINGLE_BETTER = range(6)
STATS = 6
#: The columns of the per-node logits and their gradient (`ClimbState.move_grad`, float64[n, LOGITS];
#: the move head's output, `regal.policy`): the node's pick logit and its group logit.
LOGIT_NODE, LOGIT_GROUP = 0, 1
LOGITS = 2
#: The entries of `ClimbState.move_glob` (float64[2]): the gradient of picks over all nodes and
#: over all movable nodes, spread over the nodes by weight afterwards (`regal.moves`).
GLOB_ANY, GLOB_MOVABLE = 0, 1

#: The kinds of node pick (`pick[PICK_KIND]`).
NO_PICK = 0
FROM_POOL = 1           # a node of the focused pool
FROM_POOL_MOVABLE = 2   # a non-resident node of the focused pool
ANY_NODE = 3            # any node (an unfocused device move)
DIRECTED = 4            # a directed move's tensor, by bytes
ANY_MOVABLE = 5         # any node with room to move in the order (an unfocused order move)


class MovePolicy(NamedTuple):
    """The move policy as the moves read it: the share of picks it makes (0: none), each node's
    weight, the cumulative weights over all nodes and over the movable ones, the last pick
    (float64[PICK_FIELDS]) and each node's probability of a group move."""
    mix: float
    weight: np.ndarray
    cum: np.ndarray
    cum_movable: np.ndarray
    pick: np.ndarray
    group: np.ndarray


@numba.njit(**_STEP)
def clear(pick):
    """Nothing to credit: no node pick and no group draw noted."""
    pick[PICK_KIND], pick[PICK_GROUP_NODE] = 0.0, -1.0


@numba.njit(**_STEP)
def policy_of(s, mix):
    """The `MovePolicy` of a `ClimbState`, with share `mix` (0 when it has no weights)."""
    return MovePolicy(mix if s.move_weight.shape[0] else 0.0, s.move_weight, s.move_cum, s.move_cum_movable,
                      s.move_pick, s.move_group)


@numba.njit(**_STEP)
def note(pick, kind, m, v, q):
    """A node pick: its kind, the size of the set drawn from, the node, its factor q."""
    pick[PICK_KIND], pick[PICK_SIZE], pick[PICK_NODE], pick[PICK_Q] = kind, m, v, q


@numba.njit(**_STEP)
def _share_factor(mix, p, base):
    """q = mix p / (mix p + (1 - mix) base): d log P / d logit of the picked node is q (1 - p)."""
    total = mix * p + (1.0 - mix) * base
    return mix * p / total if total > 0.0 else 0.0


@numba.njit(**_JIT)
def pick_pool(pool, m, resident, skip_resident, pol, rng):
    """A node of pool[:m] (resident ones skipped with skip_resident), uniform or, with probability
    mix, by the policy's weights; -1 when none is eligible (no draw made)."""
    mix, w = pol.mix, pol.weight
    c, total = 0, 0.0
    for i in range(m):
        if not (skip_resident and resident[pool[i]]):
            c += 1
            if mix > 0.0:
                total += w[pool[i]]
    if c == 0:
        return -1
    v = -1
    if mix > 0.0 and rng.random() < mix:
        x = rng.random() * total
        for i in range(m):
            if not (skip_resident and resident[pool[i]]):
                v = pool[i]
                x -= w[v]
                if x < 0.0:
                    break
    else:
        j = rng.integers(0, c)
        for i in range(m):
            if not (skip_resident and resident[pool[i]]):
                if j == 0:
                    v = pool[i]
                    break
                j -= 1
    q = _share_factor(mix, w[v] / total, 1.0 / c) if mix > 0.0 and total > 0.0 else 0.0
    note(pol.pick, FROM_POOL_MOVABLE if skip_resident else FROM_POOL, m, v, q)
    return v


@numba.njit(**_JIT)
def pick_global(cum, size, pol, rng, kind):
    """An index in [0, size): uniform or, with probability mix, by the cumulative weights cum."""
    mix = pol.mix
    if mix > 0.0 and rng.random() < mix:
        i = min(int(np.searchsorted(cum, rng.random() * cum[size - 1], side="right")), size - 1)
    else:
        i = rng.integers(0, size)
    q = 0.0
    if mix > 0.0 and cum[size - 1] > 0.0:
        w = cum[i] - (cum[i - 1] if i > 0 else 0.0)
        q = _share_factor(mix, w / cum[size - 1], 1.0 / size)
    note(pol.pick, kind, size, i, q)
    return i


@numba.njit(**_JIT)
def pick_directed(nbytes, cand, m, pol, rng):
    """The index in cand[:m] of a directed move's tensor: by bytes or, with probability mix, by
    bytes times the policy's weight."""
    mix, w = pol.mix, pol.weight
    total, wtotal = 0.0, 0.0
    for i in range(m):
        total += float(nbytes[cand[i]])
        if mix > 0.0:
            wtotal += float(nbytes[cand[i]]) * w[cand[i]]
    weighted = mix > 0.0 and rng.random() < mix
    x = rng.random() * (wtotal if weighted else total)
    acc, i = 0.0, m - 1
    for j in range(m):  # the first cumulative weight > x (numpy.searchsorted, side="right")
        acc += float(nbytes[cand[j]]) * (w[cand[j]] if weighted else 1.0)
        if acc > x:
            i = j
            break
    u = cand[i]
    q = 0.0
    if mix > 0.0 and wtotal > 0.0 and total > 0.0:
        q = _share_factor(mix, float(nbytes[u]) * w[u] / wtotal, float(nbytes[u]) / total)
    note(pol.pick, DIRECTED, m, u, q)
    return i


@numba.njit(**_JIT)
def credit(g, pol, stats, grad, glob, pool, cand, better):
    """A simulated move's outcome (better: it improved the score) into the per-node counts
    (stats) and, when learning, REINFORCE's gradient: advantage (reward - baseline) times
    d log P / d logit, for the picked node's logit and (a device move of a non-resident node) its
    group logit. The reward is 1 for a better score, else 0, per evaluation: a screened move
    (rejected unsimulated, no evaluation spent) is neither rewarded nor counted. The baseline is
    the reward's running mean (pick[PICK_BASELINE])."""
    pick = pol.pick
    kind = int(pick[PICK_KIND])
    if kind == NO_PICK:
        return
    v, m, q = int(pick[PICK_NODE]), int(pick[PICK_SIZE]), pick[PICK_Q]
    r = 1.0 if better else 0.0
    gv = int(pick[PICK_GROUP_NODE])
    if stats.shape[0]:
        stats[v, STAT_PICKS] += 1.0
        stats[v, STAT_BETTER] += r
        if gv >= 0:
            col = STAT_GROUPED if pick[PICK_GROUPED] > 0.0 else STAT_SINGLE
            stats[gv, col] += 1.0
            stats[gv, col + 1] += r
    if grad.shape[0]:
        c = r - pick[PICK_BASELINE]
        pick[PICK_BASELINE] += 0.01 * (r - pick[PICK_BASELINE])
        if q > 0.0:
            grad[v, LOGIT_NODE] += c * q
            w = pol.weight
            if kind == FROM_POOL or kind == FROM_POOL_MOVABLE:
                total = 0.0
                for i in range(m):
                    if not (kind == FROM_POOL_MOVABLE and g.resident[pool[i]]):
                        total += w[pool[i]]
                for i in range(m):
                    u = pool[i]
                    if not (kind == FROM_POOL_MOVABLE and g.resident[u]):
                        grad[u, LOGIT_NODE] -= c * q * w[u] / total
            elif kind == DIRECTED:
                total = 0.0
                for i in range(m):
                    total += float(g.nbytes[cand[i]]) * w[cand[i]]
                for i in range(m):
                    u = cand[i]
                    grad[u, LOGIT_NODE] -= c * q * float(g.nbytes[u]) * w[u] / total
            else:
                glob[GLOB_ANY if kind == ANY_NODE else GLOB_MOVABLE] += c * q
        if gv >= 0:
            grad[gv, LOGIT_GROUP] += c * pick[PICK_GROUP_Q]
    clear(pick)
