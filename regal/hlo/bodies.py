"""The called computations of an HLO module (fusion bodies, ...), read only to decide which
operand buffers an instruction may take over (`reuse`, SPEC.md section 3); see `regal.hlo`."""

from __future__ import annotations

import re
from typing import NamedTuple

from regal.hlo.syntax import HloParseError, _COMMENT, _instructions


#: only on element i of each operand, so the output may be written over an operand.
ELEMENTWISE_OPCODES = frozenset({
    "abs", "round-nearest-afz", "round-nearest-even", "ceil", "count-leading-zeros", "convert",
    "bitcast-convert", "copy", "cosine", "erf", "exponential", "exponential-minus-one", "floor", "imag",
    "is-finite", "log", "log-plus-one", "not", "negate", "popcnt", "real", "reduce-precision", "rsqrt",
    "logistic", "sign", "sine", "sqrt", "cbrt", "tan", "tanh", "add", "atan2", "compare", "complex",
    "divide", "maximum", "minimum", "multiply", "power", "remainder", "subtract", "and", "or", "xor",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "stochastic-convert", "select", "clamp",
})

_ARRAY_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?")


def _array_shape(shape: str) -> str | None:
    """The shape text of a single array (element type, dims and layout, no spaces), else None."""
    t = _COMMENT.sub("", shape).replace(" ", "") if "/*" in shape else shape.replace(" ", "")
    return t if _ARRAY_SHAPE.fullmatch(t) else None


def _leaf_shapes(shape: str) -> set[str]:
    """The array shapes of a (possibly tuple) shape's leaves."""
    t = _COMMENT.sub("", shape).replace(" ", "") if "/*" in shape else shape.replace(" ", "")
    return set(_ARRAY_SHAPE.findall(t))


class _Body(NamedTuple):
    """A called computation: its instructions, parameters by number, ROOT and users."""
    ops: dict       # name -> (opcode, operand names)
    params: dict    # parameter number -> name
    root: str
    users: dict     # name -> [(user name, operand index)]


class _Bodies:
    """The module's non-entry computations, each parsed when first asked for (None if it cannot be)."""

    def __init__(self, lines: list[str], computations: dict):
        self.lines, self.computations, self.parsed = lines, computations, {}

    def get(self, name: str | None) -> _Body | None:
        if name is None or name not in self.computations:
            return None
        if name not in self.parsed:
            self.parsed[name] = self._parse(*self.computations[name])
        return self.parsed[name]

    def _parse(self, first: int, stop: int) -> _Body | None:
        ops, params, users, root = {}, {}, {}, None
        try:
            for ins in _instructions(self.lines, first, stop, "<body>"):
                operands = [] if ins.opcode in ("constant", "parameter") else ins.operands
                ops[ins.name] = (ins.opcode, operands)
                if ins.opcode == "parameter" and ins.operands.isdigit():
                    params[int(ins.operands)] = ins.name
                for j, o in enumerate(operands):
                    users.setdefault(o, []).append((ins.name, j))
                if ins.is_root:
                    root = ins.name
        except HloParseError:  # a body is only read for reuse; one that does not parse gives none
            return None
        return None if root is None else _Body(ops, params, root, users)


def _fusion_can_share(body: _Body | None, kind: str, i: int) -> bool:
    """Fusion rules: in-place roots (dynamic-update-slice, scatter) over a parameter; loop and
    input fusions whose parameter's every transitive use is elementwise (or a tuple); an output
    fusion whose ROOT adds the parameter to a dot or convolution; any other fusion when the
    parameter reaches the ROOT through elementwise ops only."""
    if body is None or i not in body.params:
        return False
    p = body.params[i]
    if p in _in_place_parameters(body):
        return True
    if kind in ("kLoop", "kInput"):
        return _uses_elementwise(body, p, allow_tuple=True)
    if kind == "kOutput":
        opcode, operands = body.ops[body.root]
        if opcode != "add" or len(operands) != 2:
            return False
        matched = [j for j, o in enumerate(operands) if body.ops.get(o, ("",))[0] in ("dot", "convolution")]
        if not matched:
            return False
        return body.users.get(p, []) == [(body.root, 1 - matched[0])]
    return _uses_elementwise(body, p, allow_tuple=False)


def _in_place_parameters(body: _Body) -> set[str]:
    """Parameters that an in-place ROOT (or ROOT tuple element) updates: operand 0 of a
    dynamic-update-slice or scatter, through a bitcast."""
    opcode, operands = body.ops[body.root]
    sources = operands if opcode == "tuple" else [body.root]
    found = set()
    for src in sources:
        op, ops = body.ops.get(src, ("", []))
        if op in ("dynamic-update-slice", "scatter") and ops:
            x = ops[0]
            if body.ops.get(x, ("", []))[0] == "bitcast":
                x = body.ops[x][1][0]
            if body.ops.get(x, ("",))[0] == "parameter":
                found.add(x)
    return found


def _uses_elementwise(body: _Body, p: str, allow_tuple: bool) -> bool:
    """Every transitive use of `p` is elementwise on it (operand 0 of a dynamic-update-slice
    counts), or a tuple when `allow_tuple`."""
    stack, visited = [p], {p}
    while stack:
        cur = stack.pop()
        for user, j in body.users.get(cur, []):
            op = body.ops[user][0]
            if not (op in ELEMENTWISE_OPCODES or (op == "dynamic-update-slice" and j == 0)
                    or (allow_tuple and op == "tuple")):
                return False
            if user not in visited:
                visited.add(user)
                stack.append(user)
    return True
