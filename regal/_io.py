"""Opening regal's text files (UTF-8, gzip-compressed when the path ends in `.gz`), and writing
every file regal writes atomically (a temporary file in the same directory, then `os.replace`);
CSV fields as RFC 4180 has them (`csv_rows`, `csv_field`: MiniMalloc's buffer lists)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import secrets
import sys
import time
import zlib
from typing import IO, Iterator


class FileNotFound(FileNotFoundError):
    """A file that does not exist, said in one line ("PATH: no such file"): a FileNotFoundError (an
    OSError, as `open` raises). A module's own error class joins it, this class first so that its
    __init__ is the one run (`SolutionFileNotFound`, `PackingFileNotFound`: also a SolutionError /
    PackingError), so `except OSError` and the module's `except` both catch it; it pickles (Dask)."""

    def __init__(self, path: str):
        import errno
        FileNotFoundError.__init__(self, errno.ENOENT, "no such file", path)
        self.path = path

    def __str__(self) -> str:
        return f"{self.path}: no such file"

    def __reduce__(self):
        return type(self), (self.path,)


class _GzipReader(gzip.GzipFile):
    """A gzip file whose corrupt data raises `gzip.BadGzipFile` (an OSError, which every reader of
    regal reports in one line) where `gzip` raises a bare `zlib.error`."""

    def _guard(self, method, *args):
        try:
            return method(*args)
        except zlib.error as e:
            raise gzip.BadGzipFile(f"corrupt gzip data ({e})") from None

    def read(self, size=-1):
        return self._guard(super().read, size)

    def read1(self, size=-1):
        return self._guard(super().read1, size)

    def peek(self, n):
        return self._guard(super().peek, n)

    def readline(self, size=-1):
        return self._guard(super().readline, size)


def open_text(path: str | os.PathLike, mode: str = "rt") -> IO[str]:
    """Open `path` as UTF-8 text for `mode` ("r", "w", "a", with or without "t").

    A path ending in `.gz` is read or written through gzip, so the same call serves `model.json`
    and `model.json.gz`. Errors are the ones `open` and `gzip.open` raise.
    """
    if "b" in mode:
        raise ValueError(f"open_text opens text files only, got mode {mode!r}")
    mode = mode if "t" in mode else mode + "t"
    p = os.fspath(path)
    if p.endswith(".gz"):
        if mode.startswith("r"):
            return io.TextIOWrapper(_GzipReader(p, "rb"), encoding="utf-8")
        return gzip.open(p, mode, encoding="utf-8")
    return open(p, mode, encoding="utf-8")


def _each_object(obj: dict) -> dict:
    return obj


def read_json(f: IO[str]):
    """`json.load(f)` that a signal can stop: the C parser runs no Python code and so no signal
    handler until it ends (2-3 s on a 300,000-node graph under load, issue 55); a Python hook
    called for each object lets Ctrl-C and SIGTERM in at once, for a negligible cost."""
    return json.load(f, object_hook=_each_object)


def graph_kind(path: str | os.PathLike) -> str:
    """"hlo", "onnx" or "json": what a graph path holds, by its suffix (an HLO module without
    one is recognised by its first line)."""
    p = os.fspath(path)
    if p.endswith((".onnx", ".onnx.gz")):
        return "onnx"
    if p.endswith((".hlo", ".hlo.txt", ".hlo.gz")):
        return "hlo"
    if p.endswith((".json", ".json.gz", ".gz")):
        return "json"
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            return "hlo" if f.read(64).lstrip().startswith("HloModule") else "json"
    except OSError:
        return "json"


def output_path(path: str | os.PathLike) -> str:
    """The file a write to `path` replaces: `path` itself, or the file a symbolic link there
    points to (followed, so the link stays a link and its target gets the new content)."""
    p = os.fspath(path)
    return os.path.realpath(p) if os.path.islink(p) else p


def check_writable(path: str | os.PathLike, inputs=()) -> None:
    """OSError with a one-line reason unless `atomic_path` can write `path`: checked before a
    long search. The path (a symbolic link: its target) must not be a directory, a FIFO or any
    other non-regular file, nor the same file as one of `inputs` (the files the command reads);
    its directory must exist and take a new file, which is tried (a temporary file made and
    removed: the same step the write starts with)."""
    p = os.fspath(path)
    target = output_path(p)
    if os.path.isdir(target):
        raise OSError(f"{p}: is a directory")
    if os.path.exists(target) and not os.path.isfile(target):
        raise OSError(f"{p}: not a regular file (a FIFO, device or socket); regal writes files by replacing them")
    for other in inputs:
        if other is not None and _same_file(target, other):
            raise OSError(f"{p}: is also an input of this command ({os.fspath(other)}); give another output path")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise OSError(f"{p}: no such directory {folder}")
    try:
        fd, tmp = _make_temp(target)
    except OSError as e:
        raise OSError(f"{p}: cannot write in {folder} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(tmp)


def _same_file(a: str, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(os.fspath(b))


#: A temporary file of `atomic_path`: "<name>.<pid>-<start>-<random>.tmp<suffix>", in the
#: target's folder; <start> is when the writing process started (`_start_ticks`), so that a pid
#: the system gave again to another process does not keep the file forever (issue 55).
_TEMP = re.compile(r"\.(\d+)-(\d+)-[0-9a-f]{8}\.tmp")
#: As they were named before: "<pid>-<random>" (stale once the pid has ended, or this old), and
#: `tempfile.mkstemp`'s "<random>" (stale once this old), in seconds.
_PID_TEMP = re.compile(r"\.(\d+)-[0-9a-f]{8}\.tmp")
_LEGACY_TEMP = re.compile(r"\.[a-z0-9_]{8}\.tmp")
LEGACY_TEMP_AGE_S = 3600


def _temp_suffix(target: str) -> str:
    base = os.path.basename(target)
    return ".tmp.gz" if target.endswith(".gz") else ".tmp" + os.path.splitext(base)[1]


def _make_temp(target: str) -> tuple[int, str]:
    """(fd, path) of a new, empty temporary file beside `target`, made with the mode a new file
    gets (0666 less the umask), as `open` would, not tempfile's 0600."""
    folder = os.path.dirname(os.path.abspath(target))
    base = os.path.basename(target)
    me = f"{os.getpid()}-{_start_ticks(os.getpid()) or 0}"
    for _ in range(100):
        tmp = os.path.join(folder, f"{base}.{me}-{secrets.token_hex(4)}{_temp_suffix(target)}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def _start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (`/proc/PID/stat`, field 22); None
    where it cannot be read (not Linux, no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _writer_alive(pid: int, start: int) -> bool:
    """Whether the process that made a temporary file (its pid, and its start: 0 where that was
    unknown) still runs: the pid runs, and started then (else the pid was given again)."""
    if not _pid_alive(pid):
        return False
    now = _start_ticks(pid)
    return start == 0 or now is None or now == start


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def clean_stale_temps(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files that earlier writes of `path` left behind (a process killed
    mid-write: its pid no longer runs, or runs another process, started later; an old-style
    name: its pid ended or over an hour old); returns them. A temporary file of a write still
    running is kept."""
    target = output_path(path)
    folder = os.path.dirname(os.path.abspath(target))
    base = os.path.basename(target)
    suffix = _temp_suffix(target)
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        if not (name.startswith(base + ".") and name.endswith(suffix)):
            continue
        middle = name[len(base):len(name) - len(suffix) + 4]   # ".<pid>-<start>-<hex>.tmp"
        full = os.path.join(folder, name)
        m = _TEMP.fullmatch(middle)
        old = _PID_TEMP.fullmatch(middle)
        try:
            if m:
                stale = not _writer_alive(int(m.group(1)), int(m.group(2)))
            elif old:
                stale = not _pid_alive(int(old.group(1))) or now - os.stat(full).st_mtime > LEGACY_TEMP_AGE_S
            elif _LEGACY_TEMP.fullmatch(middle):
                stale = now - os.stat(full).st_mtime > LEGACY_TEMP_AGE_S
            else:
                continue
            if stale:
                os.unlink(full)
                removed.append(full)
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A temporary path in the same directory as `path` (same suffix), renamed over `path` once
    the body has finished without an error, removed otherwise: a reader, or a kill mid-write,
    never sees a cut-off file, and an earlier good file stays until the new one is complete.

    The new file's mode follows the umask; its data reach the disk (fsync) before the rename.
    A symbolic link at `path` is followed (its target is replaced, the link stays); a FIFO or
    other non-regular file there is refused. Temporary files of earlier writes of `path` that
    were killed mid-write are removed first (`clean_stale_temps`). An OSError names `path`."""
    p = os.fspath(path)
    target = output_path(p)
    if os.path.exists(target) and not os.path.isfile(target) and not os.path.isdir(target):
        raise OSError(f"{p}: not a regular file (a FIFO, device or socket); regal writes files by replacing them")
    clean_stale_temps(target)
    try:
        fd, tmp = _make_temp(target)
    except OSError as e:
        raise OSError(f"{p}: cannot write ({e.strerror or e})") from None
    os.close(fd)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, target)
        _fsync_dir(os.path.dirname(os.path.abspath(target)))
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, (BrokenPipeError,)) and tmp in str(e):
            raise OSError(f"{p}: cannot write ({e.strerror or type(e).__name__})") from None
        raise


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a file system without directory fsync
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_text(path: str | os.PathLike) -> Iterator[IO[str]]:
    """Write text to `path` (gzip for `.gz`) through `atomic_path`."""
    with atomic_path(path) as tmp:
        with open_text(tmp, "w") as f:
            yield f


@contextlib.contextmanager
def atomic_binary(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """Write bytes to `path` (not compressed, whatever its suffix) through `atomic_path`."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            yield f


def atomic_savefig(fig, path: str | os.PathLike, **kwargs) -> None:
    """`fig.savefig(path, **kwargs)` through `atomic_path`, the format from `path`'s suffix."""
    fmt = os.path.splitext(os.fspath(path))[1][1:].lower() or None
    with atomic_binary(path) as f:
        fig.savefig(f, format=fmt, **kwargs)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While the body runs, what C code writes to file descriptor 1 goes to descriptor 2: a
    library that prints (METIS's warnings) cannot break a command's `--json` answer on stdout.
    Python's own buffered stdout is flushed first and left alone. Not for threads that write
    to stdout meanwhile (the descriptor is the process's)."""
    try:
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError):
        pass
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 at all
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        try:
            libc_flush()
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def libc_flush() -> None:
    """Flush C stdio's buffers (what a C library printed and has not written out yet)."""
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


class LockedError(OSError):
    """Another process holds the lock of a directory (`directory_lock`); the message names it."""


#: The directories this process holds `directory_lock` on: {real path: (file descriptor, depth)}.
_HELD_LOCKS: dict = {}


@contextlib.contextmanager
def directory_lock(folder: str | os.PathLike, name: str = ".regal.lock", what: str = "another run") -> Iterator[str]:
    """Hold an exclusive lock on `folder` (created if missing) while the body runs: `flock` on
    `folder/name`, which holds the holder's pid. The kernel drops the lock when its holder ends,
    however it ends (kill -9 included), so a crashed run never leaves it stuck; the file stays.
    A second holder, in another process, gets `LockedError` at once ("FOLDER: in use by WHAT
    (pid N)"); within one process the lock is re-entrant. POSIX only; elsewhere nothing is locked."""
    os.makedirs(folder, exist_ok=True)
    key = os.path.realpath(folder)
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield key
        return
    if key in _HELD_LOCKS:
        fd, depth = _HELD_LOCKS[key]
        _HELD_LOCKS[key] = (fd, depth + 1)
        try:
            yield key
        finally:
            fd, depth = _HELD_LOCKS[key]
            _HELD_LOCKS[key] = (fd, depth - 1)
        return
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise LockedError(f"{os.fspath(folder)}: in use by {what}"
                          + (f" (pid {holder})" if holder.isdigit() else "")
                          + "; wait for it to end, or use another directory") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD_LOCKS[key] = (fd, 1)
    try:
        yield key
    finally:
        del _HELD_LOCKS[key]
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------- CSV fields (MiniMalloc's buffers)
class CsvError(ValueError):
    """A CSV text that does not parse (`csv_rows`): the message names the row."""


def csv_rows(lines):
    """(line number, fields) of each record of a CSV text (RFC 4180: a quoted field may hold
    commas, doubled quotes and line breaks): an unquoted field trimmed of white space, a quoted
    one as written between its quotes (white space around the quotes skipped). A line without a
    quote, the usual case, is split on commas."""
    held, start = None, 0
    for n, line in enumerate(lines, start=1):
        if held is None and '"' not in line:
            yield n, [x.strip() for x in line.rstrip("\r\n").split(",")]
            continue
        held, start = (line, n) if held is None else (held + line, start)
        if held.count('"') % 2:   # a quoted field goes on to the next line
            continue
        yield start, _quoted_fields(held.rstrip("\r\n"), start)
        held = None
    if held is not None:
        raise CsvError(f"row {start}: a quoted field is not closed")


def _quoted_fields(text: str, row: int) -> list[str]:
    out, i, n = [], 0, len(text)
    while True:
        j = i
        while j < n and text[j] in " \t":
            j += 1
        if j < n and text[j] == '"':
            parts, k = [], j + 1
            while True:
                q = text.find('"', k)
                if q < 0:
                    raise CsvError(f"row {row}: a quoted field is not closed")
                parts.append(text[k:q])
                if text.startswith('"', q + 1):   # a doubled quote is one quote
                    parts.append('"')
                    k = q + 2
                    continue
                k = q + 1
                break
            while k < n and text[k] in " \t":
                k += 1
            if k < n and text[k] != ",":
                raise CsvError(f"row {row}: text after a quoted field's closing quote")
            out.append("".join(parts))
            if k >= n:
                return out
            i = k + 1
        else:
            k = text.find(",", i)
            if k < 0:
                out.append(text[i:].strip())
                return out
            out.append(text[i:k].strip())
            i = k + 1


_QUOTED = re.compile(r'[,"\r\n]|^\s|\s$')


def csv_field(text: str) -> str:
    """An id as a CSV field: quoted (RFC 4180) when it holds a comma, a quote or a line break, or
    begins or ends with white space (which a reader that trims fields would drop)."""
    if _QUOTED.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text
