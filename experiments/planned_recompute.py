"""The planned step with the search's recomputation (issue 53 item 4) against what users run, on
four small training steps written here (a GPT-style decoder with Adam, a BatchNorm CNN with SGD,
a two-layer LSTM language model with AdamW, a GELU MLP with AdamW), each anchor in a process of
its own (`python -m experiments.planned_recompute one PROGRAM ANCHOR`), one thread:

    python -m experiments.planned_recompute run          # every program and anchor; writes the table
    python -m experiments.planned_recompute run --force losses time   # those cells again
    python -m experiments.planned_recompute run --cached # the table from the cells there, running none

Anchors (`regal.torch.eager.measure_anchor`, the process's peak: every tensor storage alive in
the process before the step plus the allocator's high mark during it): `eager`, `compile`
(torch.compile, default mode), `planned` (regal's order alone, `recompute=False`),
`planned_recompute` (`planned_step`'s default: `recompute=0.1`, the normalizations' rewrite
tried beside it). Two checks, each in a process of its own: `losses` (eager, `recompute=False` and
`recompute=0.1` trained 20 steps from the same weights on the same 20 batches, the global
generator seeded alike: are the losses bit for bit, and within 1e-5 relative; and bit for bit
with eager run without oneDNN, whose RNN kernels the planned step cannot trace), and `time` (eager
and both planned steps in one process, their steps interleaved, 5 timed after a warm-up: the
medians and their ratios, with the load average before and after). `gpt_dropout` is the GPT with
dropout 0.1 on the attention weights and both residual branches: checks only (the draws).
Cells are kept in experiments/results/planned-recompute/cells/ (`run` resumes; `--force` runs
again). Results: experiments/results/planned-recompute/README.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

PROGRAMS = ("gpt", "cnn", "lstm", "mlp")
ANCHORS = ("eager", "compile", "planned", "planned_recompute")
CHECKS = ("losses", "time")
CHECK_PROGRAMS = PROGRAMS + ("gpt_dropout",)
STEPS = 20
OUT = os.path.join(os.path.dirname(__file__), "results", "planned-recompute")


def program(name: str):
    """(model, optimizer, example inputs, loss_fn) of one program, seeded."""
    import torch
    from torch import nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    if name in ("gpt", "gpt_dropout"):
        p = 0.1 if name == "gpt_dropout" else 0.0

        class Block(nn.Module):
            def __init__(self, d, h):
                super().__init__()
                self.ln1, self.ln2, self.h = nn.LayerNorm(d), nn.LayerNorm(d), h
                self.drop_a, self.drop_1, self.drop_2 = nn.Dropout(p), nn.Dropout(p), nn.Dropout(p)
                self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, 2))
                a = (q @ k.transpose(-1, -2)) / (d // self.h) ** 0.5
                a = self.drop_a(a.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1))
                x = x + self.drop_1(self.o((a @ v).transpose(1, 2).reshape(b, t, d)))
                return x + self.drop_2(self.mlp(self.ln2(x)))

        class GPT(nn.Module):
            def __init__(self, vocab=512, d=128, layers=4, h=4, t=128):
                super().__init__()
                self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(t, d))
                self.blocks = nn.Sequential(*[Block(d, h) for _ in range(layers)])
                self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

            def forward(self, idx):
                return self.head(self.ln(self.blocks(self.emb(idx) + self.pos)))
        m = GPT()
        x, y = torch.randint(0, 512, (8, 128)), torch.randint(0, 512, (8, 128))
        return m, torch.optim.Adam(m.parameters(), lr=1e-3), (x, y), \
            lambda out, x, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    if name == "cnn":
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))
        m = nn.Sequential(block(3, 32), block(32, 32), nn.MaxPool2d(2), block(32, 64), block(64, 64), nn.MaxPool2d(2),
                          block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
        return m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), \
            (torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))), lambda out, x, y: F.cross_entropy(out, y)
    if name == "lstm":
        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.rnn = nn.Embedding(256, 128), nn.LSTM(128, 256, num_layers=2, batch_first=True)
                self.head = nn.Linear(256, 256)

            def forward(self, x):
                return self.head(self.rnn(self.emb(x))[0])
        m = LM()
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3), \
            (torch.randint(0, 256, (16, 64)), torch.randint(0, 256, (16, 64))), \
            lambda out, x, y: F.cross_entropy(out.reshape(-1, 256), y.reshape(-1))
    if name == "mlp":
        m = nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.GELU()) for _ in range(6)], nn.Linear(1024, 10))
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3), \
            (torch.randn(256, 1024), torch.randint(0, 10, (256,))), lambda out, x, y: F.cross_entropy(out, y)
    raise ValueError(f"unknown program {name!r}; one of {', '.join(PROGRAMS)}")


def one(prog: str, anchor: str) -> dict:
    """One anchor of one program in this process: {anchor: bytes, predicted..., step_s}."""
    import torch
    from regal.torch.eager import _loss_step, measure_anchor
    from regal.torch.importer import _forward_arity
    from regal.torch.step import planned_step
    torch.set_num_threads(1)
    model, opt, inputs, loss = program(prog)
    if anchor in ("planned", "planned_recompute"):
        step = planned_step(model, opt, inputs, loss_fn=loss, budget=3000, recompute=anchor == "planned_recompute")
        from regal.torch.eager import measure_step
        out = {anchor: measure_step(step, inputs, torch.device("cpu")), "predicted": step.predicted_peak_bytes,
               "recompute": step.solution.info.get("recompute"), "rewrite": step.recomputed}
        run = step
    else:
        out = measure_anchor(anchor, model, opt, inputs, loss_fn=loss, budget=3000, copy=False)
        fwd = torch.compile(model) if anchor == "compile" else model
        run = _loss_step(fwd, opt, loss, _forward_arity(model))
    times = []
    for _ in range(6):
        t = time.perf_counter()
        run(*inputs)
        times.append(time.perf_counter() - t)
    out["step_s"] = statistics.median(times[1:])
    return out


def _batches(inputs: tuple, n: int) -> list:
    """`n` batches of the example's shapes and dtypes, seeded: normal floats, integers below the
    example's largest (token ids, class labels)."""
    import torch
    g = torch.Generator().manual_seed(1)
    return [tuple(torch.randn(a.shape, generator=g, dtype=a.dtype) if a.is_floating_point()
                  else torch.randint(0, int(a.max()) + 1, a.shape, generator=g, dtype=a.dtype) for a in inputs)
            for _ in range(n)]


def losses(prog: str) -> dict:
    """Eager and the planned step (recompute False and 0.1) trained STEPS steps from the same
    weights on the same batches, the global generator seeded alike before each run."""
    import torch
    from regal.torch.importer import _forward_arity
    from regal.torch.step import planned_step
    torch.set_num_threads(1)
    model, opt, inputs, loss = program(prog)
    data = _batches(inputs, STEPS)
    arity = _forward_arity(model)

    def eager(model, opt):
        torch.manual_seed(5)
        out = []
        for b in data:
            opt.zero_grad(set_to_none=True)
            loss_ = loss(model(*b[:arity]), *b)
            loss_.backward()
            opt.step()
            out.append(float(loss_))
        return out
    ref = eager(model, opt)
    with torch.backends.mkldnn.flags(enabled=False):   # the kernels the planned step is traced with (RNNs)
        m, o, _, _ = program(prog)
        ref_plain = eager(m, o)
    got = {}
    for name, r in (("planned", False), ("planned_recompute", 0.1)):
        m, o, _, _ = program(prog)
        step = planned_step(m, o, inputs, loss_fn=loss, budget=3000, recompute=r)
        torch.manual_seed(5)
        vals = [float(step(*b)) for b in data]
        got[name] = {"bit_for_bit": vals == ref, "max_rel": max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(vals, ref)),
                     "bit_for_bit_without_onednn": vals == ref_plain,
                     "recomputed": bool(step.recomputed or (step.solution.info.get("recompute") or {}).get("count"))}
    return {"losses": got, "eager_first_last": [ref[0], ref[-1]]}


def timing(prog: str) -> dict:
    """Eager and both planned steps in this process, their steps interleaved (rotating who goes
    first), one warm-up each then 5 timed: medians, ratios to eager, the load before and after."""
    import torch
    from regal.torch.eager import _loss_step
    from regal.torch.importer import _forward_arity
    from regal.torch.step import planned_step
    torch.set_num_threads(1)
    runs = {}
    model, opt, inputs, loss = program(prog)
    runs["eager"] = _loss_step(model, opt, loss, _forward_arity(model))
    for name, r in (("planned", False), ("planned_recompute", 0.1)):
        m, o, _, _ = program(prog)
        runs[name] = planned_step(m, o, inputs, loss_fn=loss, budget=3000, recompute=r)
    load = [os.getloadavg()[0]]
    times: dict = {k: [] for k in runs}
    names = list(runs)
    for i in range(6):
        for k in names[i % 3:] + names[:i % 3]:
            t = time.perf_counter()
            runs[k](*inputs)
            times[k].append(time.perf_counter() - t)
    load.append(os.getloadavg()[0])
    med = {k: statistics.median(v[1:]) for k, v in times.items()}
    return {"time": med, "ratio": {k: med[k] / med["eager"] for k in med}, "load": load}


def _cell(prog: str, anchor: str, force: bool, cached: bool = False) -> dict:
    path = os.path.join(OUT, "cells", f"{prog}_{anchor}.json")
    if os.path.exists(path) and not force:
        with open(path) as f:
            return json.load(f)
    if cached:
        return {"error": "not run"}
    r = subprocess.run([sys.executable, "-m", "experiments.planned_recompute", "one", prog, anchor],
                       capture_output=True, text=True, timeout=1800)
    line = (r.stdout.strip().splitlines() or ["{}"])[-1]
    cell = json.loads(line) if line.startswith("{") else {"error": r.stderr[-300:]}
    cell["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    if "error" not in cell:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(cell, f, indent=1)
    return cell


def run(force: bool = False, only: tuple = (), cached: bool = False) -> None:
    os.makedirs(OUT, exist_ok=True)
    cells = {}
    todo = [(p, c) for p in CHECK_PROGRAMS for c in CHECKS] + [(p, a) for p in PROGRAMS for a in ANCHORS]
    for prog, anchor in todo:
        cells[(prog, anchor)] = _cell(prog, anchor, force and (not only or anchor in only), cached)
        print(prog, anchor, cells[(prog, anchor)], flush=True)
    mib = 2 ** 20
    rows = ["| program | eager MiB | compile | planned (order) | planned_recompute (default) | predicted | "
            "recomputed (extra compute) | step time vs eager |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for prog in PROGRAMS:
        e = cells[(prog, "eager")].get("eager")
        if not isinstance(e, int):
            rows.append(f"| {prog} | not run | | | | | | |")
            continue

        def rel(a):
            v = cells[(prog, a)].get(a)
            return f"{v / mib:.1f} ({(v - e) / e * 100:+.1f} %)" if isinstance(v, int) else "not run"
        pr = cells[(prog, "planned_recompute")]
        rc = pr.get("recompute") or {}
        what = ("rewrite; " if pr.get("rewrite") else "") + f"{rc.get('count', 0)} ops (+{rc.get('extra_fraction', 0) * 100:.1f} %)"
        ratio = (cells[(prog, "time")].get("ratio") or {}).get("planned_recompute", float("nan"))
        rows.append(f"| {prog} | {e / mib:.1f} | {rel('compile')} | {rel('planned')} | {rel('planned_recompute')} | "
                    f"{pr.get('predicted', 0) / mib:.2f} | {what} | {ratio:.2f}x |")
    checks = [f"| program | {STEPS} steps, recompute=False | {STEPS} steps, recompute=0.1 (max rel. diff) | "
              "step time eager | planned (order) | planned_recompute | load (1 min) |",
              "|---|---|---|---:|---:|---:|---|"]
    for prog in CHECK_PROGRAMS:
        lo, ti = cells[(prog, "losses")].get("losses", {}), cells[(prog, "time")]
        if not lo or "time" not in ti:
            checks.append(f"| {prog} | {cells[(prog, 'losses')].get('error', '')[:80]} | | | | | |")
            continue

        def same(k):
            c = lo[k]
            word = "bit for bit" if c["bit_for_bit"] else f"differ ({c['max_rel']:.1e})"
            if not c["bit_for_bit"] and c.get("bit_for_bit_without_onednn"):
                word += "; bit for bit with eager without oneDNN"
            return word + ("" if c["recomputed"] or k == "planned" else " (nothing recomputed)")
        t, r = ti["time"], ti["ratio"]
        checks.append(f"| {prog} | {same('planned')} | {same('planned_recompute')} ({lo['planned_recompute']['max_rel']:.1e}) "
                      f"| {t['eager'] * 1e3:.1f} ms | {r['planned']:.2f}x | {r['planned_recompute']:.2f}x | "
                      f"{ti['load'][0]:.1f} -> {ti['load'][1]:.1f} |")
    text = ("# The planned step with the search's recomputation (issue 53 item 4)\n\n"
            "    python -m experiments.planned_recompute run\n\n" + __doc__.split("\n\n", 1)[1] + "\n"
            + "\n".join(rows) + "\n\n" + "\n".join(checks) + "\n")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    if sys.argv[1:2] == ["one"]:
        prog, anchor = sys.argv[2], sys.argv[3]
        print(json.dumps(losses(prog) if anchor == "losses" else timing(prog) if anchor == "time" else one(prog, anchor)))
    elif sys.argv[1:2] in (["run"], []):
        run(force="--force" in sys.argv, only=tuple(a for a in sys.argv[2:] if not a.startswith("-")),
            cached="--cached" in sys.argv)
    else:
        sys.exit("usage: python -m experiments.planned_recompute run [--cached] [--force [ANCHOR ...]] | "
                 "one PROGRAM ANCHOR")
