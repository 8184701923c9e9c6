"""`regal train --head start|moves`: the learned policy's recipe (regal/policy/learned.json) as
one call per head, writing into a folder OUT.

- **start** (`train_head("start", ...)`): the flagship's per-start outcomes on the data's cells
  (`regal.training.data.start_row`, cached in OUT/start-rows/), then the start-choice head trained
  on the train cells by the exact policy gradient (`regal.training.start`) for a fixed number of
  epochs; the valid cells' choice cost is recorded, not used to choose. Writes OUT/start.npz.
- **moves** (`train_head("moves", ...)`): the no-policy flagship's per-node counts on the data's
  cells (`regal.training.data.moves_row`, OUT/moves-rows/), then the move head on the start
  policy's fixed network (`regal.training.moves.train_move_head`: imitation, then REINFORCE) on
  the train cells; its score against no policy on the valid cells is recorded. Writes
  OUT/learned.npz (start choice and move head: what ships as regal/policy/learned.npz).

The data: the corpus' train and valid splits (`regal.training.data.CORPUS`, `per_source` train
graphs a source), or graph files given (every one a train cell), at each device count and seed.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

__all__ = ["START_FILE", "MOVES_FILE", "train_head"]

START_FILE, MOVES_FILE = "start.npz", "learned.npz"


def _jobs(manifest, graphs, per_source, seeds, devices) -> list:
    from regal.training.data import corpus_jobs, given_jobs
    if graphs:
        return given_jobs(graphs, seeds, devices)
    data = os.path.dirname(os.path.abspath(manifest)) if manifest else None
    return corpus_jobs(per_source, seeds, devices, data=data)


def _rows(fn, out_dir: str, name: str, jobs: list, budget: int, workers: int, fresh: bool, log) -> list:
    from regal.training.data import run_rows
    folder = os.path.join(out_dir, name)
    if fresh and os.path.isdir(folder):
        shutil.rmtree(folder)
    return run_rows(fn, jobs, folder, budget=budget, workers=workers, log=log)


def train_head(head: str, out_dir: str, *, manifest=None, graphs=(), per_source: int = 30, seeds=(0, 1),
               devices=(2, 4), budget: int = 1000, epochs: int = 16, learning_rate: float | None = None,
               entropy_coef: float = 0.01, steps: int = 4, samples: int = 12, imitation_steps: int = 600,
               start_policy=None, mix: float = 0.5, seed: int = 0, fresh: bool = False, workers: int = 1,
               log=print) -> str:
    """Train `head` ("start" or "moves") into `out_dir` (module docstring); returns the file
    written. learning_rate: the start head's Adam rate (default 3e-3), or the move head's
    REINFORCE rate (default 1e-3); samples: flagship runs per REINFORCE step."""
    from regal._io import directory_lock
    if head not in ("start", "moves"):
        raise ValueError(f"no head {head!r} (start or moves)")
    jobs = _jobs(manifest, graphs, per_source, seeds, devices)
    if not jobs:
        raise ValueError("no graphs to train on")
    recipe = {"head": head, "per_source": None if graphs else per_source, "graphs": len({j[2] for j in jobs}),
              "collect_seeds": list(seeds), "devices": list(devices), "budget": budget, "seed": seed,
              "command": " ".join(["regal"] + sys.argv[1:]) if os.path.basename(sys.argv[0]) == "regal" else None}
    with directory_lock(out_dir, what="another regal train"):
        if head == "start":
            return _start(out_dir, jobs, recipe, epochs, 3e-3 if learning_rate is None else learning_rate,
                          entropy_coef, workers, fresh, log)
        return _moves(out_dir, jobs, recipe, start_policy, imitation_steps, steps, samples,
                      1e-3 if learning_rate is None else learning_rate, mix, workers, fresh, log)


def _start(out_dir, jobs, recipe, epochs, lr, entropy, workers, fresh, log) -> str:
    from regal.training.data import start_row
    from regal.training.start import choice_cost, start_cells, train_start_head
    t0 = time.perf_counter()
    log(f"collecting each start's outcome at {recipe['budget']} evaluations")
    rows = _rows(start_row, out_dir, "start-rows", jobs, recipe["budget"], workers, fresh, log)
    cells = start_cells(rows)
    train = [c for _, split, c in cells if split == "train"]
    valid = [c for _, split, c in cells if split == "valid"]
    log(f"training the start choice on {len(train)} cells for {epochs} epochs")
    pol = train_start_head(train, epochs=epochs, lr=lr, entropy=entropy, seed=recipe["seed"], log=log)
    meta = {**pol.meta, **recipe, "collected_rows": len(rows)}
    if valid:
        meta["valid_cells"] = len(valid)
        meta["valid_cost"], meta["valid_default_cost"] = choice_cost(pol, valid)
        log(f"valid: {meta['valid_cost']:.3f} % above the best start (the flagship's own choice: "
            f"{meta['valid_default_cost']:.3f} %)")
    meta["seconds"] = round(time.perf_counter() - t0, 1)
    pol.meta = meta
    path = os.path.join(out_dir, START_FILE)
    pol.save(path)
    log(f"wrote {path}")
    return path


def _moves(out_dir, jobs, recipe, start_policy, imitation_steps, steps, batch, lr, mix, workers, fresh, log) -> str:
    from regal.policy import load_policy
    from regal.training.data import moves_row
    from regal.training.moves import move_cells, score, train_move_head, with_head
    t0 = time.perf_counter()
    start_file = start_policy or os.path.join(out_dir, START_FILE)
    if not start_policy and not os.path.exists(start_file):
        raise ValueError(f"{start_file}: no start policy (run --head start first, or give --start)")
    start = load_policy(start_file)
    if not start.config.start:
        raise ValueError(f"{start_file}: the policy has no start-choice head (--start)")
    log(f"collecting the no-policy flagship's picks at {recipe['budget']} evaluations")
    rows = _rows(moves_row, out_dir, "moves-rows", jobs, recipe["budget"], workers, fresh, log)
    train = move_cells([r for r in rows if r["split"] == "train"], start)
    valid = move_cells([r for r in rows if r["split"] == "valid"], start)
    log(f"training the move head on {len(train)} cells: {imitation_steps} imitation steps, {steps} REINFORCE steps")
    _, head, meta = train_move_head(start, train, imitate=imitation_steps, steps=steps, batch=batch, lr=lr, mix=mix,
                                    budget=recipe["budget"], seed=recipe["seed"], log=log)
    meta = {**meta, **recipe, "start_policy": os.path.abspath(start_file), "collected_rows": len(rows), "mix": mix}
    if valid:
        meta["valid_cells"] = len(valid)
        meta["valid_vs_none_pct"] = score(valid, start, head, mix, recipe["budget"])
        log(f"valid: {meta['valid_vs_none_pct']:+.3f} % lower peak than no policy")
    meta["seconds"] = round(time.perf_counter() - t0, 1)
    path = os.path.join(out_dir, MOVES_FILE)
    with_head(start, head, mix, {"moves": meta}).save(path)   # the start head's meta stays at the top
    log(f"wrote {path}")
    return path
