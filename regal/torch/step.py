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

Refused with `UnsupportedError` (one line): another optimizer class, `fused`, `capturable` or
`differentiable` optimizers, a tensor learning rate, a parameter that requires grad but is in
no param group, an input of another shape, dtype or device than traced, a call under autocast
(grad scaling), a change of the optimizer's structure (momentum on/off, nesterov, amsgrad,
maximize, weight decay on/off, its parameters), `devices` other than 1.
"""

from __future__ import annotations

import copy
from typing import Callable, NamedTuple

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

    def step(params, buffers, frozen, state, *inputs):
        tensors = {**{n: t for (n, _, _), t in zip(layout.params, params)}, **dict(zip(layout.buffers, buffers)),
                   **dict(zip(layout.frozen, frozen))}
        outputs = torch.func.functional_call(model, tensors, inputs if arity is None else inputs[:arity])
        loss = loss_fn(outputs, *inputs)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
            raise GraphError(f"torch program '{name}': loss_fn must return a floating tensor of one element")
        grads = torch.autograd.grad(loss, params, allow_unused=True)
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

    was = model.training
    model.train(True)
    try:
        with no_onednn():   # oneDNN's RNN backward cannot be traced
            gm = make_fx(step, tracing_mode="fake")(params, buffers, frozen, state, *inputs)
    except (GraphError, UnsupportedError):
        raise
    except Exception as e:  # noqa: BLE001 - tracing raises many types; one line for the caller
        first = " ".join(str(e).split())[:300]
        raise GraphError(f"torch program '{name}': tracing the training step failed ({type(e).__name__}: {first})") \
            from None
    finally:
        model.train(was)
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


class PlannedStep:
    """`planned_step`'s answer: call it with a batch to train one step (see the module docstring).

    graph: the step as a regal graph; solution: regal's order (d = 1); program: the step as an
    FX program in that order; predicted_peak_bytes: SPEC.md section 3's peak of that order (the
    model's resident tensors included); traced_peak_bytes: the same for PyTorch's traced order.
    """

    def __init__(self, model, optimizer, kind: _Kind, layout: _Layout, traced: Traced, solution, program,
                 example: tuple, predicted: int, traced_peak: int):
        self.model, self.optimizer = model, optimizer
        self._kind, self._layout, self._example = kind, layout, example
        self.traced, self.graph, self.solution, self.program = traced, traced.graph, solution, program
        self.predicted_peak_bytes, self.traced_peak_bytes = predicted, traced_peak
        self.steps = 0
        self.recomputed = False   # whether the backward reads recomputed values (`recompute=True`)
        self.max_grad_norm = None   # the gradients' clipping threshold (`max_grad_norm`), read each call

    def __repr__(self) -> str:
        return (f"PlannedStep({type(self.model).__name__}, {type(self.optimizer).__name__}, "
                f"{self.graph.num_nodes} nodes, predicted peak {self.predicted_peak_bytes:,} B, "
                f"traced order {self.traced_peak_bytes:,} B)")

    def in_order(self, solution=None) -> "PlannedStep":
        """This step with its ops in another order (`solution`, d = 1), or in PyTorch's traced
        order (None: as PyTorch runs the traced program, no output written over an input);
        `predicted_peak_bytes` is that order's. It trains the same model with the same optimizer."""
        from regal.simulate import simulate
        from regal.torch.plan import own_solution, plan_program, without_reuse
        other = copy.copy(self)
        graph = self.graph if solution is not None else without_reuse(self.graph)
        solution = solution if solution is not None else own_solution(self.traced)
        other.solution = solution
        other.program = plan_program(self.traced, solution, realize_reuse=graph is self.graph)
        other.predicted_peak_bytes = int(simulate(graph, solution.placement, solution.order, 1).peak_bytes)
        return other

    def _check(self, inputs: tuple) -> None:
        if len(inputs) != len(self._example):
            raise UnsupportedError(f"planned step: called with {len(inputs)} inputs, traced with {len(self._example)}")
        for k, (a, e) in enumerate(zip(inputs, self._example)):
            if not isinstance(a, torch.Tensor):
                raise UnsupportedError(f"planned step: input {k} is a {type(a).__name__}, not a tensor")
            if a.shape != e.shape or a.dtype != e.dtype or a.device != e.device:
                raise UnsupportedError(
                    f"planned step: input {k} is {tuple(a.shape)} {a.dtype} on {a.device}, the step was planned for "
                    f"{tuple(e.shape)} {e.dtype} on {e.device}; plan a step for it (regal.torch.planned_step)")
        if torch.is_autocast_enabled() or torch.is_autocast_enabled("cpu"):
            raise UnsupportedError("planned step: autocast / grad scaling is not supported; call it outside autocast")
        now = _structure(self.optimizer)
        if now != self._kind:
            if len(now.groups) != len(self._kind.groups):
                raise UnsupportedError("planned step: the optimizer's param groups changed since the step was planned")
            for gi, (a, b) in enumerate(zip(now.groups, self._kind.groups)):
                for name, x, y in zip(_FLAG_NAMES[now.algorithm] + ("parameters",), a, b):
                    if x != y:
                        raise UnsupportedError(f"planned step: param group {gi}'s {name} changed since the step was "
                                               "planned; plan it again")

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
        args = self._arguments(inputs)
        with torch.no_grad():
            out = self.program(*args)
        self.steps += 1
        # the optimizer was stepped (by the program): a learning-rate scheduler reads this flag,
        # which `optimizer.step` sets, to warn of a scheduler stepped before its optimizer
        self.optimizer._opt_called = True
        return out[0] if isinstance(out, (list, tuple)) else out


def planned_step(model: "torch.nn.Module", optimizer: "torch.optim.Optimizer", example_inputs, *,
                 loss_fn: Callable | None = None, devices: int = 1, budget: int = 5000, seed: int = 0,
                 recompute: bool = False, max_grad_norm: float | None = None) -> PlannedStep:
    """Trace one training step of `model` with `optimizer`, order it with regal's flagship for
    the lowest peak memory, and return a callable that trains with it: `loss = step(*inputs)`
    runs forward, backward and the update in that order, updating `model`'s parameters and
    buffers and `optimizer`'s state in place (module docstring: what is traced, what is refused).

    `example_inputs`: a tuple of tensors of the shapes every later batch has (a lone tensor is
    wrapped); `model(*inputs[:k])` with k the positional arguments `forward` takes, and
    `loss_fn(outputs, *inputs)` (default: the sum of the means of the floating outputs).
    `budget`: the flagship's evaluations; `seed`: its seed. `recompute`: also plan the step
    whose backward reads recomputed copies of the normalizations' outputs (BatchNorm, LayerNorm,
    GroupNorm) and their activations instead of keeping them from the forward
    (`regal.torch.recompute`: torch.compile's trade), and keep it if its predicted peak is lower
    (`step.recomputed` says which; gradients then equal eager's to float tolerance, not bit for
    bit). `max_grad_norm`: clip the gradients' total 2-norm to it before the update, as
    `torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)` between `backward()` and
    `step()` does (then no update can start before the last gradient exists); the threshold is
    `step.max_grad_norm`, read at every call. Nothing is run on the real tensors while planning:
    the ops' scratch is measured on copies.
    """
    from regal.simulate import simulate
    from regal.torch.plan import own_solution, plan_program, without_reuse
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
    plans = [_plan(_trace(model, optimizer, kind, layout, inputs, loss_fn, name, r), layout, budget, seed)
             for r in ((False, True) if recompute else (False,))]
    traced, solution, predicted = min(plans, key=lambda p: p[2])   # recompute only where it lowers the peak
    program = plan_program(traced, solution, realize_reuse=True)
    own = own_solution(plans[0][0])
    traced_peak = int(simulate(without_reuse(plans[0][0].graph), own.placement, own.order, 1).peak_bytes)
    step = PlannedStep(model, optimizer, kind, layout, traced, solution, program, inputs, predicted, traced_peak)
    step.recomputed = traced is not plans[0][0]
    step.max_grad_norm = max_grad_norm
    return step


def _plan(traced: Traced, layout: _Layout, budget: int, seed: int):
    """`(calibrated traced step, regal's solution, its predicted peak)` for one traced step."""
    from regal.flagship import optimize
    from regal.simulate import simulate
    from regal.torch.plan import calibrate, measure_nodes, torch_threads_kept
    # The ops' scratch, measured on copies with the first step's numbers (any finite ones do).
    traced = traced._replace(args=traced.args + tuple(0.5 for _ in layout.scalars))
    device = next((a.device for a in traced.args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    traced = calibrate(traced, measure_nodes(traced, device))
    with torch_threads_kept():
        solution = optimize(traced.graph, devices=1, budget=budget, seed=seed)
    return traced, solution, int(simulate(traced.graph, solution.placement, solution.order, 1).peak_bytes)
