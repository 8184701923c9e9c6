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

Interrupts that are never lost (issue 55): Python's own SIGINT handler raises KeyboardInterrupt
wherever the main thread is, and an exception raised inside a ctypes callback is printed and
dropped; llvmlite calls back into Python while Numba compiles or loads a cached kernel, so a
Ctrl-C there was lost (planning went on). `interrupt_handler` raises KeyboardInterrupt as
Python's does, except inside llvmlite, where it keeps the signal and raises it as soon as the
main thread is out (`keyboard_interrupts`, `stops_on_interrupt`: the library's long calls);
`exit_on_signals` is the same for the `regal` commands that have nothing to write, with a
watchdog that ends the process if the main thread does not come out within a grace period.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import os
import signal
import sys
import threading
import time
from typing import Callable, Iterator, TypeVar

__all__ = ["Deadline", "Stopped", "expired", "as_deadline", "stop_on_signals", "interruptible", "KernelWatch",
           "STOP_SIGNALS", "interrupt_handler", "keyboard_interrupts", "stops_on_interrupt", "exit_on_signals",
           "signal_status", "last_signal", "take_early_signals", "request_stop_on_signals"]

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
    (a second Ctrl-C is the second); `signum`: the first request's signal number, if a signal.
    """

    __slots__ = ("at", "reason", "requests", "signum")

    def __init__(self, time_limit_s: float | None = None, *, start: float | None = None):
        if time_limit_s is None:
            self.at = None
        else:
            self.at = (time.perf_counter() if start is None else start) + float(time_limit_s)
        self.reason: str | None = None
        self.requests = 0
        self.signum: int | None = None

    def request_stop(self, reason: str = "stopped", signum: int | None = None) -> None:
        """Expire now (the first request's reason is kept; it replaces the time limit's)."""
        self.requests += 1
        if self.reason is None or self.reason == "time_limit":
            self.reason = reason
            self.signum = signum

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
    if threading.current_thread() is not threading.main_thread():
        yield deadline
        return
    previous = request_stop_on_signals(deadline, signals)
    try:
        yield deadline
    finally:
        for name, old in previous.items():
            signal.signal(getattr(signal, name), old)


def request_stop_on_signals(deadline: Deadline, signals=STOP_SIGNALS) -> dict:
    """From now on (main thread only) each of `signals` calls `deadline.request_stop`; returns
    the handlers replaced, by signal name (`stop_on_signals` puts them back; the `regal`
    program's `exit_on_signals` does, at the command's end)."""
    def handler(signum, frame):
        deadline.request_stop(f"interrupted ({signal.Signals(signum).name})", signum)

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {name: signal.signal(getattr(signal, name), handler) for name in signals if hasattr(signal, name)}


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


# ------------------------------------------------------------ interrupts that are never lost
#: Signals kept while the main thread ran inside llvmlite, not raised yet (`interrupt_handler`).
_PENDING: list = []
_PENDING_LOCK = threading.Lock()
#: The last signal `interrupt_handler` turned into KeyboardInterrupt, or that `exit_on_signals`'s
#: watchdog saw (its number), for the program's exit status.
_LAST_SIGNAL: list = [None]
#: Seconds between two re-deliveries of a kept signal (`_redeliver`).
REDELIVER_S = 0.02


#: Code where an exception raised by a signal handler is lost or fatal: llvmlite (Numba compiling
#: or loading a kernel calls back into Python through ctypes, which drops it) and JAX (its C++ calls
#: back into Python; a KeyboardInterrupt raised there can end in std::terminate, status -6).
_KEEP_SIGNALS_IN = tuple(os.sep + m + os.sep for m in ("llvmlite", "jaxlib", os.path.join("jax", "_src")))


def _signal_must_wait(frame) -> bool:
    """Whether `frame` or a frame below it runs code of `_KEEP_SIGNALS_IN`, where the signal's
    KeyboardInterrupt must wait until the main thread is out."""
    while frame is not None:
        name = frame.f_code.co_filename
        if any(m in name for m in _KEEP_SIGNALS_IN):
            return True
        frame = frame.f_back
    return False


def _redeliver(signum: int) -> None:
    """Signal the main thread again every REDELIVER_S while a kept signal waits (each time the
    handler looks again whether it is out of llvmlite)."""
    while True:
        time.sleep(REDELIVER_S)
        with _PENDING_LOCK:
            if not _PENDING:
                return
            _thread.interrupt_main(signum)


def interrupt_handler(signum, frame):
    """A signal handler that raises KeyboardInterrupt, as Python's own SIGINT handler does, for
    SIGINT, SIGTERM or SIGHUP; but while the main thread runs inside llvmlite or JAX (where Python
    would drop it or the process would abort, `_KEEP_SIGNALS_IN`) the signal is kept and raised
    within REDELIVER_S of the main thread coming out."""
    if _signal_must_wait(frame):
        with _PENDING_LOCK:
            if not _PENDING:
                threading.Thread(target=_redeliver, args=(signum,), name="regal-interrupt", daemon=True).start()
            _PENDING.append(signum)
        return
    with _PENDING_LOCK:
        _PENDING.clear()
    _LAST_SIGNAL[0] = signum
    raise KeyboardInterrupt


def record_signal(signum: int | None) -> None:
    """Set the signal `last_signal` reports (the program records one that arrived before its
    handlers, and clears it between commands run in one process)."""
    _LAST_SIGNAL[0] = signum


def last_signal() -> int | None:
    """The number of the last signal turned into KeyboardInterrupt (None: none)."""
    return _LAST_SIGNAL[0]


def signal_status(signum: int | None) -> int:
    """The exit status of a run ended by signal `signum` with nothing to write: 128 + its
    number, the shell's convention (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + int(signal.SIGINT if signum is None else signum)


@contextlib.contextmanager
def keyboard_interrupts() -> Iterator[None]:
    """While the body runs in the main thread where SIGINT has Python's own handler,
    `interrupt_handler` in its place: Ctrl-C raises KeyboardInterrupt as before, but never gets
    lost inside Numba's kernel loading or compilation; a signal still kept when the body
    ends is raised then. Anywhere else (another thread, a handler of the program's own) the
    body runs as it is."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    signal.signal(signal.SIGINT, interrupt_handler)
    try:
        yield
    except BaseException:
        try:
            with _PENDING_LOCK:
                _PENDING.clear()
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        raise
    # the kept signals are cleared (under the lock: `_redeliver` signals no more) before the
    # handler goes back; put back first, a redelivery landing between the two raised its
    # KeyboardInterrupt past the clearing, and the thread went on signalling every REDELIVER_S
    try:
        with _PENDING_LOCK:
            kept = bool(_PENDING)
            _PENDING.clear()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if kept:
        raise KeyboardInterrupt


def stops_on_interrupt(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` run under `keyboard_interrupts`: a long library call (a search, planning a step)
    that Ctrl-C stops with KeyboardInterrupt wherever it is, Numba's kernel loading included."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with keyboard_interrupts():
            return fn(*args, **kwargs)
    return wrapper


@contextlib.contextmanager
def exit_on_signals(grace_s: float | None = None, signals=STOP_SIGNALS, on_exit: Callable[[int], None] | None = None):
    """For a command with nothing worth finishing (it writes nothing, or writes atomically): each
    of `signals` raises KeyboardInterrupt in the main thread (`interrupt_handler`; the caller
    turns it into exit status `signal_status`). grace_s (the program only): a watchdog thread,
    woken by the signal itself (`signal.set_wakeup_fd`, written by the C-level handler whatever
    the main thread is doing: inside a long call into C, the handler's KeyboardInterrupt waits for
    it to return), ends the process `grace_s` after the signal if it still runs: `on_exit(signum)`
    (the caller's last words, its children ended), then `os._exit(signal_status(signum))`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {name: signal.signal(getattr(signal, name), interrupt_handler) for name in signals
                if hasattr(signal, name)}
    watch = None
    if grace_s is not None:
        watch = _Watchdog(grace_s, on_exit)
    try:
        yield
    finally:
        if watch is not None:
            watch.close()
        for name, old in previous.items():
            signal.signal(getattr(signal, name), old)


class _Watchdog:
    """`exit_on_signals`'s watchdog: a pipe that the C-level signal handler writes each signal's
    number to, read by a daemon thread that ends the process `grace_s` later."""

    def __init__(self, grace_s: float, on_exit):
        self.grace_s, self.on_exit = grace_s, on_exit
        self.read, self.write = os.pipe()
        os.set_blocking(self.write, False)
        try:
            self.old = signal.set_wakeup_fd(self.write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            self.old = None
            os.close(self.read)
            os.close(self.write)
            self.read = None
            return
        threading.Thread(target=self._run, name="regal-signal-watchdog", daemon=True).start()

    def _run(self) -> None:
        ours = {int(getattr(signal, name)) for name in STOP_SIGNALS if hasattr(signal, name)}
        signum = None
        while signum not in ours:  # (another signal with a Python handler writes its number too)
            try:
                data = os.read(self.read, 1)
            except OSError:
                data = b""
            if not data:
                os.close(self.read)
                return
            signum = data[0]
        _LAST_SIGNAL[0] = _LAST_SIGNAL[0] or signum
        time.sleep(self.grace_s)
        if self.on_exit is not None:
            try:
                self.on_exit(signum)
            except BaseException:  # noqa: BLE001  (the process ends now whatever happens)
                pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(signal_status(signum))

    def close(self) -> None:
        if self.read is None:
            return
        signal.set_wakeup_fd(self.old if self.old is not None else -1)
        os.close(self.write)  # the thread's read ends (end of file), or it has its signal already


#: Signals that arrived before the program installed its handlers: `regal.cli` records them
#: while its modules load, run as the program, and hands its list over here.
_EARLY_SIGNALS: list = []


def take_early_signals() -> list:
    """The signals recorded before the command's handlers were installed (emptied)."""
    out = list(_EARLY_SIGNALS)
    _EARLY_SIGNALS.clear()
    return out
