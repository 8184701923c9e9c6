"""Plans that run: a regal solution as a PyTorch program, executed and measured by PyTorch.

    traced = regal.torch.plan.trace_for(model, (x,), "adam")     # regal.torch.trace, random ops seeded
    traced = regal.torch.plan.calibrate(traced, regal.torch.plan.measure_nodes(traced))  # op scratch
    sol = regal.optimize(traced.graph, devices=1)
    program = regal.torch.plan.plan_program(traced, sol, realize_reuse=True)  # a torch.fx.GraphModule
    run, measured = regal.torch.plan.run_plan(traced, sol, realize_reuse=True)  # PlanRun, Measured

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
`max_memory_reserved` around the run instead. **Calibrated**: `measure_nodes` attributes the
allocator's activity to each op in one run and `calibrate` books the scratch an op frees before
it returns as its `temp_bytes`. **Random ops** (`seed_random_ops`, applied by `trace_for`) draw
from per-node streams, so every order returns the same values. Several devices:
`regal.torch.dist`; both orders of one program compared: `regal.torch.compare`.
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
import tempfile
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
import torch.fx

from regal.graph import Graph
from regal.simulate import simulate
from regal.solution import Solution, make_solution
from regal.torch.importer import Traced

__all__ = ["Measured", "NodeMemory", "PlanRun", "SeededOp", "calibrate", "global_state_kept", "measure_nodes",
           "measure_peak", "outputs_equal", "own_order", "own_solution", "peak_during", "plan_program", "run_plan",
           "seed_random_ops", "taken_over", "trace_for", "without_reuse"]


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


class NodeMemory(NamedTuple):
    """What the allocator did while each FX call node ran (`measure_nodes`), by node name."""
    net_bytes: dict      # allocated minus freed inside the node: its new output's real bytes
    temp_bytes: dict     # highest live bytes inside the node above where it ended: scratch


class _Labelled(torch.fx.Interpreter):
    """Runs a program node by node, each call node inside a profiler range named after it."""

    def run_node(self, n):
        if n.op != "call_function":
            return super().run_node(n)
        with torch.profiler.record_function("regal::" + n.name):
            return super().run_node(n)


class _Counted(torch.fx.Interpreter):
    """Runs a program node by node on CUDA, reading the caching allocator's counters around
    each call node (host-side bookkeeping: exact, no synchronisation needed)."""

    def __init__(self, gm, device):
        super().__init__(gm)
        self.device, self.net, self.temp = device, {}, {}

    def run_node(self, n):
        if n.op != "call_function":
            return super().run_node(n)
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        out = super().run_node(n)
        after = torch.cuda.memory_allocated(self.device)
        self.net[n.name] = after - before
        self.temp[n.name] = torch.cuda.max_memory_allocated(self.device) - after
        return out


def measure_nodes(traced: Traced, device: str | torch.device = "cpu") -> NodeMemory:
    """Run the traced program once in its own order and attribute the allocator's activity to
    the FX call node that caused it: on the CPU from the profiler's memory events inside each
    node's range, on CUDA from the caching allocator's counters read around each node."""
    from torch.profiler import ProfilerActivity, profile
    device = torch.device(device)
    args = tuple(a.detach().to(device).clone() if isinstance(a, torch.Tensor) else a for a in traced.args)
    if device.type == "cuda":
        counted = _Counted(traced.graph_module, device)
        with torch.no_grad():
            counted.run(*args)
        return NodeMemory(counted.net, counted.temp)
    with torch.no_grad(), quiet_profiler(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _Labelled(traced.graph_module).run(*args)
    events = list(prof.profiler.kineto_results.events())
    spans = sorted((e.start_ns(), e.start_ns() + e.duration_ns(), e.name()[7:]) for e in events
                   if e.name().startswith("regal::"))
    mem = _cpu_memory_events(events)
    net, temp = {}, {}
    j = 0
    for start, end, name in spans:
        while j < len(mem) and mem[j][0] < start:
            j += 1
        live = high = 0
        while j < len(mem) and mem[j][0] <= end:
            live += mem[j][2]
            high = max(high, live)
            j += 1
        net[name], temp[name] = live, high - live
    return NodeMemory(net, temp)


def calibrate(traced: Traced, memory: NodeMemory, seconds: dict | None = None) -> Traced:
    """`traced` with each node's `temp_bytes` set to the scratch the allocator was seen to
    hold inside it (`measure_nodes`): the model then books the op workspaces (convolutions on
    oneDNN, cuDNN/cuBLAS workspaces) that an importer cannot see. `seconds` ({node: seconds},
    a planned step's timed run of its ops): each node's `cost` set to it instead of the
    importer's roofline (a node not in it, an alloc node, costs 0: it runs nothing)."""
    graph = traced.graph
    recs = graph.to_records()
    for r in recs:
        t = memory.temp_bytes.get(r["id"], 0)
        if t > 0 and not r.get("resident"):
            r["temp_bytes"] = int(t)
        if seconds is not None:
            r.pop("cost", None)
            if not r.get("resident") and seconds.get(r["id"], 0.0) > 0.0:
                r["cost"] = float(seconds[r["id"]])
    meta = {**graph.meta, "temp_bytes": "measured", **({"cost": "measured"} if seconds is not None else {})}
    new = Graph.from_records(recs, name=graph.name, meta=meta, source=f"calibrated {graph.name}")
    return traced._replace(graph=new)


def _call_nodes(gm: torch.fx.GraphModule) -> dict[str, torch.fx.Node]:
    return {n.name: n for n in gm.graph.nodes if n.op == "call_function"}


def taken_over(graph: Graph, order: Sequence[int]) -> dict[int, list[int]]:
    """The inputs each node takes over (SPEC.md section 3, step 2) when `order` runs on one
    device: `{node: [inputs whose buffer it writes its output into]}` (`regal._takeover.takers`,
    the rule's one vectorized twin)."""
    from regal._takeover import takers
    taker = takers(graph, np.zeros(graph.num_nodes, dtype=np.int64), np.asarray(order))
    out: dict[int, list[int]] = {}
    for u in np.flatnonzero(taker >= 0):
        out.setdefault(int(taker[u]), []).append(int(u))
    return {v: [u for u in graph.reuse(v) if u in us] for v, us in out.items()}


def _taken_per_entry(graph: Graph, order: Sequence[int]) -> dict[int, list[int]]:
    """`taken_over` by entry of `order` (its position): with recomputations (SPEC.md 3b), the
    take-overs of its instance graph, each instance named by the node it runs."""
    order = np.asarray(order)
    if order.shape[0] <= graph.num_nodes:
        pos = np.empty(graph.num_nodes, dtype=np.int64)
        pos[order] = np.arange(order.shape[0])
        return {int(pos[v]): us for v, us in taken_over(graph, order).items()}
    from regal.recompute import instance_graph
    inst, nodes = instance_graph(graph, order, checked=True)   # a Solution's order: checked when it was made
    return {i: [int(nodes[u]) for u in us] for i, us in taken_over(inst, np.arange(nodes.shape[0])).items()}


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
    """The traced program with its ops in `solution`'s order (see the module docstring); a node
    the order lists again (SPEC.md 3b) runs again there, and its later readers read the new value.

    `nodes`: run only these regal nodes (a device's share; default every node), in the order's
    order. `realize_reuse`: write each taken-over input's buffer with the op's `out=` variant.
    """
    graph, gm = traced.graph, traced.graph_module
    calls = _call_nodes(gm)
    keep = None if nodes is None else set(int(v) for v in nodes)
    order = [(i, int(v)) for i, v in enumerate(solution.order) if keep is None or int(v) in keep]
    taken = _taken_per_entry(graph, solution.order) if realize_reuse else {}
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
    split = bool(graph.meta.get("split_outputs"))
    # Folded nodes nothing reads (a getitem of an unused gradient, say) go right after their
    # inputs: placed later, they would keep their input (a whole tuple of tensors) alive.
    dead = [n for n in gm.graph.nodes if n.op == "call_function" and not n.users and n.name not in graph.index]
    ran: set[int] = set()
    forgotten: set = set()   # copies dropped before a recomputation: the last sweep must not make them again
    for i, v in order:
        n = calls.get(ids[v])
        if n is None:
            continue
        if v in ran:   # a recomputation (SPEC.md 3b): a new copy of the op; readers from here on read it
            _forget(n, env, graph.index, forgotten)
        ran.add(v)
        if i in taken:
            _emit_taken(new, n, [calls.get(ids[u]) for u in taken[i]], env, emit, graph.index)
        else:
            emit(n)
        if split and isinstance(n.meta.get("val"), (tuple, list)):
            # Each part out of the tuple at once: the tuple then dies here, and each output
            # lives to its own last reader (the importer's `split_outputs`), not all to the last.
            for m in n.users:
                if m.target is operator.getitem and m.all_input_nodes == [n]:
                    emit(m)
        if dead:
            ready = [m for m in dead if all(a in env for a in m.all_input_nodes)]
            for m in ready:
                emit(m)
            dead = [m for m in dead if m not in env]
    if keep is None:
        for n in gm.graph.nodes:   # anything left (folded nodes of residents alone)
            if n.op == "call_function" and n not in forgotten:
                emit(n)
        out = next(n for n in gm.graph.nodes if n.op == "output")
        new.node_copy(out, lambda a: emit(a))
    else:
        new.output(None)
    return torch.fx.GraphModule(gm, new)


def _forget(n: torch.fx.Node, env: dict, names, forgotten: set) -> None:
    """Before `n` runs again: drop its copy from `env`, and the copies of the folded nodes made
    from it (views, `getitem`: they follow its new copy), so that what is emitted from here on
    reads the new value while the old one is freed after its last reader. Each dropped node goes
    into `forgotten`: made again only where a later reader asks for it (`plan_program`'s last
    sweep, which makes what nothing asked for, would otherwise make a view of the new copy at the
    program's end and hold the copy alive to there)."""
    stack = [n]
    while stack:
        m = stack.pop()
        if env.pop(m, None) is None and m is not n:
            continue
        forgotten.add(m)
        stack.extend(u for u in m.users if u.op == "call_function" and u.name not in names)


def _emit_taken(new: torch.fx.Graph, n: torch.fx.Node, taken: list, env, emit, names) -> None:
    """Emit `n` with its output written into the tensor of the first input it takes over
    (`out=`): the FX argument whose producer (through folded views) is that input's node."""
    variant = _out_variant(n.target)
    val = n.meta.get("val")
    target = None
    for a in n.all_input_nodes:
        t = a.meta.get("val")
        if _root(a, names) in taken and isinstance(t, torch.Tensor) and isinstance(val, torch.Tensor) \
                and t.shape == val.shape and t.dtype == val.dtype and t.stride() == val.stride():
            target = a
            break
    if variant is None or target is None:
        emit(n)
        return
    for a in n.all_input_nodes:
        emit(a)
    args = torch.fx.node.map_arg(n.args, lambda a: env[a])
    kwargs = dict(torch.fx.node.map_arg(n.kwargs, lambda a: env[a]))
    kwargs["out"] = env[target]
    node = new.call_function(variant, tuple(args), kwargs)
    node.meta = dict(n.meta)
    env[n] = node


def _root(a: torch.fx.Node, names) -> torch.fx.Node:
    """The node whose tensor an FX value is, through single-input folded nodes (views)."""
    while a.op == "call_function" and a.name not in names and len(a.all_input_nodes) == 1:
        a = a.all_input_nodes[0]
    return a


def own_order(traced: Traced) -> np.ndarray:
    """The traced program's own order (PyTorch's), as a regal order of every node."""
    graph = traced.graph
    index = graph.index
    allocs: dict[str, list[int]] = {}   # a multi-output op's alloc nodes (`split_outputs`) go right before it
    for v, op in enumerate(graph.ops):
        if op == "alloc":
            allocs.setdefault(graph.ids[v].rpartition(":")[0], []).append(v)
    calls = [u for n in traced.graph_module.graph.nodes if n.op == "call_function" and n.name in index
             for u in allocs.get(n.name, []) + [index[n.name]]]
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


@contextlib.contextmanager
def torch_threads_kept():
    """PyTorch's intra-op thread count as it was, after the body (a regal search): Numba's
    OpenMP threading layer, which the library may load, sets the process's OpenMP thread count
    and with it PyTorch's. Kernels that sum in per-thread parts (LayerNorm's weight and bias
    gradients) then return other last bits than before the search: an order compared with
    another would differ for that alone."""
    n = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)


@contextlib.contextmanager
def global_state_kept():
    """The process's global state as it was, after the body (planning a step, measuring
    anchors): the random generators (PyTorch's CPU generator and the CUDA generators already
    initialized, Python's `random`, NumPy's global state), PyTorch's intra-op thread count
    (`torch_threads_kept`), grad mode, the default dtype, the deterministic-algorithms flags and
    cuDNN's and oneDNN's switches. Planning runs the step once on copies (`calibrate`) and a
    search; without this, a run with dropout would draw other masks after planning than eager
    PyTorch from the same seed."""
    import random

    def keep(state: torch.Tensor) -> bytes:   # as bytes: no tensor of its own while the body is measured
        return state.numpy().tobytes()

    def back(state: bytes) -> torch.Tensor:
        return torch.frombuffer(bytearray(state), dtype=torch.uint8)

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    saved = (keep(torch.get_rng_state()), [keep(s) for s in torch.cuda.get_rng_state_all()] if cuda else None,
             random.getstate(),
             np.random.get_state(), torch.is_grad_enabled(), torch.get_default_dtype(),
             torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.backends.mkldnn.enabled)
    try:
        with torch_threads_kept():
            yield
    finally:
        torch.set_rng_state(back(saved[0]))
        if saved[1] is not None:
            torch.cuda.set_rng_state_all([back(s) for s in saved[1]])
        random.setstate(saved[2])
        np.random.set_state(saved[3])
        torch.set_grad_enabled(saved[4])
        torch.set_default_dtype(saved[5])
        if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) \
                != saved[6:8]:
            torch.use_deterministic_algorithms(saved[6], warn_only=saved[7])
        (torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
         torch.backends.mkldnn.enabled) = saved[8:]


@contextlib.contextmanager
def quiet_profiler():
    """PyTorch's profiler (Kineto) writes `USDT: ... profiler_start/stop` and `STAGE:` lines to
    the process's standard error from C++ at every start and stop: they go to a file while it
    runs, and what else was written there is passed on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):   # no file descriptor 2: nothing to keep quiet
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            rest = [ln for ln in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not ln.startswith(("USDT:", "STAGE:"))]
            if rest:
                sys.stderr.write("".join(rest))


def _cpu_memory_events(events) -> list:
    """(time ns, index, bytes: + allocated, - freed) of the CPU allocator's profiler events, in order."""
    return sorted((e.start_ns(), k, e.nbytes()) for k, e in enumerate(events)
                  if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)


def peak_during(fn, device: str | torch.device = "cpu") -> tuple[int, int, Any]:
    """`(high, reserved, fn())`: the most bytes the allocator held at once while `fn()` ran,
    above what it held before (CPU: the profiler's memory events; CUDA: the caching allocator's
    counters, `reserved` its `max_memory_reserved`; on the CPU `reserved` equals `high`)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = fn()
        torch.cuda.synchronize(device)
        return (int(torch.cuda.max_memory_allocated(device) - before), int(torch.cuda.max_memory_reserved(device)),
                out)
    from torch.profiler import ProfilerActivity, profile
    with quiet_profiler(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    live = high = 0
    for _, _, b in _cpu_memory_events(prof.profiler.kineto_results.events()):
        live += b
        high = max(high, live)
    return high, high, out


def measure_peak(program, args: Sequence, device: str | torch.device = "cpu") -> Measured:
    """Run `program(*args)` once on fresh copies of `args` and read PyTorch's allocator: the
    arguments' bytes plus the highest it held during the run (`peak_during`)."""
    device = torch.device(device)
    args = tuple(a.detach().to(device).clone() if isinstance(a, torch.Tensor) else a for a in args)
    base = _storage_bytes(args)
    with torch.no_grad():
        high, reserved, out = peak_during(lambda: program(*args), device)
    return Measured(base + high, reserved if device.type == "cuda" else base + high, out, args)


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
        raise ValueError("run_plan runs one device; several: regal.torch.dist.run_placed")
    program = plan_program(traced, solution, realize_reuse=realize_reuse)
    got = measure_peak(program, traced.args, device)
    if reference is None:
        reference = measure_peak(plan_program(traced, own_solution(traced)), traced.args, device)
    graph = traced.graph
    sim = simulate(graph, solution.placement, solution.order, 1)
    return PlanRun([int(sim.peak_bytes)], [got.peak_bytes], [got.reserved_bytes],
                   outputs_equal(got, reference)), got


def own_solution(traced: Traced) -> Solution:
    """PyTorch's own order as a one-device solution of the traced graph."""
    g = traced.graph
    return make_solution(g, np.zeros(g.num_nodes, dtype=np.int32), own_order(traced), 1, "pytorch")


def without_reuse(graph: Graph) -> Graph:
    """`graph` with no `reuse` lists: what a program that takes nothing over allocates."""
    recs = graph.to_records()
    for r in recs:
        r.pop("reuse", None)
    return Graph.from_records(recs, name=graph.name, meta=graph.meta, source=graph.name)


def trace_for(module, example_inputs, training, split_outputs: bool = False, loss_fn=None) -> Traced:
    """`regal.torch.trace` of a forward pass (`training=None`) or one step with an optimizer (a
    name of `regal.torch._optim.NAMED` or a torch.optim optimizer; `loss_fn` as `trace`'s), its
    random ops each on a stream of their own (`seed_random_ops`). `split_outputs`: each output of
    a multi-output op freed after its own last reader (for a one-device plan)."""
    from regal.torch.tracing import trace
    if training is None:
        return seed_random_ops(trace(module, example_inputs, False, reuse=True, split_outputs=split_outputs))
    return seed_random_ops(trace(module, example_inputs, True, optimizer=training, reuse=True,
                                 split_outputs=split_outputs, loss_fn=loss_fn))


class SeededOp:
    """An ATen random op (dropout's mask, `rand`) drawing from a stream of its own: the global
    generator is seeded with `seed` around the call and put back after. So what it draws does
    not depend on which ops ran before it, and any order of a plan returns the same values."""

    def __init__(self, op, seed: int):
        self.op, self.seed = op, int(seed)
        self.__name__ = f"seeded_{getattr(op, '_opname', 'op')}"

    def __reduce__(self):  # an OpOverload does not pickle; its name does (worker processes)
        return _seeded_op, (self.op.namespace, self.op._opname, self.op._overloadname, self.seed)

    def __call__(self, *args, **kwargs):
        devices = sorted({t.device.index or 0 for t in torch.utils._pytree.tree_leaves((args, kwargs))
                          if isinstance(t, torch.Tensor) and t.device.type == "cuda"})
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed)
            return self.op(*args, **kwargs)


def _seeded_op(namespace: str, name: str, overload: str, seed: int) -> SeededOp:
    return SeededOp(getattr(getattr(getattr(torch.ops, namespace), name), overload), seed)


def seed_random_ops(traced: Traced) -> Traced:
    """`traced` with every seeded-random ATen op (tag `nondeterministic_seeded`) called through
    `SeededOp`, its seed taken from the node's name: the own order and every plan then draw the
    same numbers, so their outputs can be compared bit for bit."""
    import zlib
    gm = traced.graph_module
    random = [n for n in gm.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
              and torch.Tag.nondeterministic_seeded in n.target.tags]
    if not random:
        return traced
    graph = torch.fx.Graph()
    env: dict = {}
    for n in gm.graph.nodes:
        env[n] = graph.node_copy(n, lambda a: env[a])
        if n in random:
            env[n].target = SeededOp(n.target, zlib.crc32(n.name.encode()))
    return traced._replace(graph_module=torch.fx.GraphModule(gm, graph))
