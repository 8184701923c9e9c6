"""Markdown tables of the data set, per split and per family, from the manifests.

    python -m data.stats [--manifest data/manifest.json] [--synthetic data/manifest_synthetic.json]

Columns: graphs; nodes min / median / max; data edges (median); tensor MB (median over graphs
of the sum of all node `bytes`, 1 MB = 10^6 bytes); file MB (compressed size on disk, summed);
shipped (graphs whose files are in git, the others are rebuilt by `data.build_dataset`).
Numbers come from the manifest entries, which the builders fill from the saved graphs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

__all__ = ["table", "main"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_HEADER = ("graphs", "nodes min", "nodes median", "nodes max", "edges median", "tensor MB median",
           "file MB", "shipped")


def _row(label: list[str], entries: list[dict]) -> str:
    nodes = np.array([e["nodes"] for e in entries])
    edges = np.array([e["edges"] for e in entries])
    tensor_mb = np.array([e.get("total_bytes", 0) for e in entries]) / 1e6
    file_mb = sum(e.get("file_bytes", 0) for e in entries) / 1e6
    cells = label + [str(len(entries)), str(nodes.min()), f"{np.median(nodes):.0f}", str(nodes.max()),
                     f"{np.median(edges):.0f}", _fmt_mb(float(np.median(tensor_mb))), f"{file_mb:.2f}",
                     str(sum(bool(e.get("shipped", True)) for e in entries))]
    return "| " + " | ".join(cells) + " |"


def _fmt_mb(x: float) -> str:
    return f"{x:.1f}" if x >= 1 else (f"{x:.3f}" if x >= 1e-3 else f"{x:.2g}")


def table(entries: dict[str, dict], by: tuple[str, ...]) -> str:
    """A Markdown table of `entries` (manifest graph entries) grouped by the keys in `by`, plus a total."""
    groups: dict[tuple, list[dict]] = {}
    for e in entries.values():
        groups.setdefault(tuple(str(e.get(k, "")) for k in by), []).append(e)
    order = {"train": 0, "valid": 1, "test": 2}
    keys = sorted(groups, key=lambda k: tuple((order.get(x, 9) if key == "split" else 0, x)
                                              for key, x in zip(by, k)))
    lines = ["| " + " | ".join(list(by) + list(_HEADER)) + " |",
             "|" + "|".join(["---"] * len(by) + ["---:"] * len(_HEADER)) + "|"]
    lines += [_row(list(k), groups[k]) for k in keys]
    lines.append(_row(["**all**"] + [""] * (len(by) - 1), list(entries.values())))
    return "\n".join(lines)


def _load(path: str) -> dict | None:
    if not os.path.exists(path):
        print(f"(no manifest at {path})", file=sys.stderr)
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.stats", description=__doc__.split("\n")[0])
    p.add_argument("--manifest", default=os.path.join(_HERE, "manifest.json"))
    p.add_argument("--synthetic", default=os.path.join(_HERE, "manifest_synthetic.json"))
    a = p.parse_args(argv)
    real = _load(a.manifest)
    if real and real["graphs"]:
        g = real["graphs"]
        print(f"### Real graphs ({len(g)}), by split\n")
        print(table(g, ("split",)))
        print("\n### Real graphs, by family\n")
        print(table(g, ("split", "family")))
        print("\n### Real graphs, by mode and stage\n")
        print(table(g, ("mode", "stage")))
    syn = _load(a.synthetic)
    if syn and syn["graphs"]:
        print(f"\n### Synthetic graphs ({len(syn['graphs'])}), by split\n")
        print(table(syn["graphs"], ("split",)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
