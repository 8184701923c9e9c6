"""The local search's climb (`regal.local_search`) as one Numba kernel, `climb`, and its moves.

`regal.local_search` in one kernel: the same moves, acceptance and kicks, and the same draws
from the same numpy Generator (Numba's `random()` and `integers(lo, hi)` are numpy's, bit for
bit, on the shared bit generator), so a climb gives the same schedules as the Python loop it
replaced. Every kernel here takes `(g, state, params, rng, ...)`: the graph
(`regal.kernels.structs.KernelGraph`, the simulator's), the climb's arrays and counters
(`ClimbState`, kept by the caller between calls) and its settings (`ClimbParams`), all three
beside each other in `regal.kernels.structs`; helpers that need only a few arrays take those.
A move is written to `mv`: int64[3], (0 device, node, old device), (1 order, from, to) or
(2 group, size, old device) with the group in `grp`. Which node a move takes, with a move policy,
and the credit of its outcome are `regal.kernels.climb_picks`'.
"""

import numba
import numpy as np

from regal._jit import JIT as _JIT
from regal.kernels.decode import feasible_window, live_across, peak_hits, shift_node, steps_at_peak
from regal.kernels.climb_picks import (ANY_MOVABLE, ANY_NODE, PICK_GROUP_NODE, PICK_GROUP_Q, PICK_GROUPED, PICK_Q,
                                      clear, credit, note, pick_directed, pick_global, pick_pool, policy_of)
from regal.kernels.peak_memory import simulate_peak

#: The climb's steps, inlined into it by Numba. `climb` takes the state's arrays out once and
#: hands each step the few it reads: a step given the whole `ClimbState` would count a reference
#: to each of its 27 arrays up and down per move (Numba's inlining binds the struct anew).
_STEP = dict(inline="always", **_JIT)
#: The move kinds an adaptive climb chooses among (regal.climb.KINDS), unpacked: uniform,
#: focused, informed, directed.
KIND_FOCUSED = (False, True, True, True)
KIND_INFORMED = (False, False, True, True)
KIND_DIRECTED = (0.0, 0.0, 0.0, 1.0)
_INT64_MAX = np.iinfo(np.int64).max


@numba.njit(**_STEP)
def _score(g, order, placement, device_peak, count, trace, out):
    """Simulate (order, placement) into trace, count the evaluation (count: int64[()]), write
    (peak, sum of device peaks, steps at peak) to out."""
    peak = simulate_peak(g, order, placement, device_peak.shape[0], device_peak, trace)
    count[()] += 1
    out[0] = peak
    out[1] = device_peak.sum()
    out[2] = steps_at_peak(trace, order, g.resident, peak)


@numba.njit(**_JIT)
def _less(a0, a1, a2, b0, b1, b2):
    return a0 < b0 or (a0 == b0 and (a1 < b1 or (a1 == b1 and a2 < b2)))


@numba.njit(**_JIT)
def _argmin_but(row, skip):
    """The device with the least memory in row (int64[d]), skip excluded; ties to the lower."""
    best, bv = -1, _INT64_MAX
    for j in range(row.shape[0]):
        if j != skip and (best < 0 or row[j] < bv):
            best, bv = j, row[j]
    return best


@numba.njit(**_STEP)
def _window(g, pos, v):
    """(lo, hi): the positions v may take, after its predecessors and before its successors."""
    return feasible_window(g.pred_ptr, g.pred_idx, g.succ_ptr, g.succ_idx, pos, v, g.num_nodes)


@numba.njit(**_STEP)
def _order_move(g, order, pos, v, shift, rng, mv):
    """Order move: v to another position in its feasible window (half the time within `shift`);
    mv = (1, from, to) and True, or False if v has no room."""
    lo, hi = _window(g, pos, v)
    p = pos[v]
    if rng.random() < 0.5:
        lo, hi = max(lo, p - shift), min(hi, p + shift)
    if hi <= lo:
        return False
    q = rng.integers(lo, hi)
    if q >= p:
        q += 1
    shift_node(order, pos, p, q)
    mv[0], mv[1], mv[2] = 1, p, q
    return True


@numba.njit(**_STEP)
def _directed(g, order, pos, placement, scratch, rng, trace, peak, mv, pol):
    """Directed move (regal.local_search's docstring): pick a (step t, device k) at the peak and
    a tensor u held on k across t, by bytes; move u to the device with the least memory at t,
    delay it past t, or advance its last reader to t or before (thirds). mv and True, or False
    if there is no such tensor or it cannot move. scratch: `_scratch(state)`; pol: the `MovePolicy`."""
    hits, cand, last = scratch[0], scratch[1], scratch[2]
    m = peak_hits(trace, peak, hits)
    if m == 0:
        return False
    h = rng.integers(0, m)
    t, k = hits[h, 0], hits[h, 1]
    n, nbytes = g.num_nodes, g.nbytes
    m = live_across(g, order, pos, placement, t, k, cand, last)
    if m == 0:
        return False
    i = pick_directed(nbytes, cand, m, pol, rng)
    u, lastpos = cand[i], last[i]
    r = rng.random()
    if trace.shape[1] > 1 and r < 1 / 3:
        placement[u] = _argmin_but(trace[t], k)
        mv[0], mv[1], mv[2] = 0, u, k
        return True
    if r < 2 / 3:
        lo, hi = _window(g, pos, u)
        if hi > t:
            p = pos[u]
            q = rng.integers(t, hi + 1)
            shift_node(order, pos, p, q)
            mv[0], mv[1], mv[2] = 1, p, q
            return True
    if lastpos >= n:
        return False
    c = order[lastpos]
    lo, hi = _window(g, pos, c)
    if lo <= t and not g.resident[c]:
        q = rng.integers(lo, t + 1)
        shift_node(order, pos, lastpos, q)
        mv[0], mv[1], mv[2] = 1, lastpos, q
        return True
    return False


@numba.njit(**_JIT)
def _focus_pool(order, placement, a, b, k, on_k, pool):
    """Write the nodes at positions [a, b) of order to pool (with on_k, those on device k, or
    all if none is); returns how many."""
    m = 0
    if on_k:
        for i in range(a, b):
            if placement[order[i]] == k:
                pool[m] = order[i]
                m += 1
    if m == 0:
        for i in range(a, b):
            pool[m] = order[i]
            m += 1
    return m


@numba.njit(**_STEP)
def _propose(g, order, pos, placement, scratch, p, rng, trace, peak, aim, mv, pol):
    """Apply one random move to (order, pos, placement), written to mv; False if no node could
    move. aim = (focused, informed, directed share): near the peak if focused (a window of
    `p.focus_width` positions around a random step at the peak), informed: aimed at the peak
    device, that share of the focused moves `_directed`'s. trace: the current schedule's step
    trace; peak: its peak; scratch: `_scratch(state)`; pol: the `MovePolicy`, whose weights its
    node picks follow (`climb_picks.pick_pool`, `pick_global`), the pick noted in it."""
    focused, informed, directed_share = aim
    if focused and directed_share > 0.0 and rng.random() < directed_share:
        if _directed(g, order, pos, placement, scratch, rng, trace, peak, mv, pol):
            return True
    n, d = g.num_nodes, trace.shape[1]
    hits, pool, movable = scratch[0], scratch[3], scratch[4]
    a, b, k_peak, t_peak = 0, 0, 0, 0
    if focused:  # the window of order positions [a, b) around a random step at the peak
        m = peak_hits(trace, peak, hits)
        if m:
            h = rng.integers(0, m)
            t_peak, k_peak = hits[h, 0], hits[h, 1]
        else:
            t_peak = rng.integers(0, n)
        a, b = max(0, t_peak - p.focus_width), min(n, t_peak + p.focus_width + 1)
    informed = informed and focused
    if d > 1 and rng.random() < 0.5:  # device move
        if focused:
            m = _focus_pool(order, placement, a, b, k_peak, True, pool)
            v = pick_pool(pool, m, g.resident, False, pol, rng)
        else:
            v = pick_global(pol.cum, n, pol, rng, ANY_NODE)
        old = placement[v]
        if informed:
            placement[v] = _argmin_but(trace[t_peak], old)
        else:
            new = rng.integers(0, d - 1)
            placement[v] = new + 1 if new >= old else new
        mv[0], mv[1], mv[2] = 0, v, old
        return True
    m = 0  # the focus: the window's nodes (informed, with d > 1: those on the peak device, if any)
    if focused:
        m = _focus_pool(order, placement, a, b, k_peak, informed and d > 1, pool)
    v = -1
    for _ in range(20):  # attempts at finding a node with room to move
        if focused:
            v = pick_pool(pool, m, g.resident, True, pol, rng)
            if v < 0:
                focused = False
                continue
        elif movable.shape[0]:
            v = movable[pick_global(pol.cum_movable, movable.shape[0], pol, rng, ANY_MOVABLE)]
            note(pol.pick, ANY_MOVABLE, movable.shape[0], v, pol.pick[PICK_Q])
        else:
            return False
        if _order_move(g, order, pos, v, p.shift, rng, mv):
            return True
    return False


@numba.njit(**_STEP)
def _device_move_bound(g, pos, placement, trace, v):
    """A lower bound on the bytes device b = placement[v] holds while v's step runs, v (not
    resident) just moved there from another device, the order unchanged; trace: the step trace
    before the move. What b held in that row stays (v's move only adds holders on b), and
    b now also holds v's output and temp, and a copy of every input of v homed elsewhere that
    no other consumer on b keeps there across v's step (SPEC.md section 3), less the most v may
    take over (its `reuse` inputs homed on b, at most its own bytes)."""
    b = placement[v]
    t = pos[v]
    lb = trace[t, b] + g.nbytes[v] + g.temp[v]
    for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
        u = g.in_idx[e]
        if placement[u] == b:
            continue
        seen = False
        for f in range(g.in_ptr[v], e):
            seen |= g.in_idx[f] == u
        if seen:
            continue
        before, after = False, False
        for f in range(g.out_ptr[u], g.out_ptr[u + 1]):
            w = g.out_idx[f]
            if w != v and placement[w] == b:
                before |= pos[w] < t
                after |= pos[w] > t
        if not (before and after):
            lb += g.nbytes[u]
    taken = 0
    for e in range(g.reuse_ptr[v], g.reuse_ptr[v + 1]):
        u = g.reuse_idx[e]
        if placement[u] == b and not g.resident[u]:
            taken += g.nbytes[u]
    return lb - min(taken, g.nbytes[v])


@numba.njit(**_JIT)
def _undo(order, pos, placement, mv, grp):
    if mv[0] == 0:
        placement[mv[1]] = mv[2]
    elif mv[0] == 2:
        for i in range(mv[1]):
            placement[grp[i]] = mv[2]
    else:
        shift_node(order, pos, mv[2], mv[1])


@numba.njit(**_STEP)
def _take_along(nodes, resident, placement, old, new, grp, m, cap):
    """Move each of `nodes` still on `old` and not resident to `new`, appending it to grp[:m],
    while fewer than `cap`; returns the new m."""
    for w in nodes:
        if m < cap and placement[w] == old and not resident[w]:
            placement[w] = new
            grp[m] = w
            m += 1
    return m


@numba.njit(**_JIT)
def _grow_group(g, placement, mv, grp, cap):
    """Extend the device move in mv (node v, from device `old`, already on its new device) to up
    to `cap` nodes: breadth first from v over data edges (consumers first), every non-resident
    node still on `old` moved along. A group of one stays a device move (mv unchanged); else mv
    = (2, group size, old) with the group in grp."""
    v, old = mv[1], mv[2]
    new = placement[v]
    grp[0] = v
    m, i = 1, 0
    while i < m and m < cap:
        u = grp[i]
        i += 1
        m = _take_along(g.out_idx[g.out_ptr[u]:g.out_ptr[u + 1]], g.resident, placement, old, new, grp, m, cap)
        m = _take_along(g.in_idx[g.in_ptr[u]:g.in_ptr[u + 1]], g.resident, placement, old, new, grp, m, cap)
    if m > 1:
        mv[0], mv[1], mv[2] = 2, m, old


@numba.njit(**_STEP)
def _keep_if_best(score, placement, order, best, since, record):
    """Make the current schedule (score, placement, order) the best, best = (best_score,
    best_placement, best_order), if it scores better; note a lower peak in the history, record =
    (hist, num_hist, count): `_record(state)`."""
    best_score, best_placement, best_order = best
    hist, num_hist, count = record
    if _less(score[0], score[1], score[2], best_score[0], best_score[1], best_score[2]):
        best_score[:] = score
        best_placement[:] = placement
        best_order[:] = order
        since[()] = 0
        h = num_hist[()]
        if score[0] < hist[h - 1, 1] and h < hist.shape[0]:
            hist[h, 0] = count[()]
            hist[h, 1] = score[0]
            num_hist[()] = h + 1


@numba.njit(**_JIT)
def _kick(g, s, p, rng, mv, new):
    """Back to the best schedule, `p.kick_moves` blind moves, one evaluation (into the current
    trace, which becomes the current score's), then kept if best; returns how many moves were
    made."""
    s.placement[:] = s.best_placement
    s.order[:] = s.best_order
    for i in range(g.num_nodes):
        s.pos[s.order[i]] = i
    trace = s.traces[s.cur[()]]
    scratch = _scratch(s)
    moved = 0
    for _ in range(p.kick_moves):
        moved += _propose(g, s.order, s.pos, s.placement, scratch, p, rng, trace, s.score[0], (False, False, 0.0), mv,
                          policy_of(s, 0.0))
    _score(g, s.order, s.placement, s.device_peak, s.count, trace, new)
    s.score[:] = new
    s.kicks[()] += 1
    s.since[()] = 0
    _keep_if_best(s.score, s.placement, s.order, _best(s), s.since, _record(s))
    return moved


@numba.njit(**_STEP)
def _scratch(s):
    """The scratch arrays the moves share: (hits, cand, last, pool, movable)."""
    return s.hits, s.cand, s.last, s.pool, s.movable


@numba.njit(**_STEP)
def _best(s):
    """(best_score, best_placement, best_order)."""
    return s.best_score, s.best_placement, s.best_order


@numba.njit(**_STEP)
def _record(s):
    """(hist, num_hist, count): the history of best peaks and the evaluation counter."""
    return s.hist, s.num_hist, s.count


@numba.njit(**_JIT)
def _pick_kind(quality, floor, rng):
    """An adaptive climb's move kind: k with probability floor + (1 - nk floor) quality[k] / sum(quality)."""
    nk = quality.shape[0]
    total = 0.0
    for j in range(nk):
        total += quality[j]
    x = rng.random() * total
    u = rng.random()
    if u < nk * floor:
        return min(int(u / floor), nk - 1)
    for j in range(nk):
        x -= quality[j]
        if x < 0.0:
            return j
    return nk - 1


@numba.njit(**_STEP)
def _learn(q, k, rate, success):
    """A success estimate's step (adaptive move kinds, group moves): q[k] moves by `rate` toward
    1 if the move improved the score, else toward 0."""
    q[k] += rate * ((1.0 if success else 0.0) - q[k])


@numba.njit(**_JIT)
def _accepts(new, score, count, p, rng, draw):
    """(accept, better, equal) for the score `new` against the current `score` after `count`
    evaluations: better; equal with p.p_equal; worse with the annealing probability
    exp(-relative rise / temperature now), against `draw` when one was made already (>= 0),
    else a new one."""
    better = _less(new[0], new[1], new[2], score[0], score[1], score[2])
    equal = new[0] == score[0] and new[1] == score[1] and new[2] == score[2]
    accept = better
    if not accept and equal:
        accept = rng.random() < p.p_equal
    if not accept and p.temperature > 0.0 and new[0] > score[0]:  # annealing
        hot = _temperature_now(p.temperature, count, p.horizon)
        if hot > 0.0:
            accept = (draw if draw >= 0.0 else rng.random()) < _uphill_odds(new[0], score[0], hot)
    return accept, better, equal


@numba.njit(**_STEP)
def _temperature_now(temperature, count, horizon):
    """The annealing temperature after `count` evaluations: falling linearly to 0 at `horizon`."""
    return temperature * max(0.0, 1.0 - count / max(horizon, 1))


@numba.njit(**_STEP)
def _uphill_odds(peak, current, hot):
    """The probability of accepting a move from peak `current` to a higher `peak` at temperature `hot`."""
    return np.exp(-((peak - current) / max(current, 1)) / hot)


@numba.njit(**_STEP)
def _pick_move(quality, p, rng):
    """(kind, (focused, informed, directed share)) of the next move: an adaptive climb's kind
    (`_pick_kind` on the kinds' success estimates `quality`), else -1 with `focus_fraction` of
    the moves focused."""
    if p.adaptive_moves:
        kind = _pick_kind(quality, p.adaptive_floor, rng)
        return kind, (KIND_FOCUSED[kind], KIND_INFORMED[kind], KIND_DIRECTED[kind])
    return -1, (rng.random() < p.focus_fraction, p.informed, p.directed_share)


@numba.njit(**_STEP)
def _maybe_group(g, placement, group_quality, grouped, p, rng, mv, grp, pol):
    """Make a device move of a non-resident node a group move with the group share (fixed, or
    adaptive: gq[1] / (gq[0] + gq[1]) within 0.1..0.9, gq = group_quality; with a move policy,
    mix x its probability for the node + (1 - mix) x that share); returns the sort of device move
    to learn from (0 single, 1 grouped), or -1 (no group moves, or not such a move: no draw
    made). grouped: int64[()], the group moves made. The draw is noted in pol's pick (group
    node, d log P / d group logit, grouped)."""
    if not (p.group_moves > 0.0 and mv[0] == 0 and not g.resident[mv[1]]):
        return -1
    share = p.group_moves
    if p.group_adaptive:
        share = min(0.9, max(0.1, group_quality[1] / (group_quality[0] + group_quality[1])))
    mix, pick, v = pol.mix, pol.pick, mv[1]
    sig = pol.group[v] if mix > 0.0 else 0.0
    prob = mix * sig + (1.0 - mix) * share
    pick[PICK_GROUP_NODE], pick[PICK_GROUP_Q], pick[PICK_GROUPED] = v, 0.0, 0.0
    if rng.random() < prob:
        _grow_group(g, placement, mv, grp, p.group_cap)
        grouped[()] += mv[0] == 2   # never screened: each one simulated
        pick[PICK_GROUP_Q], pick[PICK_GROUPED] = (mix * sig * (1.0 - sig) / prob if prob > 0.0 else 0.0), 1.0
        return 1
    pick[PICK_GROUP_Q] = -mix * sig * (1.0 - sig) / (1.0 - prob) if prob < 1.0 else 0.0
    return 0


@numba.njit(**_STEP)
def _screen(g, pos, placement, screened, count, p, rng, mv, trace, peak):
    """A device move of one non-resident node whose bound (`_device_move_bound`) is above the
    current peak: -2.0 when it is rejected unsimulated (screen_moves 1: unless the annealing draw,
    made here, would accept the bound's rise; then that draw), else -1.0 (no draw made; audit
    mode 2 counts the move in screened). count: the evaluations so far."""
    draw = -1.0
    lb = _device_move_bound(g, pos, placement, trace, mv[1])
    if lb > peak:
        if p.screen_moves == 2:
            screened[()] += 1
            return draw
        hot = _temperature_now(p.temperature, count + 1, p.horizon)   # what _accepts would use
        if p.temperature > 0.0 and hot > 0.0:
            draw = rng.random()
        if draw < 0.0 or draw >= _uphill_odds(lb, peak, hot):
            return -2.0
    return draw


@numba.njit(**_STEP)
def _learn_both(quality, group_quality, p, kind, gkind, better):
    """A move's outcome into the grouped / single estimates (gkind >= 0) and the move kinds' (adaptive)."""
    if gkind >= 0:
        _learn(group_quality, gkind, p.adaptive_rate, better)
    if p.adaptive_moves:
        _learn(quality, kind, p.adaptive_rate, better)


@numba.njit(**_JIT)
def climb(g, s, p, rng, stop):
    """Climb until s.count reaches stop: propose, evaluate, accept (better; equal with
    p.p_equal; worse with the annealing probability) or undo; kick after `p.patience` moves
    without a new best (regal.local_search's docstring). g: the `KernelGraph`; s: the
    `ClimbState`; p: the `ClimbParams`. Returns 0 at stop, 1 when nothing can move.

    screen_moves (1): a device move whose peak is provably higher (`_device_move_bound` above
    the current peak) is not simulated: rejected as its simulation would be, the annealing draw
    made first and the move simulated only when that draw would accept the bound's rise (so it
    is accepted with the same probability). It costs no evaluation; s.screened counts them.
    2: audit, every move simulated; s.screened counts the moves 1 would screen, s.missed those
    whose bound exceeded the simulated peak (a wrong bound: never, tested).

    group_moves (> 0): that share of the device moves of a non-resident node takes the node's
    neighbours along (`_grow_group`, at most group_cap nodes); no draw is made when 0. With
    group_adaptive the share is gq[1] / (gq[0] + gq[1]) within 0.1..0.9 instead, gq =
    s.group_quality the success estimates of single and grouped device moves, updated like
    `s.quality`.
    """
    mv, new = np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)
    grp = np.empty(p.group_cap if p.group_moves > 0.0 else 0, dtype=np.int64)
    order, pos, placement, traces, score = s.order, s.pos, s.placement, s.traces, s.score
    count, since, cur, screened = s.count, s.since, s.cur, s.screened
    quality, group_quality, device_peak, scratch = s.quality, s.group_quality, s.device_peak, _scratch(s)
    best, record, accepted, sideways = _best(s), _record(s), s.accepted, s.sideways
    pol = policy_of(s, p.mix)
    stats, mgrad, glob = s.move_stats, s.move_grad, s.move_glob
    clear(pol.pick)
    while count[()] < stop:
        if since[()] >= p.patience:
            if _kick(g, s, p, rng, mv, new) == 0:
                return 1
            continue
        trace, peak = traces[cur[()]], score[0]
        kind, aim = _pick_move(quality, p, rng)
        if not _propose(g, order, pos, placement, scratch, p, rng, trace, peak, aim, mv, pol):
            since[()] += 1
            if scratch[4].shape[0] == 0 and device_peak.shape[0] == 1:
                return 1
            continue
        gkind = _maybe_group(g, placement, group_quality, s.grouped, p, rng, mv, grp, pol)
        single = mv[0] == 0 and not g.resident[mv[1]]   # a device move of one non-resident node
        draw = -1.0
        if p.screen_moves > 0 and single:
            draw = _screen(g, pos, placement, screened, count[()], p, rng, mv, trace, peak)
            if draw == -2.0:   # rejected unsimulated
                _undo(order, pos, placement, mv, grp)
                screened[()] += 1
                since[()] += 1
                _learn_both(quality, group_quality, p, kind, gkind, False)
                clear(pol.pick)   # no evaluation spent: no reward, no count
                continue
        _score(g, order, placement, device_peak, count, traces[1 - cur[()]], new)
        if p.screen_moves == 2 and single:
            s.missed[()] += _device_move_bound(g, pos, placement, trace, mv[1]) > new[0]
        since[()] += 1
        accept, better, equal = _accepts(new, score, count[()], p, rng, draw)
        if accept:
            accepted[()] += 1
            sideways[()] += equal
            score[:] = new
            cur[()] = 1 - cur[()]
            _keep_if_best(score, placement, order, best, since, record)
        else:
            _undo(order, pos, placement, mv, grp)
        _learn_both(quality, group_quality, p, kind, gkind, better)
        credit(g, pol, stats, mgrad, glob, scratch[3], scratch[1], better)
    return 0
