"""regal.torch.planned_step: a training loop trains with regal's order and gets eager PyTorch's
numbers (bit for bit on the CPU), checkpoints round-trip, and what it cannot do is refused."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import regal.torch as rt  # noqa: E402
from regal.torch.step import UnsupportedError  # noqa: E402

BUDGET = 300


class Net(nn.Module):
    """Convolution, BatchNorm (running statistics), in-place ReLU, max pooling (a multi-output
    op), dropout (random), a frozen-free head: the parts a training step has."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x)), inplace=True), 2)
        x = F.gelu(self.conv2(x)) + x
        return self.head(self.drop(x.flatten(1)))


def ce(out, x, y):
    return F.cross_entropy(out, y)


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(n)]


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-4),
    "sgd-nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "sgd-plain": lambda p: torch.optim.SGD(p, lr=0.05),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-2),
    "adamw-amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-3, amsgrad=True, betas=(0.8, 0.99)),
    "adam-maximize": lambda p: torch.optim.Adam(p, lr=1e-3, maximize=True),
}


def eager_losses(model, opt, data, seed=5, scheduler=None, clip=None):
    torch.manual_seed(seed)
    out = []
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = ce(model(x), x, y)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if scheduler is not None:
            scheduler.step()
        out.append(loss.item())
    return out


def planned_losses(step, data, seed=5, scheduler=None):
    torch.manual_seed(seed)
    out = []
    for x, y in data:
        out.append(step(x, y).item())
        if scheduler is not None:
            scheduler.step()
    return out


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def same_optimizer_state(o1, o2) -> bool:
    s1, s2 = o1.state_dict(), o2.state_dict()
    return s1["param_groups"] == s2["param_groups"] and s1["state"].keys() == s2["state"].keys() and \
        all(same_tensors(s1["state"][k], s2["state"][k]) for k in s1["state"])


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_planned_step_trains_as_eager_bit_for_bit(name, clip):
    """Eager's losses, parameters, buffers and optimizer state, bit for bit; with `max_grad_norm`
    the step clips as clip_grad_norm_ between backward() and step() does."""
    torch.manual_seed(0)
    m1 = Net()
    m2 = copy.deepcopy(m1)
    o1, o2 = OPTIMIZERS[name](m1.parameters()), OPTIMIZERS[name](m2.parameters())
    data = batches(8)
    step = rt.planned_step(m2, o2, data[0], loss_fn=ce, budget=BUDGET, max_grad_norm=clip)
    assert planned_losses(step, data) == eager_losses(m1, o1, data, clip=clip)
    assert same_tensors(m1.state_dict(), m2.state_dict())      # parameters and BatchNorm's statistics
    assert same_optimizer_state(o1, o2)
    assert all(p.grad is None for p in m2.parameters())          # gradients freed after their update
    assert step.steps == 8


def test_planned_step_follows_a_scheduler_and_param_groups():
    torch.manual_seed(0)
    m1 = Net()
    m2 = copy.deepcopy(m1)

    def make(m):
        return torch.optim.SGD([{"params": m.conv.parameters(), "lr": 0.1},
                                {"params": [p for n, p in m.named_parameters() if not n.startswith("conv.")]}],
                               lr=0.02, momentum=0.8)
    o1, o2 = make(m1), make(m2)
    s1, s2 = torch.optim.lr_scheduler.StepLR(o1, 2, 0.5), torch.optim.lr_scheduler.StepLR(o2, 2, 0.5)
    data = batches(6)
    step = rt.planned_step(m2, o2, data[0], loss_fn=ce, budget=BUDGET)
    assert planned_losses(step, data, scheduler=s2) == eager_losses(m1, o1, data, scheduler=s1)
    assert same_tensors(m1.state_dict(), m2.state_dict())


def test_checkpoint_round_trip_between_eager_and_planned():
    """state_dicts saved from a planned step load into an eager loop and back; both continue alike."""
    torch.manual_seed(0)
    m1 = Net()
    m2 = copy.deepcopy(m1)
    o1, o2 = torch.optim.Adam(m1.parameters(), lr=1e-3), torch.optim.Adam(m2.parameters(), lr=1e-3)
    data = batches(9)
    step = rt.planned_step(m2, o2, data[0], loss_fn=ce, budget=BUDGET)
    planned_losses(step, data[:3])
    eager_losses(m1, o1, data[:3])
    # the planned run's checkpoint continues in a fresh eager loop ...
    m3 = Net()
    o3 = torch.optim.Adam(m3.parameters(), lr=1e-3)
    m3.load_state_dict(copy.deepcopy(m2.state_dict()))
    o3.load_state_dict(copy.deepcopy(o2.state_dict()))
    assert eager_losses(m3, o3, data[3:6], seed=7) == eager_losses(m1, o1, data[3:6], seed=7)
    # ... and an eager checkpoint continues in the planned step (loaded into its own model and optimizer)
    m2.load_state_dict(m1.state_dict())
    o2.load_state_dict(copy.deepcopy(o1.state_dict()))   # (a state_dict shares its tensors)
    assert planned_losses(step, data[6:], seed=9) == eager_losses(m1, o1, data[6:], seed=9)
    assert same_tensors(m1.state_dict(), m2.state_dict())
    assert same_optimizer_state(o1, o2)


def test_planned_step_is_no_higher_than_its_traced_order_and_says_so():
    torch.manual_seed(0)
    m = Net()
    o = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    step = rt.planned_step(m, o, batches(1)[0], loss_fn=ce, budget=BUDGET)
    assert step.predicted_peak_bytes <= step.traced_peak_bytes
    assert "predicted peak" in repr(step)
    assert step.solution.num_devices == 1
    traced = step.in_order(None)
    assert traced.predicted_peak_bytes == step.traced_peak_bytes
    x, y = batches(1)[0]
    assert torch.isfinite(traced(x, y))


def test_lstm_and_attention_steps_plan_and_match_eager():
    """nn.LSTM (traced without oneDNN) and nn.MultiheadAttention train like eager, to float tolerance."""
    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.lstm = nn.LSTM(16, 16, batch_first=True)
            self.att = nn.MultiheadAttention(16, 2, batch_first=True)
            self.out = nn.Linear(16, 50)

        def forward(self, x):
            h = self.lstm(self.emb(x))[0]
            return self.out(self.att(h, h, h, need_weights=False)[0])

    def loss(out, x, y):
        return F.cross_entropy(out.flatten(0, 1), y.flatten())
    torch.manual_seed(0)
    m1 = Seq()
    m2 = copy.deepcopy(m1)
    # SGD: Adam turns the rounding noise of a gradient that is zero in exact arithmetic (the key
    # projection's bias) into steps of size lr, so parameters would differ by lr, not by rounding.
    o1, o2 = torch.optim.SGD(m1.parameters(), lr=0.1), torch.optim.SGD(m2.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(3)
    data = [(torch.randint(0, 50, (2, 6), generator=g), torch.randint(0, 50, (2, 6), generator=g)) for _ in range(5)]
    step = rt.planned_step(m2, o2, data[0], loss_fn=loss, budget=BUDGET)
    la, lb = [], []
    for x, y in data:
        o1.zero_grad()
        ref = loss(m1(x), x, y)
        ref.backward()
        o1.step()
        la.append(ref.item())
        lb.append(step(x, y).item())
    assert lb == pytest.approx(la, rel=1e-4)
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), k


def _refusal(make_opt=None, model=None, **kw):
    model = model or Net()
    opt = (make_opt or (lambda p: torch.optim.SGD(p, lr=0.1)))(model.parameters())
    return rt.planned_step(model, opt, batches(1)[0], loss_fn=ce, budget=BUDGET, **kw)


@pytest.mark.parametrize("make_opt, words", [
    (lambda p: torch.optim.RMSprop(p), "RMSprop is not supported"),
    (lambda p: torch.optim.Adam(p, fused=True), "fused=True"),
    (lambda p: torch.optim.SGD(p, lr=torch.tensor(0.1)), "tensor 'lr'"),
])
def test_unsupported_optimizers_are_refused_in_one_line(make_opt, words):
    with pytest.raises(UnsupportedError, match=words) as e:
        _refusal(make_opt)
    assert "\n" not in str(e.value)


def test_parameter_outside_the_optimizer_and_several_devices_are_refused():
    m = Net()
    opt = torch.optim.SGD(m.head.parameters(), lr=0.1)
    with pytest.raises(UnsupportedError, match="'conv.weight' requires grad but is in no param group"):
        rt.planned_step(m, opt, batches(1)[0], loss_fn=ce, budget=BUDGET)
    with pytest.raises(UnsupportedError, match="devices=2"):
        _refusal(devices=2)
    with pytest.raises(UnsupportedError, match="max_grad_norm must be a number > 0"):
        _refusal(max_grad_norm=-1)


def test_frozen_parameters_stay_as_they_are():
    torch.manual_seed(0)
    m = Net()
    m.conv.requires_grad_(False)
    before = m.conv.weight.detach().clone()
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1)
    step = rt.planned_step(m, opt, batches(1)[0], loss_fn=ce, budget=BUDGET)
    step(*batches(1)[0])
    assert torch.equal(m.conv.weight, before)


def test_a_changed_batch_shape_or_optimizer_structure_is_refused():
    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    step = rt.planned_step(m, opt, batches(1)[0], loss_fn=ce, budget=BUDGET)
    x, y = batches(1)[0]
    with pytest.raises(UnsupportedError, match=r"input 0 is \(2, 3, 16, 16\)"):
        step(x[:2], y[:2])
    with pytest.raises(UnsupportedError, match="autocast"):
        with torch.autocast("cpu"):
            step(x, y)
    opt.param_groups[0]["nesterov"] = True
    with pytest.raises(UnsupportedError, match="nesterov changed"):
        step(x, y)
    opt.param_groups[0]["nesterov"] = False
    opt.param_groups[0]["lr"] = 0.01   # a number, not the structure: followed
    assert torch.isfinite(step(x, y))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_planned_step_on_cuda_trains_as_eager():
    """On CUDA the plan runs where the module is; with deterministic kernels it trains as eager
    does (to float tolerance: cuDNN may pick other algorithms for the same convolution)."""
    from regal.torch.compare import deterministic
    torch.manual_seed(0)
    m1 = Net().cuda()
    m2 = copy.deepcopy(m1)
    o1, o2 = torch.optim.Adam(m1.parameters(), lr=1e-3), torch.optim.Adam(m2.parameters(), lr=1e-3)
    data = [(x.cuda(), y.cuda()) for x, y in batches(5)]
    with deterministic():
        step = rt.planned_step(m2, o2, data[0], loss_fn=ce, budget=BUDGET)
        la, lb = eager_losses(m1, o1, data), planned_losses(step, data)
    assert lb == pytest.approx(la, rel=1e-4)
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-5), k


class ConvNet(nn.Module):
    """Convolution -> BatchNorm -> activation chains (in place and not), as CNNs have them."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.b = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU6(inplace=True))
        self.c = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.SiLU())
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.c(self.b(self.a(x))).mean((2, 3)))


def test_recompute_lowers_the_peak_and_trains_as_eager_to_rounding():
    """recompute=True: the backward reads recomputed BatchNorm outputs and activations; the
    peak falls (predicted and measured alike) and a step's parameters equal eager's to rounding."""
    from regal.torch.eager import measure_step
    torch.manual_seed(0)
    m1 = ConvNet()
    m2, m3 = copy.deepcopy(m1), copy.deepcopy(m1)
    o1, o2, o3 = (torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (m1, m2, m3))
    g = torch.Generator().manual_seed(2)   # activations large enough to make the peak
    data = [(torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(2)]
    plain = rt.planned_step(m3, o3, data[0], loss_fn=ce, budget=BUDGET)
    step = rt.planned_step(m2, o2, data[0], loss_fn=ce, budget=BUDGET, recompute=True)
    assert step.predicted_peak_bytes < plain.predicted_peak_bytes
    la, lb = eager_losses(m1, o1, data[:1]), planned_losses(step, data[:1])
    assert lb == pytest.approx(la, rel=1e-6)
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6), k
    measured = measure_step(step, m2, [o2], data[1], "cpu")
    assert abs(measured - step.predicted_peak_bytes) <= 0.02 * measured
    assert measured < measure_step(plain, m3, [o3], data[1], "cpu")


class NormNet(nn.Module):
    """GroupNorm -> SiLU and LayerNorm -> GELU, the normalizations of U-Nets and transformers."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.gn = nn.GroupNorm(4, 16)
        self.proj = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        h = F.silu(self.gn(self.conv(x))).flatten(2).transpose(1, 2)      # (batch, tokens, 16)
        return self.head(F.gelu(self.ln(self.proj(h))).mean(1))


def test_recompute_covers_group_and_layer_norm_and_keeps_eagers_numbers_to_rounding():
    from regal.torch import recompute, step as planned
    torch.manual_seed(0)
    m1 = NormNet()
    m2 = copy.deepcopy(m1)
    o1, o2 = (torch.optim.SGD(m.parameters(), lr=0.05) for m in (m1, m2))
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
    kind = planned._structure(o2)
    traced = planned._trace(m2, o2, kind, planned._layout(m2, o2, kind, 2), (x, y), ce, "normnet")
    assert recompute.recompute_norms(traced.graph_module) == 2    # the GroupNorm and the LayerNorm
    step = rt.planned_step(m2, o2, (x, y), loss_fn=ce, budget=BUDGET, recompute=True)
    assert eager_losses(m1, o1, [(x, y)]) == pytest.approx(planned_losses(step, [(x, y)]), rel=1e-6)
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), k
