"""The library leaves the process's global state as it found it: random generators, thread
counts, PyTorch's and Inductor's settings (issue 55: nothing global left changed)."""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import regal  # noqa: E402


def snapshot() -> dict:
    """Everything global a library call could leave changed, as comparable values."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    state = {
        "threads": torch.get_num_threads(),
        "interop threads": torch.get_num_interop_threads(),
        "torch random": torch.get_rng_state().numpy().tobytes(),
        "python random": random.getstate(),
        "numpy random": repr(np.random.get_state()),
        "inductor config": inductor_config.get_config_copy(),
        "functorch config": functorch_config.get_config_copy(),
        "cudnn": (torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
                  torch.backends.cudnn.allow_tf32),
        "mkldnn": torch.backends.mkldnn.enabled,
        "deterministic algorithms": (torch.are_deterministic_algorithms_enabled(),
                                     torch.is_deterministic_algorithms_warn_only_enabled()),
        "default dtype": torch.get_default_dtype(),
        "grad mode": torch.is_grad_enabled(),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "anomaly mode": torch.is_anomaly_enabled(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda random"] = [s.numpy().tobytes() for s in torch.cuda.get_rng_state_all()]
    return state


def changed(before: dict, after: dict) -> list:
    out = []
    for k in before:
        a, b = before[k], after.get(k)
        if isinstance(a, dict):
            out += [f"{k}.{n}: {a.get(n)!r} -> {b.get(n)!r}" for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
        elif a != b:
            out.append(k if "random" in k else f"{k}: {a!r} -> {b!r}")
    return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.drop(F.max_pool2d(F.relu(self.bn(self.conv(x))), 2).flatten(1)))


def ce(out, x, y):
    return F.cross_entropy(out, y)


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)


@pytest.fixture
def seeded():
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)


def test_planned_step_and_a_call_leave_the_global_state(seeded):
    import regal.torch as rt
    m = Net()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    before = snapshot()
    step = rt.planned_step(m, opt, batch(), loss_fn=ce, budget=200)
    assert changed(before, snapshot()) == []
    before = snapshot()
    step(*batch())
    after = snapshot()
    assert after.pop("torch random") != before.pop("torch random")   # dropout's mask drawn, as eager draws it
    assert changed(before, after) == []


def test_compare_leaves_the_global_state(seeded):
    from regal.torch.compare import compare
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    before = snapshot()
    got = compare(m, (x,), training="sgd", budget=200)
    assert got.regal.outputs_match
    assert changed(before, snapshot()) == []


def test_measuring_anchors_leaves_the_global_state(seeded):
    from regal.torch.eager import measure_anchors
    m = Net()
    before = snapshot()
    got = measure_anchors(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), batch(), loss_fn=ce,
                          budget=200, anchors=("eager", "optimizer_in_backward", "planned"))
    assert all(isinstance(got[k], int) for k in ("eager", "optimizer_in_backward", "planned")), got
    assert changed(before, snapshot()) == []


@pytest.mark.slow
def test_measuring_torch_compile_puts_inductors_settings_back(seeded):
    """The compile anchor turns Inductor's reorder_for_peak_memory on while it runs, and off again."""
    import torch._inductor.config as inductor_config
    from regal.torch.eager import measure_anchors
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with inductor_config.patch(reorder_for_peak_memory=False):
        before = snapshot()
        got = measure_anchors(m, torch.optim.SGD(m.parameters(), lr=0.1), (x,), budget=200, anchors=("compile",))
        after = snapshot()
    assert isinstance(got["compile"], int), got
    assert changed(before, after) == []


def test_optimize_leaves_the_global_state(seeded):
    g = regal.Graph.from_records([
        {"id": "x", "bytes": 1000, "resident": True}, {"id": "w", "bytes": 4000, "resident": True},
        {"id": "a", "bytes": 2000, "inputs": ["x", "w"]}, {"id": "b", "bytes": 2000, "inputs": ["x", "w"]},
        {"id": "y", "bytes": 500, "inputs": ["a", "b"]}], name="small")
    before = snapshot()
    regal.optimize(g, devices=2, budget=300, seed=0)
    assert changed(before, snapshot()) == []
