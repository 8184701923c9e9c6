"""`compare`: PyTorch's own order and regal's plan for one program, both run and measured.

    cmp = regal.torch.compare.compare(model, (x,), devices=1, training="adam")
    cmp.pytorch.measured_peak_bytes, cmp.regal.measured_peak_bytes, cmp.regal.outputs_match

What `regal torch FILE.py:FN` runs: trace, measure eager PyTorch (`eager_peak`), measure each
op's scratch in one own-order run (`regal.torch.plan.calibrate`), run the own order, optimize
with the flagship, run the plan (one device: `measure_program`; several:
`regal.torch.dist.run_placed`). One device's figures are measured as the process sees it, as
`regal.torch.eager` measures every anchor: every tensor alive + the allocator's high mark.
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

import torch

from regal.flagship import optimize
from regal.graph import Graph
from regal.simulate import simulate
from regal.solution import Solution
from regal.torch.dist import colocate, run_placed
from regal.torch.eager import storages_of
from regal.torch.plan import (Measured, PlanRun, calibrate, global_state_kept, measure_nodes, outputs_equal,
                              own_solution, plan_program, trace_for, without_reuse)

__all__ = ["Comparison", "compare", "deterministic", "eager_peak", "measure_program", "module_device", "to_device"]


class Comparison(NamedTuple):
    """`compare`'s answer: PyTorch's own order and regal's plan, predicted and measured."""
    devices: int
    pytorch: PlanRun            # the traced program in its own order, on one device
    regal: PlanRun              # the flagship's plan, one entry per device
    solution: Solution
    graph: Graph                # the graph optimized (measured temp_bytes, `reuse` where real)
    eager: int | None = None    # eager PyTorch's measured peak of the same program (`eager_peak`)


@contextlib.contextmanager
def deterministic():
    """PyTorch's deterministic algorithms on (cuDNN's and cuBLAS's included) while comparing
    outputs bit for bit, and put back after: without it cuDNN's backward kernels differ in the
    last bits from run to run, whatever the order."""
    if torch.cuda.is_available():   # cuBLAS reads it when it first makes a handle
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]


def module_device(module) -> torch.device:
    """Where a module's parameters (or buffers) are; the CPU for one that has none."""
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


def to_device(module, example_inputs, device):
    """`(module, inputs)` on `device` (default: where the module is): the module moved in place
    (`Module.to`), the input tensors copied. Tracing on the device the plan runs on keeps the
    traced constants and kernels there (a CPU-only attention kernel traced on the CPU, say)."""
    device = torch.device(device) if device is not None else module_device(module)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device '{device}': PyTorch sees no CUDA device here")
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    return module.to(device), tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in inputs), device


def eager_peak(module, inputs, training: str | None, device, seed: int = 0, exclude=(), loss_fn=None) -> int:
    """Eager PyTorch's peak for the program `compare` runs, measured as the process sees it
    (`regal.torch.eager.measure_step`: every tensor alive + the allocator's high mark): a forward
    under `no_grad` on the module itself, or one `loss.backward()` + torch.optim step (the
    optimizer `regal.torch._optim.make_optimizer(training)` makes, `loss_fn` or the loss of
    `regal.torch.trace`) after a warm-up step, on a
    copy of the module (the module's own tensors then left out). `exclude`: other tensors that
    are not eager's (the traced program's), left out."""
    from regal.torch._optim import make_optimizer
    from regal.torch.eager import _loss_step, copy_setup, measure_step
    from regal.torch.importer import _default_loss, _forward_arity
    torch.manual_seed(seed)
    if training is None:
        was = module.training
        module.eval()
        try:
            with torch.no_grad():
                return measure_step(lambda *xs: module(*xs), inputs, device, warmup=0, exclude=exclude)
        finally:
            module.train(was)
    params = [p for p in module.parameters() if p.requires_grad]
    m, o = copy_setup(module, make_optimizer(training, params))
    m.train()
    return measure_step(_loss_step(m, o, loss_fn or _default_loss, _forward_arity(m)), inputs, device,
                        exclude=[*module.parameters(), *module.buffers(), *exclude])


def measure_program(program, args, device, exclude=()) -> Measured:
    """`program(*args)` run once on fresh copies of `args` under `no_grad`, its peak measured as
    the process sees it (`regal.torch.eager.measure_step`'s rule: every tensor alive before the
    run + the allocator's high mark during it); `args` themselves and `exclude` (another run's
    results kept to compare with) are left out: they are the measurement's, not the run's."""
    from regal.torch.eager import measure_step
    device = torch.device(device)
    fresh = tuple(a.detach().to(device).clone() if isinstance(a, torch.Tensor) else a for a in args)
    got = []

    def run():
        with torch.no_grad():
            got.append(program(*fresh))
    peak = measure_step(run, (), device, warmup=0, exclude=[*args, *_tensors(exclude)])
    reserved = int(torch.cuda.max_memory_reserved(device)) if device.type == "cuda" else peak
    return Measured(peak, reserved, got[0], fresh)


def _tensors(x) -> list:
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def compare(module, example_inputs, devices: int = 1, *, training: str | None = None, budget: int = 5000,
            seed: int = 0, device: str | torch.device | None = None, calibrate_temps: bool = True,
            eager: bool = True, loss_fn=None, recompute_budget: float = 0.0) -> Comparison:
    """Trace `module` (forward, or one training step with `training` = "sgd", "adam", "adamw",
    ... of `regal.torch._optim.NAMED`, its loss `loss_fn(outputs, *inputs)`, default the sum of
    the floating outputs' means), run it in PyTorch's own order, optimize it with the flagship on
    `devices` (one device: with `recompute_budget`, the extra compute the search may spend
    recomputing values, a fraction of one run's), run regal's plan, and measure both with
    PyTorch's allocator; `eager`: measure eager PyTorch's peak too.

    Measured as the process sees it (`regal.torch.eager`): every tensor alive in the process
    plus the allocator's high mark during the run, less what belongs to the comparison itself
    (the traced program's own arguments, each order runs on fresh copies of them; the other
    order's results kept to compare outputs). On several devices each device's figure is its
    worker process's (`regal.torch.dist.run_placed`: its program's arguments + its allocator's
    high mark).

    `device`: where to run (default: where the module is); the module is moved there first
    (`Module.to`, in place) and traced there. Both orders run under PyTorch's deterministic
    algorithms (`deterministic`), so their outputs can be compared bit for bit. `calibrate_temps`: book each op's scratch
    memory as measured in the own-order run (`measure_nodes`, `calibrate`) before optimizing
    and predicting. On one device each output of a multi-output op lives to its own last reader
    (`split_outputs`) and the plan makes its take-overs real (`realize_reuse`); on several it
    takes none over, and the plan's 0-byte in-place writes run on the home device of what they
    write (`colocate_writes`: on the zoo of `experiments.torch_plans` that lowered the largest
    measured device peak of most training steps and brought more device peaks within 2 % of
    the prediction). The process's random generators and settings are as they were after.
    """
    module, inputs, device = to_device(module, example_inputs, device)
    with global_state_kept():
        traced = trace_for(module, inputs, training, split_outputs=True, loss_fn=loss_fn)
        with deterministic():
            return _compare(module, inputs, traced, devices, training, budget, seed, device, calibrate_temps, eager,
                            loss_fn, recompute_budget)


def _compare(module, inputs, traced, devices, training, budget, seed, device, calibrate_temps, eager, loss_fn=None,
             recompute_budget=0.0) -> Comparison:
    # the traced program's own tensors (its optimizer state): not eager's
    mine = set(storages_of([*module.parameters(), *module.buffers(), *inputs]))
    own = [a for a in traced.args if isinstance(a, torch.Tensor) and storages_of([a]).keys() - mine]
    base = eager_peak(module, inputs, training, device, seed, exclude=own, loss_fn=loss_fn) if eager else None
    if calibrate_temps:
        traced = calibrate(traced, measure_nodes(traced, device))
    plain = traced._replace(graph=without_reuse(traced.graph))
    mine_order = own_solution(plain)
    reference = measure_program(plan_program(plain, mine_order), plain.args, device)
    pytorch = PlanRun([int(mine_order.peak_bytes)], [reference.peak_bytes], [reference.reserved_bytes], True)
    if devices == 1:
        sol = optimize(traced.graph, devices=1, budget=budget, seed=seed, recompute_budget=recompute_budget)
        got = measure_program(plan_program(traced, sol, realize_reuse=True), traced.args, device,
                              exclude=(reference.outputs, reference.args))
        predicted = int(simulate(traced.graph, sol.placement, sol.order, 1).peak_bytes)
        run = PlanRun([predicted], [got.peak_bytes], [got.reserved_bytes], outputs_equal(got, reference))
        return Comparison(1, pytorch, run, sol, traced.graph, base)
    sol = colocate(plain, optimize(plain.graph, devices=devices, budget=budget, seed=seed))
    run, _ = run_placed(plain, sol, device_type=device.type)
    return Comparison(devices, pytorch, run, sol, plain.graph, base)
