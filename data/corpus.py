"""The graph corpus: every shipped graph of every source in one manifest, data/manifest_corpus.json.

    python -m data.corpus [--check]

Merges the per-source manifests (each written by its own builder, see data/README.md) into
`data/manifest_corpus.json` (`regal-manifest/1`), for training and validating a learned prior
leave-one-source-out. Sources:

| source | builder | manifest | granularity |
|---|---|---|---|
| `haiku_hlo` | `data.build_dataset` (Haiku -> XLA HLO) | `manifest.json` | op |
| `torch` | `data.importer_graphs` + `data.torch_corpus` (torch.export / make_fx, ONNX) | `manifest_importers.json`, `manifest_torch.json` | op |
| `flax_hlo` | `data.flax_models` (Flax linen -> XLA HLO) | `manifest_flax.json` | op |
| `layers` | `data.layer_graphs` (torch.export contracted to modules) | `manifest_layers.json` | layer |
| `synthetic_regal` | `data.synthetic` (REGAL's recipe) | `manifest_synthetic.json` | op |
| `synthetic_layered` | `data.synthetic_layered` (layered networks) | `manifest_synthetic_layered.json` | op or layer |

Each graph's key is `<source>/<name>`; its `path` is relative to `data/` (`root` is "."). Its
entry holds `source`, `family`, `granularity`, `mode` (`fwd` / `train`; null for REGAL's
synthetic DAGs, which model neither), `stage` (`pre` / `opt` for the HLO sources, else null),
`split` (the family-level split within its source), `nodes`, `edges` and, for torch, the
`framework` (`pytorch` or `onnx`). `splits.by_source` lists each source's graphs (leave one
out); `splits.by_family[source]` its train/valid/test lists (families never straddle two;
REGAL's synthetic set has one family and keeps its split by index). Graphs outside 50-20,000
nodes are left out. `--check` loads every listed graph and checks its node count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from data._files import write_json

HERE = os.path.dirname(os.path.abspath(__file__))
MIN_NODES, MAX_NODES = 50, 20_000
SOURCES = ("haiku_hlo", "torch", "flax_hlo", "layers", "synthetic_regal", "synthetic_layered")
SPLITS = ("train", "valid", "test")

#: source -> (manifests, build commands, description)
_SOURCES = {
    "haiku_hlo": (["manifest.json"], ["python -m data.build_dataset --out data/graphs --jobs 2"],
                  "56 Haiku models (16 families) lowered to XLA HLO, pre and opt stages"),
    "torch": (["manifest_importers.json", "manifest_torch.json"],
              [".venv-torch/bin/python -m data.importer_graphs", ".venv-torch/bin/python -m data.torch_corpus"],
              "torchvision and Hugging Face models through regal.torch (torch.export forward, make_fx training "
              "step) and regal.onnx (the shipped ONNX exports)"),
    "flax_hlo": (["manifest_flax.json"], ["python -m data.flax_models"],
                 "Flax linen models lowered to XLA HLO, pre and opt stages"),
    "layers": (["manifest_layers.json"], [".venv-torch/bin/python -m data.layer_graphs"],
               "torchvision and Hugging Face models, one node per layer (module), mirrored training steps"),
    "synthetic_regal": (["manifest_synthetic.json"], ["python -m data.synthetic --count 400 --seed 0"],
                        "REGAL-style random layered DAGs, N(50, 10) sizes in abstract units"),
    "synthetic_layered": (["manifest_synthetic_layered.json"], ["python -m data.synthetic_layered --count 200 --seed 0"],
                          "random layered networks of six families, sizes in bytes from shapes"),
}


def _entries(source: str, manifest_name: str) -> list[tuple[str, dict]]:
    """(key, corpus entry) of every graph of one per-source manifest."""
    path = os.path.join(HERE, manifest_name)
    doc = json.load(open(path, encoding="utf-8"))
    base = os.path.relpath(os.path.join(HERE, doc.get("root", "graphs")), HERE)
    out = []
    for name, e in doc["graphs"].items():
        rel = os.path.normpath(os.path.join(base, e["path"]))
        if e.get("edges") is None:  # the importers' manifest has no edge counts
            import regal
            e = dict(e, edges=regal.load(os.path.join(HERE, rel)).num_data_edges)
        entry = {"path": rel.replace(os.sep, "/"), "name": name, "source": source, "nodes": e["nodes"],
                 "edges": e.get("edges"), "mode": e.get("mode"), "stage": e.get("stage")}
        if source == "torch" and manifest_name == "manifest_importers.json":
            # the importers' models take their family and split from data.torch_corpus (its manifest
            # records both, so this runs without torch)
            torch_doc = json.load(open(os.path.join(HERE, "manifest_torch.json"), encoding="utf-8"))
            fam = torch_doc["importer_families"][e["family"]]
            entry.update(family=fam, split=torch_doc["families"][fam], granularity="op", framework=e["source"])
        elif source == "torch":
            entry.update(family=e["family"], split=e["split"], granularity="op", framework="pytorch")
        else:
            entry.update(family=e["family"], split=e["split"], granularity=e.get("granularity", "op"))
        out.append((f"{source}/{name}", entry))
    return out


def build(check: bool = False) -> dict:
    graphs: dict[str, dict] = {}
    sources: dict[str, dict] = {}
    for source in SOURCES:
        manifests, commands, description = _SOURCES[source]
        keys = []
        families: dict[str, str] = {}
        for m in manifests:
            if not os.path.exists(os.path.join(HERE, m)):
                print(f"warning: {m} missing; source {source} incomplete", file=sys.stderr)
                continue
            for key, e in _entries(source, m):
                if not MIN_NODES <= e["nodes"] <= MAX_NODES:
                    continue
                graphs[key] = {k: e[k] for k in ("path", "name", "source", "family", "granularity", "mode", "stage",
                                                 "split", "nodes", "edges") + (("framework",) if "framework" in e else ())}
                keys.append(key)
                families.setdefault(e["family"], e["split"])
        if source == "synthetic_regal":  # one family; data.synthetic splits by index
            families = {"synthetic": "by index: first 300 train, next 50 valid, last 50 test"}
        nodes = np.array([graphs[k]["nodes"] for k in keys] or [0])
        sources[source] = {"description": description, "manifests": manifests, "build": commands,
                           "graphs": len(keys), "nodes_min": int(nodes.min()), "nodes_median": float(np.median(nodes)),
                           "nodes_max": int(nodes.max()),
                           "granularity": sorted({graphs[k]["granularity"] for k in keys}),
                           "families": dict(sorted(families.items()))}
    if check:
        import regal
        for key, e in graphs.items():
            g = regal.load(os.path.join(HERE, e["path"]))
            if g.num_nodes != e["nodes"]:
                raise SystemExit(f"{key}: {g.num_nodes} nodes, manifest says {e['nodes']}")
        print(f"checked {len(graphs)} graphs")
    by_source = {s: sorted(k for k, e in graphs.items() if e["source"] == s) for s in SOURCES}
    by_family = {s: {sp: [k for k in by_source[s] if graphs[k]["split"] == sp] for sp in SPLITS} for s in SOURCES}
    return {"format": "regal-manifest/1",
            "description": "The graph corpus: every source, for leave-one-source-out (python -m data.corpus)",
            "root": ".", "node_range": [MIN_NODES, MAX_NODES], "sources": sources,
            "split_policy": "by source (leave one source out), and within each source by family",
            "splits": {"by_source": by_source, "by_family": by_family},
            "graphs": dict(sorted(graphs.items()))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.corpus", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="load every graph and check its node count")
    p.add_argument("--out", default=os.path.join(HERE, "manifest_corpus.json"))
    a = p.parse_args(argv)
    doc = build(check=a.check)
    write_json(doc, a.out)
    for s, info in doc["sources"].items():
        sp = {k: len(v) for k, v in doc["splits"]["by_family"][s].items()}
        print(f"{s:18s} {info['graphs']:4d} graphs, nodes {info['nodes_min']}-{info['nodes_max']} "
              f"(median {info['nodes_median']:g}), {'/'.join(info['granularity'])}, splits {sp}")
    print(f"wrote {a.out}: {len(doc['graphs'])} graphs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
