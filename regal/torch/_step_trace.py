"""The planned step's trace (`regal.torch.step`): the optimizer's structure and update written
op for op as torch.optim's single-tensor functions run them, the arguments' layout, and one
training step traced with `make_fx` and imported (`_trace`). See `regal.torch.step` for what is
traced and refused."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.fx

from regal.graph import GraphError
from regal.torch.importer import Traced, _default_loss, _forward_arity, from_fx, no_onednn

__all__ = ["UnsupportedError"]


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
