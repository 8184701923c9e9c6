"""Random DAGs for property tests: resident nodes, temp bytes, control edges, outputs, fan-in."""

from __future__ import annotations

import numpy as np

from regal.graph import Graph


def random_dag(seed: int, num_nodes: int | None = None, max_nodes: int = 30,
               resident_fraction: float = 0.15, control_fraction: float = 0.1,
               temp_fraction: float = 0.3) -> Graph:
    """A random DAG whose node records exercise every rule of SPEC.md section 3."""
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
    return Graph.from_records(recs, name=f"random{seed}")
