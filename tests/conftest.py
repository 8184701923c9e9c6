"""Fixtures shared by several test modules; tests/ is on sys.path through pyproject's `pythonpath`."""

import os
import signal

import pytest

# Plans of PyTorch steps are costed by the nominal roofline in the tests, the same on every machine
# (`regal.torch._ops.device_cost_model`; its own test clears this).
os.environ["REGAL_COST_MODEL"] = "nominal"


def pytest_configure(config):
    """A run started with SIGINT ignored (a background job of a non-interactive shell: `make test &`
    or `nohup make test &` in a script) passes the ignoring on to every process it starts, and Python
    then installs no KeyboardInterrupt handler: tests/test_interrupts.py would test the shell, not
    regal (6 of its tests failed so). Each test process (each xdist worker too) gives itself Python's
    own handler, which its subprocesses get back as the default at exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def local_search_simulations(monkeypatch):
    """A list that grows by one per simulation the local search runs: its starts' (Python,
    `regal.climb.Evaluator`'s `peak_of`) and its climb kernel's, which the kernel counts in
    `regal.kernels.climb._score`, its only call of the simulator (read from the rise of the state's
    `count` over each kernel call)."""
    from regal import climb as climb_module
    from regal.kernels import climb as _climb
    calls = []
    real_peak, real_climb = climb_module.peak_of, _climb.climb

    def climb(g, state, params, rng, stop):
        before = int(state.count[()])
        code = real_climb(g, state, params, rng, stop)
        calls.extend([1] * (int(state.count[()]) - before))
        return code

    monkeypatch.setattr(climb_module, "peak_of", lambda *a, **k: calls.append(1) or real_peak(*a, **k))
    monkeypatch.setattr(_climb, "climb", climb)
    return calls
