"""A real graph of about N nodes for the engine benchmark: a deep Transformer LM's training step.

    python -m benchmarks.big_graph --nodes 80000 -o data/cache/bench_80k.json.gz

The model is data/nets.py's TransformerLM (vocabulary 8000, 4 heads, width 64, sequence 32,
batch 1) with AdamW, traced with data/models.py's train_fn and imported from its
pre-optimization HLO (lowering only; XLA's compiler is not run, which at this depth would take
minutes). The depth is chosen from two shallow traces (nodes grow linearly with layers), so the
graph lands within a few hundred nodes of --nodes. Deterministic: same JAX version, same graph.
"""

from __future__ import annotations

import argparse
import os
import time


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=80_000)
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args(argv)
    from data._files import save_graph
    t0 = time.perf_counter()
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
