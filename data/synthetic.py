"""REGAL-style synthetic computation graphs: random layered DAGs with N(50, 10) tensor sizes.

    python -m data.synthetic --out data/graphs/synthetic --count 400 --seed 0

REGAL (Paliwal et al., ICLR 2020) adds to its TensorFlow and XLA graphs a synthetic set whose
tensor sizes are drawn from N(50, 10). The paper gives no more detail, so the structure here is
our choice, made to look like a small network's graph (see `generate`):

- one resident `input` node and a few resident `parameter` nodes (about 1 in 12 nodes);
- the other nodes in layers of width 1 to 4; each takes 1 to 3 data inputs: one from the
  previous layer, the others either a skip connection from an earlier layer (geometric
  distance) or a parameter;
- every non-output node and every parameter has at least one consumer; the last layer holds
  the graph outputs.

Sizes: every node's `bytes` is round(N(50, 10)), at least 1. The unit is abstract; we store the
values in the `bytes` field unchanged, so peaks on this set read in the same units as REGAL's.
`cost` is drawn from U(0.5, 1.5) us times the fan-in (only the timed model reads it).
Everything is a pure function of `(num_nodes, seed)`.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from data._files import save_graph, write_json
from regal.graph import Graph

__all__ = ["SIZE_MEAN", "SIZE_STD", "MIN_NODES", "MAX_NODES", "generate", "sample_dataset", "main"]

SIZE_MEAN, SIZE_STD = 50.0, 10.0
MIN_NODES, MAX_NODES = 50, 250
_OPS = {1: ("relu", "tanh", "reshape", "transpose", "reduce"),
        2: ("add", "multiply", "dot", "convolution", "subtract"),
        3: ("concatenate", "select", "fusion")}


def _sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.maximum(1, np.rint(rng.normal(SIZE_MEAN, SIZE_STD, size=n))).astype(np.int64)


def generate(num_nodes: int, seed: int, name: str | None = None) -> Graph:
    """A random layered DAG of exactly `num_nodes` nodes (>= 4), a pure function of its arguments.

    Node order is topological: `input`, the parameters `w*`, then the layers' nodes `n*`.
    """
    if num_nodes < 4:
        raise ValueError(f"num_nodes must be >= 4, got {num_nodes}")
    rng = np.random.default_rng([seed, num_nodes])
    num_params = int(rng.integers(max(1, num_nodes // 16), max(2, num_nodes // 8) + 1))
    num_compute = num_nodes - 1 - num_params
    sizes = _sizes(rng, num_nodes)

    layers: list[list[int]] = []  # compute node indices (0-based among compute nodes)
    k = 0
    while k < num_compute:
        width = min(int(rng.choice([1, 2, 3, 4], p=[0.35, 0.35, 0.2, 0.1])), num_compute - k)
        layers.append(list(range(k, k + width)))
        k += width
    layer_of = np.repeat(np.arange(len(layers)), [len(x) for x in layers])

    # Inputs by "kind": ("input",), ("param", j) or ("node", c).
    inputs: list[list[tuple]] = [[] for _ in range(num_compute)]
    param_uses = np.zeros(num_params, dtype=np.int64)
    for li, layer in enumerate(layers):
        for c in layer:
            fan_in = int(rng.choice([1, 2, 3], p=[0.45, 0.4, 0.15]))
            primary = ("input",) if li == 0 else ("node", int(rng.choice(layers[li - 1])))
            chosen = [primary]
            for _ in range(fan_in - 1):
                if li >= 2 and rng.random() < 0.5:
                    back = min(li - 1, 1 + int(rng.geometric(0.5)))
                    cand = ("node", int(rng.choice(layers[li - back])))
                else:
                    unused = np.flatnonzero(param_uses == 0)
                    j = int(rng.choice(unused)) if unused.size and rng.random() < 0.7 else int(rng.integers(num_params))
                    cand = ("param", j)
                if cand not in chosen:
                    chosen.append(cand)
                    if cand[0] == "param":
                        param_uses[cand[1]] += 1
            inputs[c] = chosen

    # Every compute node outside the last layer feeds a later node; every parameter is used.
    has_consumer = np.zeros(num_compute, dtype=bool)
    for ins in inputs:
        for kind in ins:
            if kind[0] == "node":
                has_consumer[kind[1]] = True
    last = len(layers) - 1
    for c in range(num_compute):
        if not has_consumer[c] and layer_of[c] < last:
            lo = layer_of[c] + 1
            hi = min(last, lo + 2)
            later = [x for li in range(lo, hi + 1) for x in layers[li]]
            open_ = [x for x in later if len(inputs[x]) < 3]
            if not open_:  # the next layers are full: any later node with room
                open_ = [x for li in range(hi + 1, last + 1) for x in layers[li] if len(inputs[x]) < 3]
            inputs[int(rng.choice(open_ or later))].append(("node", c))
    for j in np.flatnonzero(param_uses == 0):
        open_ = [x for x in range(num_compute) if len(inputs[x]) < 3]
        inputs[int(rng.choice(open_)) if open_ else int(rng.integers(num_compute))].append(("param", int(j)))

    def node_id(kind: tuple) -> str:
        return "input" if kind[0] == "input" else (f"w{kind[1]}" if kind[0] == "param" else f"n{kind[1]}")

    recs: list[dict] = [{"id": "input", "op": "parameter", "bytes": int(sizes[0]), "resident": True}]
    recs += [{"id": f"w{j}", "op": "parameter", "bytes": int(sizes[1 + j]), "resident": True}
             for j in range(num_params)]
    for c in range(num_compute):
        fan_in = len(inputs[c])
        ops = _OPS[min(fan_in, 3)]
        recs.append({"id": f"n{c}", "op": str(ops[int(rng.integers(len(ops)))]),
                     "bytes": int(sizes[1 + num_params + c]), "inputs": [node_id(x) for x in inputs[c]],
                     "cost": float(np.round(rng.uniform(0.5, 1.5) * 1e-6 * fan_in, 12))})
    meta = {"source": "synthetic", "generator": "data.synthetic", "seed": int(seed), "num_nodes": int(num_nodes),
            "size_distribution": f"round(N({SIZE_MEAN:g}, {SIZE_STD:g})), >= 1, abstract units stored as bytes"}
    return Graph.from_records(recs, name=name or f"synthetic_n{num_nodes}_s{seed}", meta=meta,
                              source="data.synthetic")


def sample_dataset(count: int, seed: int) -> list[tuple[str, int, int]]:
    """(name, num_nodes, graph seed) of each graph of the set; node counts uniform in [50, 250]."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(MIN_NODES, MAX_NODES + 1, size=count)
    seeds = np.random.SeedSequence(seed).generate_state(count, dtype=np.uint32)
    return [(f"synthetic_s{seed}_{i:04d}", int(sizes[i]), int(seeds[i])) for i in range(count)]


def _split_of(i: int, count: int, fractions=(0.75, 0.125)) -> str:
    n_train = round(fractions[0] * count)
    n_valid = round(fractions[1] * count)
    return "train" if i < n_train else ("valid" if i < n_train + n_valid else "test")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.synthetic", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="data/graphs/synthetic", help="output folder")
    p.add_argument("--count", type=int, default=400, help="number of graphs (default 400: 300/50/50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--manifest", default=None,
                   help="manifest path (default: <folder holding the graphs folder>/manifest_synthetic.json)")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    out_abs = os.path.abspath(a.out)
    graphs_root = os.path.dirname(out_abs)
    manifest_path = a.manifest or os.path.join(os.path.dirname(graphs_root), "manifest_synthetic.json")
    sub = os.path.relpath(out_abs, graphs_root)
    entries = {}
    for i, (name, n, gseed) in enumerate(sample_dataset(a.count, a.seed)):
        split = _split_of(i, a.count)
        g = generate(n, gseed, name=name)
        g.meta.update(split=split, family="synthetic", dataset_seed=a.seed, index=i)
        path = os.path.join(a.out, f"{name}.json.gz")
        file_bytes = save_graph(g, path)
        entries[name] = {"path": f"{sub}/{name}.json.gz", "family": "synthetic", "split": split,
                         "seed": gseed, "nodes": g.num_nodes, "edges": g.num_data_edges,
                         "control_edges": 0, "total_bytes": int(g.bytes.sum()),
                         "file_bytes": file_bytes, "shipped": True}
    doc = {"format": "regal-manifest/1",
           "description": f"REGAL-style synthetic DAGs: python -m data.synthetic --count {a.count} --seed {a.seed}",
           "root": os.path.relpath(graphs_root, os.path.dirname(os.path.abspath(manifest_path))),
           "node_range": [MIN_NODES, MAX_NODES],
           "split_policy": "by index: first 75% train, next 12.5% valid, last 12.5% test",
           "splits": {s: [n for n, e in entries.items() if e["split"] == s] for s in ("train", "valid", "test")},
           "families": {"synthetic": "all"}, "graphs": entries}
    write_json(doc, manifest_path)
    for fname in sorted(os.listdir(a.out)):  # files of an earlier, larger --count
        if fname.startswith("synthetic_") and fname.endswith(".json.gz") and fname[:-8] not in entries:
            os.remove(os.path.join(a.out, fname))
    print(f"wrote {len(entries)} graphs to {a.out} and {manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
