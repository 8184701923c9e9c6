"""Where a planned step's recomputations spend their time (issue 53: booked extra cost against
measured step time), on a program of experiments/torch_steps.py, in one process:

    PYTHONPATH=/tmp/expdeps python -m experiments.torch_step_profile llama_4l_adamw [--runs 7] [--budget 3000]

The program's step is planned twice on copies of one model (recompute=False, and the default
recompute=0.1), then eager and both programs run interleaved (`--runs` each after a warm-up;
medians; the load before and after). Each planned program also runs node by node under a
timing FX interpreter (the median over runs of each FX call node's wall time), so that each
node's measured time can be set beside its booked cost (the graph's `cost`, the search's
`regal.recompute.op_costs`): over the whole step, over the recomputed op runs (the FX nodes a
plan runs a second time), and by ATen op: which ops the second program runs more of, or longer,
than the first. Prints one JSON object (`--json PATH` writes it too).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.fx


class _Timed(torch.fx.Interpreter):
    """Runs a program node by node, adding each call node's CPU time (this thread's: the time
    the process was preempted, under load, is not counted) to `times[name]`."""

    def __init__(self, gm, times: dict):
        super().__init__(gm)
        self.times = times

    def run_node(self, n):
        if n.op != "call_function":
            return super().run_node(n)
        t = time.thread_time()
        out = super().run_node(n)
        self.times.setdefault(n.name, []).append(time.thread_time() - t)
        return out


def _origin(program: torch.fx.GraphModule, traced_gm: torch.fx.GraphModule) -> dict:
    """{program node name: (the traced node's name it copies, its run: 0 first, 1 recomputed ...)}.
    `plan_program` copies each traced node (`node_copy`, meta copied); a recomputation is a
    second copy of the same node. The traced nodes are told apart by their meta's identity."""
    by_meta = {id(n.meta.get("val")): n.name for n in traced_gm.graph.nodes
               if n.op == "call_function" and n.meta.get("val") is not None}
    seen: collections.Counter = collections.Counter()
    out = {}
    for n in program.graph.nodes:
        if n.op != "call_function":
            continue
        src = by_meta.get(id(n.meta.get("val")))
        if src is None:
            continue
        out[n.name] = (src, seen[src])
        seen[src] += 1
    return out


def _layout_of(a) -> list:
    t = a.meta.get("val")
    return [a.name, list(t.shape), list(t.stride())] if isinstance(t, torch.Tensor) else [a.name]


def _target(n) -> str:
    t = n.target
    return getattr(t, "__name__", None) or str(t)


def profile_plan(step, args_of, batch, runs: int) -> dict:
    """Per-node wall times of `step`'s program (medians of `runs` runs through `_Timed`), joined
    with the graph's booked costs."""
    plan = step._main
    program = plan.program
    graph = plan.traced.graph
    from regal.recompute import op_costs
    cost, model = op_costs(graph)
    index = graph.index
    origin = _origin(program, plan.traced.graph_module)
    times: dict = {}
    for _ in range(runs):
        args = args_of(step, batch)
        with torch.no_grad():
            _Timed(program, times).run(*args)
    med = {k: statistics.median(v) for k, v in times.items()}
    nodes = {n.name: n for n in program.graph.nodes if n.op == "call_function"}
    rows = []
    for name, t in med.items():
        src, run = origin.get(name, (None, 0))
        v = index.get(src) if src is not None else None
        rows.append({"node": name, "src": src, "run": run, "op": _target(nodes[name]),
                     "seconds": t, "booked": float(cost[v]) if v is not None else 0.0, "regal": v is not None,
                     "inputs": [_layout_of(a) for a in nodes[name].all_input_nodes]})
    return {"rows": rows, "cost_model": model, "total_booked": float(cost.sum()),
            "recompute": step.solution.info.get("recompute"), "rewrite": bool(step.recomputed),
            "extra": getattr(step, "extra_fraction", None)}


def _by_op(rows: list) -> dict:
    out: dict = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        c = out[r["op"]]
        c[0] += 1
        c[1] += r["seconds"]
        c[2] += r["booked"]
    return out


def summarize(name: str, prof: dict) -> dict:
    rows = prof["rows"]
    total_s = sum(r["seconds"] for r in rows)
    again = [r for r in rows if r["run"] > 0]
    folded = [r for r in rows if not r["regal"]]
    return {"program": name, "nodes": len(rows), "seconds": total_s,
            "booked_total": prof["total_booked"], "booked_run": sum(r["booked"] for r in rows),
            "recomputed_runs": len(again), "recomputed_seconds": sum(r["seconds"] for r in again),
            "recomputed_booked": sum(r["booked"] for r in again),
            "folded_nodes": len(folded), "folded_seconds": sum(r["seconds"] for r in folded),
            "search": prof["recompute"], "rewrite": prof["rewrite"], "extra_fraction": prof["extra"]}


def main(argv=None) -> int:
    from experiments.torch_steps import PROGRAMS, _batches, _build
    p = argparse.ArgumentParser(prog="python -m experiments.torch_step_profile", description=__doc__.split("\n")[0])
    p.add_argument("program", choices=sorted(PROGRAMS))
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--budget", type=int, default=3000)
    p.add_argument("--recompute", type=float, default=0.1)
    p.add_argument("--json", default=None)
    p.add_argument("--roofline", action="store_true", help="plan the default step a second time with its ops "
                   "booked by the device's roofline (REGAL_COST_MODEL=roofline), as before they were timed")
    p.add_argument("--rates", nargs=2, type=float, default=None, metavar=("FLOPS", "BYTES"),
                   help="the device cost model's FLOP/s and bytes/s (default: measured, as planned_step does)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    from regal.torch import _ops
    if args.rates:   # pinned: the same plan from run to run
        _ops._DEVICE_COSTS[("cpu", 1)] = {**_ops.device_cost_model("cpu"), "peak_flops_per_s": args.rates[0],
                                          "bandwidth_bytes_per_s": args.rates[1]}
    rates = _ops.device_cost_model("cpu")
    import regal.torch as rt
    from regal.torch.step import _forward_arity
    model, opt_factory, inputs, loss_fn = _build(args.program, "cpu")
    arity = _forward_arity(model)
    planned = ("plain", "recompute") + (("roofline",) if args.roofline else ())
    models = {k: copy.deepcopy(model) for k in ("eager",) + planned}
    opts = {k: opt_factory(m.parameters()) for k, m in models.items()}
    t0 = time.perf_counter()
    steps = {}
    for k in planned:
        if k == "roofline":   # the same default step, its ops booked by the device's roofline (not timed)
            os.environ["REGAL_COST_MODEL"] = "roofline"
        try:
            steps[k] = rt.planned_step(models[k], opts[k], inputs, loss_fn=loss_fn, budget=args.budget,
                                       recompute=(False if k == "plain" else args.recompute))
        finally:
            os.environ.pop("REGAL_COST_MODEL", None)
    plan_s = time.perf_counter() - t0
    m, o = models["eager"], opts["eager"]

    def eager(*b):
        o.zero_grad(set_to_none=True)
        loss = loss_fn(m(*(b if arity is None else b[:arity])), *b)
        loss.backward()
        o.step()
        return loss.detach()
    runs = {"eager": eager, **steps}
    batches = _batches(inputs, args.runs + 1)
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    load = [os.getloadavg()[0]]
    for i, b in enumerate(batches):
        names = list(runs)
        for k in names[i % len(names):] + names[:i % len(names)]:
            torch.manual_seed(i)
            t, c = time.perf_counter(), time.thread_time()
            runs[k](*b)
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.thread_time() - c)
    med = {k: statistics.median(v[1:]) for k, v in wall.items()}
    med_cpu = {k: statistics.median(v[1:]) for k, v in cpu.items()}

    def args_of(step, batch):   # the program's arguments for this batch (advances the optimizer's step count)
        return step._arguments(batch, step._main)
    profs = {k: profile_plan(steps[k], args_of, batches[0], args.runs) for k in planned}
    load.append(os.getloadavg()[0])
    summ = {k: summarize(k, v) for k, v in profs.items()}
    a, b = _by_op(profs["plain"]["rows"]), _by_op(profs["recompute"]["rows"])
    diff = []
    for op in set(a) | set(b):
        x, y = a.get(op, [0, 0.0, 0.0]), b.get(op, [0, 0.0, 0.0])
        diff.append({"op": op, "count": [x[0], y[0]], "seconds": [round(x[1], 6), round(y[1], 6)],
                     "booked": [x[2], y[2]], "extra_seconds": y[1] - x[1]})
    diff.sort(key=lambda d: -abs(d["extra_seconds"]))
    again = sorted((r for r in profs["recompute"]["rows"] if r["run"] > 0), key=lambda r: -r["seconds"])
    out = {"program": args.program, "planning_seconds": round(plan_s, 1), "load": load,
           "rates": [rates["peak_flops_per_s"], rates["bandwidth_bytes_per_s"]],
           "wall_median": med, "ratio": {k: med[k] / med["eager"] for k in med},
           "cpu_median": med_cpu, "cpu_ratio": {k: med_cpu[k] / med_cpu["eager"] for k in med_cpu}, "summary": summ,
           "by_op": diff[:25], "recomputed": again[:40],
           "rows": {k: v["rows"] for k, v in profs.items()}}
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
