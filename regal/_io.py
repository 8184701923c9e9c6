"""Opening regal's text files (UTF-8, gzip-compressed when the path ends in `.gz`), and writing
every file regal writes atomically (a temporary file in the same directory, then `os.replace`)."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import tempfile
import zlib
from typing import IO, Iterator


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


def load_graph(path: str | os.PathLike, dims=None, name: str | None = None):
    """Any graph file regal reads: regal-graph/1 JSON, XLA HLO text, or ONNX (`dims` gives
    symbolic ONNX dimensions their values; `name` renames an imported module, a JSON graph keeps
    its own). `regal.load` is this function."""
    kind = graph_kind(path)
    if kind == "onnx":
        from regal.onnx import load_onnx
        return load_onnx(path, dims=dims, name=name)
    if dims:
        raise ValueError(f"{os.fspath(path)}: --dim applies to ONNX models only")
    if kind == "hlo":
        from regal.hlo import load_hlo
        return load_hlo(path, name=name)
    from regal.graph import load
    return load(path)


def check_writable(path: str | os.PathLike) -> None:
    """OSError with a one-line reason unless a file can be written at `path` (its directory
    exists and is writable, and the path is not a directory): checked before a long search."""
    p = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(p))
    if os.path.isdir(p):
        raise OSError(f"{p}: is a directory")
    if not os.path.isdir(folder):
        raise OSError(f"{p}: no such directory {folder}")
    if not os.access(folder, os.W_OK):
        raise OSError(f"{p}: directory {folder} is not writable")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A temporary path in the same directory as `path` (same suffix), renamed over `path` once
    the body has finished without an error, removed otherwise: a reader, or a kill mid-write,
    never sees a cut-off file, and an earlier good file stays until the new one is complete."""
    p = os.fspath(path)
    base = os.path.basename(p)
    suffix = ".tmp.gz" if p.endswith(".gz") else ".tmp" + os.path.splitext(base)[1]
    fd, tmp = tempfile.mkstemp(prefix=base + ".", suffix=suffix, dir=os.path.dirname(os.path.abspath(p)))
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
