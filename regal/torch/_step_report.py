"""What a planned step says (`regal.torch.step`): its peak's breakdown (`explain`,
`peak_breakdown`) and its planning progress on a terminal."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import torch

from regal.torch._step_trace import _storage_key

__all__: list = []


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB" if abs(n) >= 2**20 else f"{n / 2**10:,.1f} KiB"


def _autocast(device_type: str) -> bool:
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:   # an older signature: CUDA's flag alone
        return device_type == "cuda" and bool(torch.is_autocast_enabled())


#: The kinds `peak_breakdown` books a resident tensor under, by the graph's op.
_RESIDENT_KINDS = {"parameter": "parameters", "buffer": "buffers", "optimizer_state": "optimizer state",
                   "input": "inputs", "constant": "constants"}


def _breakdown(plan, settings: dict) -> dict:
    from regal.simulate import memory_trace
    from regal.solution import instance_solution
    from regal.torch.plan import taken_over, without_reuse
    from regal.torch.recompute import _loss_position
    graph, sol = plan.traced.graph, plan.solution
    if settings.get("order") == "traced":
        graph = without_reuse(graph)
    graph, sol = instance_solution(graph, sol)   # an order that runs a node twice: one node per run
    order = np.asarray(sol.order, dtype=np.int64)
    n = graph.num_nodes
    _, trace = memory_trace(graph, sol.placement, order, 1)
    t = int(np.argmax(trace[:, 0]))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    last = np.full(n, -1, dtype=np.int64)   # the position of each node's last reader
    readers = np.repeat(np.arange(n), np.diff(graph.in_ptr))
    np.maximum.at(last, graph.in_idx, pos[readers])
    kept = graph.output | (last < 0)   # never freed (SPEC.md section 3)
    alive = graph.resident | ((pos <= t) & (kept | (last >= t)))
    w = int(order[t])
    for u in taken_over(graph, order).get(w, []):   # its bytes are now the op's output
        alive[u] = False
    gm = plan.traced.graph_module
    fx_pos = {nd.name: k for k, nd in enumerate(gm.graph.nodes)}
    loss_at = _loss_position(gm, {nd: k for k, nd in enumerate(gm.graph.nodes)})
    grads = set(gm.meta.get("regal_gradients", ()))
    index = graph.index
    grad_ids = set()
    for nd in gm.graph.nodes:
        if nd.op != "call_function":
            continue
        val = nd.meta.get("val")
        flat = [val] if isinstance(val, torch.Tensor) else [x for x in val if isinstance(x, torch.Tensor)] \
            if isinstance(val, (tuple, list)) else []
        for k, x in enumerate(flat):
            if _storage_key(x) in grads:
                grad_ids.add(f"{nd.name}:{k}" if f"{nd.name}:{k}" in index else nd.name)

    def kind(v: int) -> str:
        op, nid = graph.ops[v], graph.ids[v]
        if graph.resident[v]:
            return _RESIDENT_KINDS.get(op, op)
        if "#" in nid:
            return "recomputed values"
        if nid in grad_ids:
            return "gradients"
        fx = nid.rpartition(":")[0] if op == "alloc" else nid
        return "activations (forward)" if fx_pos.get(fx, loss_at + 1) <= loss_at else "backward temporaries"

    by_kind: dict = {}
    for v in np.flatnonzero(alive):
        k = kind(int(v))
        by_kind[k] = by_kind.get(k, 0) + int(graph.bytes[v])
    by_kind["op scratch"] = int(graph.temp_bytes[w])
    largest = sorted((int(v) for v in np.flatnonzero(alive & ~graph.resident)), key=lambda v: -int(graph.bytes[v]))
    return {"predicted_peak_bytes": int(trace[t, 0]), "peak_step": t, "steps": n,
            "peak_op": {"id": graph.ids[w], "op": graph.ops[w]},
            "by_kind": by_kind,
            "largest": [{"id": graph.ids[v], "op": graph.ops[v], "bytes": int(graph.bytes[v]), "kind": kind(v)}
                        for v in largest[:5]],
            "traced_order_peak_bytes": plan.traced_peak, "recomputed": plan.recomputed, "variants": dict(plan.peaks)}


class _Progress:
    """Planning's stage on one line of standard error, rewritten in place, when it is a terminal
    and planning has taken more than `after` seconds; nothing otherwise. A thread redraws the
    line (written to a copy of file descriptor 2, which the profiler's quieting may redirect)."""

    def __init__(self, label: str, after: float = 2.0):
        self.label, self.after, self.text, self.shown = label, after, "tracing", False
        try:
            self.on = sys.stderr.isatty() and os.isatty(2)
        except (AttributeError, ValueError, OSError):
            self.on = False
        if self.on:
            self.start = time.monotonic()
            self.fd = os.dup(2)
            self.done = threading.Event()
            self.thread = threading.Thread(target=self._run, name="regal-planning-progress", daemon=True)
            self.thread.start()

    def stage(self, text: str) -> None:
        self.text = text

    def searching(self, what: str):
        def callback(p) -> None:
            self.text = f"{what} {p.evaluations:,}/{p.budget:,}"
        return callback

    def _run(self) -> None:
        while not self.done.wait(0.25):
            elapsed = time.monotonic() - self.start
            if elapsed >= self.after:
                self._write(f"\r\x1b[Kplanning {self.label}: {self.text}... ({elapsed:.0f} s)")
                self.shown = True

    def _write(self, text: str) -> None:
        try:
            os.write(self.fd, text.encode())
        except OSError:
            pass

    def close(self) -> None:
        if not self.on:
            return
        self.done.set()
        self.thread.join()
        if self.shown:
            self._write("\r\x1b[K")
        os.close(self.fd)
