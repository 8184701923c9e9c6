"""`compare`: PyTorch's own order and regal's plan for one program, both run and measured.

    cmp = regal.torch.compare.compare(model, (x,), devices=1, training="adam")
    cmp.pytorch.measured_peak_bytes, cmp.regal.measured_peak_bytes, cmp.regal.outputs_match

What `regal torch FILE.py:FN` runs: trace, measure each op's scratch in one own-order run
(`regal.torch.plan.calibrate`), run the own order, optimize with the flagship, run the plan
(one device: `regal.torch.plan.run_plan`; several: `regal.torch.dist.run_placed`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from regal.flagship import optimize
from regal.graph import Graph
from regal.solution import Solution
from regal.torch.dist import colocate_writes, run_placed
from regal.torch.plan import (PlanRun, calibrate, measure_nodes, measure_peak, own_solution, plan_program, run_plan,
                              trace_for, without_reuse)

__all__ = ["Comparison", "compare"]


class Comparison(NamedTuple):
    """`compare`'s answer: PyTorch's own order and regal's plan, predicted and measured."""
    devices: int
    pytorch: PlanRun            # the traced program in its own order, on one device
    regal: PlanRun              # the flagship's plan, one entry per device
    solution: Solution
    graph: Graph                # the graph optimized (measured temp_bytes, `reuse` where real)


def compare(module, example_inputs, devices: int = 1, *, training: str | None = None, budget: int = 5000,
            seed: int = 0, device: str = "cpu", calibrate_temps: bool = True) -> Comparison:
    """Trace `module` (forward, or one training step with `training` = "sgd" / "adam"), run
    it in PyTorch's own order, optimize it with the flagship on `devices`, run regal's plan,
    and measure both with PyTorch's allocator.

    `calibrate_temps`: book each op's scratch memory as measured in the own-order run
    (`measure_nodes`, `calibrate`) before optimizing and predicting. On one device the plan
    makes its take-overs real (`realize_reuse`); on several it takes none over, and the plan's
    0-byte in-place writes run on the home device of what they write (`colocate_writes`: on
    the zoo of `experiments.torch_plans` that lowered the largest measured device peak of most
    training steps and brought more device peaks within 2 % of the prediction).
    """
    traced = trace_for(module, example_inputs, training)
    if calibrate_temps:
        traced = calibrate(traced, measure_nodes(traced, device))
    plain = traced._replace(graph=without_reuse(traced.graph))
    own = own_solution(plain)
    reference = measure_peak(plan_program(plain, own), plain.args, device)
    pytorch = PlanRun([int(own.peak_bytes)], [reference.peak_bytes], [reference.reserved_bytes], True)
    if devices == 1:
        sol = optimize(traced.graph, devices=1, budget=budget, seed=seed)
        run, _ = run_plan(traced, sol, device=device, realize_reuse=True, reference=reference)
        return Comparison(1, pytorch, run, sol, traced.graph)
    sol = colocate_writes(plain, optimize(plain.graph, devices=devices, budget=budget, seed=seed))
    run, _ = run_placed(plain, sol, device_type=torch.device(device).type)
    return Comparison(devices, pytorch, run, sol, plain.graph)
