"""Static memory packing: an offset for every buffer, so that no two live buffers overlap.

A *packing instance* is a list of buffers, each live on a half-open interval of time
`[lower, upper)` and `size` bytes long (MiniMalloc's CSV: `id,lower,upper,size`). A packing
gives each an `offset`; it is valid when any two buffers whose lives intersect occupy disjoint
byte ranges `[offset, offset + size)`, and its arena is the largest `offset + size`. No arena
is smaller than the *live-bytes bound*, the most bytes live at one time; a packing at the bound
is optimal.

`pack(instance, time_limit_s)` returns the best packing it finds within the time limit:

1. the fast heuristic: greedy placement (first fit and best fit) in several orders (size,
   area, life, the busiest section first), the best kept; at the bound it stops there;
2. MiniMalloc's exact search (`regal.kernels.minimalloc.search`; Moffitt, ASPLOS 2023) at the
   bound, its three preorders taking turns under doubling node limits as MiniMalloc does;
3. if the bound is not reached, a bisection between the bound and the best arena found, each
   capacity tried with a share of the time left.

Buffers that live over the whole span of their component are stacked at its bottom first (an
exchange argument: moving such a buffer to the top of any packing and lowering what was above
it keeps the packing valid at the same arena), and independent components (no buffer live
across a time between them) are packed apart. Every packing this module returns has passed
`check`, which is independent of the packer. See `regal.memory_plan` for a graph's buffers.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import numpy as np

from regal.kernels.collide import first_collision
from regal.kernels import minimalloc as _minimalloc
from regal.kernels import pack as K
from regal._io import CsvError, FileNotFound, csv_field, csv_rows
from regal._stop import KernelWatch

__all__ = ["PackingError", "Instance", "Packing", "instance", "live_bytes_bound", "check", "pack",
           "greedy_pack", "read_csv", "write_csv"]


class PackingError(ValueError):
    """A malformed instance or an invalid packing; the message names the buffer (or row)."""


class PackingFileNotFound(FileNotFound, PackingError):
    """A CSV file that does not exist: a PackingError and a FileNotFoundError (an OSError)."""


#: Sizes, lives and offsets are exact up to this (2**62 bytes or steps): larger ones are refused,
#: and so is an instance whose live bytes at some time add up to more (sums are checked, never
#: wrapped).
MAX_VALUE = K.MAX_VALUE


class Instance(NamedTuple):
    """Buffers to pack: ids (tuple of str), lower, upper, size: int64[m] (lives [lower, upper)),
    each value in [0, MAX_VALUE]."""
    ids: tuple
    lower: np.ndarray
    upper: np.ndarray
    size: np.ndarray


class Packing(NamedTuple):
    """A checked packing. offsets: int64[m]; packed_bytes: max(offset + size), 0 when empty;
    bound_bytes: the live-bytes bound; optimal: packed_bytes == bound_bytes, or a complete search
    showed that nothing smaller fits; method: what found it; seconds: wall time."""
    offsets: np.ndarray
    packed_bytes: int
    bound_bytes: int
    optimal: bool
    method: str
    seconds: float


def _column(a, name: str, ids) -> np.ndarray:
    """int64[m] from integers in [0, MAX_VALUE] (any integer dtype, or Python ints); PackingError
    naming the first buffer out of range."""
    a = np.asarray(a)
    if a.size and a.dtype == object:
        if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in a.tolist()):
            raise PackingError(f"{name} must hold integers")
        bad = [i for i, x in enumerate(a.tolist()) if not 0 <= x <= MAX_VALUE]
    elif a.size and not np.issubdtype(a.dtype, np.integer):
        raise PackingError(f"{name} must hold integers")
    else:
        bad = np.flatnonzero((a < 0) | (a > MAX_VALUE)).tolist() if a.size else []
    if bad:
        i = bad[0]
        what = "negative" if int(a[i]) < 0 else "over 2**62, the largest value a packing holds exactly"
        raise PackingError(f"buffer {ids[i]!r}: {name} {int(a[i])} is {what}")
    return np.ascontiguousarray(a, dtype=np.int64)


def instance(lower, upper, size, ids=None) -> Instance:
    """Validate and build an Instance (PackingError naming the first bad buffer)."""
    lower, upper, size = (np.asarray(a) for a in (lower, upper, size))
    m = lower.shape[0] if lower.ndim == 1 else -1
    if lower.ndim != 1 or upper.shape != (m,) or size.shape != (m,):
        raise PackingError("lower, upper and size must be one-dimensional arrays of one length")
    ids = tuple(str(i) for i in range(m)) if ids is None else tuple(str(i) for i in ids)
    if len(ids) != m:
        raise PackingError(f"{len(ids)} ids for {m} buffers")
    lower, upper, size = (_column(a, name, ids) for a, name in ((lower, "lower"), (upper, "upper"), (size, "size")))
    bad = upper < lower
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PackingError(f"buffer {ids[i]!r} has upper < lower (lower {lower[i]}, upper {upper[i]}, size {size[i]})")
    return Instance(ids, lower, upper, size)


def _live_peak(lower, upper, size) -> tuple[int, int]:
    """(the most bytes live at one time, a time when they are), exact (Python ints where an
    int64 sum could wrap)."""
    lower, upper, size = (np.asarray(a, dtype=np.int64) for a in (lower, upper, size))
    keep = (size > 0) & (upper > lower)
    if not keep.any():
        return 0, 0
    t = np.concatenate([lower[keep], upper[keep]])
    delta = np.concatenate([size[keep], -size[keep]])
    order = np.lexsort((delta, t))  # at one time, frees (negative) before allocations
    if float(size[keep].sum(dtype=np.float64)) >= 2.0 ** 62:  # an int64 running sum might wrap
        delta = delta.astype(object)
    running = np.cumsum(delta[order])
    at = int(np.argmax(running))
    return int(running[at]), int(t[order][at])


def live_bytes_bound(lower, upper, size) -> int:
    """The most bytes live at one time: a lower bound on any packing's arena (exact, a Python
    int: it may be over MAX_VALUE, which `pack` refuses)."""
    return _live_peak(lower, upper, size)[0]


def check(inst: Instance, offsets, vectorized: bool = True) -> int:
    """The arena of a valid packing of `inst`; PackingError naming two buffers that collide (or
    a missing, negative or too large offset: every end, offset + size, is at most MAX_VALUE).
    Independent of the packer: a sweep over time that keeps the live buffers sorted by offset,
    each starting buffer tested against its neighbours (`regal.kernels.collide`, issue 55: the
    NumPy test of every (start time, live buffer) pair took 1-3 s for 100,000 buffers after a
    stop request; vectorized=False: the same sweep in Python ints, its twin)."""
    offsets = np.asarray(offsets)
    m = inst.size.shape[0]
    if offsets.shape != (m,):
        raise PackingError(f"{offsets.shape[0] if offsets.ndim else 0} offsets for {m} buffers")
    if m and not (np.issubdtype(offsets.dtype, np.integer) or offsets.dtype == object):
        raise PackingError("offsets must be integers")
    sizes = inst.size.tolist()
    if offsets.dtype == object or (offsets.dtype.kind == "u" and m and int(offsets.max()) > MAX_VALUE):
        big = [int(x) for x in offsets.tolist()]   # Python ints: a value past int64 stays exact
        bad = next((i for i in range(m) if big[i] < 0 or big[i] + sizes[i] > MAX_VALUE), None)
    else:
        o = offsets.astype(np.int64)
        found = np.flatnonzero((o < 0) | (o > MAX_VALUE - inst.size))
        bad = int(found[0]) if found.size else None
    if bad is not None:
        oi = int(offsets[bad])
        if oi < 0:
            raise PackingError(f"buffer {inst.ids[bad]!r} has a negative offset {oi}")
        raise PackingError(f"buffer {inst.ids[bad]!r} ends at {oi + sizes[bad]} (offset {oi} + size "
                           f"{sizes[bad]}), over 2**62, the largest value a packing holds exactly")
    off = offsets.astype(np.int64)   # every offset fits now
    live_at = np.flatnonzero((inst.size > 0) & (inst.upper > inst.lower))
    if vectorized and live_at.size:
        off64 = off[live_at]
        pair = first_collision(np.ascontiguousarray(inst.lower[live_at], dtype=np.int64),
                               np.ascontiguousarray(inst.upper[live_at], dtype=np.int64), off64,
                               np.ascontiguousarray(inst.size[live_at], dtype=np.int64))
        if pair[0] < 0:
            return int((off64 + inst.size[live_at]).max())
        i, other = int(live_at[pair[0]]), int(live_at[pair[1]])
        a = (int(off[i]), int(off[i]) + sizes[i])
        b = (int(off[other]), int(off[other]) + sizes[other])
        raise PackingError(f"buffers {inst.ids[i]!r} and {inst.ids[other]!r} are live at the same time "
                           f"and overlap in [{max(a[0], b[0])}, {min(a[1], b[1])})")
    live, offs = live_at.tolist(), off.tolist()
    lo, up = inst.lower.tolist(), inst.upper.tolist()
    events = sorted([(lo[i], 1, i) for i in live] + [(up[i], 0, i) for i in live])
    import bisect
    active: list[tuple[int, int, int]] = []  # (offset, end, buffer), sorted
    for _, kind, i in events:
        item = (offs[i], offs[i] + sizes[i], i)
        if kind == 0:
            active.pop(bisect.bisect_left(active, item))
            continue
        k = bisect.bisect_left(active, item)
        for j in (k - 1, k):
            if 0 <= j < len(active) and active[j][0] < item[1] and item[0] < active[j][1]:
                other = active[j][2]
                raise PackingError(f"buffers {inst.ids[i]!r} and {inst.ids[other]!r} are live at the same time "
                                   f"and overlap in [{max(item[0], active[j][0])}, {min(item[1], active[j][1])})")
        active.insert(k, item)
    return max((offs[i] + sizes[i] for i in live), default=0)


# ---------------------------------------------------------------- the packer
class _Part(NamedTuple):
    """One independent component, its full-span buffers stacked at the bottom (`base` bytes);
    the rest's arrays, overlap graph (CSR), sections and busiest-section totals."""
    members: np.ndarray     # indices into the instance of the buffers above the base
    base_members: np.ndarray
    base: int
    size: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    ptr: np.ndarray
    idx: np.ndarray
    sections: tuple         # (sec_lo, sec_hi, sec_ptr, sec_idx), see `_sections`
    busiest: np.ndarray     # int64: each buffer's largest section total
    bound: int              # base + the rest's live-bytes bound


def _components(lower, upper) -> list[np.ndarray]:
    """Groups of buffers with no time between them that a buffer of another group crosses."""
    order = np.argsort(lower, kind="stable")
    reach = np.maximum.accumulate(upper[order])
    cut = np.flatnonzero(lower[order][1:] >= reach[:-1]) + 1
    return [g.astype(np.int64) for g in np.split(order, cut)]


def _part(inst: Instance, members: np.ndarray, watch: "KernelWatch | None" = None) -> _Part | None:
    """The part of the buffers `members` (one component); None when `watch` cut its overlap
    graph short."""
    lo, up = inst.lower[members], inst.upper[members]
    full = (lo <= lo.min()) & (up >= up.max())
    base_members, rest = members[full], members[~full]
    lo, up, sz = inst.lower[rest], inst.upper[rest], inst.size[rest]
    watch = watch or KernelWatch()
    ptr, idx = watch.run(K.overlaps, lo, up)
    if ptr[-1] < 0 or watch.expired():  # cut short, or no time left for its sections (a second at 100K)
        return None
    sections = _sections(lo, up)
    if watch.expired():
        return None
    sec_lo, sec_hi, sec_ptr, sec_idx = sections
    totals = np.add.reduceat(sz[sec_idx], sec_ptr[:-1]) if sec_idx.size else np.zeros(0, dtype=np.int64)
    busiest = K.busiest(np.ascontiguousarray(totals, dtype=np.int64), sec_lo, sec_hi)
    base = int(inst.size[base_members].sum())
    return _Part(rest, base_members, base, sz, lo, up, ptr, idx, sections, busiest,
                 base + int(totals.max(initial=0)))


def _sections(lower, upper):
    """MiniMalloc's sections: for each distinct end time E, the buffers live just before it
    (lower < E <= upper); each buffer spans a contiguous range [sec_lo, sec_hi) of them. Every
    two overlapping buffers share one, and each is a set of pairwise overlapping buffers.
    Returns (sec_lo, sec_hi: int64[m], sec_ptr: int64[S+1], sec_idx: int64[*])."""
    ends = np.unique(upper)
    sec_lo = np.searchsorted(ends, lower, side="right").astype(np.int64)
    sec_hi = np.searchsorted(ends, upper, side="right").astype(np.int64)
    span = sec_hi - sec_lo
    owner = np.repeat(np.arange(lower.shape[0]), span)
    which = (np.arange(owner.shape[0]) - np.repeat(np.cumsum(span) - span, span) + np.repeat(sec_lo, span))
    order = np.argsort(which, kind="stable")
    sec_ptr = np.concatenate([[0], np.cumsum(np.bincount(which, minlength=ends.shape[0]))]).astype(np.int64)
    return sec_lo, sec_hi, sec_ptr, owner[order].astype(np.int64)


def _orders(part: _Part) -> list[tuple[str, np.ndarray]]:
    """Greedy orders, largest first: size, area, life length, the busiest section's total."""
    sz, length = part.size, part.upper - part.lower
    area = _area(sz, length)
    keys = {"size": (sz, length), "area": (area, sz), "life": (length, sz), "section": (part.busiest, sz),
            "section-area": (part.busiest, area)}
    return [(name, np.lexsort((-b, -a)).astype(np.int64)) for name, (a, b) in keys.items()]


#: The greedy placements `pack(..., quick=True)` tries (order, best fit): the packing-aware
#: search's score, where every evaluation packs.
QUICK = (("size", False), ("section", False))


def _area(size, length) -> np.ndarray:
    """size * length, saturated at int64's largest (an ordering key: both may be up to 2**62)."""
    big = np.iinfo(np.int64).max
    over = (length > 0) & (size > big // np.maximum(length, 1))
    return np.where(over, big, size * np.where(over, 0, length))


def _stacked(size: np.ndarray, base: int = 0) -> np.ndarray:
    """Offsets that stack the buffers one above the other from `base` (always valid)."""
    return base + np.cumsum(size) - size


def _greedy(part: _Part, quick: bool = False, watch: "KernelWatch | None" = None) -> tuple[np.ndarray | None, int, str]:
    """The best of the greedy placements (first fit and best fit, every order of `_orders`;
    quick: those of QUICK): (offsets, arena, name), (None, 0, "") when each ran over MAX_VALUE.
    Once `watch` cuts a placement short, its unplaced buffers are stacked above the arena and no
    other placement is tried."""
    watch = watch or KernelWatch()
    best = (None, np.iinfo(np.int64).max, "")
    for name, order in _orders(part):
        for best_fit in (False, True):
            if quick and (name, best_fit) not in QUICK:
                continue
            off, arena, placed = watch.run(K.greedy, part.size, part.ptr, part.idx, order, best_fit)
            if placed < order.shape[0] and arena >= 0:  # cut short: the rest stacked above
                rest = order[placed:]
                if arena + int(part.size[rest].sum(dtype=np.float64)) < MAX_VALUE:
                    off[rest] = _stacked(part.size[rest], arena)
                    arena = int((off + part.size).max(initial=0))
                    name += f" (cut short: {order.shape[0] - placed:,} of {order.shape[0]:,} buffers stacked)"
                else:
                    arena = -1
                if 0 <= arena < best[1]:
                    best = (off, int(arena), f"greedy-{name}")
                return best if best[0] is not None else (None, 0, "")
            if 0 <= arena < best[1]:
                best = (off, int(arena), f"greedy-{name}")
    return best if best[0] is not None else (None, 0, "")


def _buffers(part: _Part) -> _minimalloc.Buffers:
    """The exact search's view of a part."""
    width = part.upper - part.lower
    return _minimalloc.Buffers(part.size, part.ptr, part.idx, *part.sections, width, _area(part.size, width))


def _search(part: _Part, capacity: int, until: float, watch: "KernelWatch | None" = None) -> tuple[np.ndarray | None, bool]:
    """(offsets of the part's rest within `capacity` (its base included) by the exact search,
    or None; whether a complete search showed that nothing fits). Every call of the search is
    cut at `until` and by `watch`."""
    watch = watch or KernelWatch()
    cap = int(capacity - part.base)  # one type for every call: one compiled signature
    if cap < part.bound - part.base:
        return None, True
    if part.size.shape[0] > SEARCH_MAX_BUFFERS:
        return None, False
    bufs = _buffers(part)
    out = np.empty(part.size.shape[0], dtype=np.int64)
    limit = max(64, part.size.shape[0])
    while time.perf_counter() < until and not watch.expired():
        limit *= 2
        for heuristic in range(3):
            status, _ = watch.run(_minimalloc.search, bufs, heuristic, cap, limit, out, until=until)
            if status == _minimalloc.FOUND:
                return out.copy(), False
            if status == _minimalloc.INFEASIBLE:
                return None, True
            if status == _minimalloc.TIMEOUT:
                return None, False
    return None, False


def greedy_pack(inst: Instance) -> Packing:
    """The fast heuristic alone (step 1 of `pack`), checked."""
    return pack(inst, time_limit_s=0.0)


#: The exact search is not run on a part of more buffers than this: its explicit stack keeps a
#: copy of the unplaced buffers' order per level, memory quadratic in the buffers (gigabytes
#: past ~15,000), and at that size its first descent alone outlasts any time limit. Such a part
#: keeps its best greedy placement. (MiniMalloc's challenging instances have up to 454.)
SEARCH_MAX_BUFFERS = 8192

#: Share of `pack`'s time limit the search at the live-bytes bound may take; each later
#: capacity of the bisection gets half of what is left.
BOUND_SHARE = 0.5

#: Seconds per buffer `pack` keeps from a deadline for what follows the packing: the check, and
#: a caller writing the offsets (`regal pack -o`: 4 us per buffer on the 2-core machine).
FINISH_SECONDS_PER_BUFFER = 10e-6


def pack(inst: Instance, time_limit_s: float | None = 10.0, quick: bool = False, deadline=None) -> Packing:
    """The best packing found within `time_limit_s` seconds (None: until proven optimal or the
    bisection ends; 0: the fast heuristic alone; quick: two greedy placements alone, `QUICK`),
    checked by `check`. deadline: a `regal._stop.Deadline` (a stop request, a command's time
    limit) that cuts every step short, the greedy placements included (their unplaced buffers
    are then stacked above the others: the packing stays valid), less the time the check takes.
    PackingError when some time more than MAX_VALUE bytes are live (sums are never wrapped)."""
    from regal._args import check_seconds
    check_seconds(time_limit_s)
    t0 = time.perf_counter()
    m = inst.size.shape[0]
    hard = float("inf")
    if deadline is not None and deadline.at is not None:
        hard = deadline.at - FINISH_SECONDS_PER_BUFFER * m
    until = min(hard, float("inf") if time_limit_s is None else t0 + float(time_limit_s))
    watch = KernelWatch(deadline, hard)
    offsets = np.zeros(m, dtype=np.int64)
    live = np.flatnonzero((inst.size > 0) & (inst.upper > inst.lower))
    bound, when = _live_peak(inst.lower, inst.upper, inst.size)
    if bound > MAX_VALUE:
        raise PackingError(f"{bound} bytes are live at time {when}: over 2**62, the largest arena a packing holds "
                           "exactly")
    if live.size == 0:
        return Packing(offsets, 0, 0, True, "empty", time.perf_counter() - t0)
    sub = Instance(inst.ids, inst.lower[live], inst.upper[live], inst.size[live])  # ids unused below
    parts, found, methods = _first_packings(sub, quick, watch)
    arena = max(a for _, a in found)
    proven = bound    # no arena below this fits (shown)
    floor = bound     # the lowest capacity the bisection still tries
    target = bound
    while time_limit_s != 0 and not quick and arena > floor and time.perf_counter() < until and not watch.expired():
        left = until - time.perf_counter()
        slot = time.perf_counter() + (left * BOUND_SHARE if target == bound else left / 2.0)
        fits, shown = True, False
        trial = list(found)
        for k, (p, (_, a)) in enumerate(zip(parts, found)):
            if a <= target:
                continue
            res, shown = _search(p, target, min(slot, until), watch)
            if res is None:
                fits = False
                break
            trial[k] = (res, p.base + int((res + p.size).max(initial=0)))
        if fits:
            methods = ["minimalloc" if t is not f else mth for t, f, mth in zip(trial, found, methods)]
            found = trial
            arena = max(a for _, a in found)
        else:
            floor = target + 1
            if shown:
                proven = max(proven, target + 1)
        target = (floor + arena) // 2
    for p, (off, _) in zip(parts, found):
        np.put(offsets, live[p.base_members], _stacked(sub.size[p.base_members]))
        offsets[live[p.members]] = off + p.base
    packed = check(inst, offsets)
    method = "minimalloc" if "minimalloc" in methods else max(zip((a for _, a in found), methods))[1]
    if watch.cut and deadline is not None and deadline.stop_requested:
        method += f" ({deadline.reason})"
    return Packing(offsets, packed, bound, bool(packed <= proven), method, time.perf_counter() - t0)


def _first_packings(sub: Instance, quick: bool, watch: KernelWatch) -> tuple[list, list, list]:
    """Each component's part and its first packing, the best greedy placement: (parts, found:
    (offsets of the part's rest, arena), methods). A part reached after `watch` expired, or whose
    overlap graph it cut short, is stacked; PackingError when no greedy placement stays within
    MAX_VALUE."""
    parts, found, methods = [], [], []
    for members in _components(sub.lower, sub.upper):
        p = None if watch.expired() else _part(sub, members, watch)
        if p is None:  # no time left to build it: every buffer of the component stacked
            p = _Part(members, members[:0], 0, sub.size[members], sub.lower[members], sub.upper[members],
                      np.zeros(members.shape[0] + 1, dtype=np.int64), np.zeros(0, dtype=np.int64),
                      (None,) * 4, np.zeros(0, dtype=np.int64), 0)
            found.append((_stacked(p.size), int(p.size.sum())))
            methods.append("stacked (cut short)")
            parts.append(p._replace(bound=found[-1][1]))  # no search: it is at its own bound
            continue
        parts.append(p)
        if p.size.shape[0] == 0:
            found.append((np.zeros(0, dtype=np.int64), p.base))
            methods.append("stacked")
            continue
        off, arena, name = _greedy(p, quick, watch)
        if off is None:
            raise PackingError("every greedy placement ends over 2**62, the largest arena a packing holds exactly")
        found.append((off, p.base + arena))
        methods.append(name)
    return parts, found, methods


# ---------------------------------------------------------------- MiniMalloc's CSV
def read_csv(path: str | os.PathLike) -> Instance:
    """Read MiniMalloc's CSV (`id,lower,upper,size`; an `offset` column, if any, is ignored).
    PackingError naming the file, row and field of the first bad value."""
    p = os.fspath(path)
    try:
        f = open(p, newline="", encoding="utf-8-sig")  # a byte-order mark (Excel's "CSV UTF-8") is skipped
    except FileNotFoundError:
        raise PackingFileNotFound(p) from None
    except OSError as e:
        raise PackingError(f"{p}: cannot read ({e.strerror or type(e).__name__})") from None
    ids, cols = [], {"lower": [], "upper": [], "size": []}
    with f:
        try:
            reader = csv_rows(f)
            row_no, header = next(reader, (0, None))
            if header is None:
                raise PackingError(f"{p}: empty file (expected the header id,lower,upper,size)")
            missing = [c for c in ("id", "lower", "upper", "size") if c not in header]
            if missing:
                raise PackingError(f"{p}: row 1: header lacks column {missing[0]!r} (expected id,lower,upper,size)")
            where = {c: header.index(c) for c in ("id", "lower", "upper", "size")}
            seen = set()
            for row_no, row in reader:
                if all(not c for c in row):
                    continue
                if len(row) < len(header):
                    raise PackingError(f"{p}: row {row_no}: {len(row)} fields, expected {len(header)}")
                bid = row[where["id"]]   # trimmed, unless quoted: a quoted " a" keeps its spaces
                if bid in seen:
                    raise PackingError(f"{p}: row {row_no}: field 'id': buffer {bid!r} listed twice")
                seen.add(bid)
                ids.append(bid)
                for c in ("lower", "upper", "size"):
                    text = row[where[c]].strip()
                    try:
                        value = int(text)
                    except ValueError:
                        raise PackingError(f"{p}: row {row_no}: field {c!r}: {text!r} is not an integer") from None
                    if value < 0:
                        raise PackingError(f"{p}: row {row_no}: field {c!r}: {value} is negative")
                    if value > MAX_VALUE:
                        raise PackingError(f"{p}: row {row_no}: field {c!r}: {value} is over 2**62, the largest "
                                           "value a packing holds exactly")
                    cols[c].append(value)
                if cols["upper"][-1] < cols["lower"][-1]:
                    raise PackingError(f"{p}: row {row_no}: field 'upper': {cols['upper'][-1]} is below lower "
                                       f"{cols['lower'][-1]}")
        except UnicodeDecodeError:
            raise PackingError(f"{p}: not a text CSV file") from None
        except CsvError as e:
            raise PackingError(f"{p}: {e}") from None
    return instance(np.asarray(cols["lower"], dtype=np.int64), np.asarray(cols["upper"], dtype=np.int64),
                    np.asarray(cols["size"], dtype=np.int64), ids)


def write_csv(path: str | os.PathLike, inst: Instance, offsets) -> None:
    """Write the instance's rows with an `offset` column (MiniMalloc's solution CSV); an id that
    holds a comma, a quote or a line break, or begins or ends with a space, is quoted (RFC
    4180), so that `read_csv` reads it back as it was."""
    from regal._io import atomic_text
    cols = (inst.lower.tolist(), inst.upper.tolist(), inst.size.tolist(), np.asarray(offsets).tolist())
    with atomic_text(path) as f:
        f.write("id,lower,upper,size,offset\n")
        f.writelines(f"{csv_field(b)},{lo},{up},{sz},{off}\n" for b, lo, up, sz, off in zip(inst.ids, *cols))
