"""`regal.torch.from_module` and `regal.torch.trace`: a module's forward pass (torch.export) or
one training step as a `Graph`, with the program and real arguments to run it.

    graph = regal.torch.from_module(model, (x,))                                  # forward
    graph = regal.torch.from_module(model, (x,), training=True, optimizer="adamw")  # one training step
    traced = regal.torch.trace(model, (x,), training=True, optimizer=torch.optim.SGD(...))

A training step is traced by the one tracer of the training steps (`regal.torch._step_trace`,
which `regal.torch.planned_step` and `regal torch --train` use): forward, backward and the update
of a real torch.optim optimizer, run from torch.optim's own single-tensor functions
(`regal.torch._optim`). `optimizer` is a name (`regal.torch._optim.NAMED`: "sgd" with momentum
0.9, "adam", "adamw", "rmsprop", "adagrad", "adamax", "adadelta"; lr 1e-3) or an optimizer over
the module's parameters; the update's numbers are those of the optimizer's next step, constants
of the program (the planned step takes them as arguments instead, computed at every call).
"""

from __future__ import annotations

from typing import Callable

import torch

from regal.graph import Graph, GraphError
from regal.torch.importer import Traced, _exported_names, from_fx, no_onednn

__all__ = ["from_module", "trace"]


def from_module(module: "torch.nn.Module", example_inputs, training: bool = False, *,
                loss_fn: Callable | None = None, optimizer="sgd", name: str | None = None,
                reuse: bool = True) -> Graph:
    """Import a module's forward pass (torch.export), or with `training=True` one training step
    (forward, backward, in-place `optimizer` update: a name of `regal.torch._optim.NAMED`, "sgd"
    with momentum 0.9 by default, or a torch.optim optimizer over the module's parameters).

    `example_inputs` is a tuple of the forward's positional arguments (a lone tensor is
    wrapped); only their shapes and dtypes matter. The module is traced in eval mode for the
    forward pass and in train mode for a step, and put back in its mode afterwards. With
    `reuse=False` no node lists inputs it may take over (what eager PyTorch allocates).
    """
    return trace(module, example_inputs, training, loss_fn=loss_fn, optimizer=optimizer, name=name,
                 reuse=reuse).graph


def trace(module: "torch.nn.Module", example_inputs, training: bool = False, *,
          loss_fn: Callable | None = None, optimizer="sgd", name: str | None = None,
          reuse: bool = True, split_outputs: bool = False) -> Traced:
    """`from_module`, keeping the traced program and real arguments to run it (`Traced`).
    `split_outputs`: as `from_fx`'s (a program for one device). Traced with oneDNN off, so that
    `nn.LSTM` / `nn.GRU` are traced as the ops of their cells: oneDNN's fused RNN kernel cannot be
    traced through its backward."""
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    name = name or f"{type(module).__name__.lower()}_{'train' if training else 'fwd'}"
    was_training = module.training
    module.train(training)
    try:
        with no_onednn():
            if not training:
                ep = _export(module, args, name)
                graph = from_fx(ep.graph_module, *_exported_names(ep), name=name, reuse=reuse,
                                split_outputs=split_outputs,
                                meta={"mode": "forward", "ir": "torch.export", "model": type(module).__name__})
                ids = tuple(_exported_ids(ep))
                return Traced(graph, ep.graph_module, _exported_args(ep, args), ids)
            return _train_step(module, args, loss_fn, optimizer, name, reuse, split_outputs)
    finally:
        module.train(was_training)


def _exported_ids(ep):
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        yield str(spec.target if spec.target is not None and kind != "USER_INPUT" else spec.arg.name)


def _exported_args(ep, args) -> tuple:
    """The real tensors of an ExportedProgram's placeholders, in order."""
    state, consts, user = ep.state_dict, ep.constants, iter(args)
    out = []
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            out.append(next(user))
        elif kind in ("PARAMETER", "BUFFER"):
            out.append(state[spec.target] if spec.target in state else consts[spec.target])
        else:
            out.append(consts[spec.target])
    return tuple(out)


def _export(module, args, name: str):
    try:
        return torch.export.export(module, args)
    except Exception as e:  # torch.export raises many types; one line for the caller
        first = " ".join(str(e).split())[:300]
        raise GraphError(f"torch program '{name}': torch.export failed ({type(e).__name__}: {first})") from None


def _train_step(module, args, loss_fn, optimizer, name: str, reuse: bool, split_outputs: bool) -> Traced:
    """One training step through the one tracer (`regal.torch._step_trace._trace`)."""
    from regal.torch._optim import make_optimizer
    from regal.torch._step_trace import _layout, _structure, _trace
    if isinstance(optimizer, str):
        optimizer = make_optimizer(optimizer, [p for p in module.parameters() if p.requires_grad])
    kind = _structure(optimizer)
    layout = _layout(module, optimizer, kind, len(args))
    traced, _ = _trace(module, optimizer, kind, layout, args, loss_fn, name, reuse=reuse, split_outputs=split_outputs,
                       random_order=False, bake=True)
    return traced
