"""A training step in regal's order, for a training loop: `regal.torch.planned_step`.

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = regal.torch.planned_step(model, optimizer, (x, y), loss_fn=lambda out, x, y: F.cross_entropy(out, y))
    for x, y in batches:
        loss = step(x, y)        # forward, backward and update in regal's order; model and optimizer updated

**What is traced.** One training step, as eager PyTorch runs it: `model(*inputs)` (the leading
inputs its `forward` takes; `loss_fn(outputs, *inputs)` sees all of them), `loss`, the backward
(`torch.autograd.grad`, ATen ops as the autograd engine runs them: `make_fx`), then the update
of `optimizer`'s own algorithm (torch.optim's single-tensor SGD / Adam / AdamW, op for op), on
the module's own parameters, buffers and optimizer state tensors, in place. The optimizer's
numbers (lr, momentum, dampening, betas, eps, weight decay, the step count's bias corrections)
are arguments of the program, read from `optimizer.param_groups` and `optimizer.state` at every
call: a learning-rate scheduler, `optimizer.load_state_dict` and `model.load_state_dict` work as
with eager PyTorch. The traced program is imported with each output of a multi-output op freed
after its own reader (`split_outputs`) and random ops kept in their traced order (so dropout
draws from the global generator what eager draws), its ops' scratch measured once
(`regal.torch.plan.calibrate`), and ordered by the flagship (`regal.optimize`, d = 1).

**The order it finds.** Each parameter's update may run as soon as its gradient exists and the
backward has read the parameter for the last time: the optimizer-in-backward order is one of
the orders the search reaches, not a rule; a gradient is freed right after its update, never
kept in `.grad` (which stays None). Elementwise ops write over an input at its last read
(`realize_reuse`): eager cannot do that.

**Equal to eager.** The same ATen kernels on the same tensors: parameters, buffers, optimizer
state and losses equal eager PyTorch's (`loss.backward()`, `optimizer.step()`) bit for bit on
the CPU where eager runs the same kernels (single-tensor torch.optim, its default on the CPU);
with `foreach=True` eager runs the multi-tensor kernels: equal to float tolerance. LSTM/GRU are
traced without oneDNN (its RNN backward cannot be traced): equal to float tolerance.

**Other batches, other modes.** A plan is kept per signature: the inputs' shapes and dtypes and
every module's train / eval mode. A batch of other shapes (a loader's last batch) or a call with
the model in eval mode is planned again on first sight, said once on standard error
("planned again for input shapes ..."), and that plan kept; the step is traced in the modules'
own modes, so it does what an eager step in that mode does.

**Hygiene.** The step keeps the model, the optimizer and its plans (programs and graphs): no
tensor of tracing, no example batch (shapes only). Planning (the trace, the run on copies that
measures the ops' scratch, the search) leaves the process's random generators, thread count and
settings as it found them (`regal.torch.plan.global_state_kept`): dropout then draws what eager
draws from the same seed. On a terminal, planning that takes more than 2 s shows its stage on
one line of standard error. `step.explain()` says what makes the predicted peak.

Refused with `UnsupportedError` (one line): another optimizer class, `fused`, `capturable` or
`differentiable` optimizers, a tensor learning rate, a parameter that requires grad but is in
no param group, an input on another device or not a tensor, a call under autocast (the plan
would run in full precision), a call that finds a gradient in a parameter's `.grad` (eager's
backward would add to it; gradient accumulation is not supported), a change of the optimizer's
structure (momentum on/off, nesterov, amsgrad, maximize, weight decay on/off, its parameters),
`devices` other than 1.
"""

from __future__ import annotations

import copy
import os
import sys
import threading
import time
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.fx

from regal.graph import GraphError
from regal.torch.importer import Traced, _default_loss, _forward_arity, from_fx, no_onednn

__all__ = ["PlannedStep", "UnsupportedError", "planned_step"]


class UnsupportedError(ValueError):
    """What a planned step cannot do, in one line."""


class _Kind(NamedTuple):
    """The optimizer's structure, fixed when the step is traced (its numbers are not)."""
    algorithm: str               # "sgd" or "adam"
    groups: tuple                # per param group: a tuple of structural flags


def _structure(optimizer) -> _Kind:
    if type(optimizer) in (torch.optim.SGD,):
        algorithm = "sgd"
    elif type(optimizer) in (torch.optim.Adam, torch.optim.AdamW):
        algorithm = "adam"
    else:
        raise UnsupportedError(f"planned_step: optimizer {type(optimizer).__name__} is not supported "
                               "(torch.optim.SGD, Adam, AdamW)")
    groups = []
    for k, g in enumerate(optimizer.param_groups):
        for flag in ("fused", "capturable", "differentiable"):
            if g.get(flag):
                raise UnsupportedError(f"planned_step: param group {k} has {flag}=True; not supported")
        for key in ("lr", "momentum", "dampening", "weight_decay", "eps", "betas"):
            vals = g.get(key, ())
            if any(isinstance(v, torch.Tensor) for v in (vals if isinstance(vals, tuple) else (vals,))):
                raise UnsupportedError(f"planned_step: param group {k} has a tensor '{key}'; give it as a float")
        if algorithm == "sgd":
            flags = (g["momentum"] != 0, bool(g["nesterov"]), bool(g["maximize"]), g["weight_decay"] != 0)
        else:
            flags = (bool(g["amsgrad"]), bool(g["maximize"]), g["weight_decay"] != 0,
                     bool(g.get("decoupled_weight_decay", False)))
        groups.append(flags + (tuple(id(p) for p in g["params"]),))
    return _Kind(algorithm, tuple(groups))


_FLAG_NAMES = {"sgd": ("momentum on/off", "nesterov", "maximize", "weight decay on/off"),
               "adam": ("amsgrad", "maximize", "weight decay on/off", "decoupled weight decay")}


def _state_keys(kind: _Kind, flags: tuple) -> tuple:
    if kind.algorithm == "sgd":
        return ("momentum_buffer",) if flags[0] else ()
    return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if flags[0] else ())


#: The scalars each parameter's update takes, by algorithm (arguments of the program).
_SCALARS = {"sgd": ("weight_decay", "momentum", "alpha", "neg_lr"),
            "adam": ("decay", "weight_decay", "one_minus_beta1", "beta2", "one_minus_beta2", "bc2_sqrt", "eps",
                     "neg_step_size")}


def _scalars(kind: _Kind, group: dict, state: dict, first: bool) -> dict:
    """The update's numbers for one parameter, computed as torch.optim computes them (Python
    floats, the same operations), for a step whose state counter is already advanced."""
    if kind.algorithm == "sgd":
        return {"weight_decay": group["weight_decay"], "momentum": group["momentum"],
                "alpha": 1.0 if first else 1 - group["dampening"], "neg_lr": -group["lr"]}
    lr, (beta1, beta2) = group["lr"], group["betas"]
    step = state["step"].item()
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    return {"decay": 1 - lr * group["weight_decay"], "weight_decay": group["weight_decay"],
            "one_minus_beta1": 1 - beta1, "beta2": beta2, "one_minus_beta2": 1 - beta2,
            "bc2_sqrt": bias_correction2 ** 0.5, "eps": group["eps"], "neg_step_size": -(lr / bias_correction1)}


def _update(kind: _Kind, flags: tuple, p, g, state: list, s: dict) -> None:
    """torch.optim's single-tensor update of one parameter, op for op (torch 2.9-2.14), with
    the numbers `s` as given (traced: stand-ins that become the program's arguments)."""
    if kind.algorithm == "sgd":
        momentum, nesterov, maximize, decay = flags[:4]
        if maximize:
            g = -g
        if decay:
            g = g.add(p, alpha=s["weight_decay"])
        if momentum:
            buf = state[0]
            buf.mul_(s["momentum"]).add_(g, alpha=s["alpha"])
            g = g.add(buf, alpha=s["momentum"]) if nesterov else buf
        p.add_(g, alpha=s["neg_lr"])
        return
    amsgrad, maximize, decay, decoupled = flags[:4]
    exp_avg, exp_avg_sq = state[0], state[1]
    if maximize:
        g = -g
    if decay:
        if decoupled:
            p.mul_(s["decay"])
        else:
            g = g.add(p, alpha=s["weight_decay"])
    exp_avg.lerp_(g, s["one_minus_beta1"])
    exp_avg_sq.mul_(s["beta2"]).addcmul_(g, g, value=s["one_minus_beta2"])
    if amsgrad:
        torch.maximum(state[2], exp_avg_sq, out=state[2])
        denom = (state[2].sqrt() / s["bc2_sqrt"]).add_(s["eps"])
    else:
        denom = (exp_avg_sq.sqrt() / s["bc2_sqrt"]).add_(s["eps"])
    p.addcdiv_(exp_avg, denom, value=s["neg_step_size"])


def _clip(grads: list, max_norm) -> None:
    """`torch.nn.utils.clip_grad_norm_(..., max_norm)` on these gradients, op for op as it runs
    on the CPU (norm 2; its foreach kernels fall back to these per-tensor ops there)."""
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2.0) for g in grads]), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)


class _Layout(NamedTuple):
    """Who is who among the program's arguments."""
    params: list                 # (name, group index, index in group) per optimized parameter
    buffers: list                # buffer names
    frozen: list                 # names of parameters that do not require grad
    state: list                  # (parameter position, state key) per optimizer state tensor
    inputs: int
    scalars: list                # (parameter position, scalar name) per scalar argument

    @property
    def clips(self) -> bool:
        """Whether the step clips its gradients (its last scalar is the threshold)."""
        return bool(self.scalars) and self.scalars[-1][0] == -1


def _layout(model, optimizer, kind: _Kind, n_inputs: int, clip: bool = False) -> _Layout:
    names = {}
    for name, p in model.named_parameters():
        names.setdefault(id(p), name)
    params, seen = [], set()
    for gi, g in enumerate(optimizer.param_groups):
        for pi, p in enumerate(g["params"]):
            if id(p) not in names:
                raise UnsupportedError(f"planned_step: param group {gi} holds a tensor of shape {tuple(p.shape)} "
                                       "that is not a parameter of the model")
            if id(p) in seen:
                raise UnsupportedError(f"planned_step: parameter '{names[id(p)]}' is in two param groups")
            seen.add(id(p))
            params.append((names[id(p)], gi, pi))
    frozen = []
    for name, p in model.named_parameters():
        if id(p) in seen:
            if not p.requires_grad:
                raise UnsupportedError(f"planned_step: parameter '{name}' is in the optimizer but does not require grad")
        elif p.requires_grad:
            raise UnsupportedError(f"planned_step: parameter '{name}' requires grad but is in no param group "
                                   "of the optimizer (freeze it with requires_grad_(False), or add it)")
        else:
            frozen.append(name)
    state = [(k, key) for k, (_, gi, _) in enumerate(params) for key in _state_keys(kind, kind.groups[gi])]
    scalars = [(k, s) for k in range(len(params)) for s in _SCALARS[kind.algorithm]]
    scalars += [(-1, "max_grad_norm")] if clip else []   # one for the step: the clipping threshold
    return _Layout(params, [n for n, _ in model.named_buffers()], frozen, state, n_inputs, scalars)


#: Stand-ins for the update's numbers while tracing: odd values that no model constant has; each
#: becomes a placeholder of the program (`_lift_scalars`).
def _stand_in(k: int) -> float:
    return 0.123456789012345 + k * 2.0 ** -30


def _lift_scalars(gm: torch.fx.GraphModule, count: int) -> None:
    """Replace the stand-in numbers in `gm` by `count` new placeholders (after the others)."""
    values = {_stand_in(k): k for k in range(count)}
    last = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    phs = []
    with gm.graph.inserting_after(last):
        for k in reversed(range(count)):
            phs.append(gm.graph.placeholder(f"scalar_{k}"))
    phs.reverse()
    found = set()

    def lift(a):
        if type(a) is float and a in values:
            found.add(values[a])
            return phs[values[a]]
        return a

    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.args = torch.fx.node.map_aggregate(n.args, lift)
            n.kwargs = torch.fx.node.map_aggregate(n.kwargs, lift)
    gm.graph._codegen = torch.fx.graph.CodeGen()   # flat arguments, as the plans take them
    gm.recompile()


def _storage_key(t):
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _zeros_state(p):
    """A state tensor as torch.optim makes it on a parameter's first step."""
    return torch.zeros_like(p, memory_format=torch.preserve_format)


def _trace(model, optimizer, kind: _Kind, layout: _Layout, inputs: tuple, loss_fn, name: str,
           recompute: bool = False) -> Traced:
    from torch.fx.experimental.proxy_tensor import make_fx
    named = dict(model.named_parameters())
    params = [named[n] for n, _, _ in layout.params]
    bufs = dict(model.named_buffers())
    buffers = [bufs[n] for n in layout.buffers]
    frozen = [named[n] for n in layout.frozen]
    state = [optimizer.state.get(params[k], {}).get(key) for k, key in layout.state]
    state = [s if isinstance(s, torch.Tensor) else _zeros_state(params[k]) for s, (k, _) in zip(state, layout.state)]
    per_param: list[list] = [[] for _ in params]
    for j, (k, _) in enumerate(layout.state):
        per_param[k].append(j)
    arity = _forward_arity(model)
    names_s = _SCALARS[kind.algorithm]
    loss_fn = loss_fn or _default_loss

    grad_storages: list = []   # the gradients' (fake) storages: what `explain` calls gradients

    def step(params, buffers, frozen, state, *inputs):
        tensors = {**{n: t for (n, _, _), t in zip(layout.params, params)}, **dict(zip(layout.buffers, buffers)),
                   **dict(zip(layout.frozen, frozen))}
        outputs = torch.func.functional_call(model, tensors, inputs if arity is None else inputs[:arity])
        loss = loss_fn(outputs, *inputs)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
            raise GraphError(f"torch program '{name}': loss_fn must return a floating tensor of one element")
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        grad_storages.extend(_storage_key(g) for g in grads if g is not None)
        with torch.no_grad():
            if layout.clips:
                _clip([g for g in grads if g is not None], _stand_in(len(layout.scalars) - 1))
            for k, (p, g) in enumerate(zip(params, grads)):
                if g is None:
                    continue
                flags = kind.groups[layout.params[k][1]]
                s = {nm: _stand_in(k * len(names_s) + j) for j, nm in enumerate(names_s)}
                _update(kind, flags, p, g, [state[j] for j in per_param[k]], s)
        return loss.detach()

    try:   # in the modules' own train / eval modes, as eager runs them
        with no_onednn():   # oneDNN's RNN backward cannot be traced
            gm = make_fx(step, tracing_mode="fake")(params, buffers, frozen, state, *inputs)
    except (GraphError, UnsupportedError):
        raise
    except Exception as e:  # noqa: BLE001 - tracing raises many types; one line for the caller
        first = " ".join(str(e).split())[:300]
        raise GraphError(f"torch program '{name}': tracing the training step failed ({type(e).__name__}: {first})") \
            from None
    gm.meta["regal_gradients"] = [k for k in grad_storages if k is not None]
    if recompute:
        from regal.torch.recompute import recompute_norms
        recompute_norms(gm)
    _lift_scalars(gm, len(layout.scalars))
    ids = [(n, "parameter") for n, _, _ in layout.params] + [(n, "buffer") for n in layout.buffers]
    ids += [(n, "parameter") for n in layout.frozen]
    ids += [(f"{layout.params[k][0]}.{key}", "optimizer_state") for k, key in layout.state]
    ids += [(f"input_{k}", "input") for k in range(layout.inputs)]
    ids += [(f"scalar:{k}", "input") for k in range(len(layout.scalars))]
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(ids):
        raise GraphError(f"torch program '{name}': the traced step takes {len(phs)} arguments, expected {len(ids)}")
    placeholders = {ph.name: ids[k] for k, ph in enumerate(phs)}
    graph = from_fx(gm, placeholders, ["loss"], name=name, reuse=True, split_outputs=True, random_order=True,
                    meta={"mode": "train", "ir": "make_fx", "optimizer": type(optimizer).__name__,
                          "model": type(model).__name__})
    args = (*params, *buffers, *frozen, *state, *inputs)
    return Traced(graph, gm, args, tuple(i for i, _ in ids))


class _Plan(NamedTuple):
    """The plan for one input signature (shapes, dtypes, the modules' train / eval modes)."""
    traced: Traced               # the traced step; its args are shapes only (meta tensors): it holds no data
    solution: object             # regal's order (`regal.Solution`, d = 1)
    program: torch.fx.GraphModule
    predicted: int               # SPEC.md section 3's peak of `solution`
    traced_peak: int             # the same for PyTorch's traced order
    recomputed: bool             # whether the backward reads recomputed values
    peaks: dict                  # the predicted peak of each variant planned: {"plain": B, "recompute": B}


class _Spec(NamedTuple):
    """What a planned step keeps of an example input: its shape, dtype and device, no data."""
    shape: tuple
    dtype: torch.dtype
    device: torch.device


def _signature(inputs: tuple, model) -> tuple:
    """What a plan is kept by: the inputs' shapes and dtypes, and every module's train / eval mode."""
    return tuple((tuple(a.shape), a.dtype) for a in inputs), tuple(m.training for m in model.modules())


def _modes(modes: tuple) -> str:
    if all(modes):
        return "train mode"
    if not any(modes):
        return "eval mode"
    return f"mixed modes ({sum(not m for m in modes)} of {len(modes)} modules in eval mode)"


def _shapes_only(traced: Traced) -> Traced:
    """`traced` holding no tensor data: its args as meta tensors of the same shapes (the plan
    needs only the program and the graph; the real arguments are read at every call)."""
    def meta(a):
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta") \
            if isinstance(a, torch.Tensor) else a
    return traced._replace(args=tuple(meta(a) for a in traced.args))


class PlannedStep:
    """`planned_step`'s answer: call it with a batch to train one step (see the module docstring).

    graph: the step as a regal graph; solution: regal's order (d = 1); program: the step as an
    FX program in that order; predicted_peak_bytes: SPEC.md section 3's peak of that order (the
    model's resident tensors included); traced_peak_bytes: the same for PyTorch's traced order;
    all of the plan for the example's shapes. `plans`: every plan made so far, by signature
    (input shapes and dtypes, the modules' modes): a batch of other shapes, or the model in
    another mode, gets a plan of its own on first sight. `explain()`: what makes the peak.

    The step keeps the model, the optimizer and its plans: no tensor of tracing, no example batch
    (its shapes only), so it holds no memory beyond what eager PyTorch holds for the same loop.
    """

    def __init__(self, model, optimizer, kind: _Kind, layout: _Layout, settings: dict, key: tuple, plan: _Plan,
                 example: tuple):
        self.model, self.optimizer = model, optimizer
        self._kind, self._layout, self._settings = kind, layout, settings
        self._example = example   # _Spec per input: the shapes planned first, no tensor
        self._key = key
        self._plans = {key: plan}
        self.steps = 0
        self.max_grad_norm = None   # the gradients' clipping threshold (`max_grad_norm`), read each call

    @property
    def plans(self) -> dict:
        """Every plan made so far: {(input shapes and dtypes, modules' modes): plan}."""
        return dict(self._plans)

    @property
    def _main(self) -> _Plan:
        return self._plans[self._key]

    traced = property(lambda self: self._main.traced, doc="the traced step of the example's plan (shapes only)")
    graph = property(lambda self: self._main.traced.graph, doc="the example's plan's regal graph")
    solution = property(lambda self: self._main.solution, doc="regal's order for the example's shapes")
    program = property(lambda self: self._main.program, doc="the FX program in that order")
    predicted_peak_bytes = property(lambda self: self._main.predicted, doc="SPEC.md section 3's peak of the plan")
    traced_peak_bytes = property(lambda self: self._main.traced_peak, doc="the same for PyTorch's traced order")
    recomputed = property(lambda self: self._main.recomputed, doc="whether the backward reads recomputed values")

    def __repr__(self) -> str:
        return (f"PlannedStep({type(self.model).__name__}, {type(self.optimizer).__name__}, "
                f"{self.graph.num_nodes} nodes, predicted peak {self.predicted_peak_bytes:,} B, "
                f"traced order {self.traced_peak_bytes:,} B)")

    def in_order(self, solution=None) -> "PlannedStep":
        """This step with its ops in another order (`solution`, d = 1, for the example's shapes),
        or in PyTorch's traced order (None: as PyTorch runs the traced program, no output written
        over an input; batches of other shapes then run in their traced order too);
        `predicted_peak_bytes` is that order's. It trains the same model with the same optimizer."""
        from regal.simulate import simulate
        from regal.torch.plan import own_solution, plan_program, without_reuse
        other = copy.copy(self)
        plan = self._main
        graph = plan.traced.graph if solution is not None else without_reuse(plan.traced.graph)
        if solution is None:
            other._settings = {**self._settings, "order": "traced"}
            solution = own_solution(plan.traced)
        program = plan_program(plan.traced, solution, realize_reuse=graph is plan.traced.graph)
        predicted = int(simulate(graph, solution.placement, solution.order, 1).peak_bytes)
        other._plans = {self._key: plan._replace(solution=solution, program=program, predicted=predicted)}
        return other

    def _check(self, inputs: tuple) -> None:
        if len(inputs) != len(self._example):
            raise UnsupportedError(f"planned step: called with {len(inputs)} inputs, traced with {len(self._example)}")
        for k, (a, e) in enumerate(zip(inputs, self._example)):
            if not isinstance(a, torch.Tensor):
                raise UnsupportedError(f"planned step: input {k} is a {type(a).__name__}, not a tensor")
            if a.device != e.device:
                raise UnsupportedError(f"planned step: input {k} is on {a.device}, the step runs on {e.device}; "
                                       "move the batch there")
        device = self._example[0].device if self._example else torch.device("cpu")
        if torch.is_autocast_enabled() or _autocast(device.type):
            raise UnsupportedError("planned step: called under autocast, which a planned step does not follow "
                                   "(it would run in full precision); call it outside autocast")
        now = _structure(self.optimizer)
        if now != self._kind:
            if len(now.groups) != len(self._kind.groups):
                raise UnsupportedError("planned step: the optimizer's param groups changed since the step was planned")
            for gi, (a, b) in enumerate(zip(now.groups, self._kind.groups)):
                for name, x, y in zip(_FLAG_NAMES[now.algorithm] + ("parameters",), a, b):
                    if x != y:
                        raise UnsupportedError(f"planned step: param group {gi}'s {name} changed since the step was "
                                               "planned; plan it again")
        groups = self.optimizer.param_groups
        for name, gi, pi in self._layout.params:
            if groups[gi]["params"][pi].grad is not None:
                raise UnsupportedError(
                    f"planned step: parameter '{name}' has a gradient in .grad (from a backward() before this call?); "
                    "a planned step computes its own gradients and would ignore it: set .grad to None first "
                    "(optimizer.zero_grad(set_to_none=True)); gradient accumulation is not supported")

    def _plan_for(self, key: tuple, inputs: tuple) -> _Plan:
        """A plan for a new signature, made now and kept; said once on standard error."""
        plan = _plan_step(self.model, self.optimizer, self._kind, self._layout, inputs, self._settings)
        self._plans[key] = plan
        shapes = ", ".join(str(tuple(a.shape)) for a in inputs)
        mode = f" with the model in {_modes(key[1])}" if key[1] != self._key[1] else ""
        sys.stderr.write(f"planned step: planned again for input shapes {shapes}{mode} (predicted peak "
                         f"{plan.predicted:,} B); {len(self._plans)} plans kept\n")
        sys.stderr.flush()
        return plan

    def _arguments(self, inputs: tuple) -> tuple:
        layout, opt = self._layout, self.optimizer
        groups = opt.param_groups
        params = [groups[gi]["params"][pi] for _, gi, pi in layout.params]
        named_b = dict(self.model.named_buffers())
        named_p = dict(self.model.named_parameters())
        first = []
        for k, p in enumerate(params):   # the state torch.optim makes on a parameter's first step
            keys = _state_keys(self._kind, self._kind.groups[layout.params[k][1]])
            if not keys and self._kind.algorithm == "sgd":   # plain SGD keeps no state
                first.append(False)
                continue
            st = opt.state[p]
            first.append(any(key not in st for key in keys))
            for key in keys:
                if key not in st:
                    st[key] = _zeros_state(p)
            if self._kind.algorithm == "adam":
                if "step" not in st:
                    st["step"] = torch.tensor(0.0, dtype=torch.float64 if torch.get_default_dtype() == torch.float64
                                              else torch.float32)
                st["step"] += 1
        scalars = []
        for k, p in enumerate(params):
            s = _scalars(self._kind, groups[layout.params[k][1]], opt.state.get(p, {}), first[k])
            scalars.extend(s[nm] for nm in _SCALARS[self._kind.algorithm])
        if self.max_grad_norm is not None:
            scalars.append(float(self.max_grad_norm))
        state = [opt.state[params[k]][key] for k, key in layout.state]
        return (*params, *[named_b[n] for n in layout.buffers], *[named_p[n] for n in layout.frozen], *state,
                *inputs, *scalars)

    def __call__(self, *inputs):
        self._check(inputs)
        key = _signature(inputs, self.model)
        plan = self._plans.get(key) or self._plan_for(key, inputs)
        args = self._arguments(inputs)
        with torch.no_grad():
            out = plan.program(*args)
        self.steps += 1
        # the optimizer was stepped (by the program): a learning-rate scheduler reads this flag,
        # which `optimizer.step` sets, to warn of a scheduler stepped before its optimizer
        self.optimizer._opt_called = True
        return out[0] if isinstance(out, (list, tuple)) else out

    def peak_breakdown(self) -> dict:
        """What makes the predicted peak of the example's plan, as a dict (`explain` says it in words):
        the step and op at the peak, the bytes alive there by kind (parameters, buffers, optimizer
        state, inputs, activations of the forward, gradients, backward temporaries, recomputed
        values, the op's scratch), the largest tensors alive, and the predicted peak of each
        variant planned (with and without recomputation where `recompute` was asked)."""
        return _breakdown(self._main, self._settings)

    def explain(self) -> str:
        """A few lines saying what makes the predicted peak (`peak_breakdown`'s figures)."""
        b = self.peak_breakdown()
        mib = _mib
        lines = [f"predicted peak {mib(b['predicted_peak_bytes'])} at step {b['peak_step'] + 1:,} of {b['steps']:,}: "
                 f"{b['peak_op']['op']} ('{b['peak_op']['id']}'); PyTorch's traced order: "
                 f"{mib(b['traced_order_peak_bytes'])}",
                 "alive at the peak:"]
        for kind, n in sorted(b["by_kind"].items(), key=lambda kv: -kv[1]):
            if n:
                lines.append(f"  {kind:<24}{mib(n):>12}  {100 * n / max(b['predicted_peak_bytes'], 1):5.1f} %")
        if b["largest"]:
            lines.append("largest tensors alive there (not parameters or optimizer state):")
            for t in b["largest"]:
                lines.append(f"  {t['id']:<32}{mib(t['bytes']):>12}  {t['kind']}, {t['op']}")
        peaks = b["variants"]
        if "recompute" in peaks:
            kept = "with recomputation" if b["recomputed"] else "without recomputation (it did not lower the peak)"
            lines.append(f"recompute=True: predicted {mib(peaks['recompute'])} with recomputation, "
                         f"{mib(peaks['plain'])} without; the step runs {kept}")
        return "\n".join(lines)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB" if abs(n) >= 2**20 else f"{n / 2**10:,.1f} KiB"


def _autocast(device_type: str) -> bool:
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:   # an older signature: CUDA's flag alone
        return device_type == "cuda" and bool(torch.is_autocast_enabled())


#: The kinds `peak_breakdown` books a resident tensor under, by the graph's op.
_RESIDENT_KINDS = {"parameter": "parameters", "buffer": "buffers", "optimizer_state": "optimizer state",
                   "input": "inputs", "constant": "constants"}


def _breakdown(plan: _Plan, settings: dict) -> dict:
    from regal.simulate import memory_trace
    from regal.solution import instance_solution
    from regal.torch.plan import taken_over, without_reuse
    from regal.torch.recompute import _loss_position
    graph, sol = plan.traced.graph, plan.solution
    if settings.get("order") == "traced":
        graph = without_reuse(graph)
    graph, sol = instance_solution(graph, sol)   # an order that runs a node twice: one node per run
    order = np.asarray(sol.order, dtype=np.int64)
    n = graph.num_nodes
    _, trace = memory_trace(graph, sol.placement, order, 1)
    t = int(np.argmax(trace[:, 0]))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    last = np.full(n, -1, dtype=np.int64)   # the position of each node's last reader
    readers = np.repeat(np.arange(n), np.diff(graph.in_ptr))
    np.maximum.at(last, graph.in_idx, pos[readers])
    kept = graph.output | (last < 0)   # never freed (SPEC.md section 3)
    alive = graph.resident | ((pos <= t) & (kept | (last >= t)))
    w = int(order[t])
    for u in taken_over(graph, order).get(w, []):   # its bytes are now the op's output
        alive[u] = False
    gm = plan.traced.graph_module
    fx_pos = {nd.name: k for k, nd in enumerate(gm.graph.nodes)}
    loss_at = _loss_position(gm, {nd: k for k, nd in enumerate(gm.graph.nodes)})
    grads = set(gm.meta.get("regal_gradients", ()))
    index = graph.index
    grad_ids = set()
    for nd in gm.graph.nodes:
        if nd.op != "call_function":
            continue
        val = nd.meta.get("val")
        flat = [val] if isinstance(val, torch.Tensor) else [x for x in val if isinstance(x, torch.Tensor)] \
            if isinstance(val, (tuple, list)) else []
        for k, x in enumerate(flat):
            if _storage_key(x) in grads:
                grad_ids.add(f"{nd.name}:{k}" if f"{nd.name}:{k}" in index else nd.name)

    def kind(v: int) -> str:
        op, nid = graph.ops[v], graph.ids[v]
        if graph.resident[v]:
            return _RESIDENT_KINDS.get(op, op)
        if "#" in nid:
            return "recomputed values"
        if nid in grad_ids:
            return "gradients"
        fx = nid.rpartition(":")[0] if op == "alloc" else nid
        return "activations (forward)" if fx_pos.get(fx, loss_at + 1) <= loss_at else "backward temporaries"

    by_kind: dict = {}
    for v in np.flatnonzero(alive):
        k = kind(int(v))
        by_kind[k] = by_kind.get(k, 0) + int(graph.bytes[v])
    by_kind["op scratch"] = int(graph.temp_bytes[w])
    largest = sorted((int(v) for v in np.flatnonzero(alive & ~graph.resident)), key=lambda v: -int(graph.bytes[v]))
    return {"predicted_peak_bytes": int(trace[t, 0]), "peak_step": t, "steps": n,
            "peak_op": {"id": graph.ids[w], "op": graph.ops[w]},
            "by_kind": by_kind,
            "largest": [{"id": graph.ids[v], "op": graph.ops[v], "bytes": int(graph.bytes[v]), "kind": kind(v)}
                        for v in largest[:5]],
            "traced_order_peak_bytes": plan.traced_peak, "recomputed": plan.recomputed, "variants": dict(plan.peaks)}


class _Progress:
    """Planning's stage on one line of standard error, rewritten in place, when it is a terminal
    and planning has taken more than `after` seconds; nothing otherwise. A thread redraws the
    line (written to a copy of file descriptor 2, which the profiler's quieting may redirect)."""

    def __init__(self, label: str, after: float = 2.0):
        self.label, self.after, self.text, self.shown = label, after, "tracing", False
        try:
            self.on = sys.stderr.isatty() and os.isatty(2)
        except (AttributeError, ValueError, OSError):
            self.on = False
        if self.on:
            self.start = time.monotonic()
            self.fd = os.dup(2)
            self.done = threading.Event()
            self.thread = threading.Thread(target=self._run, name="regal-planning-progress", daemon=True)
            self.thread.start()

    def stage(self, text: str) -> None:
        self.text = text

    def searching(self, what: str):
        def callback(p) -> None:
            self.text = f"{what} {p.evaluations:,}/{p.budget:,}"
        return callback

    def _run(self) -> None:
        while not self.done.wait(0.25):
            elapsed = time.monotonic() - self.start
            if elapsed >= self.after:
                self._write(f"\r\x1b[Kplanning {self.label}: {self.text}... ({elapsed:.0f} s)")
                self.shown = True

    def _write(self, text: str) -> None:
        try:
            os.write(self.fd, text.encode())
        except OSError:
            pass

    def close(self) -> None:
        if not self.on:
            return
        self.done.set()
        self.thread.join()
        if self.shown:
            self._write("\r\x1b[K")
        os.close(self.fd)


def planned_step(model: "torch.nn.Module", optimizer: "torch.optim.Optimizer", example_inputs, *,
                 loss_fn: Callable | None = None, devices: int = 1, budget: int = 5000, seed: int = 0,
                 recompute: bool = False, max_grad_norm: float | None = None) -> PlannedStep:
    """Trace one training step of `model` with `optimizer`, order it with regal's flagship for
    the lowest peak memory, and return a callable that trains with it: `loss = step(*inputs)`
    runs forward, backward and the update in that order, updating `model`'s parameters and
    buffers and `optimizer`'s state in place (module docstring: what is traced, what is refused).

    `example_inputs`: a tuple of tensors of the shapes batches have (a lone tensor is wrapped);
    a batch of other shapes, or the model in another train / eval mode, is planned again on
    first sight (said once on standard error) and that plan kept. `model(*inputs[:k])` with k
    the positional arguments `forward` takes, and `loss_fn(outputs, *inputs)` (default: the sum
    of the means of the floating outputs). The step is traced in the modules' own modes.
    `budget`: the flagship's evaluations; `seed`: its seed. `recompute`: also plan the step
    whose backward reads recomputed copies of the normalizations' outputs (BatchNorm, LayerNorm,
    GroupNorm) and their activations instead of keeping them from the forward
    (`regal.torch.recompute`: torch.compile's trade), and keep it if its predicted peak is lower
    (`step.recomputed` says which; gradients then equal eager's to float tolerance, not bit for
    bit). `max_grad_norm`: clip the gradients' total 2-norm to it before the update, as
    `torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)` between `backward()` and
    `step()` does (then no update can start before the last gradient exists); the threshold is
    `step.max_grad_norm`, read at every call. Nothing is run on the real tensors while planning:
    the ops' scratch is measured on copies; the process's random generators, thread count and
    other global settings are as they were after planning. On a terminal, planning that takes
    more than 2 s shows its stage on standard error.
    """
    from regal._args import check_search_args
    check_search_args(devices=devices, budget=budget, seed=seed)
    if devices != 1:
        raise UnsupportedError(f"planned_step: devices={devices}: a planned step runs on one device "
                               "(several: regal.torch.dist.run_placed runs a placed plan once)")
    if not isinstance(model, torch.nn.Module):
        raise UnsupportedError(f"planned_step: model is a {type(model).__name__}, not a torch.nn.Module")
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    for k, a in enumerate(inputs):
        if not isinstance(a, torch.Tensor):
            raise UnsupportedError(f"planned_step: example input {k} is a {type(a).__name__}, not a tensor")
    kind = _structure(optimizer)
    if max_grad_norm is not None and not (isinstance(max_grad_norm, (int, float)) and max_grad_norm > 0):
        raise UnsupportedError(f"planned_step: max_grad_norm must be a number > 0, got {max_grad_norm!r}")
    layout = _layout(model, optimizer, kind, len(inputs), max_grad_norm is not None)
    name = f"{type(model).__name__.lower()}_{type(optimizer).__name__.lower()}_step"
    settings = {"loss_fn": loss_fn, "budget": budget, "seed": seed, "recompute": recompute, "name": name,
                "order": "search"}
    plan = _plan_step(model, optimizer, kind, layout, inputs, settings)
    step = PlannedStep(model, optimizer, kind, layout, settings, _signature(inputs, model), plan,
                       tuple(_Spec(tuple(a.shape), a.dtype, a.device) for a in inputs))
    step.max_grad_norm = max_grad_norm
    return step


def _plan_step(model, optimizer, kind: _Kind, layout: _Layout, inputs: tuple, settings: dict) -> _Plan:
    """Trace, measure and order one step for these inputs (and, with `recompute`, its variant
    that recomputes the normalizations), leaving the process's global state as it was."""
    from regal.simulate import simulate
    from regal.torch.plan import global_state_kept, own_solution, plan_program, without_reuse
    search = settings["order"] == "search"
    variants = (False, True) if settings["recompute"] and search else (False,)
    progress = _Progress(settings["name"])
    try:
        with global_state_kept():
            plans = []
            for r in variants:
                progress.stage("tracing" + (" the step with recomputation" if r else ""))
                traced = _trace(model, optimizer, kind, layout, inputs, settings["loss_fn"], settings["name"], r)
                plans.append(_plan(traced, layout, settings, progress, r))
            traced, solution, predicted = min(plans, key=lambda p: p[2])   # recompute only where it lowers the peak
            program = plan_program(traced, solution, realize_reuse=search)
            base = plans[0][0]
            own = own_solution(base)
            traced_peak = int(simulate(without_reuse(base.graph), own.placement, own.order, 1).peak_bytes)
    finally:
        progress.close()
    peaks = {("recompute" if r else "plain"): p[2] for r, p in zip(variants, plans)}
    return _Plan(_shapes_only(traced), solution, program, predicted, traced_peak, traced is not base, peaks)


def _plan(traced: Traced, layout: _Layout, settings: dict, progress: _Progress, recompute: bool):
    """`(calibrated traced step, its solution, its predicted peak)` for one traced step: regal's
    order, or PyTorch's traced order (`settings["order"]` "traced", `PlannedStep.in_order(None)`)."""
    from regal.flagship import optimize
    from regal.simulate import simulate
    from regal.torch.plan import calibrate, measure_nodes, own_solution, without_reuse
    # The ops' scratch, measured on copies with the first step's numbers (any finite ones do).
    traced = traced._replace(args=traced.args + tuple(0.5 for _ in layout.scalars))
    device = next((a.device for a in traced.args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    progress.stage("measuring the ops' scratch")
    traced = calibrate(traced, measure_nodes(traced, device))
    if settings["order"] == "traced":
        solution = own_solution(traced)
        return traced, solution, int(simulate(without_reuse(traced.graph), solution.placement, solution.order,
                                              1).peak_bytes)
    what = "searching the order" + (" with recomputation" if recompute else "")
    solution = optimize(traced.graph, devices=1, budget=settings["budget"], seed=settings["seed"],
                        callback=progress.searching(what))
    return traced, solution, int(simulate(traced.graph, solution.placement, solution.order, 1).peak_bytes)
