"""Every method REGAL is compared with, behind one signature, scored by one simulator.

    solve(graph, devices, *, seed=0, time_limit_s=None, budget=..., **options) -> regal.Solution

This folder installs as the package `regal_baselines` (the bare name `baselines` belongs to an
unrelated PyPI project) and plugs into regal's method registry through the `regal.methods`
entry point (setup.cfg), which names `METHODS` below: the library never imports it, and
`regal.methods` lists these beside the library's own methods. Modules are imported on first use,
so listing methods stays cheap (OR-Tools and pymetis load only for the methods that need them).
Every solver builds its Solution with `regal.solution.make_solution`, so the reported peak is a
fresh SPEC.md section 3 simulation of the returned placement and order.
"""

from __future__ import annotations

__all__ = ["METHODS"]

# name -> (module:function, one-line description, takes a budget, takes num_threads[, objective])
METHODS = {
    "cpsat": ("regal_baselines.cpsat:solve",
              "OR-Tools CP-SAT model of SPEC section 3 (placement and order), hinted", False, False),
    "exact": ("regal_baselines.exact:solve",
              "exact minimum-peak order on one device, DP over executed sets (Serenity)", False, False),
    "gp-dfs": ("regal_baselines.partition:solve",
               "METIS partition (pymetis) for placement + depth-first order", False, False),
    "local-search": ("regal_baselines.local_search:solve",
                     "hill climbing over device and order moves from the best heuristic start", True, False),
    "tuned-brkga": ("regal_baselines.brkga:solve_tuned",
                    "BRKGA with hyper-parameters grid-searched on the train split", True, True),
    "xla": ("regal_baselines.heuristics:solve_xla", "XLA's own schedule from a scheduled HLO module", False, False),
    "xla-heuristics": ("regal_baselines.heuristics:solve_xla_heuristics",
                       "best of XLA's list, DFS and post-order schedulers", False, False),
    "inductor-heuristics": ("regal_baselines.heuristics:solve_inductor_heuristics",
                            "best of Inductor's LPMF, BFS and DFS orders", False, False),
    "greedy": ("regal_baselines.greedy:solve_greedy", "greedy list scheduling by memory delta", False, False),
    "random": ("regal_baselines.greedy:solve_random", "random placement and random topological order", False, False),
    "gas": ("regal_baselines.gas:solve", "graph-as-sequence policy (GRU) priors for BRKGA", True, True),
    "cpsat-runtime": ("regal_baselines.cpsat_runtime:solve",
                      "runtime: CP-SAT with intervals per node and transfer (small graphs), HEFT-hinted, "
                      "replayed by the timed model", False, False, "runtime"),
    # recomputation (SPEC.md section 3b), one device, over the graph's traced order
    "moccasin": ("regal_baselines.moccasin:solve",
                 "runtime: Moccasin (Bartan et al. 2023): CP-SAT, fixed traced order, each node at most twice, "
                 "least recompute cost with peak under --memory-limit (one device)", False, False, "runtime"),
    "checkpoint-sqrt": ("regal_baselines.recompute:solve_checkpoint_sqrt",
                        "Chen et al. 2016 sqrt(n) checkpoints over the traced order, the rest recomputed "
                        "(one device)", False, False),
    "recompute-pointwise": ("regal_baselines.recompute:solve_pointwise",
                            "pointwise ops recomputed in the traced order, as torch.compile's min-cut partitioner "
                            "(one device)", False, False),
    "traced-order": ("regal_baselines.recompute:solve_traced",
                     "the graph's traced (node) order as is, no recomputation (one device)", False, False),
}
