"""The data of the learned policy's heads (`regal train --head start|moves`): flagship runs on the
corpus' train and valid splits, one cached JSON row per (graph, devices, seed).

- **start** (`start_row`): the flagship at a short budget climbing from each of its starts in turn
  (`Forced`), with the starts' names and climb scores: every action's reward of the start choice.
- **moves** (`moves_row`): the flagship without a policy, its own picks counted per node
  (`regal.moves.MoveProposals.uniform`, bit for bit the flagship's draws) and its peak: the
  imitation targets of the move head.

The corpus (`CORPUS`) is the six sources' train and valid splits of graphs up to 3,000 nodes
(experiments/configs/learned_answers.json holds the same list): `per_source` train graphs spread
over each source's list, a third as many valid ones. The data set is found as `regal.dataset`
finds it ($REGAL_DATA_DIR, else ./data).
"""

from __future__ import annotations

import json
import os
import time

__all__ = ["CORPUS", "Forced", "corpus_jobs", "given_jobs", "start_row", "moves_row", "run_rows"]

#: (source, split, dataset entry): the corpus' train and valid splits, as
#: experiments/configs/learned_answers.json names them ("manifest": a file of the data folder)
CORPUS = (
    ("real", "train", {"split": "train", "max_nodes": 3000}),
    ("real", "valid", {"split": "valid", "max_nodes": 3000}),
    ("synthetic", "train", {"split": "train", "synthetic": True, "limit": 60}),
    ("synthetic", "valid", {"split": "valid", "synthetic": True, "limit": 30}),
    ("flax", "train", {"split": "flax_hlo:train", "manifest": "manifest_corpus.json", "max_nodes": 3000}),
    ("flax", "valid", {"split": "flax_hlo:valid", "manifest": "manifest_corpus.json", "max_nodes": 3000}),
    ("torch", "train", {"split": "torch:train", "manifest": "manifest_corpus.json", "max_nodes": 3000}),
    ("torch", "valid", {"split": "torch:valid", "manifest": "manifest_corpus.json", "max_nodes": 3000}),
    ("layers", "train", {"split": "layers:train", "manifest": "manifest_corpus.json", "max_nodes": 3000}),
    ("layers", "valid", {"split": "layers:valid", "manifest": "manifest_corpus.json", "max_nodes": 3000}),
    ("layered", "train", {"split": "synthetic_layered:train", "manifest": "manifest_corpus.json", "spread": 60}),
    ("layered", "valid", {"split": "synthetic_layered:valid", "manifest": "manifest_corpus.json", "spread": 20}),
)


def dataset_paths(entry: dict, data: str | None = None) -> list[str]:
    """The graph files of one dataset entry (`CORPUS`'s): its split of its manifest (a file of the
    data folder `data`, default `regal.dataset.data_dir()`), up to max_nodes, `spread` of them
    over the families (`regal.dataset.spread`), the first `limit`."""
    from regal.dataset import data_dir, split_paths, spread
    folder = data or data_dir()
    manifest = os.path.join(folder, entry.get("manifest", "manifest.json"))
    synthetic = entry.get("synthetic", False)
    paths = split_paths(entry["split"], manifest=manifest, synthetic=synthetic, max_nodes=entry.get("max_nodes"))
    if entry.get("spread"):
        paths = spread(paths, entry["spread"], manifest=manifest, synthetic=synthetic)
    return paths[:entry["limit"]] if entry.get("limit") else paths


def corpus_jobs(per_source: int, seeds=(0,), devices=(2, 4), datasets=None, data: str | None = None) -> list:
    """The data's cells (source, split, path, devices, seed): `per_source` train graphs spread
    evenly over each source's list and a third as many valid ones (at least one), every device
    count and seed. datasets: (source, split, entry) triples (default `CORPUS`)."""
    jobs = []
    for source, split, entry in (CORPUS if datasets is None else datasets):
        paths = dataset_paths(entry, data)
        want = per_source if split == "train" else max(per_source // 3, 1)
        paths = paths[::max(1, len(paths) // want)][:want]
        jobs += [(source, split, p, d, s) for s in seeds for p in paths for d in devices]
    return jobs


def given_jobs(paths, seeds=(0,), devices=(2, 4)) -> list:
    """Cells on graph files given by the user: every one a training cell (source "given")."""
    return [("given", "train", os.path.abspath(p), d, s) for s in seeds for p in paths for d in devices]


class Forced:
    """A start chooser that climbs from start `k` (the data: each start's outcome) and keeps
    what the flagship showed it (the starts' names and scores)."""

    def __init__(self, k: int):
        self.k, self.names, self.scores = k, None, None

    def choose_start(self, graph, devices, names, scores) -> int:
        self.names, self.scores = list(names), [list(map(int, s)) for s in scores]
        return min(self.k, len(names) - 1)


class Counting:
    """No policy, the picks counted (`MoveProposals.uniform`: the flagship's own draws)."""

    moves = None

    def move_proposals(self, graph, devices):
        from regal.moves import MoveProposals
        self.moves = MoveProposals.uniform(graph.num_nodes)
        return self.moves


def _row(job) -> dict:
    source, split, path, d, seed = job
    return {"source": source, "split": split, "path": path, "devices": d, "seed": seed}


def start_row(job, budget: int = 1000) -> dict:
    """The flagship at `budget` evaluations climbing from each of its starts in turn, on one cell:
    the row's "names", "scores" (the starts' climb scores) and "outcomes" (peak bytes per start)."""
    from regal.flagship import optimize
    from regal.parallel import cached_graph
    _, _, path, d, seed = job
    g = cached_graph(path)
    first = Forced(0)
    outcomes = [optimize(g, d, budget=budget, seed=seed, policy=first).peak_bytes]
    for k in range(1, len(first.names)):
        outcomes.append(optimize(g, d, budget=budget, seed=seed, policy=Forced(k)).peak_bytes)
    return {**_row(job), "names": first.names, "scores": first.scores, "outcomes": outcomes}


def moves_row(job, budget: int = 1000) -> dict:
    """The no-policy flagship at `budget` on one cell, counting per node: the row's "peak_bytes"
    and "stats" (`MoveProposals.stats`, int[n, STATS])."""
    from regal.flagship import optimize
    from regal.parallel import cached_graph
    _, _, path, d, seed = job
    rec = Counting()
    t = time.perf_counter()
    sol = optimize(cached_graph(path), d, budget=budget, seed=seed, policy=rec)
    return {**_row(job), "peak_bytes": sol.peak_bytes, "seconds": round(time.perf_counter() - t, 4),
            "stats": rec.moves.stats.astype(int).tolist()}


def _row_file(folder: str, job) -> str:
    source, _, path, d, seed = job
    return os.path.join(folder, source, os.path.basename(path).split(".")[0], f"d{d}_s{seed}.json")


def _write_row(fn, job, budget: int, out: str) -> dict:
    from regal._io import atomic_text
    row = fn(job, budget)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with atomic_text(out) as f:
        json.dump(row, f)
    return row


def run_rows(fn, jobs: list, folder: str, budget: int = 1000, workers: int = 1, log=None) -> list[dict]:
    """Each job's row `fn(job, budget)` (`start_row` or `moves_row`), cached one file each under
    `folder` (a cached row is read, not run again: a stopped collection resumes); on `workers`
    local processes (Dask) when more than one."""
    files = [_row_file(folder, job) for job in jobs]
    todo = [(job, f) for job, f in zip(jobs, files) if not os.path.exists(f)]
    if log:
        log(f"{len(jobs)} cells, {len(jobs) - len(todo)} cached, {len(todo)} to run")
    t0 = time.perf_counter()
    if todo and workers > 1:
        from dask.distributed import as_completed

        from regal.parallel import dask_client
        with dask_client(workers=workers) as client:
            futures = [client.submit(_write_row, fn, job, budget, f, pure=False) for job, f in todo]
            for i, fut in enumerate(as_completed(futures), 1):
                fut.result()
                if log and (i % 50 == 0 or i == len(todo)):
                    log(f"  {i}/{len(todo)} cells ({time.perf_counter() - t0:.0f} s)")
    else:
        for i, (job, f) in enumerate(todo, 1):
            _write_row(fn, job, budget, f)
            if log and (i % 50 == 0 or i == len(todo)):
                log(f"  {i}/{len(todo)} cells ({time.perf_counter() - t0:.0f} s)")
    out = []
    for f in files:
        with open(f) as fh:
            out.append(json.load(fh))
    return out
