"""Random DAGs for property tests: resident nodes, temp bytes, control edges, outputs, fan-in."""

from __future__ import annotations

import numpy as np

from regal.graph import Graph


def random_dag(seed: int, num_nodes: int | None = None, max_nodes: int = 30,
               resident_fraction: float = 0.15, control_fraction: float = 0.1,
               temp_fraction: float = 0.3, reuse_fraction: float = 0.0,
               output_fraction: float = 0.0) -> Graph:
    """A random DAG whose node records exercise every rule of SPEC.md section 3.

    reuse_fraction: the share of nodes with inputs that get a `reuse` list (a random subset of
    their inputs, resident ones included, in random order); such a node's bytes are often set to
    an input's bytes, so that taking over is possible. 0 (the default) draws nothing more, so the
    graphs of a seed are the same as before the field existed.
    output_fraction: the share of nodes marked `output` (graph outputs, never freed; resident
    ones and nodes without consumers included, where the flag changes nothing). 0: none, as
    before the field existed.
    """
    rng = np.random.default_rng(seed)
    n = int(num_nodes if num_nodes is not None else rng.integers(1, max_nodes + 1))
    resident = rng.random(n) < resident_fraction
    resident[0] = resident[0] and n > 1
    recs = []
    for v in range(n):
        rec = {"id": f"n{v}", "bytes": int(rng.integers(0, 100)), "op": str(rng.choice(["add", "dot", "conv"]))}
        earlier_compute = [u for u in range(v)]
        if resident[v]:
            rec["resident"] = True
        else:
            if earlier_compute:
                k = int(rng.integers(0, min(4, len(earlier_compute)) + 1))
                ins = rng.choice(earlier_compute, size=k, replace=False)
                # favour recent producers, like a real network
                rec["inputs"] = [f"n{int(u)}" for u in sorted(ins)]
                rest = [u for u in earlier_compute if u not in set(ins.tolist()) and not resident[u]]
                if rest and rng.random() < control_fraction:
                    rec["control_inputs"] = [f"n{int(rng.choice(rest))}"]
            if rng.random() < temp_fraction:
                rec["temp_bytes"] = int(rng.integers(1, 50))
            if rng.random() < 0.5:
                rec["cost"] = float(rng.random() * 1e-3)
        recs.append(rec)
    if reuse_fraction > 0:
        _add_reuse(recs, np.random.default_rng([seed, 7]), reuse_fraction)
    if output_fraction > 0:
        out_rng = np.random.default_rng([seed, 11])
        for rec in recs:
            if out_rng.random() < output_fraction:
                rec["output"] = True
    return Graph.from_records(recs, name=f"random{seed}")


def _add_reuse(recs: list, rng: np.random.Generator, fraction: float) -> None:
    by_id = {r["id"]: r for r in recs}
    for rec in recs:
        ins = rec.get("inputs", [])
        if not ins or rng.random() >= fraction:
            continue
        k = int(rng.integers(1, len(ins) + 1))
        rec["reuse"] = [str(u) for u in rng.permutation(ins)[:k]]
        if rng.random() < 0.6:  # an elementwise op: the size of one of its inputs
            rec["bytes"] = int(by_id[str(rng.choice(rec["reuse"]))]["bytes"])
