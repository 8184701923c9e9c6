"""What a PyTorch user runs today, measured as `regal.torch.plan` measures a plan: the anchors a
planned step (`regal.torch.planned_step`) is compared with.

    peaks = regal.torch.eager.measure_anchors(model, optimizer, (x, y), loss_fn=loss_fn)
    peaks["eager"], peaks["optimizer_in_backward"], peaks["compile"], peaks["planned"], ...

Every figure is one training step's peak: the resident tensors (parameters, buffers, optimizer
state, the batch: `resident_bytes`) plus the most bytes the allocator held above them while the
step ran (`regal.torch.plan.peak_during`: the CPU profiler's memory events, or CUDA's
`max_memory_allocated`). Each is taken on a copy of the model and a fresh optimizer of the same
class and hyperparameters, after warm-up steps (the optimizer's state exists, torch.compile has
compiled), with gradients set to None between steps (`zero_grad(set_to_none=True)` right after
the update, the best case for eager). The anchors:

- `eager`: `loss.backward()`, `optimizer.step()` with torch.optim's default `foreach` (the
  single-tensor kernels on the CPU, the multi-tensor ones on CUDA); `eager_foreach_false`:
  `foreach=False` (the same as `eager` on the CPU).
- `optimizer_in_backward`: PyTorch's recipe (`Tensor.register_post_accumulate_grad_hook`, one
  optimizer per parameter, as torchtune's `register_optim_in_bwd_hooks`): each parameter is
  updated, and its gradient freed, as soon as the gradient is accumulated.
- `compile`: `torch.compile` of the forward and the loss (Inductor, its fusion, AOTAutograd's
  min-cut partitioner, `reorder_for_peak_memory` on), eager `optimizer.step()`; a string saying
  why where it does not compile.
- `traced`: the traced step in PyTorch's own order; `planned`: regal's planned step (and
  `predicted`: its SPEC.md section 3 peak); `planned_recompute`: the planned step with
  `recompute=True` (BatchNorm's outputs and activations recomputed in the backward:
  `regal.torch.recompute`), and `predicted_recompute`.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from regal.torch.plan import peak_during
from regal.torch.step import _forward_arity, planned_step

__all__ = ["ANCHORS", "copy_setup", "measure_anchors", "measure_step", "resident_bytes"]

#: The anchors `measure_anchors` measures, in the order it reports them.
ANCHORS = ("eager", "eager_foreach_false", "optimizer_in_backward", "compile", "traced", "planned",
           "planned_recompute")


def _optimizer_tensors(optimizer) -> list:
    return [t for st in optimizer.state.values() for t in st.values() if isinstance(t, torch.Tensor)]


def resident_bytes(model, optimizers, inputs) -> int:
    """Bytes of the distinct storages of `model`'s parameters and buffers, the optimizers'
    state tensors and the inputs: what every step holds before it starts."""
    tensors = [*model.parameters(), *model.buffers(), *inputs]
    for opt in optimizers:
        tensors += _optimizer_tensors(opt)
    seen, total = set(), 0
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def copy_setup(model, optimizer, foreach: bool | None = "same"):
    """A deep copy of `model` and a new optimizer of `optimizer`'s class over the copy's
    parameters, with the same param groups' hyperparameters (its state empty); `foreach` set to
    the value given unless "same"."""
    clone = copy.deepcopy(model)
    index = {id(p): k for k, p in enumerate(model.parameters())}
    params = list(clone.parameters())
    groups = []
    for g in optimizer.param_groups:
        hyper = {k: v for k, v in g.items() if k != "params"}
        if foreach != "same":
            hyper["foreach"] = foreach
        groups.append({**hyper, "params": [params[index[id(p)]] for p in g["params"]]})
    return clone, type(optimizer)(groups)


def measure_step(step: Callable, model, optimizers, inputs, device, warmup: int = 1) -> int:
    """Resident bytes plus the allocator's high mark above them during one `step(*inputs)`,
    after `warmup` unmeasured calls."""
    for _ in range(warmup):
        step(*inputs)
    base = resident_bytes(model, optimizers, inputs)
    high, _, _ = peak_during(lambda: step(*inputs), device)
    return base + high


def _loss_step(forward, optimizer, loss_fn, arity):
    def step(*inputs):
        loss = loss_fn(forward(*(inputs if arity is None else inputs[:arity])), *inputs)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def _in_backward(model, optimizer):
    """The optimizer-in-backward recipe on a copy: one optimizer per parameter, stepped from the
    parameter's post-accumulate-grad hook."""
    clone, opt = copy_setup(model, optimizer)
    per = {}
    for g in opt.param_groups:
        hyper = {k: v for k, v in g.items() if k != "params"}
        for p in g["params"]:   # a param group (not keywords): it may hold keys __init__ does not take
            per[p] = type(optimizer)([{**hyper, "params": [p]}])

    def hook(p):
        per[p].step()
        per[p].zero_grad(set_to_none=True)

    for p in per:
        p.register_post_accumulate_grad_hook(hook)
    return clone, list(per.values())


def measure_anchors(model, optimizer, example_inputs, *, loss_fn: Callable | None = None, budget: int = 5000,
                    seed: int = 0, device: str | torch.device | None = None, compile: bool = True,
                    anchors=ANCHORS) -> dict:
    """One training step's measured peak (bytes) under each anchor in `anchors` (module
    docstring), on copies: `model` and `optimizer` are left as they were. `device`: where to
    run (default: where the model's parameters are); a failing anchor gets a one-line string.
    Also `predicted` (regal's peak for its plan) and `traced_predicted`."""
    from regal.torch.importer import _default_loss
    loss_fn = loss_fn or _default_loss
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    device = torch.device(device)
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    inputs = tuple(a.to(device) for a in inputs)
    arity = _forward_arity(model)
    out: dict = {}
    for name in anchors:
        try:
            out.update(_anchor(name, model.to(device), optimizer, inputs, loss_fn, arity, budget, seed, device,
                               compile))
        except Exception as e:  # noqa: BLE001 - an anchor that fails is reported, not fatal
            out[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    return out


def _anchor(name, model, optimizer, inputs, loss_fn, arity, budget, seed, device, compile) -> dict:
    torch.manual_seed(seed)
    if name in ("eager", "eager_foreach_false"):
        m, o = copy_setup(model, optimizer, "same" if name == "eager" else False)
        m.train()
        return {name: measure_step(_loss_step(m, o, loss_fn, arity), m, [o], inputs, device)}
    if name == "optimizer_in_backward":
        m, opts = _in_backward(model, optimizer)
        m.train()
        return {name: measure_step(_loss_step(m, None, loss_fn, arity), m, opts, inputs, device)}
    if name == "compile":
        if not compile:
            return {name: "not run (compile=False)"}
        import torch._inductor.config as inductor_config
        m, o = copy_setup(model, optimizer)
        m.train()
        inductor_config.reorder_for_peak_memory = True
        compiled = torch.compile(m)
        return {name: measure_step(_loss_step(compiled, o, loss_fn, arity), m, [o], inputs, device, warmup=2)}
    if name in ("traced", "planned", "planned_recompute"):
        m, o = copy_setup(model, optimizer)
        step = planned_step(m, o, inputs, loss_fn=loss_fn, budget=budget, seed=seed,
                            recompute=name == "planned_recompute")
        if name == "traced":
            step = step.in_order(None)
        got = measure_step(step, m, [o], inputs, device)
        said = {"traced": "traced_predicted", "planned": "predicted", "planned_recompute": "predicted_recompute"}
        return {name: got, said[name]: step.predicted_peak_bytes}
    raise ValueError(f"unknown anchor {name!r}; one of {ANCHORS}")
