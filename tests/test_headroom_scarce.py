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


# ---------------------------------------------------------------------- the paper stage (experiments.headroom_paper)
def _best(devices):
    import regal
    g = _graph()
    sol = regal.optimize(g, devices, budget=200, seed=0, policy=None, num_threads=1)
    return g, {"placement": np.asarray(sol.placement), "order": np.asarray(sol.order), "peak": sol.peak_bytes}


@pytest.mark.parametrize("devices", [2, 4])
def test_hindsight_priors_centre_on_the_schedule_and_its_parts(devices):
    """hind-cC: every gene's Beta mean is the long run's key (the priority on a level), and the means decode
    to its schedule; hplace leaves the priorities uniform, hsched the affinities."""
    from experiments.headroom_paper import hindsight_priors
    from regal.decode import decode, encode
    g, best = _best(devices)
    n, k = g.num_nodes, devices + 1
    hind = hindsight_priors("hind-c20", best, devices)
    mean = (hind.alpha / (hind.alpha + hind.beta)).reshape(n, k)
    keys = encode(best["placement"], best["order"], devices).reshape(n, k)
    assert np.allclose(mean[:, :devices], keys[:, :devices]) and np.allclose(hind.alpha + hind.beta, 20.0)
    assert np.abs(mean[:, devices] - keys[:, devices]).max() <= 0.5 / 60 + 1e-12
    placement, _ = decode(g, mean.reshape(-1), devices)
    assert placement.tolist() == np.asarray(best["placement"]).tolist()
    place = hindsight_priors("hplace-c20", best, devices)
    sched = hindsight_priors("hsched-c20", best, devices)
    pa, sa = place.alpha.reshape(n, k), sched.alpha.reshape(n, k)
    assert np.all(pa[:, devices] == 1.0) and np.all(place.beta.reshape(n, k)[:, devices] == 1.0)
    assert np.allclose(pa[:, :devices], hind.alpha.reshape(n, k)[:, :devices])
    assert np.all(sa[:, :devices] == 1.0) and np.allclose(sa[:, devices], hind.alpha.reshape(n, k)[:, devices])
    with pytest.raises(ValueError, match="unknown hindsight arm"):
        hindsight_priors("noisy-c20", best, devices)


def test_paper_tables_average_per_graph_then_per_source():
    """% lower peak than plain BRKGA: the mean over seeds per graph, the mean over a source's graphs, the worst."""
    from experiments.headroom_paper import paper_tables, summary
    cells = []
    for graph, source, peaks in (("a", "s1", {"none": 100, "default": 98, "hind-c5": 90}),
                                 ("b", "s1", {"none": 200, "default": 210, "hind-c5": 200}),
                                 ("c", "s2", {"none": 50, "default": 50, "hind-c5": 49})):
        for arm, p in peaks.items():
            for seed in (0, 1):
                cells.append({"graph": graph, "source": source, "devices": 2, "arm": arm, "seed": seed,
                              "peak_bytes": p + (seed if arm == "none" else 0), "seconds": 1.0,
                              "long_peak_bytes": p - 5})
    s = summary(cells)
    none_a = [100, 101]
    hind_a = np.mean([(b - 90) / b * 100 for b in none_a])
    hind_b = np.mean([(b - 200) / b * 100 for b in (200, 201)])
    hind_c = np.mean([(b - 49) / b * 100 for b in (50, 51)])
    mean, worst_source, worst_graph = s[(2, "hind-c5")]
    assert mean == pytest.approx(np.mean([hind_a, hind_b, hind_c]))
    assert worst_source == pytest.approx(min(np.mean([hind_a, hind_b]), hind_c))
    assert worst_graph == pytest.approx(min(hind_a, hind_b, hind_c))
    text = "\n".join(paper_tables(cells))
    assert f"| hind-c5 | {np.mean([hind_a, hind_b]):+.2f} / {min(hind_a, hind_b):+.2f} |" in text
    assert "than the shipped `default` policy" in text


def test_action_priors_take_the_nearest_of_regal_actions():
    """hact: per gene the REGAL action nearest the hindsight key (0.5: Beta(2, 2)); hact_sched: affinities uniform."""
    from experiments.headroom_paper import action_priors
    means = np.array([[0.75, 0.25, 0.5], [0.25, 0.75, 0.9], [0.25, 0.75, 0.3], [0.25, 0.75, 0.1]])
    p = action_priors(means, 2, scheduling_only=False)
    assert p.alpha.reshape(4, 3).tolist() == [[5, 2, 2], [2, 5, 5], [2, 5, 2], [2, 5, 1]]
    assert p.beta.reshape(4, 3).tolist() == [[2, 5, 2], [5, 2, 1], [5, 2, 5], [5, 2, 5]]
    s = action_priors(means, 2, scheduling_only=True)
    assert np.all(s.alpha.reshape(4, 3)[:, :2] == 1) and np.all(s.beta.reshape(4, 3)[:, :2] == 1)
    assert s.alpha.reshape(4, 3)[:, 2].tolist() == [2, 5, 2, 1]


def test_hpflip_redraws_a_share_of_the_devices_and_leaves_the_priorities_uniform():
    """hpflipP-cC: hplace-cC with about P % of the devices redrawn (uniformly, so some stay), priorities Beta(1, 1)."""
    from experiments.headroom_paper import hindsight_priors
    g, best = _best(2)
    n = g.num_nodes
    exact = hindsight_priors("hplace-c20", best, 2).alpha.reshape(n, 3)
    flipped = hindsight_priors("hpflip50-c20", best, 2)
    fa = flipped.alpha.reshape(n, 3)
    assert np.all(fa[:, 2] == 1.0) and np.all(flipped.beta.reshape(n, 3)[:, 2] == 1.0)
    changed = np.mean(np.any(fa[:, :2] != exact[:, :2], axis=1))
    assert 0.05 < changed < 0.5
