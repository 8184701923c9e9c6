"""The one tracer of training steps and torch.optim's own update (regal.torch._optim, issue 53,
item 4): `regal torch --train`, `regal.torch.from_module(training=True)` and `planned_step` trace
the same program; every supported optimizer trains as eager PyTorch does, bit for bit; over 20
steps the losses are eager's (bit for bit without recomputation, to 1e-5 with it), dropout's
draws included. Skipped where torch is absent."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import regal.torch as rt  # noqa: E402
from regal.torch.step import UnsupportedError  # noqa: E402

BUDGET = 200


class Net(nn.Module):
    """Conv -> BatchNorm -> ReLU -> dropout -> linear: running statistics, an in-place activation
    and random draws."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(p)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.drop(F.relu(self.bn(self.conv(x)), inplace=True)).flatten(1))


def _block(i: int, o: int):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))


def deep_net(p: float = 0.2):
    """Three convolution -> BatchNorm -> ReLU blocks at 16x16, dropout, a linear head: activations
    make its peak, so recomputing the normalizations lowers it."""
    return nn.Sequential(_block(3, 16), _block(16, 16), _block(16, 16), nn.MaxPool2d(2), nn.Dropout(p), nn.Flatten(),
                         nn.Linear(16 * 8 * 8, 10))


def ce(out, x, y):
    return F.cross_entropy(out, y)


def _batches(n: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(n)]


def _eager(model, opt, data, seed=5):
    torch.manual_seed(seed)
    out = []
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = ce(model(x), x, y)
        loss.backward()
        opt.step()
        out.append(loss.detach().clone())
    return out


def _planned(step, data, seed=5):
    torch.manual_seed(seed)
    return [step(x, y).clone() for x, y in data]


def _ops(graph) -> Counter:
    return Counter(graph.ops[v] for v in range(graph.num_nodes))


def test_one_tracer_for_from_module_regal_torch_and_the_planned_step():
    """from_module(training=True), the trace `regal torch --train` runs (`trace_for`) and
    planned_step's plan are one program: the same FX ops, graph nodes and ops (Adam; the planned
    step takes the update's numbers as arguments, the others as constants: no graph nodes)."""
    from regal.torch.plan import trace_for
    torch.manual_seed(0)
    m = Net()
    x, y = _batches(1)[0]
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, foreach=False)
    step = rt.planned_step(m, opt, (x,), budget=BUDGET, recompute=False)
    cmd = trace_for(m, (x,), "adam", split_outputs=True)     # what `regal torch --train adam` plans
    lib = rt.trace(m, (x,), training=True, optimizer="adam", split_outputs=True)
    fwd_only = rt.from_module(m, (x,), training=True, optimizer="adam")
    fx = [Counter(str(getattr(n.target, "op", n.target)) for n in t.graph_module.graph.nodes
                  if n.op == "call_function") for t in (step.traced, cmd, lib)]
    assert fx[0] == fx[1] == fx[2] and sum(fx[0].values()) > 50
    assert step.graph.num_nodes == cmd.graph.num_nodes == lib.graph.num_nodes
    assert _ops(step.graph) == _ops(cmd.graph) == _ops(lib.graph)
    # from_module's default imports each multi-output op as one node (no `alloc` nodes): the same ops else
    assert _ops(fwd_only) == _ops(lib.graph) - Counter({"alloc": _ops(lib.graph)["alloc"]})


OPTIMIZERS = {
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3, momentum=0.9, centered=True, weight_decay=1e-4),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-4),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, maximize=True),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-2, amsgrad=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-2, lr_decay=1e-3, initial_accumulator_value=0.1),
    "adamax": lambda p: torch.optim.Adamax(p, lr=1e-2, weight_decay=1e-3),
    "adadelta": lambda p: torch.optim.Adadelta(p, weight_decay=1e-3),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == "rmsprop" else pytest.mark.slow) for n in OPTIMIZERS])
def test_every_optimizer_trains_as_eager_bit_for_bit(name):
    """torch.optim's own single-tensor update, traced: after 4 steps with dropout the parameters,
    buffers, losses and optimizer state equal eager's bit for bit, and the state dict loads into
    the eager optimizer and trains on alike (one more step each)."""
    torch.manual_seed(0)
    m1 = Net(0.2)
    m2 = copy.deepcopy(m1)
    o1, o2 = OPTIMIZERS[name](m1.parameters()), OPTIMIZERS[name](m2.parameters())
    data = _batches(5)
    step = rt.planned_step(m2, o2, data[0], loss_fn=ce, budget=BUDGET, recompute=False)
    assert [float(v) for v in _eager(m1, o1, data[:4])] == [float(v) for v in _planned(step, data[:4])]
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert s1["param_groups"] == s2["param_groups"] and s1["state"].keys() == s2["state"].keys()
    for k in s1["state"]:
        assert s1["state"][k].keys() == s2["state"][k].keys()
        for key, v in s1["state"][k].items():
            assert torch.equal(v, s2["state"][k][key]) and v.dtype == s2["state"][k][key].dtype, (k, key)
    o1.load_state_dict(copy.deepcopy(o2.state_dict()))   # the planned step's state trains on in eager
    _eager(m1, o1, data[4:])
    _planned(step, data[4:])
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)


def test_a_change_of_branch_in_the_update_is_refused_in_one_line():
    """torch.optim branches on `weight_decay != 0`: setting it to 0 after planning would run
    another update, so the step refuses in one line (and leaves the step count untouched)."""
    torch.manual_seed(0)
    m = Net()
    opt = torch.optim.RMSprop(m.parameters(), lr=1e-3, weight_decay=1e-4)
    x, y = _batches(1)[0]
    step = rt.planned_step(m, opt, (x, y), loss_fn=ce, budget=BUDGET, recompute=False)
    step(x, y)
    opt.param_groups[0]["weight_decay"] = 0.0
    with pytest.raises(UnsupportedError, match="weight_decay changed since the step was planned") as e:
        step(x, y)
    assert "\n" not in str(e.value)
    assert all(float(s["step"]) == 1.0 for s in opt.state.values())


@pytest.mark.slow   # two plans (with and without recomputation) and 60 steps: ~15 s on the loaded 2-core VM
def test_twenty_steps_of_losses_equal_eagers():
    """Over 20 steps with dropout from the same seed: recompute=False gives eager's losses bit for
    bit; recompute=0.1 (the search's budget) too on this BatchNorm net (the target: 1e-5), the
    same draws."""
    torch.manual_seed(0)
    base = deep_net(0.2)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(20)]
    m1 = copy.deepcopy(base)
    ref = [float(v) for v in _eager(m1, torch.optim.Adam(m1.parameters(), lr=1e-3), data)]
    for recompute in (False, 0.1):
        m2 = copy.deepcopy(base)
        step = rt.planned_step(m2, torch.optim.Adam(m2.parameters(), lr=1e-3), data[0], loss_fn=ce, budget=BUDGET,
                               recompute=recompute)
        got = [float(v) for v in _planned(step, data)]
        assert got == pytest.approx(ref, rel=1e-5)
        # BatchNorm recomputed by the rewrite (addcmul, as its CPU kernel) or ops run again by the
        # search: the same kernels on the same values, so bit for bit here too
        assert got == ref
        if recompute:
            assert step.recomputed or step.solution.info["recompute"]["count"] > 0


PROG = '''
import torch
def make():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    return m, (torch.randn(4, 8), torch.randint(0, 3, (4,)))
def loss(out, x, y):
    return torch.nn.functional.cross_entropy(out, y)
'''


def _regal(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "regal.cli", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("args, message", [
    (("--train", "adamw", "--recompute", "-1"), "'-1' is not a finite number in [0, inf)"),
    (("--train", "adamw", "--recompute", "nan"), "'nan' is not a finite number"),
    (("--train", "nadam"), "'nadam' is not one of"),
    (("--train", "adam", "--loss", "hinge"), "'hinge' is none of mean, mse, cross_entropy"),
    (("--loss", "mse"), "a loss needs a training step"),
    (("--train", "sgd", "--recompute", "0.1", "--devices", "2"), "recomputation runs on one device"),
    (("--train", "sgd", "--loss", "{f}:nothing"), "no function 'nothing'"),
])
def test_regal_torch_bad_training_options_are_one_line(tmp_path, args, message):
    """Bad --recompute, --train, --loss values: one line naming the problem, exit 1 or 2, before
    anything is traced (in process: click's runner)."""
    from click.testing import CliRunner

    from regal.cli import main
    f = tmp_path / "prog.py"
    f.write_text(PROG)
    r = CliRunner().invoke(main, ["torch", f"{f}:make", "--budget", "10", *(a.format(f=f) for a in args)])
    assert r.exit_code in (1, 2) and isinstance(r.exception, SystemExit), r.stderr   # click's exit: no traceback
    assert message in r.stderr, r.stderr
    assert len([line for line in r.stderr.strip().splitlines() if line.startswith("Error")]) == 1


@pytest.mark.slow   # traces, searches with recomputation, runs three orders: ~15 s
@pytest.mark.parametrize("loss", ["cross_entropy", "{f}:loss"])
def test_regal_torch_trains_adamw_with_a_named_loss_and_recompute_budget(tmp_path, loss):
    """`regal torch --train adamw --loss ... --recompute 0.1 --json`: the plan's outputs equal
    PyTorch's order, and the JSON's "recompute" block is regal optimize's (count, extra cost and
    fraction, the fraction within the budget)."""
    f = tmp_path / "prog.py"
    f.write_text(PROG)
    r = _regal("torch", f"{f}:make", "--train", "adamw", "--loss", loss.format(f=f), "--recompute", "0.1",
               "--budget", "200", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["outputs_match"] is True
    rc = doc["recompute"]
    assert set(rc) == {"count", "extra_cost", "extra_fraction"} and 0.0 <= rc["extra_fraction"] <= 0.1 + 1e-9
