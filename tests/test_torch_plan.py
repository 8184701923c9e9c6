"""Tests for regal.torch.plan: regal's plans run as PyTorch programs and measured by its allocator."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import regal.torch.plan as tp  # noqa: E402
import regal.torch.compare as tc  # noqa: E402
from regal.solution import make_solution  # noqa: E402


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):
        x = torch.relu(self.b1(self.c1(x)))
        x = torch.nn.functional.gelu(self.c2(x))
        return self.fc(x.mean((2, 3)))


class Block(torch.nn.Module):
    """A pre-norm transformer block (attention + GELU MLP)."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.n1, self.n2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.att = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.n1(x)
        x = x + self.att(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.n2(x))


def _programs():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 4))
    return [("mlp", mlp, (torch.randn(8, 16),)), ("cnn", SmallCNN(), (torch.randn(4, 3, 16, 16),)),
            ("block", Block(), (torch.randn(2, 10, 32),))]


PROGRAMS = _programs()
MODES = [None, "sgd", "adam"]


def _random_order(graph, rng) -> np.ndarray:
    """A uniformly drawn next-ready node at each step: a random topological order."""
    indeg = np.diff(graph.pred_ptr).astype(int)
    ready = [v for v in range(graph.num_nodes) if indeg[v] == 0]
    order = []
    while ready:
        v = ready.pop(int(rng.integers(len(ready))))
        order.append(v)
        for w in graph.succ_idx[graph.succ_ptr[v]:graph.succ_ptr[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(int(w))
    return np.asarray(order)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m or "forward")
@pytest.mark.parametrize("name,module,inputs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_any_valid_order_runs_and_returns_the_own_orders_outputs_bit_for_bit(name, module, inputs, mode):
    """Every random topological order, as a program, returns the traced order's outputs and
    updated parameters bit for bit on the CPU."""
    traced = tp.trace_for(module, inputs, mode)
    g = traced.graph
    ref = tp.measure_peak(tp.plan_program(traced, tp.own_solution(traced)), traced.args)
    rng = np.random.default_rng(0)
    for _ in range(3):
        sol = make_solution(g, np.zeros(g.num_nodes, dtype=np.int32), _random_order(g, rng), 1, "random")
        got = tp.measure_peak(tp.plan_program(traced, sol, realize_reuse=True), traced.args)
        assert tp.outputs_equal(got, ref)


def test_the_own_order_program_returns_what_the_eager_module_returns():
    """The traced forward in its own order returns exactly what calling the module returns."""
    _, module, inputs = PROGRAMS[1]
    traced = tp.trace_for(module, inputs, None)
    got = tp.measure_peak(tp.plan_program(traced, tp.own_solution(traced)), traced.args)
    with torch.no_grad():
        want = module.eval()(*inputs)
    assert torch.equal(got.outputs[0], want)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m or "forward")
@pytest.mark.parametrize("name,module,inputs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_calibrated_prediction_matches_the_allocator_within_two_percent(name, module, inputs, mode):
    """With each op's scratch measured (`calibrate`), the predicted peak of a random order is
    within 2 % of the peak PyTorch's CPU allocator reports for it."""
    traced = tp.trace_for(module, inputs, mode)
    traced = tp.calibrate(traced, tp.measure_nodes(traced))
    g = traced.graph
    rng = np.random.default_rng(1)
    sol = make_solution(g, np.zeros(g.num_nodes, dtype=np.int32), _random_order(g, rng), 1, "random")
    got = tp.measure_peak(tp.plan_program(traced, sol, realize_reuse=True), traced.args)
    assert abs(got.peak_bytes - sol.peak_bytes) <= 0.02 * sol.peak_bytes


def test_take_overs_are_made_real_with_out_variants():
    """A chain of elementwise ops whose outputs take their inputs over runs in one buffer:
    the plan writes each output over its input (`out=`), and the allocator sees the lower peak
    the model books (without the take-overs it is one buffer higher)."""
    class Chain(torch.nn.Module):
        def forward(self, x):
            y = x * 2.0
            return torch.tanh(torch.sigmoid(torch.exp(y) + 1.0)) - 0.5

    x = torch.randn(256, 1024)
    traced = tp.trace_for(Chain(), (x,), None)
    g = traced.graph
    assert sum(len(g.reuse(v)) > 0 for v in range(g.num_nodes)) >= 4
    sol = make_solution(g, np.zeros(g.num_nodes, dtype=np.int32), g.topological_order(), 1, "topo")
    assert tp.taken_over(g, sol.order)
    real = tp.measure_peak(tp.plan_program(traced, sol, realize_reuse=True), traced.args)
    plain = tp.measure_peak(tp.plan_program(traced, sol), traced.args)
    assert abs(real.peak_bytes - sol.peak_bytes) <= 64          # 0-dim scalars of the ops, 4 B each
    assert abs(plain.peak_bytes - real.peak_bytes - x.numel() * 4) <= 64
    assert tp.outputs_equal(real, plain)


@pytest.mark.slow  # two measured PyTorch training runs and a flagship search: about 40 s
def test_compare_runs_the_flagship_plan_and_never_measures_above_pytorchs_order():
    """`compare` on a training step: regal's measured peak is at most PyTorch's own order's,
    and each prediction is within 2 % of its measurement."""
    _, module, inputs = PROGRAMS[1]
    cmp = tc.compare(module, inputs, 1, training="adam", budget=300, seed=0)
    assert cmp.regal.outputs_match
    assert cmp.regal.measured_peak_bytes[0] <= cmp.pytorch.measured_peak_bytes[0]
    for run in (cmp.pytorch, cmp.regal):
        p, m = run.predicted_peak_bytes[0], run.measured_peak_bytes[0]
        assert abs(p - m) <= 0.02 * m


PROG = '''
import torch
def make():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    return m, (torch.randn(4, 8),)
def broken():
    return 3
class Branchy(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1
def untraceable():
    return Branchy(), (torch.randn(4, 4),)
'''


def _regal(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "regal.cli", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.slow)])  # 2: a process per device
def test_regal_torch_json_contract(tmp_path, devices):
    """`regal torch FILE.py:FN --json` prints one JSON object with the contract's keys: lists
    per device for regal's plan, one entry (one device) for PyTorch's own order."""
    f = tmp_path / "prog.py"
    f.write_text(PROG)
    r = _regal("torch", f"{f}:make", "--devices", str(devices), "--train", "sgd", "--budget", "200", "--seed", "1",
               "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"devices", "pytorch", "regal", "eager", "outputs_match", "recompute"}
    assert doc["recompute"] == {"count": 0, "extra_cost": 0.0, "extra_fraction": 0.0}
    assert doc["devices"] == devices and doc["outputs_match"] is True
    assert set(doc["eager"]) == {"measured_peak_bytes"} and len(doc["eager"]["measured_peak_bytes"]) == 1
    assert doc["eager"]["measured_peak_bytes"][0] > 0
    for k, n in (("pytorch", 1), ("regal", devices)):
        assert set(doc[k]) == {"predicted_peak_bytes", "measured_peak_bytes"}
        assert len(doc[k]["measured_peak_bytes"]) == n == len(doc[k]["predicted_peak_bytes"])
        assert all(m > 0 for m in doc[k]["measured_peak_bytes"])


def test_regal_torch_table_for_a_person(tmp_path):
    """Without --json, `regal torch` prints a short table: both orders, predicted and measured."""
    f = tmp_path / "prog.py"
    f.write_text(PROG)
    r = _regal("torch", f"{f}:make", "--budget", "100")
    assert r.returncode == 0, r.stderr
    assert "pytorch order" in r.stdout and "regal plan" in r.stdout and "measured" in r.stdout


@pytest.mark.parametrize("spec,message", [("nofile.py:make", "no such file"), ("{f}:missing", "no function 'missing'"),
                                          ("{f}:broken", "must return (module, example_inputs)"),
                                          ("{f}:untraceable", "torch.export failed")])
def test_regal_torch_bad_program_is_one_line_error(tmp_path, spec, message):
    """A missing file, function, a function returning the wrong thing or a program torch.export
    cannot trace: one line on stderr (PyTorch's own trace log held back), exit 1."""
    f = tmp_path / "prog.py"
    f.write_text(PROG)
    r = _regal("torch", spec.format(f=f), "--budget", "10", cwd=tmp_path)
    assert r.returncode == 1
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_regal_torch_without_function_name_is_usage_error(tmp_path):
    """FILE.py without :FN is a usage error (exit 2)."""
    r = _regal("torch", os.fspath(tmp_path / "prog.py"))
    assert r.returncode == 2


NOISY = '''
import torch
from helper import width        # a module beside the program
print("building the model")     # the program's own output
def make():
    print("make() says hello")
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 2)), (torch.randn(4, 8),)
'''


def test_regal_torch_keeps_the_programs_prints_and_the_profilers_out_of_json(tmp_path):
    """The program's prints go to stderr, it imports a module beside it (run from another
    folder), and PyTorch's profiler lines (`USDT: ... profiler_start`) are not shown."""
    (tmp_path / "prog.py").write_text(NOISY)
    (tmp_path / "helper.py").write_text("width = 16\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _regal("torch", f"{tmp_path / 'prog.py'}:make", "--train", "adam", "--budget", "50", "--json", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["outputs_match"] is True
    assert "building the model" in r.stderr and "make() says hello" in r.stderr
    assert "USDT" not in r.stderr and "profiler_start" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, message", [(("--devices", "100"), "at most 16 on cpu"),
                                           (("--device", "tpu"), "'tpu' is no device"),
                                           (("--device", "cuda:0"), None)])
def test_regal_torch_checks_devices_in_one_line(tmp_path, args, message):
    f = tmp_path / "prog.py"
    f.write_text(PROG)
    r = _regal("torch", f"{f}:make", "--budget", "10", *args)
    if message is None:   # CUDA: runs where there is one, else a one-line error
        if r.returncode == 0:
            return
        message = "sees no CUDA device"
    assert r.returncode in (1, 2) and message in r.stderr and "Traceback" not in r.stderr


class _Recurrent(torch.nn.Module):
    """nn.LSTM, nn.GRU and nn.MultiheadAttention: oneDNN's RNN kernels and the CPU's flash
    attention, which tracing on the CPU used to fail on (issue 46)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.lstm = torch.nn.LSTM(16, 16, batch_first=True)
        self.gru = torch.nn.GRU(16, 16, batch_first=True)
        self.att = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.out = torch.nn.Linear(16, 50)

    def forward(self, x):
        h = self.gru(self.lstm(self.emb(x))[0])[0]
        return self.out(self.att(h, h, h, need_weights=False)[0])


@pytest.mark.parametrize("mode", ["adam", None])
def test_recurrent_and_attention_programs_plan_and_run(mode):
    torch.manual_seed(0)
    cmp = tc.compare(_Recurrent(), (torch.randint(0, 50, (2, 6)),), 1, training=mode, budget=200)
    assert cmp.regal.outputs_match
    assert cmp.regal.measured_peak_bytes[0] <= cmp.pytorch.measured_peak_bytes[0]
    assert cmp.eager > 0
