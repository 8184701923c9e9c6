"""The ENTRY computation of an HLO module -> node records -> `Graph`: folding, residents,
control inputs and the `reuse` field; see `regal.hlo`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from regal.graph import Graph
from regal.hlo.bodies import (ELEMENTWISE_OPCODES, _array_shape, _Bodies, _fusion_can_share, _in_place_parameters,
                               _leaf_shapes)
from regal.hlo.syntax import (_ALIASING_STARTS, COST_MODEL, FOLDED_OPCODES, HloParseError, _brace_names, _flops,
                              _Instruction, _leaves, _Syntax)


def _scan_module(lines: list[str], source: str) -> tuple[str | None, bool, tuple[str, int, int], dict]:
    """(module name, is_scheduled, (entry name, first body line, closing line), computations).

    Lines are 0-based indices into `lines`; the ENTRY body is `lines[first:stop]`; computations
    maps the name of every other computation to its (first body line, closing line).
    """
    module, scheduled, entry = None, False, None
    computations: dict[str, tuple[int, int]] = {}
    i = 0
    while i < len(lines):
        st = lines[i].strip()
        if st.startswith("HloModule") and module is None:
            while st.endswith(",") and i + 1 < len(lines):  # a header wrapped after a comma
                i += 1
                st += " " + lines[i].strip()
            hm = re.match(r"HloModule\s+([^\s,]+)", st)
            if hm is None:
                raise HloParseError(f"{source}:{i + 1}: HloModule header without a module name")
            module = hm.group(1)
            scheduled = re.search(r"\bis_scheduled=true\b", st) is not None
        elif st.endswith("{") and not st.startswith("//"):  # a computation header
            j = i + 1
            while j < len(lines) and lines[j].strip() != "}":
                j += 1
            if j == len(lines):
                raise HloParseError(f"{source}:{i + 1}: computation has no closing '}}'")
            if st.startswith("ENTRY"):
                if entry is not None:
                    raise HloParseError(f"{source}:{i + 1}: a second ENTRY computation")
                em = re.match(r"ENTRY\s+%?([^\s(){}]+)", st)
                entry = (em.group(1) if em else "entry", i + 1, j)
            else:
                cm = re.match(r"%?([^\s(){}]+)", st)
                if cm:
                    computations.setdefault(cm.group(1), (i + 1, j))
            i = j
        i += 1
    if entry is None:
        raise HloParseError(f"{source}:{max(1, len(lines))}: no ENTRY computation")
    return module, scheduled, entry, computations


@dataclass
class _Entry:
    """The ENTRY computation imported so far: node records and how instruction names resolve."""
    records: list = field(default_factory=list)   # node records; inputs as node indices until _to_graph
    struct: dict = field(default_factory=dict)    # instruction name -> real node index or tuple of structures
    pending: dict = field(default_factory=dict)   # folded instruction -> control inputs its consumers inherit
    info: dict = field(default_factory=dict)      # instruction name -> (bytes, elements, dims or None)
    num_instructions: int = 0
    num_folded: int = 0
    bodies: "_Bodies | None" = None               # the called computations, parsed when first needed
    shapes: dict = field(default_factory=dict)    # instruction name -> array shape (type, dims, layout) or None
    opcodes: dict = field(default_factory=dict)   # instruction name -> opcode
    reuse: dict = field(default_factory=dict)     # real node index -> operand names it may take over
    must: set = field(default_factory=set)        # nodes that share their operands' buffer (while, in-place ops)
    aliased: set = field(default_factory=set)     # those and the operands they share: buffers with several values
    root: str | None = None                       # the ROOT instruction


def _add_instruction(entry: _Entry, ins: _Instruction, source: str) -> None:
    """Record `ins`: a resident node, a folded alias, or a real node (see the module docstring)."""
    where = f"{source}:{ins.lineno}"
    entry.num_instructions += 1
    if ins.name in entry.struct:
        raise HloParseError(f"{where}: instruction '{ins.name}' is defined twice")
    entry.info[ins.name] = (ins.nbytes, ins.nelem, ins.dims)
    entry.shapes[ins.name] = _array_shape(ins.shape)
    entry.opcodes[ins.name] = ins.opcode
    if ins.is_root:
        entry.root = ins.name
    if ins.opcode in ("constant", "parameter"):
        _add_resident(entry, ins, where)
        return
    for o in ins.operands:
        if o not in entry.struct:
            raise HloParseError(f"{where}: operand '{o}' of '{ins.name}' is not defined")
    ctrl, cseen = _control_inputs(entry, ins, where)
    if ins.opcode in FOLDED_OPCODES or ins.opcode.endswith("-done"):
        _fold(entry, ins, ctrl, cseen, where)
    else:
        _add_real(entry, ins, ctrl)


def _add_resident(entry: _Entry, ins: _Instruction, where: str) -> None:
    """A parameter or constant: a resident node without inputs."""
    if ins.opcode == "parameter" and not ins.operands.isdigit():
        raise HloParseError(f"{where}: parameter '{ins.name}' takes an index, "
                            f"not operands: '{ins.operands[:40]}'")
    entry.struct[ins.name] = len(entry.records)
    entry.records.append({"id": ins.name, "op": ins.opcode, "bytes": ins.nbytes, "resident": True})


def _control_inputs(entry: _Entry, ins: _Instruction, where: str) -> tuple[list, set]:
    """Real nodes `ins` must follow: its control predecessors (resolved through folding) and the
    control inputs its operands' folded instructions pass on. Returns (nodes, the same as a set)."""
    ctrl: list = []
    cseen: set = set()
    try:
        attrs = ins.attrs
        preds = _brace_names(attrs["control-predecessors"]) if "control-predecessors" in attrs else []
    except _Syntax as e:
        raise HloParseError(f"{where}: control-predecessors of '{ins.name}': {e}") from None
    for c in preds:
        if c == ins.name:
            continue
        if c not in entry.struct:
            raise HloParseError(f"{where}: control predecessor '{c}' of '{ins.name}' is not defined")
        _leaves((entry.struct[c], entry.pending.get(c, ())), ctrl, cseen)
    for o in ins.operands:
        _leaves(entry.pending.get(o, ()), ctrl, cseen)
    return ctrl, cseen


def _fold(entry: _Entry, ins: _Instruction, ctrl: list, cseen: set, where: str) -> None:
    """An alias-only instruction: no node, its name resolves to its operands' structure."""
    struct, operands = entry.struct, ins.operands
    entry.num_folded += 1
    if ins.opcode == "tuple":
        struct[ins.name] = tuple(struct[o] for o in operands)
    elif not operands:
        raise HloParseError(f"{where}: {ins.opcode} '{ins.name}' has no operand")
    elif ins.opcode == "get-tuple-element":
        idx = ins.attrs.get("index", "")
        if not idx.isdigit():
            raise HloParseError(f"{where}: get-tuple-element '{ins.name}' has no index")
        base = struct[operands[0]]
        if isinstance(base, tuple):
            if int(idx) >= len(base):
                raise HloParseError(f"{where}: index {idx} is out of range for "
                                    f"the {len(base)}-tuple '{operands[0]}'")
            base = base[int(idx)]
        struct[ins.name] = base
    else:
        struct[ins.name] = struct[operands[0]]
        for o in operands[1:]:  # add-dependency's token: ordering only
            _leaves(struct[o], ctrl, cseen)
    if ctrl:
        entry.pending[ins.name] = tuple(ctrl)


def _add_real(entry: _Entry, ins: _Instruction, ctrl: list) -> None:
    """An ordinary node: inputs are the leaves of its operands, cost the roofline of COST_MODEL."""
    operands, info = ins.operands, entry.info
    inputs: list = []
    seen: set = set()
    for o in operands:
        _leaves(entry.struct[o], inputs, seen)
    nbytes = ins.nbytes
    in_bytes = sum(info[o][0] for o in dict.fromkeys(operands))
    if ins.opcode in _ALIASING_STARTS and ins.shape.lstrip().startswith("("):
        nbytes = max(0, nbytes - in_bytes)  # the result tuple repeats the operand buffers
    flops = _flops(ins.opcode, ins.nelem, operands, ins.attrs, info)
    cost = max(flops / COST_MODEL["peak_flops_per_s"],
               (in_bytes + nbytes) / COST_MODEL["bandwidth_bytes_per_s"])
    op = f"fusion:{ins.attrs['kind']}" if ins.opcode == "fusion" and "kind" in ins.attrs else ins.opcode
    v = len(entry.records)
    entry.struct[ins.name] = v
    entry.records.append({"id": ins.name, "op": op, "bytes": nbytes, "inputs": inputs,
                          "control_inputs": ctrl, "cost": cost})
    must = _must_alias(entry, ins, inputs)
    if must is not None:  # one buffer with (some of) its operands: XLA's alias analysis merges them
        entry.must.add(v)
        entry.aliased.add(v)
        entry.aliased.update(must)
        entry.reuse[v] = [entry.records[u]["id"] for u in must]
    else:
        candidates = _reuse_candidates(entry, ins)
        if candidates:
            entry.reuse[v] = candidates


def _to_graph(entry: _Entry, module: str | None, entry_name: str, scheduled: bool, name: str | None,
              source: str) -> Graph:
    """The Graph of the imported records, with node ids for inputs and the `meta` of the docstring."""
    records = entry.records
    ids = [r["id"] for r in records]
    for r in records:
        if "inputs" in r:
            r["inputs"] = [ids[u] for u in r["inputs"]]
            r["control_inputs"] = [ids[u] for u in r["control_inputs"]]
    outputs = _add_reuse(entry)
    meta: dict[str, Any] = {"source": "hlo", "module": module, "entry": entry_name,
                            "scheduled": scheduled, "hlo_instructions": entry.num_instructions,
                            "folded": entry.num_folded, "cost_model": dict(COST_MODEL)}
    meta["outputs"] = [ids[v] for v in outputs]
    for v in outputs:  # returned: XLA keeps the value to the end, consumed inside or not
        if not records[v].get("resident"):
            records[v]["output"] = True
    if scheduled:
        meta["xla_order"] = ids
    return Graph.from_records(records, name=name or module or entry_name, meta=meta, source=source)


def _must_alias(entry: _Entry, ins: _Instruction, inputs: list) -> list | None:
    """The operands whose buffer `ins` must share (HloAliasAnalysis puts them in one buffer), or
    None: a while shares its init operand's leaves; an in-place op (dynamic-update-slice,
    scatter, a fusion whose ROOT is one over a parameter) its updated operand. XLA's copy
    insertion makes every such operand die here; parameters and constants get a copy first."""
    if ins.opcode == "while":
        return [u for u in inputs if not entry.records[u].get("resident")]
    if ins.opcode in ("dynamic-update-slice", "scatter"):
        index = 0
    elif ins.opcode == "fusion":
        body = entry.bodies.get(ins.attrs.get("calls", "").lstrip("%"))
        params = _in_place_parameters(body) if body is not None else set()
        numbers = sorted(i for i, p in body.params.items() if p in params) if params else []
        if not numbers:
            return None
        index = numbers[0]
    else:
        return None
    if index >= len(ins.operands):
        return None
    u = entry.struct.get(ins.operands[index])
    if not isinstance(u, int) or entry.records[u].get("resident"):
        return []
    return [u]


def _reuse_candidates(entry: _Entry, ins: _Instruction) -> list[str]:
    """The operands whose buffer XLA may give `ins`'s output, in operand order.

    XLA's heap simulator (`HeapSimulator::RunComputation`) lets a value take over an operand's
    buffer when that operand's live range ends at this instruction (SPEC.md section 3 checks that
    per schedule), the user is not a copy, it uses the operand's defining instruction directly
    (not through a bitcast or get-tuple-element, which define no value of their own), neither
    buffer is aliased (a while's), and `HloDataflowAnalysis::CanShareOperandBufferWithUser`
    holds: same shape and layout, and the op writes element i of its output from element i of
    that operand only (`_can_share`). Parameters and constants are never taken over.
    """
    if ins.opcode in ("copy", "while", "call", "conditional") or ins.opcode.endswith("-start"):
        return []
    out = _leaf_shapes(ins.shape)
    if not out:
        return []
    found: list[str] = []
    seen: set = set()
    for i, o in enumerate(ins.operands):
        if o in seen:
            continue  # XLA checks an operand at its first index
        seen.add(o)
        u = entry.struct.get(o)
        if not isinstance(u, int) or entry.records[u]["id"] != o or entry.records[u].get("resident"):
            continue
        if entry.shapes.get(o) not in out or entry.opcodes.get(o) in ("while", "call", "conditional"):
            continue
        if _can_share(entry, ins, i, o):
            found.append(o)
    return found


def _can_share(entry: _Entry, ins: _Instruction, i: int, operand: str) -> bool:
    """`CanShareOperandBufferWithUser` for operand number i of `ins`, shapes already equal."""
    op = ins.opcode
    if op == "fusion":
        return _fusion_can_share(entry.bodies.get(ins.attrs.get("calls", "").lstrip("%")),
                                 ins.attrs.get("kind", ""), i)
    if op in ("dynamic-update-slice", "scatter"):
        return i == 0 and ins.operands.count(operand) == 1
    if op == "custom-call":
        pairs = ins.attrs.get("output_to_operand_aliasing", "")
        return str(i) in re.findall(r":\s*\(\s*(\d+)", pairs)
    return op in ELEMENTWISE_OPCODES


def _add_reuse(entry: _Entry) -> list:
    """Write each node's `reuse` field: its candidates, except a live-out candidate (a graph
    output's buffer is never freed) and, for a node that shares no buffer by must-alias, a
    candidate that does (XLA never shares a buffer holding several values with another one).
    Returns the live-out nodes (the ROOT's leaves), in order."""
    records = entry.records
    out: list = []
    if entry.root is not None and entry.root in entry.struct:
        _leaves(entry.struct[entry.root], out, set())
    live_out = set(out)
    index = {r["id"]: i for i, r in enumerate(records)}
    for v, names in entry.reuse.items():
        if v in entry.aliased and v not in entry.must:
            continue
        must = v in entry.must  # a must-alias node keeps exactly the operands it shares
        keep = [u for u in names if index[u] not in live_out and (must or index[u] not in entry.aliased)]
        if keep:
            records[v]["reuse"] = keep
    return out
