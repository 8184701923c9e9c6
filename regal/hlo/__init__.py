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

The package: `syntax` reads one instruction (shapes, operands, attributes; element sizes),
`entry` turns the ENTRY computation into node records (folding, residents, control inputs,
`reuse`), `bodies` reads the called computations that `reuse` looks into.
"""

from __future__ import annotations

import os
import re

from regal._io import open_text
from regal.graph import Graph
from regal.hlo.bodies import ELEMENTWISE_OPCODES, _Bodies
from regal.hlo.entry import _add_instruction, _Entry, _scan_module, _to_graph
from regal.hlo.syntax import COST_MODEL, FOLDED_OPCODES, HloParseError, _instructions, shape_bytes

__all__ = ["COST_MODEL", "ELEMENTWISE_OPCODES", "FOLDED_OPCODES", "HloParseError", "load_hlo", "parse_hlo", "shape_bytes"]


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
