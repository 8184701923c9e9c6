"""Why a 1x memory limit is hard for the runtime objective: the peak-memory flagship's own
schedule, replayed by the timed model (SPEC.md section 4), against its section 3 peak.

    python -m experiments.timed_replay [OUT.md]

On the 16 real *valid* graphs of the infeasible_share config (d = 2, 4; 5,000 evaluations,
seed 0, the same runs that set the 1x limit there), the flagship's placement and order are
encoded as a timed chromosome (priorities along the order, transfers by producer position,
`regal.timed.encode_timed`) and simulated: the devices then run at once, each taking its ready
node of highest priority, so a device that waits for a transfer runs a later node first, and
copies occupy memory from their transfer's start. The ratio timed peak / section 3 peak says how
far the sequential schedule's memory is from what the same placement and priorities need in
time; where it is above 1, that schedule is over a 1x limit in the timed model. The flagship's
runs are cells of the experiment runner (Dask; cached with the infeasible_share config's peak
cells, which are the same runs).
"""
import os
import statistics
import sys

from experiments.runner import ROOT, Cell, Method, dataset_graphs, run_cells
from regal.timed import check_device_model, decode_timed, encode_timed


def main(out: str | None = None, workers: int | None = None) -> None:
    from regal.parallel import cached_graph, dask_client
    from regal.solution import load_solution
    paths = dataset_graphs({"label": "real-valid", "split": "valid", "spread": 16, "max_nodes": 5000})
    method = Method("peak-regal", "regal", {"budget": 5000})  # regal.optimize(g, d, budget=5000, seed=0)
    cells = [Cell(method, p, d, 0) for p in paths for d in (2, 4)]
    cache = os.path.join(ROOT, "experiments", "cache", "infeasible_share")
    with dask_client(workers=workers) as client:
        run_cells(cells, cache, client=client, progress=False)
    lines = ["| graph | d | section 3 peak (B) | timed peak of the same schedule (B) | ratio |",
             "|---|---:|---:|---:|---:|"]
    ratios = {2: [], 4: []}
    for c in cells:
        g, d = cached_graph(c.graph_path), c.devices
        sol = load_solution(c.path(cache), g)
        _, sim = decode_timed(g, encode_timed(sol.placement, sol.order, d), d, check_device_model(None, d))
        r = sim.peak_bytes / sol.peak_bytes
        ratios[d].append(r)
        lines.append(f"| {g.name} | {d} | {sol.peak_bytes:,} | {int(sim.peak_bytes):,} | {r:.4f} |")
        print(lines[-1], flush=True)
    summary = []
    for d, rs in ratios.items():
        summary.append(f"- d = {d}: {len(rs)} graphs, ratio min {min(rs):.3f}, median {statistics.median(rs):.3f}, "
                       f"max {max(rs):.3f}; at most 1.0001 (within the limit up to rounding) on "
                       f"{sum(r <= 1.0001 for r in rs)}")
    text = "\n".join(["# The peak-memory flagship's schedule replayed by the timed model", "",
                      "Command: `python -m experiments.timed_replay " + (out or "") + "`", ""] + summary + [""] + lines)
    print("\n".join(summary))
    if out:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
