"""XLA HLO text -> `Graph` (SPEC.md section 1).

Reads both pre-optimization HLO (`jax.jit(f).lower(...).compiler_ir('hlo').as_hlo_text()`) and
compiled, scheduled HLO (`lowered.compile().as_text()`). Only the ENTRY computation becomes
nodes; called computations (fusion bodies, while bodies, branches, reducers) are not expanded.

What each entry instruction becomes:

- `parameter`, `constant`: a resident node (no inputs; any control predecessors are dropped,
  since a resident tensor exists before execution starts).
- An alias-only instruction (`FOLDED_OPCODES`, plus any opcode ending in `-done`) produces no
  node: it is folded into the value *structure* of its operands, so the producer's bytes count
  once and stay live until the last real consumer. A structure is a real node index or a tuple
  of structures: `tuple(...)` builds one, `get-tuple-element(x), index=i` selects element i of
  a tuple structure and resolves to `x` itself when `x` is a real node (a while, a call, a
  multi-output fusion), every other folded opcode resolves to its operand 0. A consumer gets
  every leaf real node of its operands' structures as a data input, each listed once. The
  extra operands of `add-dependency` (a token) and the control predecessors of a folded
  instruction become control inputs of its real consumers. A folded ROOT makes no node: its
  leaves are the graph outputs, marked `output` (never freed under SPEC.md section 3, even
  when another instruction also consumes them: XLA keeps every returned value to the end).
- Everything else, unknown opcodes included, is one ordinary node. `op` is the opcode, except
  fusions, whose op is `fusion:<kind>` (e.g. `fusion:kLoop`), because the kind tells a loop
  fusion from a library call. `bytes` is `shape_bytes` of the result shape; for async starts
  whose result tuple repeats the operands (`all-gather-start`, `collective-permute-start`,
  `copy-start`, `async-start`, `send`, `recv`) the operands' bytes are subtracted, so aliased
  buffers are not counted twice.
- `control-predecessors={...}` become `control_inputs`, resolved through folding.
- `reuse` (SPEC.md section 3): the operands whose buffer XLA may give the node's output, so that
  regal's peak of XLA's schedule is XLA's liveness. XLA:CPU's heap simulator writes a value over
  an operand's buffer when that operand's live range ends there (SPEC.md checks that per
  schedule) and `CanShareOperandBufferWithUser` holds (`_reuse_candidates`): the same shape and
  layout; an elementwise opcode (`ELEMENTWISE_OPCODES`), a loop or input fusion whose parameter
  is only used elementwise inside (the called computation is read for this), an output fusion
  whose root adds the parameter to a dot or convolution, any other fusion whose parameter
  reaches the root elementwise. Never a copy's, a parameter's or constant's, an operand seen
  through a bitcast or get-tuple-element (no value of its own), or a live-out one (an output is
  never freed). A while, a dynamic-update-slice, a scatter, and a fusion whose root updates a
  parameter in place share their operand's buffer by construction (XLA inserts copies so that
  the operand dies there): they list it, and those buffers are shared with nothing else.

`cost` (seconds) is a rough roofline on the nominal device `COST_MODEL` (a feature for the
timed model and the policy, not ground truth): flops are `2*out*prod(lhs contracting dims)` for
`dot`, `2*out*kernel_elements/output_features` for `convolution`, and one per output element
for everything else; `cost = max(flops / peak_flops, (operand bytes + bytes) / bandwidth)`.
Loop trip counts and fusion bodies are not looked into.

`meta` records `source="hlo"`, `module`, `entry`, `scheduled`, `hlo_instructions` (entry
instruction count), `folded` (folded instruction count), `cost_model`, `outputs` (the ROOT's
leaf nodes: what the module returns, each marked `output`), and, for a scheduled
module, `xla_order`: the real nodes in XLA's schedule order (node order itself, since every
reference must point to an earlier instruction).

Errors are `HloParseError` with one-line messages `"{source}:{line}: {what}"`.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from regal._io import open_text
from regal.graph import Graph, GraphError

__all__ = ["COST_MODEL", "ELEMENTWISE_OPCODES", "FOLDED_OPCODES", "HloParseError", "load_hlo", "parse_hlo", "shape_bytes"]


class HloParseError(GraphError):
    """HLO text that cannot be imported; the message is `"{source}:{line}: {what}"`."""


#: Opcodes that only alias (part of) their operands; every `*-done` opcode is folded too (its
#: result is the buffer its `*-start` produced). `reshape`, `copy` and `transpose` stay real:
#: before layout assignment they may move data, and after it XLA turns free ones into bitcasts.
FOLDED_OPCODES = frozenset({
    "bitcast", "get-tuple-element", "tuple", "opt-barrier", "optimization-barrier",
    "add-dependency", "domain", "async-update",
})

# Async starts whose result tuple repeats their operand buffers (all-reduce-start's does not).
_ALIASING_STARTS = frozenset({"all-gather-start", "collective-permute-start", "copy-start",
                              "async-start", "send", "recv"})

#: The nominal device behind `cost` (SPEC.md section 4 uses cost only in the timed model).
COST_MODEL = {"peak_flops_per_s": 100e12, "bandwidth_bytes_per_s": 1e12,
              "rule": "max(flops/peak, (operand bytes + output bytes)/bandwidth); "
                      "dot 2*out*K, convolution 2*out*kernel/out_features, else 1 flop/element"}

# Bits per element. Sub-byte types pack: an array takes ceil(elements * bits / 8) bytes.
_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "f4e2m1fn": 4,
    "f6e2m3fn": 6, "f6e3m2fn": 6, "s8": 8, "u8": 8,
    "f8e5m2": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8,
    "f8e4m3": 8, "f8e3m4": 8, "f8e8m0fnu": 8,
    "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32,
    "s64": 64, "u64": 64, "f64": 64, "c64": 64, "c128": 128, "token": 0, "opaque": 0,
}


class _Syntax(Exception):
    """A parse failure without position; the caller adds source and line."""


class _Incomplete(_Syntax):
    """The text ended inside a bracket group (the instruction may continue on the next line)."""


_SPECIAL = re.compile(r'[()\[\]{}",]|/\*')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_BRACES = re.compile(r"\{[^{}]*\}")
_ARRAY = re.compile(r"([A-Za-z][A-Za-z0-9]*)\[([^\]]*)\]")
_SHAPE_REST = re.compile(r"(?:[\s(),]|\btoken\b|\bopaque\b)*")
_CLOSER = {"(": ")", "[": "]", "{": "}"}
_HEAD = re.compile(r'\s*(ROOT\s+)?(%?[^\s=,(){}\[\]"]+)\s*=\s*')
_ARRAY_START = re.compile(r"[A-Za-z][A-Za-z0-9]*\[|(?:token|opaque)\b")
_OPCODE = re.compile(r"\s+([A-Za-z][A-Za-z0-9_\-]*)\(")
_NEW_INSTR = re.compile(r'\s*(ROOT\s+)?%?[^\s=,(){}\[\]"]+\s*=\s*(?:\(|[A-Za-z][A-Za-z0-9]*\[)')
_INT_LIST = re.compile(r"-?\d+")


def _split(s: str, pos: int, closer: str | None) -> tuple[list[tuple[int, int]], int]:
    """Split `s[pos:]` at top-level commas up to `closer` (None: to the end of `s`).

    Nested (), [], {} must balance; quoted strings (with backslash escapes) and /* comments */
    are skipped whole. Returns the comma-separated spans and the index just after `closer`.
    """
    stack: list[str] = []
    spans = []
    piece = pos
    search = _SPECIAL.search
    while True:
        m = search(s, pos)
        if m is None:
            if closer is None and not stack:
                spans.append((piece, len(s)))
                return spans, len(s)
            raise _Incomplete(f"unbalanced brackets: missing '{stack[-1] if stack else closer}'")
        c, j = m.group(), m.start()
        if c == '"':
            sm = _STRING.match(s, j)
            if sm is None:
                raise _Incomplete("unterminated string")
            pos = sm.end()
        elif c == "/*":
            k = s.find("*/", j + 2)
            if k < 0:
                raise _Incomplete("unterminated comment")
            pos = k + 2
        elif c == ",":
            if not stack:
                spans.append((piece, j))
                piece = j + 1
            pos = j + 1
        elif c in "([{":
            stack.append(_CLOSER[c])
            pos = j + 1
        elif stack:
            if c != stack.pop():
                raise _Syntax(f"unbalanced brackets: unexpected '{c}'")
            pos = j + 1
        elif c == closer:
            spans.append((piece, j))
            return spans, j + 1
        else:
            raise _Syntax(f"unbalanced brackets: unexpected '{c}'")


@functools.lru_cache(maxsize=1 << 16)
def _shape_info(text: str) -> tuple[int, int, tuple | None]:
    """(bytes, elements, dims) of a shape; dims only for a single array, else None."""
    t = _COMMENT.sub("", text) if "/*" in text else text
    while "{" in t:  # layouts, tiling, memory spaces: irrelevant to the size
        t2 = _BRACES.sub("", t)
        if t2 == t:
            raise _Syntax(f"malformed shape '{text}'")
        t = t2
    nbytes = nelem = 0
    arrays = 0
    dims: tuple = ()
    for m in _ARRAY.finditer(t):
        etype = m.group(1)
        bits = _BITS.get(etype)
        if bits is None:
            raise _Syntax(f"unknown element type '{etype}'")
        dims = tuple(_dim(d, text) for d in m.group(2).split(",")) if m.group(2).strip() else ()
        n = math.prod(dims)
        nelem += n
        nbytes += (n * bits + 7) // 8
        arrays += 1
    rest = _ARRAY.sub("", t)
    if not _SHAPE_REST.fullmatch(rest) or not t.strip():
        raise _Syntax(f"malformed shape '{text}'")
    return nbytes, nelem, (dims if arrays == 1 and "(" not in t else None)


def _dim(d: str, text: str) -> int:
    d = d.strip()
    if d.startswith("<="):  # bounded dynamic dimension: size it at its bound
        d = d[2:].strip()
    if d == "?":  # unbounded dynamic dimension: size unknown, count one element
        return 1
    if not d.isdigit():
        raise _Syntax(f"bad dimension '{d}' in shape '{text}'")
    return int(d)


def shape_bytes(shape_text: str) -> int:
    """Bytes of an HLO shape such as `f32[8,128]{1,0}` or `(bf16[4], (s4[3], token[]))`.

    Tuples sum their elements; layouts, tiling and memory spaces are ignored; a bounded dynamic
    dimension `<=N` counts N; a scalar `f32[]` is one element; sub-byte types pack per array.
    """
    try:
        return _shape_info(shape_text)[0]
    except _Syntax as e:
        raise HloParseError(f"<shape>:1: {e}") from None


def _name(piece: str) -> str:
    """The instruction name of an operand (`%x`, `x`, or `f32[2]{0} %x`), without `%`."""
    if "/*" in piece:
        piece = _COMMENT.sub("", piece)
    piece = piece.strip()
    if not piece:
        return ""
    token = piece.rsplit(None, 1)[-1]
    return token[1:] if token.startswith("%") else token


def _names(s: str, spans: list[tuple[int, int]], what: str) -> list[str]:
    out = [_name(s[a:b]) for a, b in spans]
    if out == [""]:
        return []
    if "" in out:
        raise _Syntax(f"empty entry in the {what} list")
    return out


def _parse_instruction(s: str):
    """`[ROOT] name = shape opcode(operands), key=value, ...` -> its parts (or `_Syntax`)."""
    m = _HEAD.match(s)
    if m is None:
        raise _Syntax(f"expected '<name> = <shape> <opcode>(<operands>)', got '{s.strip()[:60]}'")
    name = m.group(2).lstrip("%")
    is_root = m.group(1) is not None
    pos = m.end()
    if s.startswith("(", pos):
        _, end = _split(s, pos + 1, ")")
    else:
        am = _ARRAY_START.match(s, pos)
        if am is None:
            raise _Syntax(f"expected a shape after '{name} =', got '{s[pos:pos + 30].strip()}'")
        end = am.end()
        if s[end - 1] == "[":
            _, end = _split(s, end, "]")
        if s.startswith("{", end):
            _, end = _split(s, end + 1, "}")
    shape = s[pos:end]
    om = _OPCODE.match(s, end)
    if om is None:
        raise _Syntax(f"expected an opcode and '(' after the shape of '{name}'")
    opcode = om.group(1)
    spans, end = _split(s, om.end(), ")")
    operand_text = s[om.end():end - 1]
    attrs: dict[str, str] = {}
    rest = s[end:]
    if rest.strip():
        stripped = rest.lstrip()
        if stripped[0] in ")]}":
            raise _Syntax(f"unbalanced brackets: unexpected '{stripped[0]}' after the operands of '{name}'")
        if not stripped.startswith(","):
            raise _Syntax(f"expected ',' after the operands of '{name}', got '{stripped[:30]}'")
        start = end + len(rest) - len(stripped) + 1
        pieces = _split(s, start, None)[0]
        if not s[pieces[-1][0]:].strip():  # hand-written HLO wraps lines after a comma
            raise _Incomplete(f"expected an attribute after the last ',' of '{name}'")
        for a, b in pieces:
            eq = s.find("=", a, b)
            if eq >= 0:
                attrs[s[a:eq].strip()] = s[eq + 1:b].strip()
    if opcode in ("constant", "parameter"):
        return name, shape, opcode, operand_text.strip(), attrs, is_root
    return name, shape, opcode, _names(s, spans, "operand"), attrs, is_root


def _leaves(struct, out: list, seen: set) -> None:
    if isinstance(struct, tuple):
        for x in struct:
            _leaves(x, out, seen)
    elif struct not in seen:
        seen.add(struct)
        out.append(struct)


def _flops(opcode: str, out_elems: int, operands: list[str], attrs: dict, info: dict) -> float:
    """Rough FLOP count; see the module docstring."""
    if opcode == "dot" and operands:
        lhs = info[operands[0]][2]
        k = 1
        if lhs is not None:
            for d in _INT_LIST.findall(attrs.get("lhs_contracting_dims", "")):
                if 0 <= int(d) < len(lhs):
                    k *= lhs[int(d)]
        return 2.0 * out_elems * k
    if opcode == "convolution" and len(operands) > 1:
        kernel = info[operands[1]][2]
        labels = attrs.get("dim_labels", "")
        klabels = labels.split("_", 1)[1].split("->")[0] if "_" in labels else ""
        if kernel and len(klabels) == len(kernel) and "o" in klabels:
            return 2.0 * out_elems * math.prod(kernel) / max(1, kernel[klabels.index("o")])
        if kernel:
            return 2.0 * out_elems * math.prod(kernel[:-1])  # assume the output feature dim is last
    return float(out_elems)


def parse_hlo(text: str, name: str | None = None, source: str = "<hlo>") -> Graph:
    """Import the ENTRY computation of an HLO module as a Graph (see the module docstring)."""
    lines = text.splitlines()
    module, scheduled, (entry_name, first, stop), computations = _scan_module(lines, source)
    entry = _Entry(bodies=_Bodies(lines, computations))
    for ins in _instructions(lines, first, stop, source):
        _add_instruction(entry, ins, source)
    if not entry.records:
        raise HloParseError(f"{source}:{first}: the ENTRY computation has no real instructions")
    return _to_graph(entry, module, entry_name, scheduled, name, source)


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


class _Instruction(NamedTuple):
    """One parsed instruction of the ENTRY computation."""
    name: str
    shape: str
    opcode: str
    operands: Any          # operand names (list[str]); the raw operand text for constant, parameter
    attrs: dict            # attribute name -> value text
    is_root: bool          # the computation's ROOT
    nbytes: int            # shape_bytes of `shape`
    nelem: int             # elements of `shape`
    dims: tuple | None     # dimensions of `shape` if it is a single array
    lineno: int            # 1-based line where the instruction starts


def _instructions(lines: list[str], first: int, stop: int, source: str):
    """Yield each `_Instruction` of `lines[first:stop]`, skipping blank and `//` comment lines.

    An instruction whose brackets are still open at the end of a line continues on the next
    line, unless that line starts a new instruction.
    """
    k = first
    while k < stop:
        s, lineno = lines[k], k + 1
        k += 1
        st = s.strip()
        if not st or st.startswith("//"):
            continue
        while True:
            try:
                parts = _parse_instruction(s)
                shape_info = _shape_info(parts[1])
                break
            except _Incomplete as e:  # an instruction may continue on the next line
                if k < stop and not _NEW_INSTR.match(lines[k]):
                    s += "\n" + lines[k]
                    k += 1
                    continue
                raise HloParseError(f"{source}:{lineno}: {e}") from None
            except _Syntax as e:
                raise HloParseError(f"{source}:{lineno}: {e}") from None
        yield _Instruction(*parts, *shape_info, lineno)


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


# ---------------------------------------------------------------------------- in-place reuse
#: XLA's elementwise opcodes (`HloInstruction::IsOpElementwise`): the output element i depends
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


def _brace_names(value: str) -> list[str]:
    """The instruction names in a `{%a, %b}` attribute value."""
    if not (value.startswith("{") and value.endswith("}")):
        raise _Syntax(f"expected '{{...}}', got '{value[:40]}'")
    spans, end = _split(value, 1, "}")
    if end != len(value):
        raise _Syntax(f"unexpected text after '}}' in '{value[:40]}'")
    return _names(value, spans, "control predecessor")


def load_hlo(path: str | os.PathLike, name: str | None = None) -> Graph:
    """Read an HLO text file (`.gz` allowed); the graph's name defaults to the HloModule name, or
    to the file's name when the module's is generic (`jit__lambda`, ...)."""
    source = os.fspath(path)
    try:
        with open_text(source, "rt") as f:
            text = f.read()
    except FileNotFoundError:
        raise HloParseError(f"{source}:0: no such file") from None
    except UnicodeDecodeError as e:
        raise HloParseError(f"{source}:0: not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r})") from None
    except (OSError, EOFError) as e:  # EOFError: a cut-off .gz
        raise HloParseError(f"{source}:0: cannot read ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if name is None:
        name = _name_from_file(text, source)
    return parse_hlo(text, name=name, source=source)


#: Module names that say nothing about the model: what jax.jit of a lambda or a plain function
#: lowers to. Such a module takes its file's name instead.
_GENERIC_MODULE = re.compile(r"^(jit_)?_?(lambda|fn|f|fun|func|step|main|wrapped)_?\d*(\.\d+)?$")


def _name_from_file(text: str, source: str) -> str | None:
    """The file's name (without .hlo[.txt][.gz]) when the HloModule's name is generic, else None."""
    m = re.match(r"\s*HloModule\s+([^\s,]+)", text)
    if m is None or not _GENERIC_MODULE.match(m.group(1)):
        return None
    base = os.path.basename(source)
    for suffix in (".gz", ".txt", ".hlo"):
        base = base[:-len(suffix)] if base.endswith(suffix) else base
    return base or None
