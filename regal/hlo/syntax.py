"""HLO text, lexically: the shape and instruction syntax of one line, element sizes, and the
constants the importer shares (`FOLDED_OPCODES`, `COST_MODEL`); see `regal.hlo`."""

from __future__ import annotations

import functools
import math
import re
from typing import Any, NamedTuple

from regal.graph import GraphError


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


def _brace_names(value: str) -> list[str]:
    """The instruction names in a `{%a, %b}` attribute value."""
    if not (value.startswith("{") and value.endswith("}")):
        raise _Syntax(f"expected '{{...}}', got '{value[:40]}'")
    spans, end = _split(value, 1, "}")
    if end != len(value):
        raise _Syntax(f"unexpected text after '}}' in '{value[:40]}'")
    return _names(value, spans, "control predecessor")
