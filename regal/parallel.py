"""Dask fan-out shared by training and experiments: a local cluster by default, or an existing one.

    with dask_client(scheduler=None, workers=2) as client:
        futures = client.map(fn, args, pure=False)

Workers are processes with one thread each (BRKGA runs use one Numba thread per worker), so a
local cluster of W workers keeps W cores busy. An existing cluster is reached with
`scheduler="tcp://HOST:PORT"`; nothing else changes. Worker-side graph loading is cached per
process (`cached_graph`), so tasks ship paths, not graphs.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import lru_cache

__all__ = ["dask_client", "cached_graph", "solve_to_file"]


@contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None):
    """A dask.distributed Client: connected to `scheduler`, or on a new local process cluster."""
    import logging

    from dask.distributed import Client, LocalCluster
    if scheduler:
        client = Client(scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    workers = workers or os.cpu_count() or 1
    logging.getLogger("distributed").setLevel(logging.ERROR)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=logging.ERROR)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def cached_graph(path: str):
    """Load a graph once per worker process (again when the file changed since)."""
    st = os.stat(path)
    return _cached_graph(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _cached_graph(path: str, mtime_ns: int, size: int):
    from regal.graph import load
    return load(path)


def solve_to_file(method: str, options: dict, graph_path: str, devices: int, seed: int, out: str,
                  label: str | None = None) -> dict:
    """Run registry method `method` on the graph file and write its regal-solution/1 file to
    `out` (atomically); a method that refuses the graph (a ValueError: exact on a wide graph, xla
    without a schedule) leaves {"refused": reason} there instead. A Dask task of the experiments:
    plain arguments, so a worker needs only regal installed. `label` names the cell in the
    refusal (default: the method)."""
    import dataclasses
    import json
    import time

    import regal.methods
    graph = cached_graph(graph_path)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    t = time.perf_counter()
    try:
        sol = regal.methods.solve(method, graph, devices, seed=seed, **options)
    except ValueError as e:
        from regal._io import atomic_text
        with atomic_text(out) as f:
            json.dump({"refused": str(e).splitlines()[0], "method": label or method}, f)
        return {"cell": out, "refused": True}
    sol = dataclasses.replace(sol, info={**sol.info, "wall_seconds": time.perf_counter() - t})
    sol.save(out)
    return {"cell": out, "peak_bytes": sol.peak_bytes}
