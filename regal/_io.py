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
