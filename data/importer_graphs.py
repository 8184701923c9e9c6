"""Graphs from the importers: the shipped ONNX models and their PyTorch twins, as regal-graph/1.

    .venv-torch/bin/python -m data.importer_graphs      # ONNX and PyTorch (the torch venv, data/README.md)
    .venv/bin/python -m data.importer_graphs --onnx-only

A second source beside the Haiku zoo, from other frameworks and at operator granularity: the four
ONNX fixtures of `data/onnx/` at their reference dims (batch 8, BERT sequence 128), and the same
four models through `regal.torch` (forward with torch.export, one SGD training step with make_fx).
Writes `data/graphs/importers/*.json.gz` and `data/manifest_importers.json` (one split, "test":
nothing here is trained or tuned on). Deterministic for the same torch version.
"""

from __future__ import annotations

import argparse
import json
import os

from data._files import save_graph

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "onnx")


def onnx_graphs():
    """(model, framework, mode, Graph) of every shipped ONNX fixture at its reference dims."""
    from regal.onnx import load_onnx
    manifest = json.load(open(os.path.join(FIXTURES, "manifest.json")))["models"]
    for name, entry in manifest.items():
        yield name, "onnx", "fwd", load_onnx(os.path.join(FIXTURES, entry["file"]), dims=entry["reference_dims"])


def torch_graphs():
    """The same four models through `regal.torch`, forward and one training step (needs torch,
    torchvision and transformers)."""
    import torch

    import regal.torch
    from data.build_onnx import MODELS
    manifest = json.load(open(os.path.join(FIXTURES, "manifest.json")))["models"]
    for name, (make, _framework, _description, inputs_at, *_rest) in MODELS.items():
        inputs = inputs_at(manifest[name]["reference_dims"])
        for training in (False, True):
            torch.manual_seed(0)
            graph = regal.torch.from_module(make(), inputs, training=training)
            yield name, "pytorch", "train" if training else "fwd", graph


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx-only", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "graphs", "importers"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    graphs = {}
    for source in [onnx_graphs()] + ([] if args.onnx_only else [torch_graphs()]):
        for model, framework, mode, graph in source:
            name = f"{model}_{framework}_{mode}"
            graph = type(graph).from_records(graph.to_records(), name=name, meta=dict(graph.meta))
            size = save_graph(graph, os.path.join(args.out, f"{name}.json.gz"))
            graphs[name] = {"path": f"{name}.json.gz", "nodes": graph.num_nodes, "family": model,
                            "source": framework, "mode": mode}
            print(f"{name}: {graph.num_nodes:,} nodes, {size:,} B", flush=True)
    manifest = {"format": "regal-manifest/1", "description": __doc__.splitlines()[0],
                "root": os.path.relpath(args.out, HERE), "graphs": graphs, "splits": {"test": sorted(graphs)}}
    path = os.path.join(HERE, "manifest_importers.json")
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print(f"wrote {path} ({len(graphs)} graphs)")


if __name__ == "__main__":
    main()
