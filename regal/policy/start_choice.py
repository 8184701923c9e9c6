"""Which start the flagship's climb goes on from: the start-choice head's inputs (NumPy only).

The flagship scores every start (heuristic and "computes on fewer devices" seeds) with one
evaluation and, without a policy, climbs from the lowest score. At a short budget that choice
decides most of the answer (issue 34: on valid graphs, climbing from the best start of each
graph instead reaches the flagship's own 5,000-evaluation peak at 1,000 evaluations on about
twice as many runs). A policy with a start head (`PolicyConfig.start`) reads the graph and one
row of features per start, and picks the start to climb from (`Policy.choose_start`).

Features per start (float32[K, NUM_START_FEATURES]): whether it computes on fewer devices, its
peak and its device-peak sum over the lowest of the starts (logs, clipped to [0, 2]), its rank
by score (0 first, 1 last), whether it is the lowest score (the choice without a policy; the head
starts out preferring it), and the number of starts (log2 / 5). Which heuristic made a start is
not a feature: with it, what a policy learned did not carry to a graph source it had not seen
(experiments/results/INDEX.md).
"""

from __future__ import annotations

import numpy as np

__all__ = ["NUM_START_FEATURES", "DEFAULT_COLUMN", "MAX_STARTS", "start_features", "padded_start_features"]

NUM_START_FEATURES = 6
#: The column that marks the lowest-scored start (the choice without a policy)
DEFAULT_COLUMN = 4
#: Starts a choice reads at most (padded to this many, so the network compiles once)
MAX_STARTS = 32


def start_features(names, scores) -> np.ndarray:
    """float32[K, NUM_START_FEATURES] for starts `names` with climb scores `scores`
    (`regal.climb.Score`: peak, device-peak sum, steps at peak), K <= MAX_STARTS."""
    k = len(names)
    if not 0 < k <= MAX_STARTS or len(scores) != k:
        raise ValueError(f"a start choice reads 1..{MAX_STARTS} starts with a score each, got {k} and {len(scores)}")
    out = np.zeros((k, NUM_START_FEATURES), dtype=np.float32)
    out[:, 0] = ["/compute-on-" in str(name) for name in names]
    peak = np.array([max(s[0], 1) for s in scores], dtype=np.float64)
    total = np.array([max(s[1], 1) for s in scores], dtype=np.float64)
    out[:, 1] = np.clip(np.log(peak / peak.min()), 0.0, 2.0)
    out[:, 2] = np.clip(np.log(total / total.min()), 0.0, 2.0)
    order = sorted(range(k), key=lambda i: tuple(scores[i]))
    out[order, 3] = np.arange(k) / max(k - 1, 1)
    out[order[0], DEFAULT_COLUMN] = 1.0
    out[:, 5] = np.log2(k) / 5.0   # > 0 from two starts on, so a real row is never all zeros
    return out


def padded_start_features(names, scores) -> np.ndarray:
    """float32[MAX_STARTS, NUM_START_FEATURES]: `start_features` of the first MAX_STARTS starts,
    rows of zeros after them (what the start-choice head reads)."""
    k = min(len(names), MAX_STARTS)
    out = np.zeros((MAX_STARTS, NUM_START_FEATURES), dtype=np.float32)
    out[:k] = start_features(list(names)[:k], list(scores)[:k])
    return out
