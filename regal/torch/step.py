"""A training step in regal's order, for a training loop: `regal.torch.planned_step`.

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = regal.torch.planned_step(model, optimizer, (x, y), loss_fn=lambda out, x, y: F.cross_entropy(out, y))
    for x, y in batches:
        loss = step(x, y)        # forward, backward and update in regal's order; model and optimizer updated

**What is traced.** One training step, as eager PyTorch runs it: `model(*inputs)` (the leading
inputs its `forward` takes; `loss_fn(outputs, *inputs)` sees all of them), `loss`, the backward
(`torch.autograd.grad`, ATen ops as the autograd engine runs them: `make_fx`), then the update
of `optimizer`'s own algorithm (torch.optim's own single-tensor function for SGD, Adam, AdamW,
RMSprop, Adagrad, Adamax or Adadelta, traced: `regal.torch._optim`), on the module's own
parameters, buffers and optimizer state tensors, in place. The same trace as
`regal.torch.from_module(..., training=True)` and `regal torch --train` (`_step_trace._trace`). The optimizer's
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
`devices` other than 1, a number that sends torch.optim's update down another branch than
when it was traced (weight decay set to 0, say).
"""

from __future__ import annotations

import copy
import sys
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.fx

from regal.torch._step_report import _Progress, _autocast, _breakdown, _mib
from regal.torch._optim import OPTIMIZERS, env, evaluate, new_state
from regal.torch._step_trace import UnsupportedError, _Kind, _Layout, _layout, _Lifted, _state_keys, _structure, _trace
from regal.torch.importer import _forward_arity  # noqa: F401  (regal.torch.eager and the experiments read it here)
from regal._stop import stops_on_interrupt
from regal.torch.importer import Traced

__all__ = ["PlannedStep", "UnsupportedError", "planned_step", "RECOMPUTE_DEFAULT"]

#: `planned_step`'s default `recompute` (and what `recompute=True` means): the search may spend up
#: to 10 % more compute recomputing values of the step instead of keeping them.
RECOMPUTE_DEFAULT = 0.1


class _Plan(NamedTuple):
    """The plan for one input signature (shapes, dtypes, the modules' train / eval modes)."""
    traced: Traced               # the traced step; its args are shapes only (meta tensors): it holds no data
    solution: object             # regal's order (`regal.Solution`, d = 1)
    program: torch.fx.GraphModule
    predicted: int               # SPEC.md section 3's peak of `solution`
    traced_peak: int             # the same for PyTorch's traced order
    recomputed: bool             # whether the backward reads recomputed values
    peaks: dict                  # the predicted peak of each variant planned: {"plain": B, "recompute": B}
    lifted: _Lifted              # the program's numbers (expressions of the hyperparameters) and guards
    extra: float = 0.0           # the plan's extra compute booked (the rewrite's + the search's recomputations),
    #                              a fraction of the step as traced without them: at most `recompute`


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
    extra_fraction = property(lambda self: self._main.extra, doc="the plan's extra compute booked (the rewrite's "
                              "and the search's recomputations), a fraction of the step's: at most `recompute`")

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
                for name, x, y in zip(("flags", "state tensors", "parameters"), a, b):
                    if x != y:
                        if name == "flags":
                            name = next(f for f, u, v in zip(now.flag_names, x, y) if u != v)
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

    def _arguments(self, inputs: tuple, plan: _Plan) -> tuple:
        """The program's arguments for this call: the tensors, then its numbers computed from
        `param_groups` and `state` as torch.optim computes them (the state made and the step
        counts advanced first, as `optimizer.step` does)."""
        layout, opt = self._layout, self.optimizer
        algo = _algorithm(opt)
        groups = opt.param_groups
        params = [groups[gi]["params"][pi] for _, gi, pi in layout.params]
        named_b = dict(self.model.named_buffers())
        named_p = dict(self.model.named_parameters())
        envs, made = [], []
        for k, p in enumerate(params):   # what this step's numbers read, nothing changed yet
            group = groups[layout.params[k][1]]
            keys = _state_keys(self._kind, self._kind.groups[layout.params[k][1]])
            st = opt.state.get(p, {})
            missing = [key for key in keys if st.get(key) is None]
            after = {"step": st["step"] + 1 if "step" in st else new_state(algo, "step", p, group) + 1} \
                if algo.step else {}
            envs.append(env(algo, group, after, bool(missing)))
            made.append(missing)
        clip = {"max_grad_norm": float(self.max_grad_norm)} if self.max_grad_norm is not None else {}
        _check_guards(plan.lifted, envs, clip)
        for k, p in enumerate(params):   # the state torch.optim makes on a parameter's first step, the step counted
            group = groups[layout.params[k][1]]
            if made[k] or algo.step:
                st = opt.state[p]
                for key in made[k]:
                    st[key] = new_state(algo, key, p, group)
                if algo.step:
                    if "step" not in st:
                        st["step"] = new_state(algo, "step", p, group)
                    st["step"] += 1
        scalars = [evaluate(e, envs[k] if k >= 0 else clip) for k, e in plan.lifted.scalars]
        state = [opt.state[params[k]][key] for k, key in layout.state]
        return (*params, *[named_b[n] for n in layout.buffers], *[named_p[n] for n in layout.frozen], *state,
                *inputs, *scalars)

    def __call__(self, *inputs):
        self._check(inputs)
        key = _signature(inputs, self.model)
        plan = self._plans.get(key) or self._plan_for(key, inputs)
        args = self._arguments(inputs, plan)
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
            kept = "the rewrite" if b["recomputed"] else "the step as traced (the rewrite did not lower the peak)"
            lines.append(f"normalizations recomputed by the rewrite: predicted {mib(peaks['recompute'])}, "
                         f"{mib(peaks['plain'])} without it; the step runs {kept}")
        rc = self.solution.info.get("recompute")
        if rc is not None:
            lines.append(f"the search recomputes {rc['count']:,} op run{'' if rc['count'] == 1 else 's'}; the plan's "
                         f"extra compute +{self.extra_fraction * 100:.1f} % of the step's (a budget of "
                         f"{self._settings['recompute'] * 100:g} %, the rewrite's included)")
        return "\n".join(lines)


@stops_on_interrupt  # Ctrl-C while planning: KeyboardInterrupt, never lost in Numba's kernel loading
def planned_step(model: "torch.nn.Module", optimizer: "torch.optim.Optimizer", example_inputs, *,
                 loss_fn: Callable | None = None, devices: int = 1, budget: int = 5000, seed: int = 0,
                 recompute: bool | float = RECOMPUTE_DEFAULT, max_grad_norm: float | None = None) -> PlannedStep:
    """Trace one training step of `model` with `optimizer`, order it with regal's flagship for
    the lowest peak memory, and return a callable that trains with it: `loss = step(*inputs)`
    runs forward, backward and the update in that order, updating `model`'s parameters and
    buffers and `optimizer`'s state in place (module docstring: what is traced, what is refused).

    `example_inputs`: a tuple of tensors of the shapes batches have (a lone tensor is wrapped);
    a batch of other shapes, or the model in another train / eval mode, is planned again on
    first sight (said once on standard error) and that plan kept. `model(*inputs[:k])` with k
    the positional arguments `forward` takes, and `loss_fn(outputs, *inputs)` (default: the sum
    of the means of the floating outputs). The step is traced in the modules' own modes.
    `budget`: the flagship's evaluations; `seed`: its seed. `recompute`: the extra compute the
    search may spend recomputing values of the step instead of keeping them (SPEC.md section 3b:
    any op of the traced step but those a second run would change, `recompute: false`), as a
    fraction of one step's cost: default RECOMPUTE_DEFAULT (0.1, at most 10 % more), `True` the
    same, `False` or 0 none (then the step is bit for bit eager's on the CPU). Each op's cost is
    its time in a run of the step while planning (this thread's CPU time, the least of two runs;
    `REGAL_COST_MODEL=nominal` or `roofline` in the environment: the importer's roofline instead).
    With it, the step is also planned with the normalizations' outputs and their activations
    recomputed by a rewrite (`regal.torch.recompute`; BatchNorm updates its running statistics,
    so it may not simply run again), the rewrite's own extra compute counted against the same
    budget (`step.extra_fraction`: the plan's whole extra compute booked; a rewrite that alone
    costs more is not planned), and the variant of lower predicted peak is kept (`step.recomputed` says
    whether the backward reads rewritten values: its gradients then equal eager's to float
    tolerance, not bit for bit). `max_grad_norm`: clip the gradients' total 2-norm to it before the update, as
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
    settings = {"loss_fn": loss_fn, "budget": budget, "seed": seed, "recompute": _recompute_budget(recompute),
                "name": name,
                "order": "search"}
    plan = _plan_step(model, optimizer, kind, layout, inputs, settings)
    step = PlannedStep(model, optimizer, kind, layout, settings, _signature(inputs, model), plan,
                       tuple(_Spec(tuple(a.shape), a.dtype, a.device) for a in inputs))
    step.max_grad_norm = max_grad_norm
    return step


def _recompute_budget(recompute) -> float:
    """`planned_step`'s `recompute` as the search's budget (a float >= 0), or UnsupportedError."""
    from regal.recompute_search import check_recompute_budget
    if recompute is True:
        return RECOMPUTE_DEFAULT
    if recompute is False or recompute is None:
        return 0.0
    try:
        return check_recompute_budget(recompute)
    except ValueError:
        raise UnsupportedError(f"planned_step: recompute must be False, True or a finite number >= 0 (the extra "
                               f"compute allowed, a fraction of one step's), got {recompute!r}") from None


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
            plans, done = [], []
            for r in variants:
                progress.stage("tracing" + (" the step with recomputation" if r else ""))
                traced, lifted = _trace(model, optimizer, kind, layout, inputs, settings["loss_fn"], settings["name"],
                                        _recompute_norms if r else None)
                got = _plan(traced, settings, progress, plans[0][0].graph if r else None)
                if got is not None:   # (the rewrite alone costs more than the budget: not planned)
                    plans.append(got + (lifted,))
                    done.append(r)
            # recompute only where it lowers the peak
            traced, solution, predicted, extra, lifted = min(plans, key=lambda p: p[2])
            program = plan_program(traced, solution, realize_reuse=search)
            base = plans[0][0]
            own = own_solution(base)
            traced_peak = int(simulate(without_reuse(base.graph), own.placement, own.order, 1).peak_bytes)
    finally:
        progress.close()
    peaks = {("recompute" if r else "plain"): p[2] for r, p in zip(done, plans)}
    return _Plan(_shapes_only(traced), solution, program, predicted, traced_peak, traced is not base, peaks, lifted,
                 extra)


def _plan(traced: Traced, settings: dict, progress: _Progress, base=None):
    """`(calibrated traced step, its solution, its predicted peak, its extra compute)` for one
    traced step: regal's order, or PyTorch's traced order (`settings["order"]` "traced",
    `PlannedStep.in_order(None)`). The extra compute is a fraction of the step as traced. `base`:
    the calibrated graph of the step without the normalizations' rewrite, where `traced` is the
    rewritten step: the rewrite's own extra compute (`_rewrite_extra`) counts against the budget,
    the search gets what is left (None: the rewrite alone costs more than the budget)."""
    from regal.flagship import optimize
    from regal.recompute import total_cost
    from regal.simulate import simulate
    from regal.torch.plan import calibrate, measure_nodes, own_solution, without_reuse
    # The ops' scratch, measured on copies (the traced arguments hold the next step's numbers).
    device = next((a.device for a in traced.args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    progress.stage("measuring the ops' scratch")
    memory = measure_nodes(traced, device)
    timed = settings["recompute"] and settings["order"] == "search" and _timed_costs()
    if timed:
        progress.stage("timing the ops")
    traced = calibrate(traced, memory, _op_seconds(traced, device) if timed else None)
    if settings["order"] == "traced":
        solution = own_solution(traced)
        return traced, solution, int(simulate(without_reuse(traced.graph), solution.placement, solution.order,
                                              1).peak_bytes), 0.0
    budget, total = settings["recompute"], total_cost(traced.graph)
    rewrite, whole = 0.0, total
    if base is not None:
        whole = total_cost(base)
        rewrite = _rewrite_extra(base, traced.graph)
        if rewrite > budget * whole:
            return None
        budget = (budget * whole - rewrite) / total if total > 0 else 0.0
    what = "searching the order" + (" with recomputation" if settings["recompute"] else "")
    solution = optimize(traced.graph, devices=1, budget=settings["budget"], seed=settings["seed"],
                        callback=progress.searching(what), recompute_budget=budget)
    solution = _allocs_late(traced.graph, solution)
    searched = (solution.info.get("recompute") or {}).get("extra_cost", 0.0)
    return (traced, solution, int(simulate(traced.graph, solution.placement, solution.order, 1).peak_bytes),
            (rewrite + searched) / whole if whole > 0 else 0.0)


def _rewrite_extra(base, graph) -> float:
    """The normalizations' rewrite's own extra compute: the cost of the rewritten step's nodes
    that the step without it does not have, less the cost of those it no longer has (the two
    traces name their common nodes alike)."""
    from regal.recompute import op_costs
    a, b = op_costs(base)[0], op_costs(graph)[0]
    ids = set(base.ids)
    kept = set(graph.ids)
    return float(sum(b[v] for v, i in enumerate(graph.ids) if i not in ids)
                 - sum(a[v] for v, i in enumerate(base.ids) if i not in kept))


def _timed_costs() -> bool:
    """Whether a planned step books its ops' costs from a timed run (`_op_seconds`): yes unless
    REGAL_COST_MODEL is `nominal` (the nominal roofline: the same plan on every machine; the
    tests set it) or `roofline` (the importer's roofline of this device, `device_cost_model`)."""
    import os
    return os.environ.get("REGAL_COST_MODEL", "measured") not in ("nominal", "roofline")


class _Timer(torch.fx.Interpreter):
    """Runs a program node by node, keeping each call node's least time over the runs: this
    thread's CPU time on the CPU (what preemption under load adds is not counted), the wall
    time between two synchronizations on CUDA."""

    def __init__(self, gm, seconds: dict, cuda: bool):
        super().__init__(gm)
        self.seconds, self.cuda = seconds, cuda

    def run_node(self, n):
        if n.op != "call_function":
            return super().run_node(n)
        import time
        clock = time.perf_counter if self.cuda else time.thread_time
        if self.cuda:
            torch.cuda.synchronize()
        t = clock()
        out = super().run_node(n)
        if self.cuda:
            torch.cuda.synchronize()
        t = clock() - t
        self.seconds[n.name] = min(self.seconds.get(n.name, t), t)
        return out


def _op_seconds(traced: Traced, device, runs: int = 2) -> dict:
    """{FX call node: seconds} of the traced step's ops, each its least over `runs` runs of the
    program on copies of its arguments (after `measure_nodes`' run, which warmed the kernels up):
    the cost the search books for running it again. The importer's roofline (a CPU's matmul
    rate and copy bandwidth) books a 1x1 convolution over a 2x2 map at a tenth of what oneDNN
    takes (RegNetX-400MF's step: 86 us booked, 750 us measured), so the search spent its budget
    on ops that cost far more than it booked (+8.6 % booked, +19 % measured). A view or other
    folded node is not a node of the graph: its time is not booked."""
    seconds: dict = {}
    args = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in traced.args)
    timer = _Timer(traced.graph_module, seconds, torch.device(device).type == "cuda")
    with torch.no_grad():
        for _ in range(runs):
            timer.run(*args)
    return seconds


def _allocs_late(graph, solution):
    """`solution` with each alloc node (an output of a multi-output op, `split_outputs`) moved to
    right before the op that fills it. The program runs nothing for an alloc node: the buffer
    exists once the op runs. An alloc node has no inputs, so the search may list it anywhere
    before its op, and the simulation then books its bytes from there (RegNetY's step: 2.2 MB of
    weight gradients from the start of the forward, a peak predicted 4 % above the measured);
    listed right before its op, the prediction is what the program does, and no step's memory
    is higher (nothing reads an alloc node before its op). Unchanged where an alloc node's op
    does not come after it (then the solution is kept as found)."""
    from regal.solution import make_solution
    index = {i: k for k, i in enumerate(graph.ids)}
    owner = {v: index.get(graph.ids[v].rsplit(":", 1)[0]) for v, op in enumerate(graph.ops) if op == "alloc"}
    if not owner or None in owner.values():
        return solution
    order = [int(v) for v in solution.order]
    waiting: dict = {}   # op -> its alloc nodes listed since its last run
    out = []
    for v in order:
        if v in owner:
            waiting.setdefault(owner[v], []).append(v)
            continue
        out.extend(waiting.pop(v, ()))
        out.append(v)
    if waiting or out == order:
        return solution
    moved = make_solution(graph, solution.placement, np.asarray(out, dtype=np.int32), 1, solution.method,
                          solution.evaluations, solution.seconds, solution.info)
    return moved if moved.peak_bytes <= solution.peak_bytes else solution


def _algorithm(optimizer):
    return OPTIMIZERS[type(optimizer)]


def _recompute_norms(gm) -> None:
    from regal.torch.recompute import recompute_norms
    recompute_norms(gm)


def _check_guards(lifted: _Lifted, envs: list, clip: dict) -> None:
    """Refuse a call whose hyperparameters answer a comparison torch.optim made while tracing
    otherwise (`weight_decay != 0` with the weight decay set to 0 since): its program differs."""
    from regal.torch._optim import _CMP
    for k, expr, cmp, other, answer in lifted.guards:
        e = envs[k] if k >= 0 else clip
        if bool(_CMP[cmp](evaluate(expr, e), evaluate(other, e))) != answer:
            what = expr[1] if expr[0] == "var" else "a hyperparameter"
            raise UnsupportedError(f"planned step: the optimizer's {what} changed since the step was planned "
                                   f"(its update takes another branch now); plan it again")
