"""regal.torch.compile (issue 54): torch.compile with regal's recompute choice and kernel order.

The default part checks the hooks' signatures in the installed torch (a release that changes one
fails here, loudly), the fallbacks and the argument errors without compiling, and one real
compilation of a small training step (both hooks called, gradients equal to eager's, nothing
global left changed). The tests marked slow compare with torch.compile itself and run autocast,
another batch shape, no_grad, eval and a graph break.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from test_global_state import changed, snapshot  # noqa: E402

import importlib  # noqa: E402

import regal.torch  # noqa: E402
from regal.torch.compile import CompileConfig  # noqa: E402

compile_module = importlib.import_module("regal.torch.compile")   # the module (regal.torch.compile is the function)

FAST = CompileConfig(evaluations=300, time_limit_s=30.0)


def _params(fn) -> list:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


@contextlib.contextmanager
def cold():
    """Inductor's and AOTAutograd's caches off (a cached compilation runs no hook)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        yield


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)) * F.gelu(self.a(x)))


def test_the_hooks_have_the_signatures_regal_calls():
    """Each private hook regal sets or calls has the signature this code was written against (torch 2.13)."""
    import torch._inductor.config as inductor_config
    from torch._functorch import partitioners
    from torch._inductor import memory
    from torch._inductor.custom_graph_pass import CustomPartitionerFn, CustomSchedulerPass
    from torch._inductor.scheduler import Scheduler
    P, K, V = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD
    assert hasattr(inductor_config, "custom_partitioner_fn") and hasattr(inductor_config, "_post_fusion_custom_pass")
    assert _params(CustomPartitionerFn.__call__) == [("self", P), ("gm", P), ("joint_inputs", P), ("kwargs", V)]
    assert _params(CustomSchedulerPass.__call__) == [("self", P), ("nodes", P)]
    assert _params(partitioners.min_cut_rematerialization_partition) == [
        ("joint_module", P), ("_joint_inputs", P), ("compiler", P), ("num_fwd_outputs", K),
        ("static_lifetime_input_indices", K)]
    assert _params(partitioners.estimate_runtime) == [("node", P)]
    assert _params(partitioners._size_of) == [("node", P)]
    assert _params(memory.prepare_planning_info) == [("nodes", P), ("name_to_buf", P), ("name_to_fused_node", P),
                                                     ("graph_inputs", P), ("graph_outputs", P)]
    assert _params(memory.estimate_peak_memory) == [("nodes", P), ("name_to_freeable_input_buf", P),
                                                    ("graph_outputs", P)]
    source = inspect.getsource(Scheduler._init)
    assert "config._post_fusion_custom_pass(self.nodes)" in source
    assert source.index("_post_fusion_custom_pass(self.nodes)") < source.index("reorder_for_peak_memory(")
    from torch.utils.checkpoint import CheckpointPolicy
    assert partitioners.must_recompute.__code__.co_names.count("CheckpointPolicy") >= 1
    assert {"MUST_SAVE", "MUST_RECOMPUTE"} <= set(CheckpointPolicy.__members__)
    assert compile_module.hooks_available() == {"partitioner": True, "order": True}


def test_bad_arguments_are_one_line_errors():
    """A budget out of range, a config of the wrong type or an option regal sets itself: ValueError."""
    m = Small()
    for bad in (-0.1, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="recompute_budget"):
            regal.torch.compile(m, recompute_budget=bad)
    with pytest.raises(ValueError, match="regal_config"):
        regal.torch.compile(m, regal_config={"evaluations": 10})
    with pytest.raises(ValueError, match="custom_partitioner_fn"):
        regal.torch.compile(m, recompute_budget=0.1, options={"custom_partitioner_fn": None})


def test_a_missing_hook_or_another_backend_falls_back_with_one_warning(monkeypatch):
    """Without a hook (or with a backend other than Inductor) torch.compile's own choice is used, said once."""
    monkeypatch.setattr(compile_module, "_WARNED", set())
    monkeypatch.setattr(compile_module, "hooks_available", lambda: {"partitioner": False, "order": False})
    records = []
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert compile_module.regal_options(0.1, FAST, records) == {}
        assert compile_module.regal_options(0.1, FAST, records) == {}
    said = [str(w.message) for w in got]
    assert len(said) == 2 and "custom_partitioner_fn" in said[0] and "_post_fusion_custom_pass" in said[1]
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        c = regal.torch.compile(Small(), backend="eager")
        regal.torch.compile(Small(), backend="eager")
    assert len(got) == 1 and "not Inductor" in str(got[0].message)
    x = torch.randn(4, 16)
    assert torch.allclose(c(x), c._orig_mod(x))


def test_a_compiled_step_calls_both_hooks_and_matches_eager():
    """One training step compiled with a budget: the partitioner and the scheduler hooks run, the
    loss and the gradients equal eager's (to 1e-5), and no global setting is left changed."""
    torch.manual_seed(0)
    m, x = Small(), torch.randn(8, 16)
    ref = Small()
    ref.load_state_dict(m.state_dict())
    before = snapshot()
    c = regal.torch.compile(m, recompute_budget=0.5, regal_config=FAST)
    assert changed(before, snapshot()) == []
    with cold():
        loss = c(x).square().mean()
        loss.backward()
    after = snapshot()
    assert changed(before, after) == []
    hooks = [h for h, _ in c.regal_records]
    assert hooks.count("partition") == 1 and hooks.count("order") == 2, c.regal_records   # forward and backward
    part = next(r for h, r in c.regal_records if h == "partition")
    assert part.extra_fraction <= 0.5 + 1e-9 and part.model_peak_bytes <= part.flagship_peak_bytes
    for h, r in c.regal_records:
        if h == "order":
            assert r.regal_bytes <= r.inductor_bytes or not r.adopted
    ref_loss = ref(x).square().mean()
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def _train(model_fn, compiler, steps: int, x, y, **kw):
    torch.manual_seed(0)
    m = model_fn()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    c = compiler(m, **kw)
    losses, outs = [], []
    with cold():
        for _ in range(steps):
            out = c(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss))
            outs.append(out.detach())
    return c, losses, outs


class Breaks(nn.Module):
    """A CNN with a graph break in its forward (two compiled regions)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.bn, self.fc = nn.BatchNorm2d(8), nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.c1(x)))
        torch._dynamo.graph_break()
        x = torch.tanh(self.c2(x)) * x
        return self.fc(x.mean((2, 3)))


@pytest.mark.slow
def test_losses_and_outputs_equal_torch_compiles_and_each_region_is_planned():
    """Five Adam steps of a CNN with a graph break: losses and outputs equal torch.compile's to
    1e-5 relative, and each of the two regions got both hooks."""
    x, y = torch.randn(4, 3, 12, 12), torch.randint(0, 10, (4,))
    c, ours, our_outs = _train(Breaks, regal.torch.compile, 5, x, y, recompute_budget=0.1, regal_config=FAST)
    _, theirs, their_outs = _train(Breaks, torch.compile, 5, x, y)
    assert [h for h, _ in c.regal_records].count("partition") == 2
    assert [h for h, _ in c.regal_records].count("order") == 4
    for a, b in zip(ours, theirs):
        assert abs(a - b) <= 1e-5 * abs(b)
    for a, b in zip(our_outs, their_outs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_autocast_another_shape_no_grad_and_eval_keep_working():
    """bf16 autocast on the CPU, a batch of another size (a recompilation), no_grad inference and
    eval mode all run through regal.torch.compile and give torch.compile's outputs."""
    torch.manual_seed(0)
    m = Breaks()
    ref = Breaks()
    ref.load_state_dict(m.state_dict())
    c = regal.torch.compile(m, recompute_budget=0.1, regal_config=FAST)
    r = torch.compile(ref)
    x, x6 = torch.randn(4, 3, 12, 12), torch.randn(6, 3, 12, 12)
    with cold():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a, b = c(x), r(x)
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)
        a.float().sum().backward()
        torch.testing.assert_close(c(x6), r(x6), rtol=1e-5, atol=1e-5)
        m.eval()
        ref.eval()
        with torch.no_grad():
            torch.testing.assert_close(c(x6), r(x6), rtol=1e-5, atol=1e-5)
    assert [h for h, _ in c.regal_records].count("order") >= 6


def _joint_of(model, x):
    """(joint graph module, num_fwd_outputs, min-cut's forward and backward modules) of `model`'s
    training step, traced by AOTAutograd with no compiler (the partitioner's own input)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    got = {}

    def partition(gm, joint_inputs, **kw):
        fw, bw = min_cut_rematerialization_partition(gm, joint_inputs, **kw)
        got.update(gm=gm, n=kw["num_fwd_outputs"], fw=fw, bw=bw)
        return fw, bw
    with cold():
        torch.compile(model, backend=aot_autograd(fw_compiler=boxed_nop, partition_fn=partition))(x).sum().backward()
    return got["gm"], got["n"], got["fw"], got["bw"]


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x):
        return self.c2(F.relu(self.bn(self.c1(x)))).mean((2, 3))


def test_no_convolution_is_recomputed_and_min_cuts_partition_is_scored():
    """A convolution is never a recompute candidate (a recomputed one turns Inductor's backward
    channels-last: _compile_joint's docstring), and regal's model scores min-cut's own partition
    of a CNN's joint graph as a valid order over every joint node."""
    from regal.torch._compile_joint import joint_records, partition_peak
    gm, n, fw, bw = _joint_of(ConvNet(), torch.randn(2, 3, 8, 8))
    records, fx_of, _ = joint_records(gm, n, FAST)
    convs = [r for r in records if r["op"].startswith("convolution") and "backward" not in r["op"]]
    assert len(convs) == 2 and all(r.get("recompute") is False for r in convs)
    peak, missing, why = partition_peak(gm, n, fw, bw, FAST)
    assert why == "" and missing == 0 and peak > 0
