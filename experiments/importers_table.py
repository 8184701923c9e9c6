"""Imported real models against the compiler heuristics: one row per shipped ONNX fixture.

    python -m experiments.importers_table [--budget 5000] [--devices 1 2] [--torch]

For every fixture in data/onnx/manifest.json, imported with `regal.onnx.load_onnx` at its
reference dims (batch 8, BERT sequence 128): nodes, total bytes, the lower bound
`graph.lower_bound(d)`, and at each d the peak of `regal.optimize(graph, devices=d,
budget=5000, seed=0)` against the best compiler heuristic, min over "xla-heuristics" and
"inductor-heuristics". Peaks in MB (10^6 bytes). Prints a Markdown table.
"""

from __future__ import annotations

import argparse

import regal
from data.importer_graphs import onnx_graphs, torch_graphs

HEURISTICS = ("xla-heuristics", "inductor-heuristics")


def solve_method(name: str, graph, devices: int):
    """Run a registered method (`regal.methods`) by name."""
    from regal.methods import solve
    return solve(name, graph, devices, seed=0)


def rows(budget: int, devices: list[int], with_torch: bool = False):
    sources = [onnx_graphs()] + ([torch_graphs()] if with_torch else [])
    for source in sources:
        for name, framework, mode, graph in source:
            row = {"model": name, "framework": framework, "mode": mode, "nodes": graph.num_nodes,
                   "total_bytes": int(graph.bytes.sum())}
            _solve_row(row, graph, budget, devices)
            yield row


def _solve_row(row: dict, graph, budget: int, devices: list[int]) -> None:
    for d in devices:
        row[f"lb{d}"] = graph.lower_bound(d)
        row[f"regal{d}"] = regal.optimize(graph, devices=d, budget=budget, seed=0).peak_bytes
        row[f"heur{d}"] = min(solve_method(m, graph, d).peak_bytes for m in HEURISTICS)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=5000)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--torch", action="store_true", help="also the PyTorch graphs (needs the torch venv)")
    args = ap.parse_args(argv)
    mb = lambda x: f"{x / 1e6:,.1f}"  # noqa: E731
    head = ["model", "framework", "mode", "nodes", "total MB"]
    for d in args.devices:
        head += [f"LB d={d}", f"REGAL d={d}", f"best heuristic d={d}"]
    print("| " + " | ".join(head) + " |")
    print("|---|---|---|" + "---:|" * (len(head) - 3))
    for r in rows(args.budget, args.devices, args.torch):
        cells = [r["model"], r["framework"], r["mode"], f"{r['nodes']:,}", mb(r["total_bytes"])]
        for d in args.devices:
            cells += [mb(r[f"lb{d}"]), mb(r[f"regal{d}"]), mb(r[f"heur{d}"])]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
