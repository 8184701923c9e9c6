"""The optimizer's update in a traced training step, from torch.optim's own single-tensor
functions (`torch.optim.sgd._single_tensor_sgd`, `adam._single_tensor_adam`, ...): the update is
not written again here, it is torch.optim's code, run under `make_fx` on one parameter at a time.

Its numbers (lr, momentum, betas, eps, weight decay, the step count's bias corrections) are
Python floats that torch.optim computes with Python arithmetic before it hands them to an ATen
op. While tracing, each hyperparameter is a `_Sym`: a float whose value is a stand-in no model
constant has, which records the arithmetic done on it (`1 - beta1 ** step`, `lr / bias_correction1`),
so that every number the traced program takes is known as an expression of the hyperparameters.
Those numbers become arguments of the program, computed at every call from `param_groups` and
`state` with the same Python operations in the same order: the planned step's numbers are
eager's bit for bit, and a learning-rate scheduler works. A comparison (`weight_decay != 0`,
`momentum > 0`) is answered with the true value and recorded as a guard: the program is valid
while every guard answers the same (else the step refuses: its structure changed).

Optimizers: SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, Adadelta (`OPTIMIZERS`), single-tensor
(`foreach=False`, `fused`, `capturable` and `differentiable` off). The state is torch.optim's
own layout (`state[p]["exp_avg"]`, a float32 `step` tensor, ...), made as torch.optim makes it.
"""

from __future__ import annotations

import operator
from typing import Callable, NamedTuple

import torch

__all__ = ["OPTIMIZERS", "UnsupportedError", "make_optimizer"]


class UnsupportedError(ValueError):
    """What a planned step cannot do, in one line."""


# ---- numbers that remember how they were made ----

_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv, "pow": operator.pow}
_CMP = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
        "ge": operator.ge}


def evaluate(expr: tuple, env: dict):
    """The value of a recorded expression, by the same Python operations torch.optim ran."""
    tag = expr[0]
    if tag == "var":
        return env[expr[1]]
    if tag == "const":
        return expr[1]
    if tag == "neg":
        return -evaluate(expr[1], env)
    return _OPS[tag](evaluate(expr[1], env), evaluate(expr[2], env))


def _uses(expr: tuple, name: str) -> bool:
    if expr[0] == "var":
        return expr[1] == name
    return expr[0] != "const" and any(_uses(e, name) for e in expr[1:] if isinstance(e, tuple))


class Recorder:
    """The numbers made while tracing: `table` {stand-in value: (parameter position, expression)},
    `guards` [(parameter position, expression, comparison, other expression, answer)]."""

    def __init__(self):
        self.table: dict[float, tuple] = {}
        self.true: dict[float, object] = {}   # stand-in value -> the number it stands for now
        self.guards: list[tuple] = []
        self.count = 0

    def var(self, k: int, name: str, true):
        return self.make(k, ("var", name), true)

    def make(self, k: int, expr: tuple, true) -> "_Sym":
        value = 0.123456789012345 + self.count * 2.0 ** -30   # no model constant is one of these
        self.count += 1
        s = _Sym(value)
        s.rec, s.k, s.expr, s.true = self, k, expr, true
        self.table[value] = (k, expr)
        self.true[value] = true
        return s


def _expr(x):
    if isinstance(x, _Sym):
        return x.expr, x.true
    if type(x) in (int, float, bool):
        return ("const", x), x
    return None, None


def _binary(name: str, reflected: bool):
    op = _OPS[name]

    def f(self, other):
        e, t = _expr(other)
        if e is None:
            return NotImplemented
        if reflected:
            return self.rec.make(self.k, (name, e, self.expr), op(t, self.true))
        return self.rec.make(self.k, (name, self.expr, e), op(self.true, t))
    return f


def _compare(name: str):
    op = _CMP[name]

    def f(self, other):
        e, t = _expr(other)
        if e is None:
            return NotImplemented
        answer = bool(op(self.true, t))
        self.rec.guards.append((self.k, self.expr, name, e, answer))
        return answer
    return f


class _Sym(float):
    """A number of the update while tracing: a stand-in value for the program, the expression
    that makes it from the hyperparameters, and its true value (which answers comparisons)."""
    __hash__ = float.__hash__

    def __neg__(self):
        return self.rec.make(self.k, ("neg", self.expr), -self.true)

    def __bool__(self):
        return self != 0

    def __float__(self):   # a number leaving the recorded arithmetic would be a stand-in: refuse
        raise UnsupportedError("planned_step: the optimizer converts a hyperparameter with float(); not supported")


for _n in _OPS:
    setattr(_Sym, f"__{'truediv' if _n == 'div' else _n}__", _binary(_n, False))
    setattr(_Sym, f"__r{'truediv' if _n == 'div' else _n}__", _binary(_n, True))
for _n in _CMP:
    setattr(_Sym, f"__{_n}__", _compare(_n))


class _StepIn:
    """A state's `step` while tracing: torch.optim adds one to it (`step_t += 1`); what it reads
    after is the count after this step, the variable `step` (the program never touches the tensor)."""

    def __init__(self, rec: Recorder, k: int, true: float):
        self.rec, self.k, self.true = rec, k, true

    def __add__(self, one):
        if one != 1:
            raise UnsupportedError("planned_step: the optimizer advances its step by other than 1")
        return self.rec.var(self.k, "step", self.true)

    __iadd__ = __add__


# ---- the optimizers ----

class Algorithm(NamedTuple):
    """One torch.optim class: what its single-tensor function takes and what state it keeps."""
    name: str
    numbers: tuple               # hyperparameters the update reads ("beta1"/"beta2" from "betas")
    flags: tuple                 # boolean options (the program's structure)
    state: Callable              # group -> the tensor state keys of a parameter, in torch.optim's order
    step: bool                   # keeps a `step` tensor
    call: Callable               # (p, g, state {key: tensor}, numbers {name: _Sym}, flags {name: bool}, step)
    first: dict                  # numbers as torch.optim's first step uses them (SGD: its clone of the gradient)


def _sgd(p, g, st, h, f, step):
    from torch.optim.sgd import _single_tensor_sgd
    _single_tensor_sgd([p], [g], [st.get("momentum_buffer")], None, None, weight_decay=h["weight_decay"],
                       momentum=h["momentum"], lr=h["lr"], dampening=h["dampening"], nesterov=f["nesterov"],
                       maximize=f["maximize"], has_sparse_grad=False)


def _adam(p, g, st, h, f, step):
    from torch.optim.adam import _single_tensor_adam
    _single_tensor_adam([p], [g], [st["exp_avg"]], [st["exp_avg_sq"]], [st["max_exp_avg_sq"]] if f["amsgrad"] else [],
                        [step], None, None, amsgrad=f["amsgrad"], has_complex=False, beta1=h["beta1"],
                        beta2=h["beta2"], lr=h["lr"], weight_decay=h["weight_decay"], eps=h["eps"],
                        maximize=f["maximize"], capturable=False, differentiable=False,
                        decoupled_weight_decay=f["decoupled_weight_decay"])


def _rmsprop(p, g, st, h, f, step):
    from torch.optim.rmsprop import _single_tensor_rmsprop
    _single_tensor_rmsprop([p], [g], [st["square_avg"]], [st.get("grad_avg")], [st.get("momentum_buffer")], [step],
                           lr=h["lr"], alpha=h["alpha"], eps=h["eps"], weight_decay=h["weight_decay"],
                           momentum=h["momentum"], centered=f["centered"], maximize=f["maximize"],
                           differentiable=False, capturable=False, has_complex=False)


def _adagrad(p, g, st, h, f, step):
    from torch.optim.adagrad import _single_tensor_adagrad
    _single_tensor_adagrad([p], [g], [st["sum"]], [step], None, None, lr=h["lr"], weight_decay=h["weight_decay"],
                           lr_decay=h["lr_decay"], eps=h["eps"], has_sparse_grad=False, maximize=f["maximize"],
                           differentiable=False, has_complex=False)


def _adamax(p, g, st, h, f, step):
    from torch.optim.adamax import _single_tensor_adamax
    _single_tensor_adamax([p], [g], [st["exp_avg"]], [st["exp_inf"]], [step], eps=h["eps"], beta1=h["beta1"],
                          beta2=h["beta2"], lr=h["lr"], weight_decay=h["weight_decay"], maximize=f["maximize"],
                          differentiable=False, capturable=False, has_complex=False)


def _adadelta(p, g, st, h, f, step):
    from torch.optim.adadelta import _single_tensor_adadelta
    _single_tensor_adadelta([p], [g], [st["square_avg"]], [st["acc_delta"]], [step], lr=h["lr"], rho=h["rho"],
                            eps=h["eps"], weight_decay=h["weight_decay"], maximize=f["maximize"],
                            differentiable=False, capturable=False, has_complex=False)


_ADAM = Algorithm("adam", ("lr", "beta1", "beta2", "eps", "weight_decay"),
                  ("amsgrad", "maximize", "decoupled_weight_decay"),
                  lambda g: ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if g["amsgrad"] else ()), True, _adam, {})

#: torch.optim class -> its algorithm (AdamW is Adam with decoupled weight decay in torch.optim too).
OPTIMIZERS = {
    torch.optim.SGD: Algorithm("sgd", ("lr", "momentum", "dampening", "weight_decay"), ("nesterov", "maximize"),
                               lambda g: ("momentum_buffer",) if g["momentum"] != 0 else (), False, _sgd,
                               {"dampening": 0.0}),
    torch.optim.Adam: _ADAM,
    torch.optim.AdamW: _ADAM,
    torch.optim.RMSprop: Algorithm("rmsprop", ("lr", "alpha", "eps", "weight_decay", "momentum"),
                                   ("centered", "maximize"),
                                   lambda g: ("square_avg",) + (("momentum_buffer",) if g["momentum"] > 0 else ())
                                   + (("grad_avg",) if g["centered"] else ()), True, _rmsprop, {}),
    torch.optim.Adagrad: Algorithm("adagrad", ("lr", "lr_decay", "weight_decay", "eps"), ("maximize",),
                                   lambda g: ("sum",), True, _adagrad, {}),
    torch.optim.Adamax: Algorithm("adamax", ("lr", "beta1", "beta2", "eps", "weight_decay"), ("maximize",),
                                  lambda g: ("exp_avg", "exp_inf"), True, _adamax, {}),
    torch.optim.Adadelta: Algorithm("adadelta", ("lr", "rho", "eps", "weight_decay"), ("maximize",),
                                    lambda g: ("square_avg", "acc_delta"), True, _adadelta, {}),
}

#: `regal torch --train NAME` and `regal.torch.from_module(..., optimizer=NAME)`: the optimizer
#: each name makes (lr 1e-3; SGD with momentum 0.9), on the module's trainable parameters.
NAMED = {"sgd": (torch.optim.SGD, {"lr": 1e-3, "momentum": 0.9}), "adam": (torch.optim.Adam, {"lr": 1e-3}),
         "adamw": (torch.optim.AdamW, {"lr": 1e-3}), "rmsprop": (torch.optim.RMSprop, {"lr": 1e-3}),
         "adagrad": (torch.optim.Adagrad, {"lr": 1e-3}), "adamax": (torch.optim.Adamax, {"lr": 1e-3}),
         "adadelta": (torch.optim.Adadelta, {"lr": 1e-3})}


def make_optimizer(name: str, params) -> "torch.optim.Optimizer":
    """The optimizer `NAMED[name]` on `params` (single-tensor: `foreach=False`)."""
    if name not in NAMED:
        raise ValueError(f"optimizer must be one of {', '.join(NAMED)}, got {name!r}")
    cls, kw = NAMED[name]
    return cls(params, **kw, foreach=False)


def algorithm(optimizer) -> Algorithm:
    algo = OPTIMIZERS.get(type(optimizer))
    if algo is None:
        names = ", ".join(c.__name__ for c in OPTIMIZERS)
        raise UnsupportedError(f"planned_step: optimizer {type(optimizer).__name__} is not supported ({names})")
    return algo


def group_numbers(algo: Algorithm, group: dict) -> dict:
    """A param group's hyperparameters as the single-tensor function takes them."""
    out = {}
    for name in algo.numbers:
        out[name] = group["betas"][int(name[-1]) - 1] if name in ("beta1", "beta2") else group[name]
    return out


def group_flags(algo: Algorithm, group: dict) -> dict:
    return {f: bool(group.get(f, False)) for f in algo.flags}


def new_state(algo: Algorithm, key: str, p: torch.Tensor, group: dict) -> torch.Tensor:
    """A state tensor as torch.optim makes it on a parameter's first step."""
    if key == "step":
        from torch.optim.optimizer import _get_scalar_dtype
        return torch.tensor(0.0, dtype=_get_scalar_dtype())
    if key == "sum":   # Adagrad makes it in its constructor; a state loaded without it
        return torch.full_like(p, group["initial_accumulator_value"], memory_format=torch.preserve_format)
    return torch.zeros_like(p, memory_format=torch.preserve_format)


def trace_update(rec: Recorder, algo: Algorithm, k: int, group: dict, p, g, state: dict, step_true: float) -> None:
    """torch.optim's single-tensor update of parameter `k` (position in the step's layout), run
    on (fake) tensors with `_Sym` numbers recorded in `rec`."""
    numbers = {n: rec.var(k, n, v) for n, v in group_numbers(algo, group).items()}
    step = _StepIn(rec, k, step_true) if algo.step else None
    algo.call(p, g, state, numbers, group_flags(algo, group), step)


def env(algo: Algorithm, group: dict, state: dict, first: bool) -> dict:
    """The variables of parameter's expressions at this call: its group's numbers, its `step`
    (already advanced, as torch.optim reads it) and, on its first step, `algo.first`."""
    out = group_numbers(algo, group)
    if first:
        out.update(algo.first)
    if algo.step:
        out["step"] = state["step"].item()
    return out


def step_free(expr: tuple) -> bool:
    return not _uses(expr, "step")
