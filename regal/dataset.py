"""The data set: which graph files make up each split (a manifest such as data/manifest.json).

Paths in a manifest are relative to the manifest's folder's `graphs/` directory (or its "root").
The data set is not part of the installed package; it is found at an explicit path: the
`manifest` argument, else `$REGAL_DATA_DIR`, else `./data` in the current directory (a checkout
of the repository). The real set's manifest is `manifest.json`, the synthetic set's
`manifest_synthetic.json`.
"""

from __future__ import annotations

import json
import os

__all__ = ["data_dir", "manifest_path", "load_manifest", "split_paths", "split_names", "spread"]


def data_dir() -> str:
    """The data set's folder: $REGAL_DATA_DIR, else ./data; ValueError if it has no manifest."""
    path = os.environ.get("REGAL_DATA_DIR") or os.path.join(os.getcwd(), "data")
    if not os.path.exists(os.path.join(path, "manifest.json")):
        raise ValueError(f"no data set at {path}: pass a manifest (--manifest), set REGAL_DATA_DIR, "
                         "or run from a checkout of the repository")
    return path


def manifest_path(synthetic: bool = False) -> str:
    return os.path.join(data_dir(), "manifest_synthetic.json" if synthetic else "manifest.json")


def load_manifest(manifest: str | None = None, synthetic: bool = False) -> dict:
    path = manifest or manifest_path(synthetic)
    if synthetic and manifest:
        path = os.path.join(os.path.dirname(manifest), "manifest_synthetic.json")
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such manifest (build the data set: python -m data.build_dataset)")
    with open(path) as f:
        doc = json.load(f)
    doc["_root"] = os.path.join(os.path.dirname(os.path.abspath(path)), doc.get("root", "graphs"))
    return doc


def split_names(split: str, manifest: str | None = None, synthetic: bool = False) -> list[str]:
    """Graph names of a split. A corpus manifest (splits by source, then by family) takes
    "SOURCE:SPLIT" (one source's) or "SPLIT" (that split of every source)."""
    doc = load_manifest(manifest, synthetic)
    by_family = doc["splits"].get("by_family")
    if isinstance(by_family, dict) and split not in doc["splits"]:
        source, _, part = split.rpartition(":")
        sources = [source] if source else list(by_family)
        if any(s not in by_family or part not in by_family[s] for s in sources):
            names = sorted({f"{s}:{p}" for s, d in by_family.items() for p in d})
            raise ValueError(f"no split {split!r} in the corpus manifest (splits: train, valid, test, "
                             f"or one of {', '.join(names)})")
        return [name for s in sources for name in by_family[s][part]]
    if split not in doc["splits"]:
        raise ValueError(f"no split {split!r} in the manifest (splits: {', '.join(doc['splits'])})")
    return list(doc["splits"][split])


def split_paths(split: str, manifest: str | None = None, synthetic: bool = False,
                max_nodes: int | None = None, shipped_only: bool = True) -> list[str]:
    """Graph file paths of a split, in manifest order, optionally only those up to max_nodes."""
    doc = load_manifest(manifest, synthetic)
    out = []
    for name in split_names(split, manifest, synthetic):
        info = doc["graphs"][name]
        if max_nodes is not None and info.get("nodes", 0) > max_nodes:
            continue
        path = os.path.join(doc["_root"], info["path"])
        if shipped_only and not os.path.exists(path):
            continue
        out.append(path)
    return out


def spread(paths: list[str], k: int, manifest: str | None = None, synthetic: bool = False) -> list[str]:
    """Up to k of `paths`, taken round-robin over model families (then in manifest order)."""
    if k >= len(paths):
        return list(paths)
    doc = load_manifest(manifest, synthetic)
    # by file name: a corpus manifest's keys are "source/name"; families count per source
    family = {os.path.basename(info["path"]): f'{info.get("source", "")}/{info.get("family", "")}'
              for info in doc["graphs"].values()}
    by_family: dict[str, list[str]] = {}
    for p in paths:
        by_family.setdefault(family.get(os.path.basename(p), ""), []).append(p)
    queues = [list(v[::-1]) for v in by_family.values()]
    out: list[str] = []
    while len(out) < k:
        for q in queues:
            if q and len(out) < k:
                # the family's graphs are taken evenly spaced: first, last, middle, ...
                out.append(q.pop(len(q) // 2 if len(out) >= len(queues) else -1))
    return out
