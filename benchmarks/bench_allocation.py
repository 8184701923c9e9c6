"""SPEC section 3a's allocation (`regal.allocation`) before and after issue 36: the value-to-
allocation pass as it was (tests/naive_allocation.py, every value against every allocation and
each value in it) and as it is, on one graph at the gp-dfs start. Prints the times and whether
the two assign every value alike and report the same bytes.

    python -m benchmarks.bench_allocation GRAPH [-d 2] [--plan SOLUTION.json] [--new-only]
"""

import argparse
import importlib.util
import json
import os
import time

import numpy as np

import regal.allocation as alloc_module
from regal.heuristics import heuristic_solutions
from regal.load import load_graph


def _schedule(graph, devices, plan):
    if plan is None:
        _, placement, order = next(heuristic_solutions(graph, devices, 0, names=("gp-dfs",)))
        return placement, order
    with open(plan) as f:
        doc = json.load(f)
    index = graph.index
    placement = np.zeros(graph.num_nodes, dtype=np.int64)
    for node, k in doc["placement"].items():
        placement[index[node]] = k
    return placement, np.asarray([index[node] for node in doc["order"]])


def _timed(graph, placement, order, devices, assign):
    """(Allocation, seconds in all, seconds in the pass, the pass's where arrays per device)."""
    spent, wheres = [0.0], []
    kernel = alloc_module._assign

    def timed_assign(*args):
        t = time.perf_counter()
        where = assign(*args)
        spent[0] += time.perf_counter() - t
        wheres.append(where)
        return where

    alloc_module._assign = timed_assign
    try:
        t = time.perf_counter()
        result = alloc_module.allocation(graph, placement, order, devices)
        return result, time.perf_counter() - t, spent[0], wheres
    finally:
        alloc_module._assign = kernel


def _old_pass():
    """tests/naive_allocation.py (the pass as it was, kept as the test's twin), loaded from its
    file: a benchmark of this checkout, with nothing added to sys.path."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "naive_allocation.py")
    spec = importlib.util.spec_from_file_location("naive_allocation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph")
    parser.add_argument("-d", "--devices", type=int, default=1)
    parser.add_argument("--plan", help="a solution JSON to take the schedule from (default: gp-dfs)")
    parser.add_argument("--new-only", action="store_true", help="skip the old pass (minutes at 300K nodes)")
    args = parser.parse_args(argv)
    old_assign = _old_pass().assign

    graph = load_graph(args.graph)
    placement, order = _schedule(graph, args.devices, args.plan)
    alloc_module.allocation(graph, placement, order, args.devices)  # compiled (or loaded from the cache) first
    runs = [("new", alloc_module._assign)] + ([] if args.new_only else [("old", old_assign)])
    out = {}
    for name, assign in runs:
        out[name] = _timed(graph, placement, order, args.devices, assign)
        res, total, spent, _ = out[name]
        print(f"{name}: allocation {total:.2f} s, of which the pass {spent:.2f} s; "
              f"allocation_bytes {res.allocation_bytes:,}", flush=True)
    if "old" in out:
        same_where = all(np.array_equal(a, b) for a, b in zip(out["new"][3], out["old"][3]))
        same = all(np.array_equal(a, b) for a, b in zip(out["new"][0][1:], out["old"][0][1:]))
        print(f"n = {graph.num_nodes:,}, d = {args.devices}: same assignment {same_where}, "
              f"same result {same and out['new'][0][0] == out['old'][0][0]}")


if __name__ == "__main__":
    main()
