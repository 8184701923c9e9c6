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

__all__ = ["save_graph", "write_json", "write_source_manifest"]


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


def write_source_manifest(kept: dict, out_dir: str, manifest_path: str, only, *, description: str,
                          node_range, split_policy: str, families: dict, extra: dict | None = None) -> dict:
    """The manifest of one corpus source's builder, and its folder kept in step with it.

    kept: graph name -> entry (with "split" and "variant") of this build. With `only` (a partial
    build) the manifest's other variants are kept; without it, graph files in `out_dir` that the
    build did not keep are removed. Returns the graphs written, sorted by name.
    """
    graphs_root = os.path.dirname(os.path.abspath(out_dir))
    if only and os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            old = json.load(f)["graphs"]
        kept = {**{n: e for n, e in old.items() if e["variant"] not in only}, **kept}
    kept = dict(sorted(kept.items()))
    doc = {"format": "regal-manifest/1", "description": description,
           "root": os.path.relpath(graphs_root, os.path.dirname(os.path.abspath(manifest_path))),
           "node_range": list(node_range), "split_policy": split_policy,
           "splits": {s: [n for n, e in kept.items() if e["split"] == s] for s in ("train", "valid", "test")},
           "families": dict(families), **(extra or {}), "graphs": kept}
    write_json(doc, manifest_path)
    if not only:
        for fname in sorted(os.listdir(out_dir)):
            if fname.endswith(".json.gz") and fname[:-8] not in kept:
                os.remove(os.path.join(out_dir, fname))
    return kept
