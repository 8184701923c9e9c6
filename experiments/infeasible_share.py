"""How `regal.FlagshipConfig.infeasible_share` was chosen: the runtime flagship on 16 real *valid* graphs
(spread over families, at most 5,000 nodes; never the test graphs), d = 2, 4, memory limits 1x and
1.5x of the peak-memory flagship's peak, seeds 0-2, with the climb's share while over the limit
set to SHARE (1.0: the climb's usual share, the behaviour before the rule). Writes one JSON row
per run to OUT.

    python -m experiments.infeasible_share SHARE OUT.json      # e.g. 0.5, 1.0, 0.25, 0.0001

Results of the choice (runs within the limit of 192): 1.0 -> 107, 0.5 -> 116, 0.25 -> 115,
0.0001 (BRKGA alone while over the limit) -> 103 (run at ae4f6d2, then a module constant; the
rows are in experiments/results/infeasible_share/share_<SHARE>.json).
"""
import json
import os
import sys

import regal
from experiments.run import dataset_graphs


def main(share: float, out: str) -> None:
    config = regal.FlagshipConfig(infeasible_share=share)
    paths = dataset_graphs({"label": "real-valid", "split": "valid", "spread": 16, "max_nodes": 5000})
    rows = []
    for p in paths:
        g = regal.load(p)
        for d in (2, 4):
            peak = regal.optimize(g, d, budget=5000, seed=0, num_threads=1).peak_bytes
            for f in (1.0, 1.5):
                lim = int(f * peak)
                for s in range(3):
                    sol = regal.optimize(g, d, budget=5000, seed=s, objective="runtime", memory_limit_bytes=lim,
                                         num_threads=1, config=config)
                    t = sol.info["timed"]
                    rows.append(dict(graph=os.path.basename(p), d=d, limit=f, seed=s, feasible=t["feasible"],
                                     makespan=t["makespan_s"], peak=t["peak_bytes"] / lim))
                    print(rows[-1], flush=True)
    with open(out, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2])
