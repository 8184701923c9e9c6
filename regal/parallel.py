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

__all__ = ["dask_client", "cached_graph"]


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


@lru_cache(maxsize=64)
def cached_graph(path: str):
    """Load a graph once per worker process."""
    from regal.graph import load
    return load(path)

