"""Stopping early: one `Deadline` that every long loop polls, set by a time limit or a stop request.

A search, a seed, a bound or a report that may run for seconds polls `deadline.expired()` (a
clock read and an attribute test, well under a microsecond) every few milliseconds of work and,
once it is true, returns the best it has. A time limit sets it by the clock; a signal handler
(`stop_on_signals`, the command line's SIGINT / SIGTERM / SIGHUP) or any caller sets it with
`request_stop`. Functions that take a deadline also accept the older forms: None (never) or an
absolute `time.perf_counter()` value (`expired` reads all three).

Work that cannot poll (one long call into C) runs through `interruptible`: in a helper thread
while the caller's thread watches the deadline, so the caller gets control back within a poll
interval even though the call itself goes on until it returns (its result is then dropped).
A Numba kernel that reads a stop flag runs through `KernelWatch` instead: cut short, it returns.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Callable, Iterator, TypeVar

__all__ = ["Deadline", "Stopped", "expired", "as_deadline", "stop_on_signals", "interruptible", "KernelWatch",
           "STOP_SIGNALS"]

T = TypeVar("T")

#: The signals that ask a run to stop and still write its best result (`stop_on_signals`).
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class Stopped(Exception):
    """Raised where work that cannot return a partial result is cut short by a `Deadline`
    (`Deadline.check`, `interruptible`); `reason` is the deadline's ("time_limit", "interrupted
    (SIGTERM)", ...)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Deadline:
    """A time limit and a stop request in one object, polled by long loops.

    time_limit_s: seconds from `start` (a `time.perf_counter()` value, default now) after which
    `expired()` is true; None: no limit. `request_stop(reason)` makes it true at once (a signal
    handler may call it: it only sets attributes). `reason` says why it expired (None while it
    has not): "time_limit" or the stop request's reason. `requests` counts the stop requests
    (a second Ctrl-C is the second).
    """

    __slots__ = ("at", "reason", "requests")

    def __init__(self, time_limit_s: float | None = None, *, start: float | None = None):
        if time_limit_s is None:
            self.at = None
        else:
            self.at = (time.perf_counter() if start is None else start) + float(time_limit_s)
        self.reason: str | None = None
        self.requests = 0

    def request_stop(self, reason: str = "stopped") -> None:
        """Expire now (the first request's reason is kept; it replaces the time limit's)."""
        self.requests += 1
        if self.reason is None or self.reason == "time_limit":
            self.reason = reason

    @property
    def stop_requested(self) -> bool:
        """Whether it expired by a stop request rather than by the clock (or not at all)."""
        return self.reason is not None and self.reason != "time_limit"

    def expired(self) -> bool:
        """True once the time limit has passed or a stop was requested."""
        if self.reason is not None:
            return True
        if self.at is not None and time.perf_counter() >= self.at:
            self.reason = "time_limit"
            return True
        return False

    def check(self) -> None:
        """Raise `Stopped` if expired."""
        if self.expired():
            raise Stopped(self.reason)

    def remaining_s(self) -> float | None:
        """Seconds left (0 once expired), None without a time limit or stop."""
        if self.reason is not None:
            return 0.0
        if self.at is None:
            return None
        return max(0.0, self.at - time.perf_counter())

    def limit(self, time_limit_s: float | None, start: float | None = None) -> "Deadline":
        """This deadline with a time limit of `time_limit_s` from `start` as well (the earlier of
        the two limits); it stays the same object, so a stop request still reaches every holder."""
        if time_limit_s is not None:
            at = (time.perf_counter() if start is None else start) + float(time_limit_s)
            self.at = at if self.at is None else min(self.at, at)
        return self

    def __repr__(self) -> str:
        return f"Deadline(at={self.at!r}, reason={self.reason!r})"


def as_deadline(deadline: "Deadline | float | None", time_limit_s: float | None = None,
                start: float | None = None) -> Deadline:
    """A `Deadline` from any accepted form (None, an absolute perf_counter() value, a Deadline),
    with `time_limit_s` from `start` added; a Deadline passed in is returned itself."""
    if isinstance(deadline, Deadline):
        return deadline.limit(time_limit_s, start)
    out = Deadline(time_limit_s, start=start)
    if deadline is not None:
        out.at = float(deadline) if out.at is None else min(out.at, float(deadline))
    return out


def expired(deadline: "Deadline | float | None") -> bool:
    """Whether `deadline` (None, an absolute perf_counter() value, or a Deadline) has passed."""
    if deadline is None:
        return False
    if isinstance(deadline, Deadline):
        return deadline.expired()
    return time.perf_counter() >= deadline


@contextlib.contextmanager
def stop_on_signals(deadline: Deadline, signals=STOP_SIGNALS) -> Iterator[Deadline]:
    """While the body runs, each of `signals` (main thread only) calls
    `deadline.request_stop("interrupted (SIGTERM)")` instead of killing the process; the
    previous handlers come back afterwards. A second signal is counted, never raised: what the
    first one started (writing the best result) finishes."""
    def handler(signum, frame):
        deadline.request_stop(f"interrupted ({signal.Signals(signum).name})")

    if threading.current_thread() is not threading.main_thread():
        yield deadline
        return
    previous = {name: signal.signal(getattr(signal, name), handler) for name in signals if hasattr(signal, name)}
    try:
        yield deadline
    finally:
        for name, old in previous.items():
            signal.signal(getattr(signal, name), old)


def interruptible(fn: Callable[..., T], deadline: Deadline | None, *args, poll_s: float = 0.02,
                  requests_only: bool = False, **kwargs) -> T:
    """`fn(*args, **kwargs)`, returned; or `Stopped` within about `poll_s` once `deadline` has
    expired, even while `fn` is inside a long call that does not poll (it runs in a daemon
    thread, which finishes on its own and whose result is then dropped). An exception of `fn`
    is raised here. Without a deadline, or when already expired, no thread is started.
    requests_only: only a stop request leaves `fn` behind, not the time limit (work every result
    needs, such as loading the kernels, goes on past the limit)."""
    if deadline is None:
        return fn(*args, **kwargs)
    if deadline.expired() and (deadline.stop_requested or not requests_only):
        raise Stopped(deadline.reason)
    box: list = []

    def work():
        try:
            box.append((True, fn(*args, **kwargs)))
        except BaseException as e:  # noqa: BLE001  (handed to the caller's thread)
            box.append((False, e))

    thread = threading.Thread(target=work, name="regal-interruptible", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(poll_s)
        if not box and deadline.expired() and (deadline.stop_requested or not requests_only):
            raise Stopped(deadline.reason)
    ok, value = box[0]
    if ok:
        return value
    raise value


class KernelWatch:
    """Runs Numba kernels that take a `stop` flag (int64[1], their last argument, read every
    so many steps: `regal.packing`'s), each cut short at `until` (a perf_counter() time) or
    once `deadline` (a signal's stop request, a command's time limit) expires: the kernel runs
    in a helper thread (it releases the GIL) while this one polls and sets the flag, so that a
    signal's handler runs here at once and the kernel returns what it has within its poll
    interval (no signal ever lands inside a kernel). Without a deadline or an `until`, the
    kernel runs here. `cut`: whether some kernel was cut short."""

    POLL_S = 0.01

    def __init__(self, deadline=None, until: float = float("inf")):
        self.deadline, self.until = deadline, until
        self.cut = False  # whether some kernel was cut short

    def expired(self) -> bool:
        return time.perf_counter() >= self.until or (self.deadline is not None and self.deadline.expired())

    def run(self, kernel, *args, until: float | None = None):
        until = self.until if until is None else min(until, self.until)
        import numpy as np
        stop = np.zeros(1, dtype=np.int64)
        if self.deadline is None and until == float("inf"):
            return kernel(*args, stop)
        box: list = []

        def work():
            try:
                box.append((True, kernel(*args, stop)))
            except BaseException as e:  # noqa: BLE001  (raised in the caller's thread)
                box.append((False, e))

        if time.perf_counter() >= until or (self.deadline is not None and self.deadline.expired()):
            stop[0] = 1
        thread = threading.Thread(target=work, name="regal-pack", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(self.POLL_S)
            if not stop[0] and (time.perf_counter() >= until or (self.deadline is not None and self.deadline.expired())):
                stop[0] = 1
        self.cut = self.cut or bool(stop[0])
        ok, value = box[0]
        if ok:
            return value
        raise value
