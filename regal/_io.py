"""Opening regal's text files: UTF-8, gzip-compressed when the path ends in `.gz`."""

from __future__ import annotations

import gzip
import os
from typing import IO


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
