"""The graph as the kernels read it: one NamedTuple of flat arrays (jraph style), passed whole.

`regal.simulate.kernel_graph(graph)` builds it once per Graph (cached on the Graph); every
kernel of the memory model (`regal.kernels.decode`, `regal.kernels.orders`, `regal.kernels.climb`) takes it as its
`g` argument instead of a dozen positional arrays. Numba types a NamedTuple of arrays like a
struct of arrays (no copies, no Python objects in the kernel), and caches kernels that take it:
the class is defined here, at module level, so the type pickles by name.

Beside it, the local-search climb's two structs, so its kernels take `(g, state, params, rng,
...)`: `ClimbParams` (its settings, scalars) and `ClimbState` (its arrays, counters as 0-d
arrays).

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


class ClimbParams(NamedTuple):
    """The local-search climb's settings as its kernel reads them (`regal.kernels.climb.climb`):
    `regal.climb.LocalSearchConfig` resolved for one graph and budget
    (`LocalSearchConfig.params`), each knob under the config's own name; scalars only."""
    p_equal: float           # probability of accepting an equal score
    patience: int            # moves without a new best before a kick
    kick_moves: int          # blind moves per kick
    focus_fraction: float    # share of the moves that pick their node near the peak (not adaptive)
    focus_width: int         # positions on either side of the peak step
    shift: int               # half of the order moves go at most this far
    informed: bool           # focused moves aim at the peak device
    directed_share: float    # share of focused moves aimed at a tensor held across the peak
    temperature: float       # annealing: the start temperature, scaled (`LocalSearchConfig.params`); 0: off
    horizon: int             # annealing: evaluations over which the temperature falls to 0
    adaptive_moves: bool     # pick the move kind by its recent success
    adaptive_floor: float    # adaptive: each move kind's least probability
    adaptive_rate: float     # adaptive: the step of a success estimate
    screen_moves: int        # 0 off, 1 reject provably worse device moves unsimulated, 2 audit
    group_moves: float       # share of device moves that take neighbours along (0: no draw)
    group_cap: int           # the most nodes a group move moves
    group_adaptive: bool     # the grouped share by the recent success of grouped and single moves
    mix: float = 0.0         # a move policy's mix: the share of node picks and group draws it makes
    #                          (`regal.moves`); 0: none, no draw


class ClimbState(NamedTuple):
    """What the climb kernel (`regal.kernels.climb.climb`) updates in place between calls (n nodes,
    d devices); the counters are 0-d arrays (`state.count[()]`), so a kernel writes them."""
    placement: np.ndarray       # int32[n]     the current schedule
    order: np.ndarray           # int32[n]
    pos: np.ndarray             # int64[n]     pos[order[i]] = i
    best_placement: np.ndarray  # int32[n]     the best schedule seen
    best_order: np.ndarray      # int32[n]
    traces: np.ndarray          # int64[2, n, d]  the current schedule's step trace (row `cur`) and scratch
    device_peak: np.ndarray     # int64[d]     scratch: the simulator's per-device peaks
    score: np.ndarray           # int64[3]     the current Score: peak, sum of device peaks, steps at the peak
    best_score: np.ndarray      # int64[3]     the best Score
    quality: np.ndarray         # float64[4]   each move kind's success estimate (adaptive moves)
    group_quality: np.ndarray   # float64[2]   single and grouped device moves' success estimates
    hist: np.ndarray            # int64[*, 2]  (evaluations, peak) each time the best peak fell
    count: np.ndarray           # int64[()]    evaluations spent
    since: np.ndarray           # int64[()]    moves since the last new best
    accepted: np.ndarray        # int64[()]    accepted moves, sideways ones included
    sideways: np.ndarray        # int64[()]    accepted moves of an equal score
    kicks: np.ndarray           # int64[()]
    cur: np.ndarray             # int64[()]    the row of `traces` that is the current schedule's
    num_hist: np.ndarray        # int64[()]    the rows of `hist` in use
    screened: np.ndarray        # int64[()]    moves rejected unsimulated (`screen_moves` 1; 2: would be)
    missed: np.ndarray          # int64[()]    audit: bounds above the simulated peak (never, tested)
    grouped: np.ndarray         # int64[()]    group moves simulated
    movable: np.ndarray         # int64[*]     the non-resident nodes: those whose position matters
    hits: np.ndarray            # int64[n*d, 2] scratch: the (step, device) entries at the peak
    cand: np.ndarray            # int64[n]     scratch: the tensors held across the peak
    last: np.ndarray            # int64[n]     scratch: their last consumer's position
    pool: np.ndarray            # int64[n]     scratch: the nodes a focused move picks from
    # a move policy (issue 47, `regal.moves`): every array of size 0 without one; the layouts of
    # the last four are `regal.kernels.climb_picks`' (STAT_*, LOGIT_*, GLOB_*, PICK_*)
    move_weight: np.ndarray     # float64[n]   the policy's weight of picking each node (exp of its logit)
    move_cum: np.ndarray        # float64[n]   cumulative move_weight over all nodes
    move_cum_movable: np.ndarray  # float64[*] cumulative move_weight over `movable`
    move_group: np.ndarray      # float64[n]   the policy's probability that a device move of the node takes
    #                                          its neighbours along
    move_stats: np.ndarray      # float64[n, STATS] per picked node: picks, improvements, grouped picks,
    #                                          their improvements, ungrouped device picks, their improvements
    move_grad: np.ndarray       # float64[n, LOGITS] REINFORCE: sum of advantage x d log-probability / d logit
    #                                          (node logit, group logit) over the moves
    move_glob: np.ndarray       # float64[2]   the same for picks over all nodes / all movable nodes, spread
    #                                          over the nodes by weight afterwards (`regal.moves`)
    move_pick: np.ndarray       # float64[PICK_FIELDS] the last pick: kind, pool size, node, d log-prob
    #                                          factor, group node, group factor, grouped, the reward baseline
