"""Fixtures shared by several test modules; tests/ is on sys.path through pyproject's `pythonpath`."""

import pytest


@pytest.fixture
def local_search_simulations(monkeypatch):
    """A list that grows by one per simulation the local search runs: its starts' (Python,
    `regal.local_search.peak_of`) and its climb kernel's, which the kernel counts in
    `regal._climb._score`, its only call of the simulator (read from the counter's rise over
    each kernel call)."""
    from regal import _climb, local_search
    calls = []
    real_peak, real_climb = local_search.peak_of, _climb.climb

    def climb(*args):
        st = args[7]   # climb(g, order, pos, placement, best_placement, best_order, traces, st, ...)
        before = int(st[_climb._COUNT])
        code = real_climb(*args)
        calls.extend([1] * (int(st[_climb._COUNT]) - before))
        return code

    monkeypatch.setattr(local_search, "peak_of", lambda *a, **k: calls.append(1) or real_peak(*a, **k))
    monkeypatch.setattr(_climb, "climb", climb)
    return calls
