"""The planned step with the search's recomputation (issue 53 item 4) against what users run, on
four small training steps written here (a GPT-style decoder with Adam, a BatchNorm CNN with SGD,
a two-layer LSTM language model with AdamW, a GELU MLP with AdamW), each anchor in a process of
its own (`python -m experiments.planned_recompute one PROGRAM ANCHOR`), one thread:

    python -m experiments.planned_recompute run          # every program and anchor; writes the table

Anchors (`regal.torch.eager.measure_anchor`, the process's peak: every tensor storage alive in
the process before the step plus the allocator's high mark during it): `eager`, `compile`
(torch.compile, default mode), `planned` (regal's order alone, `recompute=False`),
`planned_recompute` (`planned_step`'s default: `recompute=0.1`, the normalizations' rewrite
tried beside it). Step time: the median of 5 steps after the measured one.
Results: experiments/results/planned-recompute/README.md.
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
OUT = os.path.join(os.path.dirname(__file__), "results", "planned-recompute")


def program(name: str):
    """(model, optimizer, example inputs, loss_fn) of one program, seeded."""
    import torch
    from torch import nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    if name == "gpt":
        class Block(nn.Module):
            def __init__(self, d, h):
                super().__init__()
                self.ln1, self.ln2, self.h = nn.LayerNorm(d), nn.LayerNorm(d), h
                self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, 2))
                a = (q @ k.transpose(-1, -2)) / (d // self.h) ** 0.5
                a = a.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
                x = x + self.o((a @ v).transpose(1, 2).reshape(b, t, d))
                return x + self.mlp(self.ln2(x))

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


def run() -> None:
    os.makedirs(OUT, exist_ok=True)
    cells = {}
    for prog in PROGRAMS:
        for anchor in ANCHORS:
            r = subprocess.run([sys.executable, "-m", "experiments.planned_recompute", "one", prog, anchor],
                               capture_output=True, text=True, timeout=1800)
            line = (r.stdout.strip().splitlines() or ["{}"])[-1]
            cells[(prog, anchor)] = json.loads(line) if line.startswith("{") else {anchor: r.stderr[-200:]}
            print(prog, anchor, cells[(prog, anchor)], flush=True)
    mib = 2 ** 20
    rows = ["| program | eager MiB | compile | planned (order) | planned_recompute (default) | predicted | "
            "recomputed (extra compute) | step time vs eager |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for prog in PROGRAMS:
        e = cells[(prog, "eager")]["eager"]

        def rel(a):
            v = cells[(prog, a)].get(a)
            return f"{v / mib:.1f} ({(v - e) / e * 100:+.1f} %)" if isinstance(v, int) else str(v)
        pr = cells[(prog, "planned_recompute")]
        rc = pr.get("recompute") or {}
        what = ("rewrite; " if pr.get("rewrite") else "") + f"{rc.get('count', 0)} ops (+{rc.get('extra_fraction', 0) * 100:.1f} %)"
        ratio = pr.get("step_s", 0) / cells[(prog, "eager")]["step_s"]
        rows.append(f"| {prog} | {e / mib:.1f} | {rel('compile')} | {rel('planned')} | {rel('planned_recompute')} | "
                    f"{pr.get('predicted', 0) / mib:.2f} | {what} | {ratio:.2f}x |")
    text = ("# The planned step with the search's recomputation (issue 53 item 4)\n\n"
            "    python -m experiments.planned_recompute run\n\n" + __doc__.split("\n\n", 1)[1] + "\n"
            + "\n".join(rows) + "\n")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    if sys.argv[1:2] == ["one"]:
        print(json.dumps(one(sys.argv[2], sys.argv[3])))
    else:
        run()
