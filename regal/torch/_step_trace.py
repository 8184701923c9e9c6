"""The one trace of a training step: forward, backward (`make_fx` below autograd) and the
update of a real `torch.optim` optimizer, run from torch.optim's own single-tensor functions
(`regal.torch._optim`), imported with `from_fx`. `regal.torch.planned_step`,
`regal.torch.from_module(..., training=True)` / `regal.torch.trace` and `regal torch --train` all
trace through `_trace` (the latter two with `regal.torch._optim.make_optimizer(NAME)`), so they
plan the same program. See `regal.torch.step` for what is traced and refused."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.fx

from regal.graph import GraphError
from regal.torch._optim import Recorder, UnsupportedError, algorithm, group_flags, new_state, step_free, trace_update
from regal.torch._ops import device_cost_model
from regal.torch.importer import Traced, _default_loss, _forward_arity, from_fx, no_onednn

__all__ = ["UnsupportedError"]


class _Kind(NamedTuple):
    """The optimizer's structure, fixed when the step is traced (its numbers are not)."""
    algorithm: str               # `regal.torch._optim.Algorithm.name`
    groups: tuple                # per param group: (its flags' values, its state keys, its parameters' ids)
    flag_names: tuple = ()


def _structure(optimizer) -> _Kind:
    algo = algorithm(optimizer)
    groups = []
    for k, g in enumerate(optimizer.param_groups):
        for flag in ("fused", "capturable", "differentiable"):
            if g.get(flag):
                raise UnsupportedError(f"planned_step: param group {k} has {flag}=True; not supported")
        for key in ("lr",) + tuple(n for n in algo.numbers if n not in ("beta1", "beta2")) + ("betas",):
            vals = g.get(key, ())
            if any(isinstance(v, torch.Tensor) for v in (vals if isinstance(vals, tuple) else (vals,))):
                raise UnsupportedError(f"planned_step: param group {k} has a tensor '{key}'; give it as a float")
        groups.append((tuple(group_flags(algo, g).values()), algo.state(g), tuple(id(p) for p in g["params"])))
    return _Kind(algo.name, tuple(groups), algo.flags)


def _state_keys(kind: _Kind, group: tuple) -> tuple:
    """The tensor state keys of a parameter of this group (the program's arguments)."""
    return group[1]


def _clip(grads: list, max_norm) -> None:
    """`torch.nn.utils.clip_grad_norm_(..., max_norm)` on these gradients, op for op as it runs
    on the CPU (norm 2; its foreach kernels fall back to these per-tensor ops there)."""
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2.0) for g in grads]), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)


class _Layout(NamedTuple):
    """Who is who among the program's arguments (the numbers are `_Lifted`'s, after tracing)."""
    params: list                 # (name, group index, index in group) per optimized parameter
    buffers: list                # buffer names
    frozen: list                 # names of parameters that do not require grad
    state: list                  # (parameter position, state key) per optimizer state tensor
    inputs: int
    clips: bool = False          # the step clips its gradients (`max_grad_norm`)


class _Lifted(NamedTuple):
    """The numbers a traced step takes after its tensors: `scalars[j] = (parameter position or
    -1 for the step's own, expression)` (`regal.torch._optim.evaluate`), and the `guards` its
    program is valid under: `(parameter position, expression, comparison, other, answer)`."""
    scalars: tuple
    guards: tuple


def _drop_detach(gm: torch.fx.GraphModule) -> None:
    """Readers of `aten.detach` read its input instead, and the detach goes: the program runs
    under no_grad, where a detach is the same storage under another tensor object, and each
    cost a call (about 5 us; autograd's saved tensors give an RNN's step one per gate and time
    step: 1,155 of a GRU step's 10,442 nodes)."""
    detach = torch.ops.aten.detach.default
    gone = False
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target is detach and isinstance(n.args[0], torch.fx.Node):
            n.replace_all_uses_with(n.args[0])
            gm.graph.erase_node(n)
            gone = True
    if gone:
        gm.recompile()


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
    return _Layout(params, [n for n, _ in model.named_buffers()], frozen, state, n_inputs, clip)


def _clip(grads: list, max_norm) -> None:
    """`torch.nn.utils.clip_grad_norm_(..., max_norm)` on these gradients, op for op as it runs
    on the CPU (norm 2; its foreach kernels fall back to these per-tensor ops there)."""
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2.0) for g in grads]), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)


def _lift_scalars(gm: torch.fx.GraphModule, rec: Recorder, bake: bool = False) -> list:
    """Replace the recorded stand-in numbers in `gm` by new placeholders (after the others), one
    per number found, in the order they were made; returns their stand-in values. `bake`: by the
    numbers they stand for now instead (constants of the program, no placeholders; returns [])."""
    found: dict = {}

    def lift(a):
        if type(a) is float and a in rec.table:
            found.setdefault(a, None)
        return a

    for n in gm.graph.nodes:
        if n.op == "call_function":
            torch.fx.node.map_aggregate((n.args, n.kwargs), lift)
    values = sorted(found)
    phs = {}
    if bake:
        phs = {v: float(rec.true[v]) for v in values}
        values = []
    else:
        last = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
        with gm.graph.inserting_after(last):
            for j in reversed(range(len(values))):
                phs[values[j]] = gm.graph.placeholder(f"scalar_{j}")

    def put(a):
        return phs[a] if type(a) is float and a in phs else a

    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.args = torch.fx.node.map_aggregate(n.args, put)
            n.kwargs = torch.fx.node.map_aggregate(n.kwargs, put)
    gm.graph._codegen = torch.fx.graph.CodeGen()   # flat arguments, as the plans take them
    gm.recompile()
    return values


def _storage_key(t):
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _guards(rec: Recorder, layout: _Layout) -> tuple:
    """The recorded comparisons, once per param group where they do not read the step count."""
    out, seen = [], set()
    for k, expr, cmp, other, answer in rec.guards:
        gi = layout.params[k][1] if k >= 0 else -1
        key = (gi, expr, cmp, other) if step_free(expr) else (k, expr, cmp, other)
        if key not in seen:
            seen.add(key)
            out.append((k, expr, cmp, other, answer))
    return tuple(out)


def _trace(model, optimizer, kind: _Kind, layout: _Layout, inputs: tuple, loss_fn, name: str, rewrite=None, *,
           reuse: bool = True, split_outputs: bool = True, random_order: bool = True,
           max_grad_norm: float = 1.0, bake: bool = False) -> tuple[Traced, _Lifted]:
    """`(Traced, _Lifted)`: one training step of `model` with `optimizer`, traced (fake tensors)
    in the modules' own modes. Its arguments: parameters, buffers, frozen parameters, optimizer
    state tensors, inputs, then the numbers (`_Lifted.scalars`); `Traced.args` holds the real
    tensors (a state tensor the optimizer has not made yet: made as torch.optim makes it, not
    stored) and the numbers of the optimizer's next step. `rewrite(gm)`: applied to the program
    before it is imported (`regal.torch.recompute.recompute_norms`). `bake`: the numbers of the
    optimizer's next step as constants of the program instead of arguments (`regal.torch.trace`:
    a program that runs as is, on one device or several)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    algo = algorithm(optimizer)
    named = dict(model.named_parameters())
    params = [named[n] for n, _, _ in layout.params]
    bufs = dict(model.named_buffers())
    buffers = [bufs[n] for n in layout.buffers]
    frozen = [named[n] for n in layout.frozen]
    groups = optimizer.param_groups
    state = [optimizer.state.get(params[k], {}).get(key) for k, key in layout.state]
    state = [s if isinstance(s, torch.Tensor) else new_state(algo, key, params[k], groups[layout.params[k][1]])
             for s, (k, key) in zip(state, layout.state)]
    per_param: list[dict] = [{} for _ in params]
    for j, (k, key) in enumerate(layout.state):
        per_param[k][key] = j
    steps = [float(optimizer.state.get(p, {}).get("step", 0)) + 1 for p in params]
    arity = _forward_arity(model)
    loss_fn = loss_fn or _default_loss
    rec = Recorder()
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
                _clip([g for g in grads if g is not None], rec.var(-1, "max_grad_norm", max_grad_norm))
            for k, (p, g) in enumerate(zip(params, grads)):
                if g is not None:
                    mine = {key: state[j] for key, j in per_param[k].items()}
                    trace_update(rec, algo, k, groups[layout.params[k][1]], p, g, mine, steps[k])
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
    if rewrite is not None:
        rewrite(gm)   # (before _drop_detach: it finds autograd's saved tensors through their `detach`)
    _drop_detach(gm)
    values = _lift_scalars(gm, rec, bake)
    scalars = tuple(rec.table[v] for v in values)
    ids = [(n, "parameter") for n, _, _ in layout.params] + [(n, "buffer") for n in layout.buffers]
    ids += [(n, "parameter") for n in layout.frozen]
    ids += [(f"{layout.params[k][0]}.{key}", "optimizer_state") for k, key in layout.state]
    ids += [(f"input_{k}", "input") for k in range(layout.inputs)]
    ids += [(f"scalar:{k}", "input") for k in range(len(scalars))]
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(ids):
        raise GraphError(f"torch program '{name}': the traced step takes {len(phs)} arguments, expected {len(ids)}")
    placeholders = {ph.name: ids[k] for k, ph in enumerate(phs)}
    device = next((t.device for t in (*params, *inputs) if isinstance(t, torch.Tensor)), torch.device("cpu"))
    graph = from_fx(gm, placeholders, ["loss"], name=name, reuse=reuse, split_outputs=split_outputs,
                    random_order=random_order, cost_model=device_cost_model(device),
                    meta={"mode": "train", "ir": "make_fx", "optimizer": type(optimizer).__name__,
                          "model": type(model).__name__})
    args = (*params, *buffers, *frozen, *state, *inputs, *(rec.true[v] for v in values))
    return Traced(graph, gm, args, tuple(i for i, _ in ids)), _Lifted(scalars, _guards(rec, layout))

