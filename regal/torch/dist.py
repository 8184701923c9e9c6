"""A placed plan executed: one PyTorch process per device, the copies of SPEC.md section 3 as
point-to-point messages, each device's peak measured by its own allocator.

    traced = regal.torch.trace(model, (x,), training=True, optimizer="adam", reuse=False)
    sol = regal.optimize(traced.graph, devices=2)
    run, outputs = regal.torch.dist.run_placed(traced, sol)   # PlanRun: lists per device

**The programs.** Device `k` runs an FX program of its own (`device_programs`): its regal
nodes in the order's order, each folded FX node (views, `getitem`) emitted right before the
first local node that needs it, as `regal.torch.plan.plan_program` does, and the transfers:
a copy is sent (`isend`) right after the step that makes it, received (allocate + `recv`)
right before its first reader on the receiving device and dropped after its last (FX frees a
value after its last use); the sender holds the send's handle until the position of the
remote reader it serves, so its copy lives as long as section 3's "Free" rule says.

**What is copied: a storage's version.** The unit is not a regal node but a tensor storage
as the traced program holds it (`meta["val"]`): an in-place node (0 bytes in regal) writes
its target's storage, so a reader reads the storage as the last writer before it in the order
left it. A copy is the storage's bytes after its producer or its latest writer; a reader
elsewhere receives exactly the version it reads, and rebuilds the tensors it reads (dtype,
size, stride, offset) over it. An argument (parameter, buffer, optimizer state, input) written
last on another device is sent back into its resident tensor at home right after that write,
so the updated arguments are where the caller expects them. Where this costs other bytes than
section 3 books, and why no plan deadlocks: docs/plans-that-run.md, "Several devices".

**Split outputs.** On a graph imported with `split_outputs` (what `regal torch` runs at every
d), output k of a multi-output op is an alloc node of its own: its storage's home is that node,
and a device program takes each part out of the op's tuple at once, so each part lives to its
own last reader and send. The op makes every output on its own device at its own step, so an
alloc node must be placed with its op (`placed_plan` refuses one that is not); `colocate`
moves alloc nodes there, right before their ops, and 0-byte in-place writes to their targets'
homes, and the peaks are re-simulated: the plan then runs as section 3 books it.

CPU: gloo, one process per device (started by a fork server, which has run no op: a process
forked after OpenMP ran hangs in its first parallel op). CUDA: NCCL, one device per
process (spawn). Sends and receives between each pair of devices are posted in one order on
both sides, so NCCL, which matches by order, pairs them as gloo does by tag.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np
import torch
import torch.fx

from regal.torch._workers import isend_copy, launch, rebuild, recv_copy, recv_into, wait_send
from regal.simulate import simulate
from regal.solution import Solution, make_solution
from regal.torch._storage import _Alias, _alias
from regal.torch.importer import UNDECLARED_WRITES, Traced  # noqa: F401 - UNDECLARED_WRITES re-exported
from regal.torch.plan import Measured, PlanRun, measure_peak, outputs_equal, own_order, plan_program

__all__ = ["Transfer", "PlacedPlan", "alloc_ops", "colocate", "colocate_allocs", "colocate_writes", "placed_plan",
           "device_programs", "program_peak_bytes", "run_placed", "storage_order_edges", "UNDECLARED_WRITES"]


# ---------------------------------------------------------------------------- the plan


class Transfer(NamedTuple):
    """One copy between devices: storage `storage` as `version` writes left it (0: as made)."""
    storage: int
    version: int
    src: int
    dst: int
    send_at: int           # order position after whose step the source posts the send (-1: first)
    recv_at: int           # order position before whose step the destination receives it
    #                        (a write-back: after it, right after the source's send)
    write_back: bool       # an argument's final value, sent to its home
    into_resident: bool    # received into the resident tensor at home (no new buffer)
    nbytes: int
    tag: int


class PlacedPlan(NamedTuple):
    """What each device runs (`placed_plan`): the transfers, and who returns each output."""
    num_devices: int
    placement: np.ndarray          # int32[n]
    order: np.ndarray              # int32[n]
    transfers: tuple               # Transfer, in the order of (recv_at, write_back, src, tag)
    output_device: dict            # FX output node name -> device that returns it


def storage_order_edges(traced: Traced) -> list[tuple[int, int]]:
    """`(u, v)` regal node pairs that the traced program's in-place writes order: every read
    or write of a storage before a write of it (in the program), and every one after it. The
    importer's graph should imply each of them; a plan that breaks one reads a wrong version."""
    al = _alias(traced)
    fx = {n: k for k, n in enumerate(traced.graph_module.graph.nodes)}
    events: dict = {}
    for n in al.reads:
        for s in al.reads[n]:
            events.setdefault(s, {})[n] = False
        for s in al.writes[n] + al.creates.get(n, []):
            events.setdefault(s, {})[n] = True
    edges = set()
    for ev in events.values():
        for w in (n for n, wr in ev.items() if wr):
            for e in ev:
                if e is not w:
                    a, b = (e, w) if fx[e] < fx[w] else (w, e)
                    edges.add((al.regal[a], al.regal[b]))
    return sorted(edges)


def _check_accesses(traced: Traced, pos: np.ndarray) -> None:
    """Raise when the order moves a read of a storage across a write of it: no placement makes
    that correct (the graph lacks the edge; `storage_order_edges`)."""
    ids = traced.graph.ids
    for u, v in storage_order_edges(traced):
        if pos[u] > pos[v]:
            raise ValueError(f"the order puts '{ids[v]}' before '{ids[u]}', but one writes a tensor the other "
                             f"reads or writes, '{ids[u]}' first in the program; the graph lacks that edge")


def placed_plan(traced: Traced, solution: Solution) -> PlacedPlan:
    """The copies SPEC.md section 3 implies for `solution`, by storage version (module docstring)."""
    graph, al = traced.graph, _alias(traced)
    d, placement, order = int(solution.num_devices), np.asarray(solution.placement), np.asarray(solution.order)
    pos = np.empty(graph.num_nodes, dtype=np.int64)
    pos[order] = np.arange(len(order))
    _check_accesses(traced, pos)
    calls = {al.regal[n]: n for n in al.reads}
    for n, made in al.creates.items():   # split outputs: each alloc node where its op makes it
        for s in made:
            if n in al.reads and placement[al.home_node[s]] != placement[al.regal[n]]:
                raise ValueError(f"'{graph.ids[al.home_node[s]]}' is placed on device "
                                 f"{int(placement[al.home_node[s]])} but '{n.name}', which makes it, on device "
                                 f"{int(placement[al.regal[n]])}: colocate(traced, solution) puts it there")
    version = [0] * len(al.nbytes)
    made = {}                                   # (storage, version) -> (device, position)
    held: list[dict] = [{} for _ in range(d)]  # device -> storage -> version it holds
    for s, kind in enumerate(al.kind):
        if kind == "arg":
            k = int(placement[al.home_node[s]])
            made[(s, 0)], held[k][s] = (k, -1), 0
    last_write = {s: n for n in al.writes for s in al.writes[n]}   # FX order: the last writer
    out: list[Transfer] = []
    for t, v in enumerate(order):
        n = calls.get(int(v))
        if n is None:
            continue
        k = int(placement[v])
        for s in al.reads[n]:
            if al.kind[s] != "const" and held[k].get(s) != version[s]:
                src, at = made[(s, version[s])]
                home = al.kind[s] == "arg" and int(placement[al.home_node[s]]) == k
                out.append(Transfer(s, version[s], src, k, at, t, False, home, al.nbytes[s], 0))
                held[k][s] = version[s]
        for s in al.creates.get(n, []):
            made[(s, 0)], held[k][s] = (k, t), 0
        for s in al.writes[n]:
            if al.kind[s] == "const":
                raise NotImplementedError(f"'{n.name}' writes a constant (get_attr) tensor")
            version[s] += 1
            made[(s, version[s])], held[k][s] = (k, t), version[s]
            home = int(placement[al.home_node[s]])
            if al.kind[s] == "arg" and last_write[s] is n and home != k:
                out.append(Transfer(s, version[s], k, home, t, t, True, True, al.nbytes[s], 0))
                held[home][s] = version[s]
    return PlacedPlan(d, placement, order, _ordered(out), _output_devices(traced, al, made, version, placement))


def _ordered(transfers: list) -> tuple:
    """Tags in receive order; each pair's sends posted in that order too (send_at raised to the
    running maximum), which NCCL's matching by order needs and gloo's by tag allows."""
    transfers = sorted(transfers, key=lambda x: (x.recv_at, x.write_back, x.src, x.storage))
    last: dict = {}
    out = []
    for tag, x in enumerate(transfers):
        at = max(x.send_at, last.get((x.src, x.dst), -1))
        last[(x.src, x.dst)] = at
        out.append(x._replace(send_at=at, tag=tag))
    return tuple(out)


def _output_devices(traced: Traced, al: _Alias, made: dict, version: list, placement) -> dict:
    """The device that holds the final version of each output's storages (an argument's: home)."""
    out_node = next(n for n in traced.graph_module.graph.nodes if n.op == "output")
    devices = {}
    for a in out_node.all_input_nodes:
        where = {int(placement[al.home_node[t.storage]]) if al.kind[t.storage] == "arg"
                 else made[(t.storage, version[t.storage])][0] for t in al.tensors[a] if al.kind[t.storage] != "const"}
        if len(where) > 1:
            raise NotImplementedError(f"output '{a.name}' spans tensors whose final values are on devices "
                                      f"{sorted(where)}")
        devices[a.name] = where.pop() if where else 0
    return devices


# ---------------------------------------------------------------------------- the programs


class _Emitter:
    """Builds one device's FX program, position by position (see docs/plans-that-run.md)."""

    def __init__(self, traced: Traced, al: _Alias, plan: PlacedPlan, k: int, device: str):
        self.traced, self.al, self.plan, self.k, self.device = traced, al, plan, k, device
        self.new = torch.fx.Graph()
        self.env: dict = {}      # fx node -> (new node or constant, {storage: generation})
        self.cur: dict = {}      # storage -> (new node whose value holds it, path)
        self.gen: dict = {}      # storage -> generation of the buffer held here
        self.pending: dict = {}  # storage -> [handle nodes of sends not yet waited]
        self.waits: dict = {}    # tag -> handle node
        self.args: list = []     # indices of traced.args this program takes
        self.buf: dict = {}      # storage -> id of the local buffer that holds it (None: resident)
        self.sizes: list = []    # buffer id -> bytes
        self.alloc: dict = {}    # new node -> [(buffer id, bytes)] it allocates
        self.aliases: dict = {}  # new node -> {buffer ids} its value keeps alive
        self.split = bool(traced.graph.meta.get("split_outputs"))

    def _stamp(self, n) -> dict:
        return {t.storage: self.gen.get(t.storage) for t in self.al.tensors.get(n, ())
                if self.al.kind[t.storage] != "const"}

    def _set(self, n, node) -> None:
        self.env[n] = (node, self._stamp(n))

    def _valid(self, n) -> bool:
        e = self.env.get(n)
        return e is not None and all(g is not None and self.gen.get(s) == g for s, g in e[1].items())

    def _constructible(self, n) -> bool:
        if self._valid(n):
            return True
        return n not in self.al.regal and n.op == "call_function" and \
            all(self._constructible(a) for a in n.all_input_nodes)

    def get(self, n):
        """`n`'s value here: cached, recomputed from local values, or rebuilt over local buffers."""
        if self._valid(n):
            return self.env[n][0]
        if self._constructible(n):
            self._set(n, self._keeps(self.new.node_copy(n, self.get), n))
        elif self.al.tensors.get(n):
            self._set(n, self._keeps(self._rebuild(n), n))
        else:
            self.env[n] = (n.meta.get("val"), {})
        return self.env[n][0]

    def _rebuild(self, n) -> torch.fx.Node:
        sources, slot = [], {}

        def layout(val, path):
            if isinstance(val, torch.Tensor):
                t = next(x for x in self.al.tensors[n] if x.path == path)
                if t.storage not in self.cur:
                    raise AssertionError(f"device {self.k}: '{n.name}' needs storage {t.storage}, not here")
                if t.storage not in slot:
                    slot[t.storage] = len(sources)
                    sources.append(self.cur[t.storage])
                return ("T", slot[t.storage], self.cur[t.storage][1], t.dtype, t.size, t.stride, t.offset)
            if isinstance(val, (tuple, list)):
                return ("S", tuple(layout(x, path + (i,)) for i, x in enumerate(val)), isinstance(val, list))
            return ("C", val)
        lay = layout(n.meta["val"], ())
        return self.new.call_function(rebuild, (lay, [s[0] for s in sources]))

    def _hold(self, s, node, path, nbytes: int | None) -> None:
        """`node`'s value at `path` is now this device's buffer of storage `s` (a new one of
        `nbytes`, or the resident tensor when None)."""
        self.cur[s] = (node, path)
        self.gen[s] = self.gen.get(s, 0) + 1
        self.buf[s] = None if nbytes is None else len(self.sizes)
        if nbytes is not None:
            self.sizes.append(nbytes)
            self.alloc.setdefault(node, []).append((self.buf[s], nbytes))

    def _keeps(self, node, n=None, storages=()):
        """Record the local buffers `node`'s value aliases (those of FX node `n`'s tensors)."""
        ss = [t.storage for t in self.al.tensors.get(n, ())] + list(storages)
        self.aliases[node] = {self.buf[s] for s in ss if self.buf.get(s) is not None}
        return node

    def _wait_pending(self, s) -> None:
        for h in self.pending.pop(s, []):
            self.new.call_function(wait_send, (h,))

    def build(self) -> torch.fx.GraphModule:
        gm, al, k = self.traced.graph_module, self.al, self.k
        placement = self.plan.placement
        for i, n in enumerate(x for x in gm.graph.nodes if x.op == "placeholder"):
            if int(placement[al.regal[n]]) == k:
                self.args.append(i)
                self._emit_created(n, self.new.node_copy(n))
        for n in gm.graph.nodes:
            if n.op == "get_attr":
                self.env[n] = (self.new.node_copy(n), {})
        by_recv, by_send = self._schedule()
        calls = {al.regal[n]: n for n in al.reads}
        self._sends(by_send.get(-1, []))
        for t, v in enumerate(self.plan.order):
            for x in by_recv.get((t, 0), []):
                self._receive(x)
            n = calls.get(int(v))
            if n is not None and int(placement[v]) == k:
                for s in al.writes[n]:
                    self._wait_pending(s)
                self._emit_created(n, self.new.node_copy(n, self.get))
            self._sends(by_send.get(t, []))
            for x in by_recv.get((t, 4), []):
                self._receive(x)
            for x in by_recv.get((t, 5), []):
                self._wait_send(x)
        for s in list(self.pending):
            self._wait_pending(s)
        self._outputs()
        return torch.fx.GraphModule(gm, self.new)

    def _schedule(self):
        """Transfers touching this device by label: (t, 0) receive before step t, (t, 4) a
        write-back's receive after it, (t, 5) a send's wait; sends by the step they follow."""
        by_recv: dict = {}
        by_send: dict = {}
        for x in self.plan.transfers:
            if x.dst == self.k:
                by_recv.setdefault((x.recv_at, 4 if x.write_back else 0), []).append(x)
            if x.src == self.k:
                by_send.setdefault(x.send_at, []).append(x)
                by_recv.setdefault((x.recv_at, 5), []).append(x)
        return by_recv, by_send

    def _emit_created(self, n, node) -> None:
        for s in self.al.creates.get(n, []):
            path = next(t.path for t in self.al.tensors[n] if t.storage == s)
            self._hold(s, node, path, None if n.op == "placeholder" else self.al.nbytes[s])
        self._set(n, self._keeps(node, n))
        if self.split and n.op == "call_function" and isinstance(n.meta.get("val"), (tuple, list)):
            # Each part out of the tuple at once (`regal.torch.plan.plan_program` does the same):
            # the tuple dies here, each output lives to its own last reader and send, as the
            # importer's `split_outputs` books it, and a send of one part holds that part only.
            for m in n.users:
                if m.target is operator.getitem and m.all_input_nodes == [n] and m not in self.al.regal:
                    part = self.get(m)
                    for t in self.al.tensors.get(m, ()):
                        if t.storage in self.al.creates[n] and self.cur[t.storage][0] is node:
                            whole = next(x for x in self.al.tensors[n] if x.storage == t.storage)
                            if (t.dtype, t.size, t.stride, t.offset) == (whole.dtype, whole.size, whole.stride,
                                                                       whole.offset):
                                self.cur[t.storage] = (part, ())

    def _receive(self, x: Transfer) -> None:
        if x.into_resident:
            self._wait_pending(x.storage)
            node, path = self.cur[x.storage]
            self.new.call_function(recv_into, (node, path, x.src, x.tag))
        else:
            node = self.new.call_function(recv_copy, (x.nbytes, x.src, x.tag, self.device))
            self._hold(x.storage, node, (), x.nbytes)
            self._keeps(node, storages=[x.storage])

    def _sends(self, xs) -> None:
        for x in xs:
            node, path = self.cur[x.storage]
            h = self._keeps(self.new.call_function(isend_copy, (node, path, x.dst, x.tag)), storages=[x.storage])
            self.pending.setdefault(x.storage, []).append(h)
            self.waits[x.tag] = h

    def _wait_send(self, x: Transfer) -> None:
        h = self.waits.pop(x.tag)
        if h in self.pending.get(x.storage, []):
            self.pending[x.storage].remove(h)
            self.new.call_function(wait_send, (h,))

    def held_peak_bytes(self) -> int:
        """The most bytes this program's buffers hold at once, beside its resident arguments: a
        buffer lives from the node that allocates it to the last use of any value over it (FX
        drops a value after its last use). What the allocator sees, less the ops' workspaces."""
        nodes = list(self.new.nodes)
        index = {n: i for i, n in enumerate(nodes)}
        last = {n: i for i, n in enumerate(nodes)}
        for i, n in enumerate(nodes):
            for a in n.all_input_nodes:
                last[a] = i
        end = {b: last[node] for node, allocs in self.alloc.items() for b, _ in allocs}
        for node, bufs in self.aliases.items():
            for b in bufs:
                end[b] = max(end[b], last[node])
        delta = np.zeros(len(nodes) + 1, dtype=np.int64)
        for node, allocs in self.alloc.items():
            for b, nbytes in allocs:
                delta[index[node]] += nbytes
                delta[end[b] + 1] -= nbytes
        return int(max(np.cumsum(delta).max(initial=0), 0))

    def _outputs(self) -> None:
        out = next(n for n in self.traced.graph_module.graph.nodes if n.op == "output")
        mine = {a.name: self.get(a) for a in out.all_input_nodes if self.plan.output_device[a.name] == self.k}
        self.new.output(mine)


def _emitters(traced: Traced, solution: Solution, device_type: str, plan: PlacedPlan | None) -> list:
    plan = plan or placed_plan(traced, solution)
    al = _alias(traced)
    out = []
    for k in range(plan.num_devices):
        e = _Emitter(traced, al, plan, k, "cpu" if device_type == "cpu" else f"{device_type}:{k}")
        e.program = e.build()
        out.append(e)
    return out


def device_programs(traced: Traced, solution: Solution, *, device_type: str = "cpu",
                    plan: PlacedPlan | None = None) -> list[tuple[torch.fx.GraphModule, list[int]]]:
    """Per device: its FX program and the indices of `traced.args` it takes (its residents).
    A program returns `{output FX node name: value}` for the outputs whose final value it holds."""
    return [(e.program, e.args) for e in _emitters(traced, solution, device_type, plan)]


def program_peak_bytes(traced: Traced, solution: Solution, *, plan: PlacedPlan | None = None) -> list[int]:
    """Per device, the peak its program holds by its own allocations and frees: its resident
    arguments plus the most bytes its buffers (outputs, received copies) hold at once. It
    differs from SPEC.md section 3's prediction only by how copies work (docs/plans-that-run.md,
    "Measured against section 3"), and from the measured peak only by the ops' workspaces."""
    out = []
    for e in _emitters(traced, solution, "cpu", plan):
        args = [traced.args[i] for i in e.args]
        base = sum({a.untyped_storage().data_ptr(): a.untyped_storage().nbytes() for a in args
                    if isinstance(a, torch.Tensor)}.values())
        out.append(base + e.held_peak_bytes())
    return out


def run_placed(traced: Traced, solution: Solution, *, backend: str | None = None, device_type: str = "cpu",
               reference: Measured | None = None, timeout_s: float = 300.0,
               start_method: str | None = None) -> tuple[PlanRun, Measured]:
    """Run `solution` on `solution.num_devices` processes and measure each device's peak.

    backend: "gloo" on CPU, "nccl" on CUDA by default. `reference`: the traced program run in
    its own order on one device (`regal.torch.plan.measure_peak`), run here when not given;
    `outputs_match` compares the outputs and updated arguments with it bit for bit. Returns the
    `PlanRun` (lists per device; `reserved_bytes` is the CUDA allocator's reserve, on CPU the
    peak) and the gathered run (`Measured`: outputs, arguments after the step, the peak over
    devices). Raises `TimeoutError` when the devices do not finish in `timeout_s`.
    """
    backend = backend or ("nccl" if device_type == "cuda" else "gloo")
    plan = placed_plan(traced, solution)
    programs = device_programs(traced, solution, device_type=device_type, plan=plan)
    got = launch([gm for gm, _ in programs], [[traced.args[i] for i in idx] for _, idx in programs], backend,
                 device_type, timeout_s, start_method)
    gathered = _gather(traced, programs, got)
    if reference is None:
        g = traced.graph
        own = make_solution(g, np.zeros(g.num_nodes, dtype=np.int32), own_order(traced), 1, "pytorch")
        reference = measure_peak(plan_program(traced, own), traced.args, "cpu" if device_type == "cpu" else "cuda")
    sim = simulate(traced.graph, solution.placement, solution.order, plan.num_devices)
    run = PlanRun([int(x) for x in sim.device_peak_bytes], [int(r["peak"]) for r in got],
                  [int(r["reserved"]) for r in got], outputs_equal(gathered, reference))
    return run, gathered


def _gather(traced: Traced, programs, got: list[dict]) -> Measured:
    """The program's return value and every argument after the run, from the devices that hold them."""
    values = {n: v for r in got for n, v in r["outputs"].items()}
    out = next(n for n in traced.graph_module.graph.nodes if n.op == "output")
    outputs = torch.fx.node.map_arg(out.args[0], lambda a: values[a.name])
    args: list = [None] * len(traced.args)
    for (_, idx), r in zip(programs, got):
        for i, a in zip(idx, r["args"]):
            args[i] = a
    peak = max(int(r["peak"]) for r in got)
    return Measured(peak, max(int(r["reserved"]) for r in got), outputs, tuple(args))


def alloc_ops(graph) -> dict[int, int]:
    """The importer's alloc nodes (`split_outputs`: output k of a multi-output op other than its
    largest, id `OP:k`) -> the op that makes that output."""
    out = {}
    for v, op in enumerate(graph.ops):
        if op == "alloc":
            u = graph.index.get(graph.ids[v].rpartition(":")[0])
            if u is not None:
                out[v] = u
    return out


def colocate_allocs(traced: Traced, solution: Solution) -> Solution:
    """`solution` with every alloc node (`split_outputs`) on its op's device, right before it.

    An alloc node books the bytes of an output its op makes; the op makes it on its own device,
    at its own step. Placed elsewhere, section 3 books those bytes on a device that never holds
    them and copies them to one that makes them (the runtime cannot do that: `placed_plan`
    refuses it); earlier in the order, it books them sooner than they exist. Moved, the model
    books the output where and when the op makes it. The order stays topological (an alloc
    node's inputs are its op's); the peaks are re-simulated."""
    graph = traced.graph
    owner = alloc_ops(graph)
    order = np.asarray(solution.order)
    if not owner or len(order) != graph.num_nodes:
        return solution
    placement = np.asarray(solution.placement, dtype=np.int32).copy()
    moved = sum(int(placement[a] != placement[u]) for a, u in owner.items())
    for a, u in owner.items():
        placement[a] = placement[u]
    before: dict = {}
    for a in sorted(owner):
        before.setdefault(owner[a], []).append(a)
    new = np.asarray([w for v in order if int(v) not in owner for w in before.get(int(v), []) + [int(v)]],
                     dtype=np.int32)
    if not moved and np.array_equal(new, order):
        return solution
    info = {**solution.info, "colocated_allocs": moved}
    return make_solution(graph, placement, new, solution.num_devices, solution.method, solution.evaluations,
                         solution.seconds, info)


def colocate(traced: Traced, solution: Solution) -> Solution:
    """`colocate_allocs`, then `colocate_writes`: the plan `run_placed` runs as section 3 books it
    (alloc nodes where their ops make the outputs; 0-byte in-place writes on their targets'
    homes). What `regal.torch.compare` runs at d > 1."""
    return colocate_writes(traced, colocate_allocs(traced, solution))


def colocate_writes(traced: Traced, solution: Solution) -> Solution:
    """`solution` with every in-place node that allocates nothing (the optimizer's `add_` on a
    parameter, an in-place ReLU) moved to the home device of the storage it writes.

    SPEC.md section 3 books such a node at 0 bytes wherever it runs, but away from its
    target's home it must receive the target (its bytes) and send the written version on to
    its readers: a search that spreads chained updates over devices to balance 0-byte nodes
    plans copies the model does not see. On its target's device the node costs what the
    model says. The peaks are re-simulated; the order is unchanged.
    """
    if solution.num_devices == 1:
        return solution
    al = _alias(traced)
    graph = traced.graph
    placement = np.asarray(solution.placement, dtype=np.int32).copy()
    moved = 0
    for n, storages in al.writes.items():
        v = al.regal.get(n)
        if v is None or not storages or graph.bytes[v] != 0 or al.creates.get(n):
            continue
        home = al.home_node[storages[0]]
        if home is not None and placement[v] != placement[home]:
            placement[v] = placement[home]
            moved += 1
    if not moved:
        return solution
    info = {**solution.info, "colocated_writes": moved}
    return make_solution(graph, placement, solution.order, solution.num_devices, solution.method,
                         solution.evaluations, solution.seconds, info)

