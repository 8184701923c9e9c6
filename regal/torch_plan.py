"""Plans that run: a regal solution as a PyTorch program, executed and measured by PyTorch.

    traced = regal.torch.trace(model, (x,), training=True, optimizer="adam", reuse=False)
    sol = regal.optimize(traced.graph, devices=1)
    program = regal.torch_plan.plan_program(traced, sol)       # a torch.fx.GraphModule
    result = regal.torch_plan.run_plan(traced, sol)              # measured peak, outputs checked

**The program.** `plan_program` copies the traced FX program's nodes into a new FX graph in the
solution's order: each regal node is its FX call node; the FX nodes regal folds (views,
`getitem`, ops that make no tensor) are placed right before the first node that needs them,
so none of them keeps a tensor alive longer than regal's model does. FX's code generator
drops each value after its last use (`x = None`), which is SPEC.md section 3's "freed after
its last consumer" in the program's own terms. A tensor's bytes are then what eager PyTorch
allocates for it, so the graph to optimize for such a program is imported with
`reuse=False` (eager writes no output over an input) unless the plan realizes take-overs
(`realize_reuse`, below).

**Take-overs made real** (`realize_reuse=True`): where SPEC.md section 3 lets node `v` take
over input `u` in this order (the rule of `taken_over`), the program calls `v`'s ATen op with
`out=` set to `u`'s tensor (`aten.add.out(a, b, out=a)`), so the output is written over the
input's buffer, as the model books it. The importer lists an input in `reuse` only for
elementwise ops over an input of the output's shape and dtype, for which `out=` aliasing
the input is exact.

**Measured.** `measure_peak` runs a program under PyTorch's profiler with memory events on
(the CPU allocator reports every allocation and free to it) and returns the bytes of its
arguments (the resident tensors: parameters, buffers, optimizer state, inputs) plus the
highest running sum of the events; on CUDA it reads `torch.cuda.max_memory_allocated` and
`max_memory_reserved` around the run instead. Several devices: `regal.torch_dist`.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
import torch.fx

from regal.graph import Graph
from regal.simulate import simulate
from regal.solution import Solution
from regal.torch import Traced

__all__ = ["PlanRun", "Measured", "measure_peak", "own_order", "plan_program", "run_plan", "taken_over",
           "outputs_equal"]


class Measured(NamedTuple):
    """One run of a program: its peak as PyTorch's allocator saw it, and what it returned."""
    peak_bytes: int              # resident arguments + the allocator's highest live bytes
    reserved_bytes: int          # CUDA: max_memory_reserved; CPU: equal to peak_bytes
    outputs: Any                 # the program's return value
    args: tuple                  # the arguments after the run (a training step updates them)


class PlanRun(NamedTuple):
    """`run_plan`'s answer, lists per device (one entry for d = 1)."""
    predicted_peak_bytes: list
    measured_peak_bytes: list
    reserved_bytes: list
    outputs_match: bool


def _call_nodes(gm: torch.fx.GraphModule) -> dict[str, torch.fx.Node]:
    return {n.name: n for n in gm.graph.nodes if n.op == "call_function"}


def taken_over(graph: Graph, order: Sequence[int]) -> dict[int, list[int]]:
    """The inputs each node takes over (SPEC.md section 3, step 2) when `order` runs on one
    device: `{node: [inputs whose buffer it writes its output into]}`."""
    last = np.full(graph.num_nodes, -1, dtype=np.int64)
    pos = np.empty(graph.num_nodes, dtype=np.int64)
    pos[np.asarray(order)] = np.arange(len(order))
    kept = graph.kept
    for v in range(graph.num_nodes):
        for u in graph.inputs(v):
            last[u] = max(last[u], pos[v])
    out: dict[int, list[int]] = {}
    for v in order:
        taken, mine = 0, []
        for u in graph.reuse(v):
            if graph.resident[u] or kept[u] or last[u] != pos[v]:
                continue
            if taken + int(graph.bytes[u]) <= int(graph.bytes[v]):
                taken += int(graph.bytes[u])
                mine.append(int(u))
        if mine:
            out[int(v)] = mine
    return out


def _out_variant(target):
    """`aten.<op>.out` for an ATen overload, or None."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    packet = getattr(torch.ops.aten, target._opname, None)
    out = getattr(packet, "out", None) if packet is not None else None
    if out is None:
        return None
    names = [a.name for a in out._schema.arguments if a.is_out]
    return out if names == ["out"] else None


def plan_program(traced: Traced, solution: Solution, *, realize_reuse: bool = False,
                 nodes: Sequence[int] | None = None) -> torch.fx.GraphModule:
    """The traced program with its ops in `solution`'s order (see the module docstring).

    `nodes`: run only these regal nodes (a device's share; default every node), in the order's
    order. `realize_reuse`: write each taken-over input's buffer with the op's `out=` variant.
    """
    graph, gm = traced.graph, traced.graph_module
    calls = _call_nodes(gm)
    keep = None if nodes is None else set(int(v) for v in nodes)
    order = [int(v) for v in solution.order if keep is None or int(v) in keep]
    taken = taken_over(graph, solution.order) if realize_reuse else {}
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            env[n] = new.node_copy(n, lambda a: env[a])

    def emit(n: torch.fx.Node) -> torch.fx.Node:
        stack = [n]
        while stack:
            m = stack[-1]
            if m in env:
                stack.pop()
                continue
            todo = [a for a in m.all_input_nodes if a not in env]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            env[m] = new.node_copy(m, lambda a: env[a])
        return env[n]

    ids = graph.ids
    for v in order:
        n = calls.get(ids[v])
        if n is None:
            continue
        if v in taken:
            _emit_taken(new, n, [calls.get(ids[u]) for u in taken[v]], env, emit)
        else:
            emit(n)
    if keep is None:
        for n in gm.graph.nodes:   # folded nodes nothing reads (dead views) come last
            if n.op == "call_function":
                emit(n)
        out = next(n for n in gm.graph.nodes if n.op == "output")
        new.node_copy(out, lambda a: emit(a))
    else:
        new.output(None)
    new.eliminate_dead_code = lambda *a, **k: None  # keep what the plan says to run
    return torch.fx.GraphModule(gm, new)


def _emit_taken(new: torch.fx.Graph, n: torch.fx.Node, inputs: list, env, emit) -> None:
    """Emit `n` with its output written into the first taken input's tensor (`out=`)."""
    variant = _out_variant(n.target)
    targets = [u for u in inputs if u is not None]
    if variant is None or not targets:
        emit(n)
        return
    for a in n.all_input_nodes:
        emit(a)
    args = torch.fx.node.map_arg(n.args, lambda a: env[a])
    kwargs = torch.fx.node.map_arg(dict(n.kwargs), lambda a: env[a])
    kwargs["out"] = env[targets[0]]
    node = new.call_function(variant, tuple(args), kwargs)
    node.meta = dict(n.meta)
    env[n] = node


def own_order(traced: Traced) -> np.ndarray:
    """The traced program's own order (PyTorch's), as a regal order of every node."""
    graph = traced.graph
    index = graph.index
    calls = [index[n.name] for n in traced.graph_module.graph.nodes if n.op == "call_function" and n.name in index]
    seen = set(calls)
    rest = [v for v in range(graph.num_nodes) if v not in seen]
    return np.asarray(rest + calls, dtype=np.int64)


def _storage_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            if s.data_ptr() not in seen:
                seen.add(s.data_ptr())
                total += s.nbytes()
    return total


def _fresh(args) -> tuple:
    return tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)


def measure_peak(program, args: Sequence, device: str | torch.device = "cpu") -> Measured:
    """Run `program(*args)` once on fresh copies of `args` and read PyTorch's allocator."""
    device = torch.device(device)
    args = tuple(a.detach().to(device).clone() if isinstance(a, torch.Tensor) else a for a in args)
    base = _storage_bytes(args)
    with torch.no_grad():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            out = program(*args)
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device) - before + base
            reserved = torch.cuda.max_memory_reserved(device)
            return Measured(int(peak), int(reserved), out, args)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = program(*args)
    events = [(e.start_ns(), k, e.nbytes()) for k, e in enumerate(prof.profiler.kineto_results.events())
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    live = high = 0
    for _, _, b in sorted(events):
        live += b
        high = max(high, live)
    return Measured(base + high, base + high, out, args)


def outputs_equal(a: Measured, b: Measured) -> bool:
    """Bit-for-bit equality of two runs' outputs and updated arguments."""
    def same(x, y) -> bool:
        if isinstance(x, torch.Tensor):
            return isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype and \
                bool(torch.equal(x.cpu(), y.cpu()) or (x.is_floating_point() and torch.equal(x.isnan(), y.isnan())
                                                        and torch.equal(x.nan_to_num().cpu(), y.nan_to_num().cpu())))
        if isinstance(x, (list, tuple)):
            return isinstance(y, (list, tuple)) and len(x) == len(y) and all(same(p, q) for p, q in zip(x, y))
        return x == y
    return same(a.outputs, b.outputs) and same(a.args, b.args)


def run_plan(traced: Traced, solution: Solution, *, device: str = "cpu", realize_reuse: bool = False,
             reference: Measured | None = None) -> tuple[PlanRun, Measured]:
    """Run `solution` (one device) as a program, measure it, and compare its outputs with the
    traced program in its own order (`reference`, run here when not given)."""
    if solution.num_devices != 1:
        raise ValueError("run_plan runs one device; several: regal.torch_dist.run_placed")
    program = plan_program(traced, solution, realize_reuse=realize_reuse)
    got = measure_peak(program, traced.args, device)
    if reference is None:
        reference = measure_peak(plan_program(traced, _own_solution(traced)), traced.args, device)
    graph = traced.graph
    sim = simulate(graph, solution.placement, solution.order, 1)
    return PlanRun([int(sim.peak_bytes)], [got.peak_bytes], [got.reserved_bytes],
                   outputs_equal(got, reference)), got


def _own_solution(traced: Traced) -> Solution:
    from regal.solution import make_solution
    g = traced.graph
    return make_solution(g, np.zeros(g.num_nodes, dtype=np.int32), own_order(traced), 1, "pytorch")
