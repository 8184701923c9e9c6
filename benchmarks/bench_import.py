"""Import speed of `regal.onnx.load_onnx`: a synthetic 5,000-node ONNX graph and the shipped fixtures.

    python -m benchmarks.bench_import [--nodes 5000] [--repeats 5]

Prints a Markdown table: ONNX nodes, regal nodes, median and best wall time over --repeats
imports (the first, which pays for importing onnx, is a separate warm-up). The synthetic model
is a stack of transformer-like blocks (MatMul, Add, Relu, Reshape, LayerNormalization, Mul),
built in memory with onnx.helper, with a symbolic batch dimension given through `dims`.
The target (issue: ONNX and PyTorch importers) is under 2 s for 5,000 nodes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from regal.onnx import load_onnx

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "data", "onnx")


def synthetic_model(num_nodes: int, width: int = 256) -> onnx.ModelProto:
    """A chain of 6-node blocks (MatMul, Add, Relu, Reshape, LayerNormalization, Mul + skip) with
    its own weights per block, then Relus up to exactly `num_nodes` ONNX nodes."""
    nodes, inits = [], []
    x = "x"
    shape = numpy_helper.from_array(np.array([-1, width], np.int64), "shape")
    inits.append(shape)
    for b in range(num_nodes // 6):
        w = numpy_helper.from_array(np.zeros((width, width), np.float32), f"w{b}")
        bias = numpy_helper.from_array(np.zeros(width, np.float32), f"b{b}")
        scale = numpy_helper.from_array(np.ones(width, np.float32), f"g{b}")
        inits += [w, bias, scale]
        nodes += [h.make_node("MatMul", [x, f"w{b}"], [f"mm{b}"], name=f"mm{b}"),
                  h.make_node("Add", [f"mm{b}", f"b{b}"], [f"add{b}"], name=f"add{b}"),
                  h.make_node("Relu", [f"add{b}"], [f"relu{b}"], name=f"relu{b}"),
                  h.make_node("Reshape", [f"relu{b}", "shape"], [f"rs{b}"], name=f"rs{b}"),
                  h.make_node("LayerNormalization", [f"rs{b}", f"g{b}"], [f"ln{b}"], name=f"ln{b}"),
                  h.make_node("Mul", [f"ln{b}", x], [f"out{b}"], name=f"mul{b}")]
        x = f"out{b}"
    for k in range(num_nodes % 6):
        nodes.append(h.make_node("Relu", [x], [f"tail{k}"], name=f"tail{k}"))
        x = f"tail{k}"
    graph = h.make_graph(nodes, "synthetic", [h.make_tensor_value_info("x", T.FLOAT, ["batch", width])],
                         [h.make_tensor_value_info(x, T.FLOAT, None)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


def time_import(source, dims, repeats: int) -> tuple[int, float, float]:
    load_onnx(source, dims=dims)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        g = load_onnx(source, dims=dims)
        times.append(time.perf_counter() - t0)
    return g.num_nodes, statistics.median(times), min(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    rows = []
    model = synthetic_model(args.nodes)
    data = model.SerializeToString()
    rows.append((f"synthetic ({len(data) / 1e6:.1f} MB, weights inline)", len(model.graph.node),
                 *time_import(data, {"batch": 8}, args.repeats)))
    manifest = json.load(open(os.path.join(FIXTURES, "manifest.json")))["models"]
    for name, entry in manifest.items():
        path = os.path.join(FIXTURES, entry["file"])
        n = len(onnx.load_from_string(gzip.open(path).read()).graph.node)
        rows.append((f"{name} (.onnx.gz)", n, *time_import(path, entry["reference_dims"], args.repeats)))
    print(f"onnx {onnx.__version__}, Python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} cores; median and best of {args.repeats} imports after a warm-up\n")
    print("| model | ONNX nodes | regal nodes | median s | best s |")
    print("|---|---:|---:|---:|---:|")
    for label, n, g, med, best in rows:
        print(f"| {label} | {n:,} | {g:,} | {med:.3f} | {best:.3f} |")


if __name__ == "__main__":
    main()
