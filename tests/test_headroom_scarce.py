"""The recompute search's `joint_priors` hook (issue 56's headroom measurement) and the experiment's prior makers."""

from __future__ import annotations

import numpy as np
import pytest

from regal.priors import Priors
from regal.recompute_search import optimize_recompute

from randgraph import random_dag


def _graph():
    return random_dag(11, num_nodes=60, reuse_fraction=0.3)


def _same(a, b) -> bool:
    return (a.peak_bytes == b.peak_bytes and a.order.tolist() == b.order.tolist()
            and a.placement.tolist() == b.placement.tolist() and a.evaluations == b.evaluations)


@pytest.mark.parametrize("devices", [1, 2])
def test_no_joint_priors_and_uniform_ones_are_todays_search_bit_for_bit(devices):
    """joint_priors=None (the default) and Beta(1, 1) everywhere give the search without the argument."""
    g = _graph()
    L = g.num_nodes * (devices + 2)
    base = optimize_recompute(g, devices, 900, 5, 0.2, policy=None)
    none = optimize_recompute(g, devices, 900, 5, 0.2, policy=None, joint_priors=None)
    uniform = optimize_recompute(g, devices, 900, 5, 0.2, policy=None, joint_priors=Priors(np.ones(L), np.ones(L)))
    assert _same(base, none) and _same(base, uniform)


def test_joint_priors_reach_stage_3(monkeypatch):
    """The priors given are the ones stage 3's BRKGA draws from, and the answer stays within the budget."""
    import regal.recompute_search as rs
    seen = []
    run_loop = rs.run_loop

    def spy(*args, **kwargs):
        seen.append(kwargs.get("priors"))
        return run_loop(*args, **kwargs)

    monkeypatch.setattr(rs, "run_loop", spy)
    g = _graph()
    L = g.num_nodes * 3
    alpha, beta = np.ones(L), np.ones(L)
    beta[2::3] = 200.0   # every recompute key ~ Beta(1, 200): below 0.5, never chosen by a mutant
    priors = Priors(alpha, beta)
    sol = optimize_recompute(g, 1, 900, 5, 0.2, policy=None, joint_priors=priors)
    assert seen and seen[-1] is priors
    assert sol.evaluations <= 900 and sol.info["recompute"]["extra_fraction"] <= 0.2 + 1e-12


def test_joint_priors_of_the_wrong_length_are_one_line():
    """Priors with another chromosome's length are refused, naming both lengths."""
    g = _graph()
    L = g.num_nodes * 2   # the chromosome without recompute keys
    with pytest.raises(ValueError, match=f"joint_priors have {L} genes"):
        optimize_recompute(g, 1, 300, 0, 0.2, policy=None, joint_priors=Priors(np.ones(L), np.ones(L)))
