"""Recompute, in the backward, what BatchNorm and its activation made in the forward (the planned
step's `recompute=True`): torch.compile's trade (AOTAutograd's min-cut partitioner saves a
convolution's output and recomputes the cheap BatchNorm-apply and activation from it), made as
a rewrite of the traced training step before regal orders it.

Eager PyTorch keeps, for a convolution -> BatchNorm -> activation -> convolution chain, the
BatchNorm input (its backward reads it), the activation's input or output (its backward reads
one; an in-place activation makes autograd keep a clone of its input) and the activation's
output (the next convolution's backward reads its input): two or three tensors of the layer's
size. After the rewrite the backward reads recomputed copies, made from what it keeps anyway
(the BatchNorm input, its saved mean and inverse deviation, its weight and bias):

    alpha = save_invstd * weight;  beta = fma(-save_mean, alpha, bias)   (per channel: addcmul)
    y = fma(x, alpha, beta);  a = act(y)                                 (elementwise: addcmul)

so the forward's BatchNorm output, its clone and the activation's output die in the forward,
after their last forward reader. The order search places the recomputation (it needs `x`, kept
anyway); elementwise ops write over their input at its last read (`realize_reuse`), so it costs
one tensor of the layer's size while it lasts. The CPU's BatchNorm kernel computes its output
with fused multiply-adds, the per-channel shift included; `aten.addcmul` rounds once as they do,
so the recomputed values equal the forward's bit for bit (tested on 90 shapes, layouts and
seeds, with and without affine parameters; a separate multiply and add differed in the last
bit). LayerNorm and GroupNorm are recomputed by their own formula: equal to rounding.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

__all__ = ["ACTIVATIONS", "NORMS", "recompute_norms"]

aten = torch.ops.aten

#: Elementwise activations recomputed after a BatchNorm: in-place name -> out-of-place op.
ACTIVATIONS = {name: getattr(aten, name.rstrip("_")).default for name in (
    "relu", "relu_", "hardtanh", "hardtanh_", "silu", "silu_", "hardswish", "hardswish_", "gelu",
    "sigmoid", "leaky_relu", "leaky_relu_")}


def _is(node, op) -> bool:
    return node.op == "call_function" and node.target == op


_ALIAS = (aten.detach.default, aten.alias.default)


def _aliases(v: torch.fx.Node) -> list:
    """`detach` / `alias` of `v`, and of those, in graph order: the same values."""
    out, todo = [], [v]
    while todo:
        n = todo.pop()
        for u in n.users:
            if u.op == "call_function" and u.target in _ALIAS and u.args[0] is n:
                out.append(u)
                todo.append(u)
    return out


def _loss_position(gm: torch.fx.GraphModule, pos: dict) -> int:
    """The position of the loss in the graph: nodes after it are the backward and the update."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    loss = out.args[0][0] if isinstance(out.args[0], (list, tuple)) else out.args[0]
    while isinstance(loss, torch.fx.Node) and loss.op == "call_function" and loss.target in _ALIAS:
        loss = loss.args[0]
    return pos[loss]


def _batch_norm(call, norm, mean, rstd, out):
    """BatchNorm's output from its input and saved statistics as the CPU kernel makes it, each
    multiply-add rounded once: fma(x, a, fma(-mean, a, b)), a = rstd * w."""
    x, weight, bias = norm.args[0], norm.args[1], norm.args[2]
    shape = [1, out.meta["val"].shape[1]] + [1] * (out.meta["val"].dim() - 2)
    alpha = rstd if weight is None else call(aten.mul.Tensor, rstd, weight)
    if bias is None:
        beta = call(aten.neg.default, call(aten.mul.Tensor, mean, alpha))
    else:
        beta = call(aten.addcmul.default, bias, call(aten.neg.default, mean), alpha)
    return call(aten.addcmul.default, call(aten.view.default, beta, shape), x, call(aten.view.default, alpha, shape))


def _layer_norm(call, norm, mean, rstd, out):
    """LayerNorm's output: (x - mean) * rstd * w + b (mean and rstd keep the normalized dims as 1)."""
    x, weight, bias = norm.args[0], norm.args[2], norm.args[3]
    y = call(aten.mul.Tensor, call(aten.sub.Tensor, x, mean), rstd)
    y = y if weight is None else call(aten.mul.Tensor, y, weight)
    return y if bias is None else call(aten.add.Tensor, y, bias)


def _group_norm(call, norm, mean, rstd, out):
    """GroupNorm's output: per (sample, group) (x - mean) * rstd, then per channel * w + b."""
    x, weight, bias, n, c, _, groups = norm.args[:7]
    full = list(out.meta["val"].shape)
    grouped = call(aten.view.default, x, [n, groups, -1])
    y = call(aten.mul.Tensor, call(aten.sub.Tensor, grouped, call(aten.unsqueeze.default, mean, -1)),
             call(aten.unsqueeze.default, rstd, -1))
    y = call(aten.view.default, y, full)
    shape = [1, c] + [1] * (len(full) - 2)
    y = y if weight is None else call(aten.mul.Tensor, y, call(aten.view.default, weight, shape))
    return y if bias is None else call(aten.add.Tensor, y, call(aten.view.default, bias, shape))


def _training_bn(norm) -> bool:
    return len(norm.args) >= 6 and norm.args[5] is True


#: The normalizations rewritten: op -> (when, how its output is recomputed).
NORMS = {aten.native_batch_norm.default: (_training_bn, _batch_norm),
         aten.native_layer_norm.default: (lambda n: True, _layer_norm),
         aten.native_group_norm.default: (lambda n: len(n.args) >= 7, _group_norm)}


def _family(norm: torch.fx.Node) -> tuple | None:
    """(out, mean, rstd, {forward value: 'norm' | activation node}) of a normalization whose three
    outputs are taken out by getitem, or None."""
    if not NORMS[norm.target][0](norm) or not isinstance(norm.meta.get("val"), (tuple, list)):
        return None
    parts = {u.args[1]: u for u in norm.users if u.target is operator.getitem}
    if set(parts) != {0, 1, 2} or len(norm.users) != 3:
        return None
    out = parts[0]
    kinds = {out: "norm"}
    for u in out.users:
        if _is(u, aten.clone.default) and u.args[0] is out:
            kinds[u] = "norm"      # autograd's copy of an in-place activation's input
        elif u.op == "call_function" and getattr(u.target, "_opname", None) in ACTIVATIONS \
                and u.args[0] is out and not any(isinstance(a, torch.fx.Node) for a in u.args[1:]) \
                and not any(isinstance(a, torch.fx.Node) for a in u.kwargs.values()):
            kinds[u] = u
    return out, parts[1], parts[2], kinds


def recompute_norms(gm: torch.fx.GraphModule) -> int:
    """Rewrite `gm` (a traced training step) in place: every backward reader of a training
    BatchNorm's output, of autograd's clone of it, or of the elementwise activation applied to
    it, reads a recomputed copy instead (module docstring). Returns how many BatchNorms were
    rewritten. Where the BatchNorm's output is written in place by the activation (`relu_`), a
    backward reader of the output itself sees the activation's values: such a family is left as
    it is."""
    from torch._guards import detect_fake_mode
    nodes = list(gm.graph.nodes)
    pos = {n: k for k, n in enumerate(nodes)}
    boundary = _loss_position(gm, pos)
    done = 0
    for norm in nodes:
        if norm.op != "call_function" or norm.target not in NORMS:
            continue
        fam = _family(norm)
        if fam is None:
            continue
        out, mean, rstd, kinds = fam
        # autograd's saved tensors reach the backward through `detach` / `alias` of the value
        for v in list(kinds):
            for a in _aliases(v):
                kinds[a] = kinds[v]
        late = {v: [u for u in v.users if pos.get(u, -1) > boundary] for v in kinds}
        if not any(late.values()):
            continue
        in_place = any(isinstance(k, torch.fx.Node) and k.target._opname.endswith("_") for k in kinds.values())
        if in_place and any(late[v] for v in [out, *_aliases(out)]):
            continue   # read after the in-place activation wrote it: not BatchNorm's values
        fake = detect_fake_mode([out.meta["val"]])
        first = min((u for us in late.values() for u in us), key=pos.__getitem__)
        made: dict = {}

        def call(op, *args, **kwargs):
            with gm.graph.inserting_before(first):
                node = gm.graph.call_function(op, args, kwargs)
            vals = torch.fx.node.map_arg((args, kwargs), lambda a: a.meta["val"])
            with fake:
                node.meta["val"] = op(*vals[0], **vals[1])
            return node

        def value(kind):
            if kind not in made:
                if kind == "norm":
                    made[kind] = NORMS[norm.target][1](call, norm, mean, rstd, out)
                else:
                    act = ACTIVATIONS[kind.target._opname]
                    made[kind] = call(act, value("norm"), *kind.args[1:], **kind.kwargs)
            return made[kind]

        for v, kind in kinds.items():
            for u in late[v]:
                u.replace_input_with(v, value(kind))
        dead = [v for v in kinds if v is not out and (_is(v, aten.clone.default) or v.target in _ALIAS)]
        while any(not v.users for v in dead):   # aliases and autograd's clone, now read by nothing
            for v in [v for v in dead if not v.users]:
                gm.graph.erase_node(v)
                dead.remove(v)
        done += 1
    if done:
        gm.graph.lint()
        gm.recompile()
    return done
