"""What regal's partitioner hook changes inside torch.compile, measured on one program (issue 54).

    PYTHONPATH=/tmp/expdeps python -m experiments.torch_compile_partition mnasnet0_5_sgd --side regal_01

One process, one side (`compile`, `compile_amb05`, `regal_01`; a fresh Inductor cache directory),
one program of `experiments.torch_compile.PROGRAMS`. On every joint graph the partitioner is
called with, the hook here runs Inductor's min-cut partitioner (torch.compile's own partition)
and, for `regal_01`, what `regal.torch.compile(recompute_budget=0.1)`'s partitioner does
(`regal.torch._compile_joint.choose_partition`); for each partition it records the saved set (the
forward's outputs past the user's: count and bytes), the forward ops the backward runs again, and
the peak regal's simulator (SPEC.md section 3b) gives that partition on the joint graph (the
forward module's order, then the backward module's: what AOTAutograd runs). It returns the
partition of the side. The order hook records Inductor's estimate of each compiled graph (and
regal's order where the side has it). Then three steps run as in experiments/torch_compile.py,
and step 3 is measured twice: the process's peak (`measure_step`) and, from the profiler's memory
events, the moment of the peak, what was allocated then and the profiler ranges around it.
Prints one JSON record. `python -m experiments.torch_compile_partition --workspaces`: the
workspace of CPU convolution backward passes by memory layout (`conv_workspaces`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def _saved(fw, num_fwd_outputs: int) -> tuple[int, int]:
    from torch._functorch.partitioners import _size_of
    outs = next(n for n in fw.graph.nodes if n.op == "output").args[0]
    saved = [o for o in outs[num_fwd_outputs:] if hasattr(o, "meta") and "val" in o.meta]
    total = 0
    for o in saved:
        try:
            total += int(_size_of(o))
        except Exception:  # noqa: BLE001 - a symbol or opaque value
            pass
    return len(saved), total


def _partition_record(gm, fw, bw, num_fwd_outputs: int, config) -> dict:
    from regal.torch._compile_joint import partition_peak
    fw_ops = {n.name for n in fw.graph.nodes if n.op == "call_function"}
    again = sorted(n.name for n in bw.graph.nodes if n.op == "call_function" and n.name in fw_ops)
    count, nbytes = _saved(fw, num_fwd_outputs)
    peak, missing, why = partition_peak(gm, num_fwd_outputs, fw, bw, config)
    return {"saved": count, "saved_bytes": nbytes, "recomputed": len(again), "recomputed_ops": again[:40],
            "regal_model_peak_bytes": peak, "sequence_missing": missing, "invalid": why,
            "fw_ops": len(fw_ops), "bw_ops": sum(n.op == "call_function" for n in bw.graph.nodes)}


def _hooks(side: str, records: list):
    from torch._inductor.custom_graph_pass import CustomPartitionerFn, CustomSchedulerPass

    from regal.torch.compile import CompileConfig
    from regal.torch.plan import torch_threads_kept

    config = CompileConfig()

    class Partition(CustomPartitionerFn):
        def __call__(self, gm, joint_inputs, **kwargs):
            with torch_threads_kept():
                return self.partition(gm, joint_inputs, **kwargs)

        def partition(self, gm, joint_inputs, **kwargs):
            from torch._functorch.partitioners import min_cut_rematerialization_partition

            from regal.torch._compile_joint import choose_partition
            n = kwargs["num_fwd_outputs"]
            fw, bw = min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
            rec = {"hook": "partition", "min_cut": _partition_record(gm, fw, bw, n, config)}
            if side == "regal_01":   # what regal.torch.compile's partitioner does, and the partition it returns
                (fw, bw), result = choose_partition(gm, joint_inputs, kwargs, (fw, bw), 0.1, config)
                rec["regal_search"] = result._asdict()
                rec["returned"] = _partition_record(gm, fw, bw, n, config)
            records.append(rec)
            return fw, bw

        def uuid(self):
            return f"diag-{side}"

    class Order(CustomSchedulerPass):
        def __call__(self, nodes):
            with torch_threads_kept():
                return self.order(nodes)

        def order(self, nodes):
            from torch._inductor.memory import estimate_peak_memory
            from torch._inductor.virtualized import V
            from torch.utils._ordered_set import OrderedSet

            from regal.torch._compile_order import kernel_graph_records, order_kernels
            sched = V.graph.scheduler
            outs = OrderedSet(V.graph.get_output_names())
            _, freeable = kernel_graph_records(nodes, sched.name_to_buf, sched.name_to_fused_node,
                                               OrderedSet(V.graph.graph_inputs.keys()), outs)
            given, _ = estimate_peak_memory(nodes, freeable, outs)
            rec = {"hook": "order", "kernels": len(nodes), "inductor_bytes": int(given)}
            if side.startswith("regal"):
                nodes, result = order_kernels(nodes, config.evaluations, config.seed, config.time_limit_s)
                rec["regal"] = result._asdict()
            records.append(rec)
            return nodes

        def uuid(self):
            return f"diag-order-{side}"

    return {"custom_partitioner_fn": Partition(), "_post_fusion_custom_pass": Order()}


def _peak_moment(step, inputs) -> dict:
    """The profiler's memory events of one step: the high mark, its time, the allocation that
    reached it and the innermost profiler ranges open then."""
    from torch.profiler import ProfilerActivity, profile

    from regal.torch.plan import _cpu_memory_events
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(*inputs)
    events = prof.profiler.kineto_results.events()
    live = high = 0
    at = None
    for t, k, b in _cpu_memory_events(events):
        live += b
        if live > high:
            high, at = live, (t, b)
    ranges = sorted(((e.end_ns() - e.start_ns(), e.name()) for e in events
                     if e.name() != "[memory]" and at and e.start_ns() <= at[0] <= e.end_ns()))
    timeline, live = [], 0
    marks = sorted((e.end_ns(), e.name()) for e in events if e.name().startswith(("aten::convolution", "## Call",
                                                                                  "CompiledFunction")))
    mem = _cpu_memory_events(events)
    j = 0
    for t, name in marks:   # the live bytes at the end of each convolution and compiled graph
        while j < len(mem) and mem[j][0] <= t:
            live += mem[j][2]
            j += 1
        timeline.append((name, live))
    return {"high_bytes": high, "last_alloc_bytes": at[1] if at else None,
            "ranges": [name for _, name in ranges[:8]], "timeline": timeline}


def run(name: str, side: str) -> dict:
    import torch

    from experiments.torch_compile import side_setup, training_step
    from regal.torch.eager import measure_step, process_bytes

    model, inputs, loss_fn, opt, patch = side_setup(name, side)
    records: list = []
    losses = []
    with patch:
        fwd = torch.compile(model, options=_hooks(side, records))
        step = training_step(fwd, loss_fn, opt, losses)
        step(*inputs)
        step(*inputs)
        base = process_bytes("cpu")
        peak = measure_step(step, inputs, torch.device("cpu"), warmup=0)
        moment = _peak_moment(step, inputs)
    return {"program": name, "side": side, "peak_bytes": peak, "base_bytes": base, "moment": moment,
            "records": records, "losses": losses}


#: (batch, channels in, size, kernel, groups, channels out): MNASNet-0.5's, ShuffleNetV2's and
#: ResNet's convolution shapes in these programs
CONV_SHAPES = ((16, 64, 24, 3, 1, 64), (16, 128, 12, 3, 1, 128), (16, 512, 3, 3, 1, 512), (16, 3, 96, 7, 1, 64),
               (8, 48, 16, 5, 48, 48), (8, 576, 2, 5, 576, 576), (8, 96, 8, 3, 96, 96), (8, 24, 32, 1, 1, 72))


def conv_workspaces() -> list:
    """[(shape, layout, workspace bytes)]: the allocator's high mark of one CPU
    `convolution_backward` (input and weight gradients) above the gradients it returns, with
    input, weight and incoming gradient channels-last or contiguous."""
    import torch

    from regal.torch.plan import peak_during
    torch.set_num_threads(1)
    rows = []
    for n, c, h, k, g, o in CONV_SHAPES:
        for layout in ("channels_last", "contiguous"):
            def f(t, layout=layout):
                return t.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else t.contiguous()
            x, w = f(torch.randn(n, c, h, h)), f(torch.randn(o, c // g, k, k))
            grad = f(torch.randn(torch.nn.functional.conv2d(x, w, None, 1, k // 2, 1, g).shape))
            high, _, got = peak_during(lambda: torch.ops.aten.convolution_backward.default(
                grad, x, w, [0], [1, 1], [k // 2, k // 2], [1, 1], False, [0, 0], g, [True, True, False]))
            rows.append(((n, c, h, k, g, o), layout, high - sum(t.untyped_storage().nbytes() for t in got if t is not None)))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    if argv is None and sys.argv[1:] == ["--workspaces"]:
        for shape, layout, nbytes in conv_workspaces():
            print(f"(batch, in, size, kernel, groups, out) = {shape} {layout}: {nbytes / 1e6:.2f} MB")
        return 0
    ap.add_argument("program")
    ap.add_argument("--side", default="regal_01", choices=("compile", "compile_amb05", "regal_01"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="regal-inductor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        print(json.dumps(run(args.program, args.side)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
