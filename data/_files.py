"""Byte-reproducible file writing for the data set: the same graph always gives the same file.

`regal.save` uses `gzip.open`, whose header records the file name and the current time, so a
rebuild would change every shipped file in git. `save_graph` writes the same JSON with a fixed
gzip header (no name, mtime 0), through a temporary file and an atomic rename.
"""

from __future__ import annotations

import gzip
import json
import os

from regal.graph import Graph

__all__ = ["save_graph", "write_json"]


def save_graph(graph: Graph, path: str) -> int:
    """Write `graph` as `regal-graph/1` JSON, gzip-compressed (path must end in .gz); returns bytes."""
    if not path.endswith(".gz"):
        raise ValueError(f"{path}: expected a .gz path")
    data = json.dumps(graph.to_json(), separators=(",", ":")).encode("utf-8")
    tmp = path + ".tmp"
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(data)
    os.replace(tmp, path)
    return os.path.getsize(path)


def write_json(doc: dict, path: str) -> None:
    """Write a manifest: indented JSON with a final newline, atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
