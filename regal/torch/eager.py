"""What a PyTorch user runs today, measured as the user's process sees it: the anchors a planned
step (`regal.torch.planned_step`) is compared with.

    peaks = regal.torch.eager.measure_anchors(model, optimizer, (x, y), loss_fn=loss_fn)
    peaks["eager"], peaks["optimizer_in_backward"], peaks["compile"], peaks["planned"], ...

**The measure.** Every figure is one training step's peak as the process sees it, the same rule
for every anchor (`measure_step`): on the CPU, every tensor storage alive in the process before
the step (`process_bytes`: the tensors the garbage collector finds, each storage once; so what a
step object or torch.compile keeps is counted, not only parameters, buffers, optimizer state and
the batch) plus the most bytes the allocator held above that while the step ran
(`regal.torch.plan.peak_during`: the CPU profiler's memory events); on CUDA, the caching
allocator's high mark over the step, `torch.cuda.max_memory_allocated`, everything allocated on
the device included. The one thing left out is what the measurement itself added:
`measure_anchors` runs each anchor on a copy of the caller's model and optimizer, so the
caller's originals (their storages) are not counted, as a user running that anchor would not
have them. `experiments/torch_steps.py` runs each anchor in a process of its own, on the model
itself (`measure_anchor(..., copy=False)`), with nothing left out.

Each anchor is measured after warm-up steps (the optimizer's state exists, torch.compile has
compiled), with gradients set to None between steps (`zero_grad(set_to_none=True)` right after
the update, the best case for eager). The anchors:

- `eager`: `loss.backward()`, `optimizer.step()` with torch.optim's default `foreach` (the
  single-tensor kernels on the CPU, the multi-tensor ones on CUDA); `eager_foreach_false`:
  `foreach=False` (the same as `eager` on the CPU).
- `optimizer_in_backward`: PyTorch's recipe (`Tensor.register_post_accumulate_grad_hook`, one
  optimizer per parameter, as torchtune's `register_optim_in_bwd_hooks`): each parameter is
  updated, and its gradient freed, as soon as the gradient is accumulated.
- `compile`: `torch.compile` of the forward and the loss (Inductor, its fusion, AOTAutograd's
  min-cut partitioner, `reorder_for_peak_memory` on while it compiles and runs, put back after),
  eager `optimizer.step()`; a string saying why where it does not compile.
- `traced`: the traced step in PyTorch's own order; `planned`: regal's planned step (and
  `predicted`: its SPEC.md section 3 peak), both with `recompute=False` (the order alone);
  `planned_recompute`: the planned step as `planned_step` plans it by default (`recompute=True`:
  the search may spend 10 % more compute on recomputation, and the rewrite that recomputes the
  normalizations is tried beside it), and `predicted_recompute`.

Measuring leaves the process as it was: random generators, thread counts, grad mode and the
Inductor settings (`regal.torch.plan.global_state_kept`).
"""

from __future__ import annotations

import copy
import gc
from typing import Callable, Iterable

import torch
from torch._subclasses.fake_tensor import FakeTensor

from regal.torch.plan import global_state_kept, peak_during
from regal.torch.step import _forward_arity, planned_step

__all__ = ["ANCHORS", "copy_setup", "measure_anchor", "measure_anchors", "measure_step", "process_bytes",
           "storages_of"]

#: The anchors `measure_anchors` measures, in the order it reports them.
ANCHORS = ("eager", "eager_foreach_false", "optimizer_in_backward", "compile", "traced", "planned",
           "planned_recompute")


def _optimizer_tensors(optimizer) -> list:
    return [t for st in optimizer.state.values() for t in st.values() if isinstance(t, torch.Tensor)]


def _storage(t):
    """`(data_ptr, nbytes, device)` of a tensor's storage; None for one without memory of its own
    (meta and fake tensors, wrapper subclasses, sparse tensors)."""
    if isinstance(t, FakeTensor) or t.is_meta:
        return None
    try:
        s = t.untyped_storage()
        ptr = s.data_ptr()
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return None
    if not ptr:
        return None
    return ptr, int(s.nbytes()), s.device


def storages_of(tensors: Iterable) -> dict:
    """{data_ptr: (nbytes, device)} of the distinct storages of these tensors."""
    out = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            got = _storage(t)
            if got is not None:
                out[got[0]] = got[1:]
    return out


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.type != "cuda" or (a.index or 0) == (b.index or 0))


def process_bytes(device: str | torch.device = "cpu", exclude: Iterable = ()) -> int:
    """Bytes of every tensor storage alive in the process on `device`: the tensors the garbage
    collector tracks (`gc.get_objects()`, after a collection), each storage once (by its data
    pointer, its whole `untyped_storage().nbytes()`), less the storages of the tensors in
    `exclude`."""
    device = torch.device(device)
    skip = set(storages_of(exclude))
    gc.collect()
    seen, total = set(), 0
    for o in gc.get_objects():
        if not issubclass(type(o), torch.Tensor):   # type(), not isinstance: no object's __class__ is asked
            continue
        got = _storage(o)
        if got is None or got[0] in seen or got[0] in skip or not _same_device(got[2], device):
            continue
        seen.add(got[0])
        total += got[1]
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


def measure_step(step: Callable, inputs, device, warmup: int = 1, exclude: Iterable = ()) -> int:
    """One `step(*inputs)`'s peak as the process sees it, after `warmup` unmeasured calls: on the
    CPU every tensor storage alive before it (`process_bytes`) plus the allocator's high mark
    above them during the step; on CUDA the allocator's high mark over the step
    (`max_memory_allocated`, all that was allocated included). `exclude`: tensors that are not
    the step's (the originals a copy was made from), left out of both."""
    device = torch.device(device)
    for _ in range(warmup):
        step(*inputs)
    exclude = list(exclude)
    if device.type == "cuda":
        gc.collect()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step(*inputs)
        torch.cuda.synchronize(device)
        left_out = sum(n for n, d in storages_of(exclude).values() if _same_device(d, device))
        return int(torch.cuda.max_memory_allocated(device)) - left_out
    base = process_bytes(device, exclude)
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


def _in_backward(model, optimizer, copy_: bool = True):
    """The optimizer-in-backward recipe (on a copy, or on `model` itself): one optimizer per
    parameter, stepped from the parameter's post-accumulate-grad hook."""
    clone, opt = copy_setup(model, optimizer) if copy_ else (model, optimizer)
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


def _inputs(example_inputs, device) -> tuple:
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    return tuple(a.to(device) for a in inputs)


def measure_anchors(model, optimizer, example_inputs, *, loss_fn: Callable | None = None, budget: int = 5000,
                    seed: int = 0, device: str | torch.device | None = None, compile: bool = True,
                    anchors=ANCHORS) -> dict:
    """One training step's measured peak (bytes) under each anchor in `anchors` (module
    docstring), each on a copy of `model` and `optimizer` (left as they were; their storages are
    not counted), in this process; torch.compile is measured last, so what its caches keep
    cannot weigh on the others. `device`: where to run (default: where the model's parameters
    are; the model is moved there); a failing anchor gets a one-line string. Also `predicted`
    (regal's peak for its plan) and `traced_predicted`. The process's global state (random
    generators, settings) is as it was after."""
    from regal._args import check_budget, check_seed
    from regal.torch.importer import _default_loss
    check_budget(budget)   # at the door: a bad one was caught by each anchor and returned as its string
    check_seed(seed)
    loss_fn = loss_fn or _default_loss
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    device = torch.device(device)
    inputs = _inputs(example_inputs, device)
    model = model.to(device)
    originals = [*model.parameters(), *model.buffers(), *_optimizer_tensors(optimizer)]
    out: dict = {}
    for name in sorted(anchors, key=lambda a: a == "compile"):
        out.update(_measured(name, model, optimizer, inputs, loss_fn, budget, seed, device, compile, True,
                             originals))
    return {k: out[k] for k in sorted(out, key=lambda k: ANCHORS.index(k) if k in ANCHORS else len(ANCHORS))}


def measure_anchor(name: str, model, optimizer, example_inputs, *, loss_fn: Callable | None = None,
                   budget: int = 5000, seed: int = 0, device: str | torch.device | None = None,
                   compile: bool = True, copy: bool = True) -> dict:
    """One anchor's measured peak, `{name: bytes}` (with its prediction where it has one), or a
    one-line string where it fails. `copy=False`: measured on `model` and `optimizer` themselves
    (they are trained; a process of its own per anchor, as `experiments/torch_steps.py` runs
    them), with nothing left out of the count."""
    from regal._args import check_budget, check_seed
    from regal.torch.importer import _default_loss
    check_budget(budget)
    check_seed(seed)
    if name not in ANCHORS:
        raise ValueError(f"unknown anchor {name!r}; one of {', '.join(ANCHORS)}")
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    device = torch.device(device)
    model = model.to(device)
    originals = [*model.parameters(), *model.buffers(), *_optimizer_tensors(optimizer)] if copy else []
    return _measured(name, model, optimizer, _inputs(example_inputs, device), loss_fn or _default_loss, budget,
                     seed, device, compile, copy, originals)


def _measured(name, model, optimizer, inputs, loss_fn, budget, seed, device, compile, copy_, originals) -> dict:
    try:
        with global_state_kept():
            return _anchor(name, model, optimizer, inputs, loss_fn, budget, seed, device, compile, copy_,
                           originals)
    except Exception as e:  # noqa: BLE001 - an anchor that fails is reported, not fatal
        return {name: f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}


def _anchor(name, model, optimizer, inputs, loss_fn, budget, seed, device, compile, copy_, originals) -> dict:
    torch.manual_seed(seed)   # (global_state_kept puts the generator back)
    arity = _forward_arity(model)
    if name in ("eager", "eager_foreach_false"):
        if copy_:
            m, o = copy_setup(model, optimizer, "same" if name == "eager" else False)
        else:
            m, o = model, optimizer
            if name == "eager_foreach_false":
                for g in o.param_groups:
                    g["foreach"] = False
        m.train()
        return {name: measure_step(_loss_step(m, o, loss_fn, arity), inputs, device, exclude=originals)}
    if name == "optimizer_in_backward":
        m, opts = _in_backward(model, optimizer, copy_)
        m.train()
        del optimizer   # (in place: the given optimizer is replaced by one per parameter)
        return {name: measure_step(_loss_step(m, None, loss_fn, arity), inputs, device, exclude=originals)}
    if name == "compile":
        if not compile:
            return {name: "not run (compile=False)"}
        import torch._inductor.config as inductor_config
        m, o = copy_setup(model, optimizer) if copy_ else (model, optimizer)
        m.train()
        with inductor_config.patch(reorder_for_peak_memory=True):
            compiled = torch.compile(m)
            return {name: measure_step(_loss_step(compiled, o, loss_fn, arity), inputs, device, warmup=2,
                                       exclude=originals)}
    if name in ("traced", "planned", "planned_recompute"):
        m, o = copy_setup(model, optimizer) if copy_ else (model, optimizer)
        step = planned_step(m, o, inputs, loss_fn=loss_fn, budget=budget, seed=seed,
                            recompute=name == "planned_recompute")   # True: the default budget (0.1)
        if name == "traced":
            step = step.in_order(None)
        got = measure_step(step, inputs, device, exclude=originals)
        said = {"traced": "traced_predicted", "planned": "predicted", "planned_recompute": "predicted_recompute"}
        return {name: got, said[name]: step.predicted_peak_bytes}
    raise ValueError(f"unknown anchor {name!r}; one of {ANCHORS}")
