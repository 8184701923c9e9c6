"""A real graph of about N nodes for the engine benchmark: a deep Transformer LM's training step.

    python -m benchmarks.big_graph --nodes 80000 -o data/cache/bench_80k.json.gz
    python -m benchmarks.big_graph --nodes 1000000 --tile /tmp/big300k.json.gz -o /tmp/big1m.json.gz

The model is data/nets.py's TransformerLM (vocabulary 8000, 4 heads, width 64, sequence 32,
batch 1) with AdamW, traced with data/models.py's train_fn and imported from its
pre-optimization HLO (lowering only; XLA's compiler is not run, which at this depth would take
minutes). The depth is chosen from two shallow traces (nodes grow linearly with layers), so the
graph lands within a few hundred nodes of --nodes. Deterministic: same JAX version, same graph.

--tile GRAPH builds exactly --nodes nodes from a saved graph instead (tracing 1M nodes with JAX
took more than 13 GB): the graph's training step repeated, independent copies side by side (ids
prefixed `cK/`), the last copy cut at a prefix of its node order (the saved order is
topological, so the cut keeps every input). Building 300K nodes by tracing takes about 150 s
and 5 GB; tiling 1M from it about a minute.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def transformer_train_graph(layers: int, name: str | None = None):
    import jax
    from data import nets
    from data.models import ModelSpec, abstract_args, adamw, classify_loss, token_inputs, tokens_net, train_fn
    from regal.hlo import parse_hlo
    spec = ModelSpec(f"transformer_enc_l{layers}_d64", "transformer_enc",
                     tokens_net(lambda: nets.TransformerLM(8000, layers, 4, 64)),
                     token_inputs(32), classify_loss, adamw)
    lowered = jax.jit(train_fn(spec)).lower(*abstract_args(spec, 1, "train"))
    name = name or f"{spec.name}_b1_train_pre"
    return parse_hlo(lowered.compiler_ir("hlo").as_hlo_text(), name=name, source=f"{name}.hlo")


def tile_graph(path: str, num_nodes: int):
    """The graph at `path` repeated until `num_nodes` nodes, the last copy cut at a prefix."""
    from regal.graph import Graph, load
    src = load(path)
    base = src.to_records()
    n = len(base)
    for ptr, idx in ((src.in_ptr, src.in_idx), (src.ctrl_in_ptr, src.ctrl_in_idx)):
        consumer = np.repeat(np.arange(n), np.diff(ptr))
        assert (idx < consumer).all(), "tiling needs a graph whose node order is topological"
    recs = []
    copies = -(-num_nodes // n)
    for c in range(copies):
        prefix = f"c{c}/"
        for r in base[:min(n, num_nodes - c * n)]:
            r = dict(r, id=prefix + r["id"])
            for key in ("inputs", "control_inputs", "reuse"):
                if key in r:
                    r[key] = [prefix + u for u in r[key]]
            recs.append(r)
    return Graph.from_records(recs, name=f"{src.name}_x{copies}_{num_nodes}", meta={
        **src.meta, "description": f"benchmark graph: {copies} copies of {src.name} side by side, the last cut "
                                   f"at a prefix of its node order: {num_nodes} nodes"})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=80_000)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--tile", metavar="GRAPH", help="repeat this saved graph instead of tracing one")
    args = ap.parse_args(argv)
    from data._files import save_graph
    t0 = time.perf_counter()
    if args.tile:
        g = tile_graph(args.tile, args.nodes)
        save_graph(g, args.out)
        print(f"{args.out}: {g.num_nodes:,} nodes, {g.num_data_edges:,} edges, {time.perf_counter() - t0:.0f} s")
        return 0
    n1, n2 = (transformer_train_graph(k).num_nodes for k in (1, 2))
    per_layer = n2 - n1
    layers = max(1, round((args.nodes - (n1 - per_layer)) / per_layer))
    g = transformer_train_graph(layers)
    g.meta.update(description=f"benchmark graph: TransformerLM train step, {layers} layers, width 64, "
                              f"sequence 32, batch 1, pre-optimization HLO", layers=layers)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    save_graph(g, args.out)
    print(f"{args.out}: {g.num_nodes:,} nodes, {g.num_data_edges:,} edges ({layers} layers, "
          f"{per_layer} nodes per layer), {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
