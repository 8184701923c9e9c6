"""REGAL's hook into the BRKGA: a Beta(alpha, beta) per gene and an elite bias per node.

Paliwal et al. (ICLR 2020), section 3: the policy predicts, per node, the parameters of the
distributions the BRKGA draws its initial population and mutants from, and optionally the
probability that a child inherits that node's genes from its elite parent.

Sampling is by inverse CDF from the same uniform numbers plain BRKGA draws: a gene with prior
Beta(1, 1) receives the uniform itself, so uniform priors reproduce plain BRKGA exactly, and a
biased run shares its random numbers with the plain run on the same seed (common random
numbers, which is what REINFORCE's reward compares). Each Beta's quantile function is tabulated
once at 2**16 + 1 points (scipy's betaincinv) and interpolated linearly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

__all__ = ["Priors", "uniform_priors", "sample_keys"]

_TABLE_SIZE = 1 << 16
_ONE_BELOW = np.nextafter(1.0, 0.0)


@dataclass(frozen=True, eq=False)
class Priors:
    """Per-gene Beta parameters and per-node elite inheritance (n nodes, d devices, L = n*(d+1)).

    alpha, beta: float64[L] (gene layout of `regal.decode`); elite_inheritance: float64[n] or
    None (None: every node uses the BRKGA config's value).
    """
    alpha: np.ndarray
    beta: np.ndarray
    elite_inheritance: np.ndarray | None = None

    def __post_init__(self):
        a = np.ascontiguousarray(self.alpha, dtype=np.float64)
        b = np.ascontiguousarray(self.beta, dtype=np.float64)
        if a.shape != b.shape or a.ndim != 1:
            raise ValueError("alpha and beta must be 1-D arrays of the same length")
        if not (np.all(a > 0) and np.all(b > 0) and np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            raise ValueError("Beta parameters must be finite and positive")
        object.__setattr__(self, "alpha", a)
        object.__setattr__(self, "beta", b)
        if self.elite_inheritance is not None:
            r = np.ascontiguousarray(self.elite_inheritance, dtype=np.float64)
            if r.ndim != 1 or a.shape[0] % max(r.shape[0], 1) or np.any((r < 0) | (r > 1)):
                raise ValueError("elite_inheritance must be float[num_nodes] in [0, 1]")
            object.__setattr__(self, "elite_inheritance", r)

    @property
    def num_keys(self) -> int:
        return int(self.alpha.shape[0])

    def gene_inheritance(self, default: float) -> np.ndarray:
        """float64[L]: the elite-inheritance probability of every gene."""
        if self.elite_inheritance is None:
            return np.full(self.num_keys, float(default))
        return np.repeat(self.elite_inheritance, self.num_keys // self.elite_inheritance.shape[0])

    @cached_property
    def groups(self) -> list:
        """[(a, b, gene indices)] for every distinct (alpha, beta) pair other than (1, 1)."""
        pairs = np.stack([self.alpha, self.beta], axis=1)
        nonuniform = np.flatnonzero((pairs[:, 0] != 1.0) | (pairs[:, 1] != 1.0))
        out = []
        if nonuniform.size:
            uniq, inv = np.unique(pairs[nonuniform], axis=0, return_inverse=True)
            for i, (a, b) in enumerate(uniq):
                out.append((float(a), float(b), nonuniform[inv.reshape(-1) == i]))
        return out


def uniform_priors(num_nodes: int, devices: int) -> Priors:
    """The priors of plain BRKGA: Beta(1, 1) everywhere, the config's elite inheritance."""
    L = num_nodes * (devices + 1)
    return Priors(np.ones(L), np.ones(L), None)


@lru_cache(maxsize=64)
def _quantile_table(a: float, b: float) -> np.ndarray:
    from scipy.special import betaincinv
    grid = np.linspace(0.0, 1.0, _TABLE_SIZE + 1)
    q = betaincinv(a, b, grid)
    q[0], q[-1] = 0.0, 1.0
    return np.minimum(q, _ONE_BELOW)


def prepare_tables(pairs) -> None:
    """Compute the Beta quantile tables of the (a, b) `pairs` now (the sampler's constants, kept
    for the process; otherwise computed on first use), so that a search's `seconds` do not count
    them: `regal optimize` does this while its kernels load."""
    for a, b in pairs:
        if (a, b) != (1.0, 1.0):
            _quantile_table(float(a), float(b))


def sample_keys(priors: Priors | None, uniforms: np.ndarray) -> np.ndarray:
    """Map uniforms float64[m, L] in [0, 1) to keys drawn from the priors (in place, returned)."""
    if priors is None:
        return uniforms
    for a, b, idx in priors.groups:
        table = _quantile_table(a, b)
        u = uniforms[:, idx] * _TABLE_SIZE
        i = np.minimum(u.astype(np.int64), _TABLE_SIZE - 1)
        frac = u - i
        uniforms[:, idx] = np.minimum(table[i] + frac * (table[i + 1] - table[i]), _ONE_BELOW)
    return uniforms
