"""regal inside torch.compile (issue 54): training steps' peaks under eager, torch.compile and
`regal.torch.compile`, each side in a process of its own.

    PYTHONPATH=/tmp/expdeps python -m experiments.torch_compile --out experiments/results/torch-compile
    python -m experiments.torch_compile --programs gru_lm_adam --sides eager compile   # a part

Every program is new to the repository (none is in `experiments/torch_steps.py`,
`experiments/torch_zoo.py` or `experiments/planned_recompute.py`): torchvision CNNs and Hugging
Face decoders built from their constructors or small configs with random weights, an RNN and a
GPT written here; SGD, Adam and AdamW. The sides (`SIDES`):

- `eager`: the eager step; `compile`: `torch.compile(model)` (Inductor, its defaults);
- `compile_amb05`: torch.compile with `torch._functorch.config.activation_memory_budget = 0.5`
  (patched around the whole run of that process);
- `regal_none`: `regal.torch.compile(model)` (regal orders Inductor's kernels; the partitioner
  is torch.compile's); `regal_01`: `regal.torch.compile(model, recompute_budget=0.1)` (regal also
  picks what the backward recomputes, within 10 % more compute).

In each side's process (`--one PROGRAM --side SIDE`; one intra-op thread, a fresh Inductor cache
directory so that every compilation is cold and the hooks run), the program trains 20 steps on
one batch from the same seeded weights, with the optimizer stepped eagerly and gradients set to
None after each update: step 1's wall time is the compile time (forward and backward compiled),
step 3 is measured as `regal.torch.eager.measure_step` measures a step (every tensor storage
alive in the process before it + the allocator's high mark during it), steps 4-8 are timed
(the median is the step time), and the 20 losses are kept. Each process's record is
OUT/cells/PROGRAM.SIDE.json; a rerun skips the cells it has (`--force` runs them again).
OUT/table.md is written from the cells.

`--sides pair` times torch.compile and `regal_01` in one process (`run_pair`: both compiled,
then alternating timed steps), since the sides' own processes run minutes apart under whatever
load the machine has then.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from experiments.torch_steps import _adam, _adamw, _sgd, _tv  # torchvision builders, optimizers: as torch_steps makes them

SIDES = ("eager", "compile", "compile_amb05", "regal_none", "regal_01")
STEPS = 20
MEASURED_STEP = 3          # 1-based: step 1 compiles, step 2 warms up
TIMED_STEPS = range(4, 9)  # 1-based, five steps


def _decoder(kind: str, batch: int = 4, tokens: int = 64):
    def build():
        import torch
        import transformers
        from torch import nn
        from torch.nn import functional as F
        common = dict(vocab_size=2000, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, attention_dropout=0.0)
        cfg = getattr(transformers, f"{kind}Config")(**common)
        lm = getattr(transformers, f"{kind}ForCausalLM")(cfg)

        class Logits(nn.Module):
            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, ids):
                return self.model(input_ids=ids).logits
        ids = torch.randint(0, 2000, (batch, tokens))
        return Logits(lm), (ids, torch.randint(0, 2000, (batch, tokens))), \
            lambda out, x, y: F.cross_entropy(out.flatten(0, 1), y.flatten())
    return build


def _gru_lm():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class GRULM(nn.Module):
        """A GRU language model written here: embedding, two stacked GRU cells stepped over the
        sequence in Python (torch.compile unrolls it; it does not compile nn.GRU), LayerNorm, output."""

        def __init__(self, vocab: int = 1000, dim: int = 128):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.cells = nn.ModuleList([nn.GRUCell(dim, dim), nn.GRUCell(dim, dim)])
            self.norm = nn.LayerNorm(dim)
            self.out = nn.Linear(dim, vocab)

        def forward(self, x):
            seq = self.emb(x)
            hs = [seq.new_zeros(seq.shape[0], seq.shape[2]) for _ in self.cells]
            outs = []
            for t in range(seq.shape[1]):
                h = seq[:, t]
                for k, cell in enumerate(self.cells):
                    hs[k] = h = cell(h, hs[k])
                outs.append(h)
            return self.out(self.norm(torch.stack(outs, 1)))
    return GRULM(), (torch.randint(0, 1000, (16, 12)), torch.randint(0, 1000, (16, 12))), \
        lambda out, x, y: F.cross_entropy(out.flatten(0, 1), y.flatten())


def _gpt():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, dim: int, heads: int):
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(a)
            return x + self.mlp(self.n2(x))

    class GPT(nn.Module):
        """A GPT written here: token and position embeddings, three pre-norm blocks (causal
        attention, GELU MLP), a final LayerNorm and an untied output layer."""

        def __init__(self, vocab: int = 1000, dim: int = 96, layers: int = 3, heads: int = 4, tokens: int = 64):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(tokens, dim)
            self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
            self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

        def forward(self, ids):
            x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            return self.head(self.norm(self.blocks(x)))
    return GPT(), (torch.randint(0, 1000, (4, 64)), torch.randint(0, 1000, (4, 64))), \
        lambda out, x, y: F.cross_entropy(out.flatten(0, 1), y.flatten())


#: name -> (build: () -> (model, inputs, loss_fn), optimizer factory, description)
PROGRAMS = {
    "mnasnet0_5_sgd": (_tv("mnasnet0_5", 8, 64), _sgd, "torchvision MNASNet-0.5, batch 8, 64x64, SGD"),
    "shufflenet_v2_x0_5_adamw": (_tv("shufflenet_v2_x0_5", 8, 64), _adamw,
                                 "torchvision ShuffleNetV2 0.5, batch 8, 64x64, AdamW"),
    "qwen2_3l_adamw": (_decoder("Qwen2"), _adamw, "transformers Qwen2 config, 3 layers, d=128, 4x64 tokens, AdamW"),
    "gru_lm_adam": (_gru_lm, _adam, "GRU-cell language model (here), 2 layers, d=128, 16x12 tokens, Adam"),
    "squeezenet1_0_sgd": (_tv("squeezenet1_0", 8, 64), _sgd, "torchvision SqueezeNet 1.0, batch 8, 64x64, SGD"),
    "mistral_3l_adam": (_decoder("Mistral"), _adam, "transformers Mistral config, 3 layers, d=128, 4x64 tokens, Adam"),
    "regnet_y_800mf_adamw": (_tv("regnet_y_800mf", 4, 64), _adamw, "torchvision RegNetY-800MF, batch 4, 64x64, AdamW"),
    "gpt_3l_adam": (_gpt, _adam, "GPT written here, 3 layers, d=96, 4 heads, 4x64 tokens, Adam"),
    "resnet34_sgd": (_tv("resnet34", 16, 96), _sgd, "torchvision ResNet-34, batch 16, 96x96, SGD"),
}


def _compiled(side: str, model):
    import torch
    if side == "eager":
        return model
    if side in ("compile", "compile_amb05"):
        return torch.compile(model)
    from regal.torch.compile import compile as regal_compile
    return regal_compile(model, recompute_budget=None if side == "regal_none" else 0.1)


def side_setup(name: str, side: str):
    """(model, inputs, loss_fn, optimizer, patch) of one side of one program, built in this
    process with one thread and seed 0; `patch`: the context torch.compile runs in (the
    activation_memory_budget 0.5 of `compile_amb05`, else nothing)."""
    import contextlib

    import torch
    import torch._functorch.config as functorch_config

    torch.set_num_threads(1)
    torch.manual_seed(0)
    build, make_opt, _ = PROGRAMS[name]
    model, inputs, loss_fn = build()
    model.train()
    opt = make_opt(model.parameters())
    patch = functorch_config.patch(activation_memory_budget=0.5) if side == "compile_amb05" else contextlib.nullcontext()
    return model, inputs, loss_fn, opt, patch


def training_step(fwd, loss_fn, opt, losses: list):
    """The user's loop's step on the compiled forward `fwd`: loss, backward, the optimizer's step,
    the gradients set to None; each loss appended to `losses`."""
    def step(x, y):
        loss = loss_fn(fwd(x), x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return step


def run_side(name: str, side: str) -> dict:
    """One side of one program in this process (module docstring)."""
    import torch

    from regal.torch.eager import measure_step

    model, inputs, loss_fn, opt, patch = side_setup(name, side)
    losses, walls = [], []
    with patch:
        fwd = _compiled(side, model)
        step = training_step(fwd, loss_fn, opt, losses)

        out: dict = {"program": name, "side": side, "torch": torch.__version__}
        for k in range(1, STEPS + 1):
            if k == MEASURED_STEP:
                out["peak_bytes"] = measure_step(step, inputs, torch.device("cpu"), warmup=0)
                walls.append(None)
                continue
            t = time.perf_counter()
            step(*inputs)
            walls.append(time.perf_counter() - t)
    out["compile_s"] = walls[0]
    out["step_s"] = statistics.median(walls[k - 1] for k in TIMED_STEPS)
    out["losses"] = losses
    records = getattr(fwd, "regal_records", None)
    if records is not None:
        out["regal"] = [{"hook": h, **r._asdict()} for h, r in records]
    return out


def run_pair(name: str, rounds: int = 7) -> dict:
    """Step time of torch.compile and of `regal.torch.compile(recompute_budget=0.1)` in one
    process (`--sides pair`): both compiled and warmed up (two steps each), then `rounds` rounds
    of one timed step of each, alternating; the medians and their ratio. Timings minutes apart
    in two processes carry the machine's load; these share it."""
    import torch

    from regal.torch.compile import compile as regal_compile

    torch.set_num_threads(1)
    build, make_opt, _ = PROGRAMS[name]
    sides = {}
    for side in ("compile", "regal_01"):
        torch.manual_seed(0)
        model, inputs, loss_fn = build()
        model.train()
        fwd = torch.compile(model) if side == "compile" else regal_compile(model, recompute_budget=0.1)
        sides[side] = (fwd, make_opt(model.parameters()), inputs, loss_fn)

    def step(side):
        fwd, opt, (x, y), loss_fn = sides[side]
        t = time.perf_counter()
        loss_fn(fwd(x), x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t
    for side in sides:
        step(side)
        step(side)
    walls = {side: [] for side in sides}
    for _ in range(rounds):
        for side in sides:
            walls[side].append(step(side))
    med = {side: statistics.median(w) for side, w in walls.items()}
    hooks = [h for h, _ in getattr(sides["regal_01"][0], "regal_records", [])]
    return {"program": name, "side": "pair", "step_s_compile": med["compile"], "step_s_regal_01": med["regal_01"],
            "ratio": med["regal_01"] / med["compile"], "walls": walls, "regal_hooks": hooks}


def _cell(out: str, name: str, side: str) -> str:
    return os.path.join(out, "cells", f"{name}.{side}.json")


def _child(name: str, side: str, timeout: int, rounds: int = 7) -> dict:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="regal-inductor-") as cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache
        cmd = [sys.executable, "-m", "experiments.torch_compile", "--one", name, "--side", side, "--rounds", str(rounds)]
        try:
            r = subprocess.run(cmd, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        except subprocess.TimeoutExpired:
            return {"program": name, "side": side, "error": f"did not finish within {timeout} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = " ".join((r.stderr or "").strip().splitlines()[-1:])[:300]
        return {"program": name, "side": side, "error": f"exit {r.returncode}: {tail}"}
    return json.loads(lines[-1])


def _load(out: str) -> dict:
    cells = {}
    folder = os.path.join(out, "cells")
    for f in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, f)) as fh:
            r = json.load(fh)
        cells[(r["program"], r["side"])] = r
    return cells


def _mib(v) -> str:
    return f"{v / 2**20:.1f}" if isinstance(v, (int, float)) else "-"


def _pct(a, b) -> str:
    return f"{100 * (a - b) / b:+.1f} %" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def _rel_loss(a: dict, b: dict):
    la, lb = a.get("losses"), b.get("losses")
    if not la or not lb or len(la) != len(lb):
        return None
    return max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(la, lb))


def table(cells: dict, programs) -> str:
    """The README's tables from the cells."""
    head = ("| program | eager MiB | compile MiB | amb 0.5 MiB | regal None MiB | regal 0.1 MiB | regal 0.1 vs compile "
            "| regal 0.1 vs amb 0.5 | step s: compile / amb / None / 0.1 | compile s: compile / amb / None / 0.1 "
            "| loss rel. diff (None, 0.1) |")
    rows = [head, "|" + "---|" * 11]
    for p in programs:
        c = {s: cells.get((p, s), {}) for s in SIDES}
        peak = {s: c[s].get("peak_bytes", c[s].get("error", "-")) for s in SIDES}

        def cellv(s):
            v = peak[s]
            return _mib(v) if isinstance(v, (int, float)) else f"fails: {str(v)[:60]}" if v != "-" else "-"
        step = " / ".join(f"{c[s]['step_s']:.3f}" if "step_s" in c[s] else "-" for s in SIDES[1:])
        comp = " / ".join(f"{c[s]['compile_s']:.0f}" if "compile_s" in c[s] else "-" for s in SIDES[1:])
        rel = ", ".join(f"{r:.1e}" if r is not None else "-" for r in
                        (_rel_loss(c["regal_none"], c["compile"]), _rel_loss(c["regal_01"], c["compile"])))
        rows.append(f"| {p} | " + " | ".join(cellv(s) for s in SIDES) +
                    f" | {_pct(peak['regal_01'], peak['compile'])} | {_pct(peak['regal_01'], peak['compile_amb05'])}"
                    f" | {step} | {comp} | {rel} |")
    return "\n".join(rows)


def summary(cells: dict, programs) -> str:
    """The issue's targets, each against the figure measured (per side, the programs with it and
    eager, compile and amb 0.5 measured); step time also from the paired cells (`run_pair`)."""
    base = ("eager", "compile", "compile_amb05")
    lines = []
    for side in ("regal_none", "regal_01"):
        full = [p for p in programs if all(isinstance(cells.get((p, s), {}).get("peak_bytes"), int) for s in base + (side,))]
        if not full:
            lines.append(f"- `{side}`: no program with every side measured")
            continue
        vs = [(cells[(p, side)]["peak_bytes"] - cells[(p, "compile")]["peak_bytes"]) / cells[(p, "compile")]["peak_bytes"]
              for p in full]
        below = sum(v < 0 for v in vs)
        slow = [cells[(p, side)]["step_s"] / cells[(p, "compile")]["step_s"] for p in full]
        comp = [cells[(p, side)]["compile_s"] / cells[(p, "compile")]["compile_s"] for p in full]
        amb = [p for p in full if cells[(p, side)]["peak_bytes"] < cells[(p, "compile_amb05")]["peak_bytes"]
               and cells[(p, side)]["step_s"] <= cells[(p, "compile_amb05")]["step_s"]]
        amb_peak = [p for p in full if cells[(p, side)]["peak_bytes"] < cells[(p, "compile_amb05")]["peak_bytes"]]
        worse_eager = [p for p in full if cells[(p, side)]["peak_bytes"] > cells[(p, "eager")]["peak_bytes"]]
        rel = [r for r in (_rel_loss(cells[(p, side)], cells[(p, "compile")]) for p in full) if r is not None]
        equal = sum(r <= 1e-5 for r in rel)
        lines += [f"- `{side}` ({len(full)} programs: {', '.join(full)}) against torch.compile's default: below on "
                  f"{below} of {len(full)} (target >= 90 %), mean {100 * statistics.mean(vs):+.1f} % (target <= -15 %); "
                  f"step time, processes minutes apart, {min(slow):.2f}-{max(slow):.2f}x torch.compile's (median "
                  f"{statistics.median(slow):.2f}x; target <= 1.1x); compile time {min(comp):.2f}-{max(comp):.2f}x "
                  f"(median {statistics.median(comp):.2f}x)",
                  f"- `{side}` against activation_memory_budget 0.5: lower peak on {len(amb_peak)} of {len(full)}, "
                  f"lower peak at a step time no higher on {len(amb)} of {len(full)} (target >= 80 %); above eager on "
                  f"{len(worse_eager)} ({', '.join(worse_eager) or 'none'}; target: none)",
                  f"- `{side}` losses over {STEPS} steps against torch.compile's: within 1e-5 relative on {equal} of "
                  f"{len(rel)}, largest relative difference {max(rel):.1e} (target <= 1e-5)" if rel
                  else f"- `{side}`: no losses"]
    pairs = [(p, cells[(p, "pair")]) for p in programs if "ratio" in cells.get((p, "pair"), {})]
    if pairs:
        lines.append("- `regal_01` step time against torch.compile's in one process (7 alternating steps each, "
                     "medians): " + ", ".join(f"{p} {c['ratio']:.2f}x" for p, c in pairs) + " (target <= 1.1x)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/results/torch-compile")
    ap.add_argument("--programs", nargs="*", default=None, help=f"of {', '.join(PROGRAMS)}")
    ap.add_argument("--sides", nargs="*", default=list(SIDES), help=f"of {', '.join(SIDES)}")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per side's process")
    ap.add_argument("--force", action="store_true", help="run cells that exist again")
    ap.add_argument("--one", help="(internal) run one program's side in this process and print its record")
    ap.add_argument("--side", help="(internal) with --one")
    ap.add_argument("--rounds", type=int, default=7, help="timed steps of each side in a pair cell")
    ap.add_argument("--table", action="store_true", help="only write the table from the cells")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_pair(args.one, args.rounds) if args.side == "pair" else run_side(args.one, args.side)))
        return 0
    programs = args.programs or list(PROGRAMS)
    bad = [p for p in programs if p not in PROGRAMS] + [s for s in args.sides if s not in SIDES + ("pair",)]
    if bad:
        print(f"error: unknown program or side {bad[0]!r}", file=sys.stderr)
        return 2
    os.makedirs(os.path.join(args.out, "cells"), exist_ok=True)
    if not args.table:
        for p in programs:
            for s in args.sides:
                path = _cell(args.out, p, s)
                if os.path.exists(path) and not args.force:
                    continue
                t = time.time()
                rec = _child(p, s, args.timeout, args.rounds)
                rec["wall_s"] = time.time() - t
                rec["load"] = os.getloadavg()[0]
                with open(path, "w") as fh:
                    json.dump(rec, fh, indent=1)
                print(f"{p} {s}: {rec.get('peak_bytes', rec.get('error'))} ({rec['wall_s']:.0f} s, load "
                      f"{rec['load']:.1f})", flush=True)
    cells = _load(args.out)
    done = [p for p in PROGRAMS if any((p, s) in cells for s in SIDES)]
    with open(os.path.join(args.out, "table.md"), "w") as fh:
        fh.write(table(cells, done) + "\n\n" + summary(cells, done) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
