"""Synthetic graphs that look like layered networks: residual, dense, U-Net, inception and NAS cells.

    python -m data.synthetic_layered --out data/graphs/synthetic_layered --count 200 --seed 0

A second synthetic generator, distinct from `data.synthetic` (REGAL's recipe: random layers of
width 1-4, N(50, 10) sizes). Here each graph is a network drawn from one of six architecture
**families** with random hyperparameters, and tensor sizes follow from shapes, in bytes:

- `resnet`: stem, 2-4 stages of basic or bottleneck residual blocks (projection shortcut when
  the shape changes), global pool, classifier;
- `densenet`: 2-4 dense blocks, each layer reading the concatenation of every earlier
  feature map of its block (fan-in up to 25), transitions that halve channels and resolution;
- `unet`: encoder-decoder of depth 2-6 (1-4 convolutions per level, optionally residual), each decoder level concatenating the encoder's skip;
- `inception`: cells of 2-4 parallel branches (1x1, 3x3, factorised 5x5, pool + 1x1) joined by
  a concatenation, reduction cells between stages;
- `transformer`: encoder, decoder or encoder-decoder stacks of pre-LN blocks (attention, MLP,
  residual adds), cross-attention reading the encoder's output in every decoder block;
- `nas`: DARTS-like cells, each of 3-5 intermediate states that sum two operations on two
  earlier states (the two previous cells' outputs or the cell's own), the cell's output the
  concatenation of its states.

Each graph is drawn at one of two **granularities**: `op` (a convolution, its BatchNorm and its
activation are three nodes; attention is projections, score matmul, softmax, context matmul)
or `layer` (conv-BN-activation is one node whose intermediate is `temp_bytes`; attention and
the MLP are one node each, the score matrix and the hidden activations as `temp_bytes`), and
one of two **modes**: `fwd` (inference) or `train`, where a backward pass mirrors the forward
one (a gradient node per forward node, reading the saved activations it needs, so they stay
alive until then; gradients of a tensor read by several nodes summed by an `add_n` node; one
weight-gradient node per layer) followed by an optimizer update per parameter (SGD with
momentum or Adam: 1 or 2 resident state tensors, the update writes the new parameter and
states). Parameters, BatchNorm statistics, inputs and labels are resident.

Sizes: float32, `bytes = 4 * batch * prod(shape)` (activations) or `4 * prod(shape)`
(parameters). `cost` is the roofline of `regal._ops` (100 TFLOP/s, 1 TB/s, the importers'
scale): FLOPs of convolutions (2 * out * k * k * C_in / groups) and matrix products
(2 * M * K * N), 2x the forward FLOPs for a layer's backward (input and weight gradients),
bytes moved for the rest. Everything is a pure function of `(family, seed)`; a draw outside
100-3,000 nodes is redrawn from the same stream.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

from data._files import save_graph, write_json
from regal._ops import COST_MODEL, roofline
from regal.graph import Graph

__all__ = ["FAMILIES", "FAMILY_SPLIT", "MIN_NODES", "MAX_NODES", "generate", "sample_dataset", "main"]

MIN_NODES, MAX_NODES = 100, 3000
F32 = 4
FAMILIES = ("resnet", "densenet", "unet", "inception", "transformer", "nas")
#: Family-level split of this source: no test architecture is seen in training.
FAMILY_SPLIT = {"resnet": "train", "densenet": "train", "transformer": "train", "nas": "train",
                "inception": "valid", "unet": "test"}

# What a node's backward reads besides the incoming gradient: its inputs, its output, or nothing.
_SAVES_OUTPUT = {"relu", "gelu", "sigmoid", "softmax", "tanh"}
_SAVES_NOTHING = {"add", "concatenate", "avg_pool", "reduce_mean", "upsample", "reshape"}


class _Net:
    """Records of one forward graph, with shapes; `train()` appends the mirrored backward pass."""

    def __init__(self, rng: np.random.Generator, batch: int, granularity: str):
        self.rng, self.batch, self.gran = rng, batch, granularity
        self.recs: list[dict] = []
        self.shape: dict[str, tuple] = {}
        self.kind: dict[str, str] = {}  # resident nodes: "input", "label", "param", "stat"
        self.flops: dict[str, float] = {}
        self.size: dict[str, int] = {}  # bytes of every node so far
        self.count = 0

    # -------------------------------------------------------------- primitives
    def _nid(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def resident(self, kind: str, shape: tuple, batched: bool = False) -> str:
        nid = self._nid({"input": "x", "label": "y", "param": "w", "stat": "s"}[kind])
        b = F32 * math.prod(shape) * (self.batch if batched else 1)
        self.recs.append({"id": nid, "op": "parameter", "bytes": int(b), "resident": True})
        self.size[nid] = int(b)
        self.kind[nid] = kind
        self.shape[nid] = shape
        return nid

    def node(self, op: str, inputs: list[str], shape: tuple, flops: float = 0.0, temp: int = 0,
             nbytes: int | None = None) -> str:
        """A compute node; `bytes` is the batched float32 `shape` unless `nbytes` is given."""
        nid = self._nid("n")
        b = F32 * self.batch * math.prod(shape) if nbytes is None else nbytes
        moved = b + sum(self.size[u] for u in set(inputs))
        rec = {"id": nid, "op": op, "bytes": int(b), "inputs": list(dict.fromkeys(inputs)),
               "cost": _round(roofline(flops, moved))}
        if temp:
            rec["temp_bytes"] = int(temp)
        self.recs.append(rec)
        self.size[nid] = int(b)
        self.shape[nid] = shape
        self.flops[nid] = flops
        return nid

    # ------------------------------------------------------------------ layers
    def conv(self, x: str, cout: int, k: int = 3, stride: int = 1, act: str | None = "relu",
             groups: int = 1, bn: bool = True) -> str:
        c, h, w = self.shape[x]
        ho, wo = max(1, -(-h // stride)), max(1, -(-w // stride))
        weight = self.resident("param", (cout, c // groups, k, k))
        out = (cout, ho, wo)
        flops = 2.0 * self.batch * cout * ho * wo * k * k * c / groups
        if self.gran == "layer":
            ins = [x, weight]
            if bn:
                ins += [self.resident("param", (2, cout)), self.resident("stat", (2, cout))]
            temp = F32 * self.batch * math.prod(out) if (bn or act) else 0
            op = "conv" + ("_bn" if bn else "") + (f"_{act}" if act else "")
            return self.node(op, ins, out, flops, temp=temp)
        y = self.node("convolution", [x, weight], out, flops)
        if bn:
            y = self.node("batch_norm", [y, self.resident("param", (2, cout)), self.resident("stat", (2, cout))], out)
        if act:
            y = self.node(act, [y], out)
        return y

    def linear(self, x: str, dout: int, act: str | None = None) -> str:
        *lead, d = self.shape[x]
        weight = self.resident("param", (d + 1, dout))
        out = (*lead, dout)
        flops = 2.0 * self.batch * math.prod(lead) * d * dout
        if self.gran == "layer":
            return self.node("linear" + (f"_{act}" if act else ""), [x, weight], out, flops,
                             temp=F32 * self.batch * math.prod(out) if act else 0)
        y = self.node("dot", [x, weight], out, flops)
        return self.node(act, [y], out) if act else y

    def add(self, *xs: str) -> str:
        return self.node("add", list(xs), self.shape[xs[0]])

    def concat(self, xs: list[str]) -> str:
        c = sum(self.shape[x][0] for x in xs)
        return self.node("concatenate", xs, (c,) + tuple(self.shape[xs[0]][1:]))

    def pool(self, x: str, stride: int = 2, kind: str = "max_pool") -> str:
        c, h, w = self.shape[x]
        return self.node(kind, [x], (c, max(1, -(-h // stride)), max(1, -(-w // stride))))

    def global_pool(self, x: str) -> str:
        return self.node("reduce_mean", [x], (self.shape[x][0],))

    def upsample(self, x: str, cout: int) -> str:
        c, h, w = self.shape[x]
        weight = self.resident("param", (c, cout, 2, 2))
        return self.node("conv_transpose", [x, weight], (cout, 2 * h, 2 * w), 2.0 * self.batch * c * h * w * cout * 4)

    def layer_norm(self, x: str) -> str:
        return self.node("layer_norm", [x, self.resident("param", (2, self.shape[x][-1]))], self.shape[x])

    def attention(self, x: str, ctx: str | None, heads: int, causal: bool = False) -> str:
        t, d = self.shape[x]
        ctx = ctx or x
        tk = self.shape[ctx][0]
        scores = F32 * self.batch * heads * t * tk
        flops = 2.0 * self.batch * (t * d * d * 2 + tk * d * d * 2 + 2 * t * tk * d)
        if self.gran == "layer":
            ws = self.resident("param", (4, d + 1, d))
            return self.node("attention", [x, ctx, ws], (t, d), flops, temp=2 * scores)
        q = self.node("dot", [x, self.resident("param", (d + 1, d))], (t, d), 2.0 * self.batch * t * d * d)
        k = self.node("dot", [ctx, self.resident("param", (d + 1, d))], (tk, d), 2.0 * self.batch * tk * d * d)
        v = self.node("dot", [ctx, self.resident("param", (d + 1, d))], (tk, d), 2.0 * self.batch * tk * d * d)
        s = self.node("dot", [q, k], (heads, t, tk), 2.0 * self.batch * t * tk * d)
        p = self.node("softmax", [s], (heads, t, tk))
        o = self.node("dot", [p, v], (t, d), 2.0 * self.batch * t * tk * d)
        return self.node("dot", [o, self.resident("param", (d + 1, d))], (t, d), 2.0 * self.batch * t * d * d)

    def mlp(self, x: str, hidden: int) -> str:
        t, d = self.shape[x]
        if self.gran == "layer":
            ws = self.resident("param", (2, d + 1, hidden))
            return self.node("mlp", [x, ws], (t, d), 4.0 * self.batch * t * d * hidden,
                             temp=2 * F32 * self.batch * t * hidden)
        return self.linear(self.linear(x, hidden, act="gelu"), d)

    # ----------------------------------------------------------- training step
    def train(self, out: str, optimizer: str) -> None:
        """Append loss, the mirrored backward pass and one optimizer update per parameter."""
        labels = self.resident("label", (1,), batched=True)
        fwd = [r for r in self.recs if not r.get("resident")]
        self.node("loss", [out, labels], ())
        grad_in: dict[str, list[str]] = {out: [self.node("loss_grad", [out, labels], self.shape[out])]}
        for rec in reversed(fwd):
            v, op = rec["id"], rec["op"]
            parts = grad_in.get(v)
            if not parts:  # a forward output other than the loss's: no gradient flows back
                continue
            g = parts[0] if len(parts) == 1 else self.node("add_n", parts, self.shape[v])
            acts = [u for u in rec["inputs"] if u not in self.kind]
            params = [u for u in rec["inputs"] if self.kind.get(u) == "param"]
            if op in _SAVES_NOTHING:  # the gradient passes through (sliced or broadcast views)
                if op in ("add", "concatenate"):
                    for u in acts:
                        grad_in.setdefault(u, []).append(g)
                    continue
                saved: list[str] = []
            elif op in _SAVES_OUTPUT:
                saved = [v]
            else:
                saved = acts + params
            if acts:
                shape = self.shape[acts[0]] if len(acts) == 1 else (sum(math.prod(self.shape[u]) for u in acts),)
                dx = self.node(op + "_grad", [g] + saved, shape, self.flops.get(v, 0.0),
                               temp=rec.get("temp_bytes", 0))
                for u in acts:
                    grad_in.setdefault(u, []).append(dx)
            if params:
                # weight gradient: reads the incoming gradient and the layer's input activations
                w_in = [g] + [u for u in rec["inputs"] if u not in params and self.kind.get(u) != "stat"]
                numel = sum(math.prod(self.shape[p]) for p in params)
                dw = self.node(op + "_wgrad", w_in, (numel,), self.flops.get(v, 0.0),
                               temp=rec.get("temp_bytes", 0), nbytes=F32 * numel)  # parameter-sized
                n_state = 1 if optimizer == "sgd" else 2
                for p in params:
                    states = [self.resident("stat", self.shape[p]) for _ in range(n_state)]
                    self.node(f"{optimizer}_update", [p, dw] + states, self.shape[p],
                              nbytes=F32 * math.prod(self.shape[p]) * (1 + n_state))


def _round(x: float) -> float:
    return float(f"{x:.3g}")


# ------------------------------------------------------------------ families
def _image(net: _Net, rng, res: int, channels: int = 3) -> str:
    return net.resident("input", (channels, res, res), batched=True)


def _resnet(net: _Net, rng) -> str:
    res = int(rng.choice([32, 64, 128, 224]))
    width = int(rng.choice([16, 32, 64]))
    bottleneck = bool(rng.random() < 0.5)
    stages = int(rng.integers(2, 5))
    x = _image(net, rng, res)
    if res >= 128:
        x = net.pool(net.conv(x, width, k=7, stride=2), 2)
    else:
        x = net.conv(x, width)
    for s in range(stages):
        cmid = width * 2 ** s
        cout = cmid * (4 if bottleneck else 1)
        for b in range(int(rng.integers(1, 11))):
            stride = 2 if (b == 0 and s > 0) else 1
            if bottleneck:
                y = net.conv(net.conv(net.conv(x, cmid, k=1), cmid, stride=stride), cout, k=1, act=None)
            else:
                y = net.conv(net.conv(x, cout, stride=stride), cout, act=None)
            short = x if (stride == 1 and net.shape[x][0] == cout) else net.conv(x, cout, k=1, stride=stride, act=None)
            x = net.add(y, short)
            x = net.node("relu", [x], net.shape[x]) if net.gran == "op" else x
    return net.linear(net.global_pool(x), int(rng.choice([10, 100, 1000])))


def _densenet(net: _Net, rng) -> str:
    res = int(rng.choice([32, 64, 128]))
    growth = int(rng.choice([12, 24, 32]))
    bottleneck = bool(rng.random() < 0.6)
    x = net.conv(_image(net, rng, res), 2 * growth)
    blocks = int(rng.integers(2, 5))
    for bi in range(blocks):
        feats = [x]
        for _ in range(int(rng.integers(3, 25))):
            inp = feats[0] if len(feats) == 1 else net.concat(feats)
            if bottleneck:
                inp = net.conv(inp, 4 * growth, k=1)
            feats.append(net.conv(inp, growth))
        x = net.concat(feats)
        if bi < blocks - 1:
            x = net.pool(net.conv(x, net.shape[x][0] // 2, k=1), 2, kind="avg_pool")
    return net.linear(net.global_pool(x), int(rng.choice([10, 100])))


def _unet(net: _Net, rng) -> str:
    res = int(rng.choice([64, 128, 256]))
    width = int(rng.choice([8, 16, 32, 64]))
    depth = int(rng.integers(2, 7))
    convs = int(rng.integers(1, 5))
    residual = bool(rng.random() < 0.4)

    def level(x, c):
        y = x
        for _ in range(convs):
            y = net.conv(y, c)
        if residual:
            y = net.add(y, net.conv(x, c, k=1, act=None))
        return y

    x = _image(net, rng, res)
    skips = []
    for i in range(depth):
        x = level(x, width * 2 ** i)
        skips.append(x)
        x = net.pool(x, 2)
    x = level(x, width * 2 ** depth)
    for i in reversed(range(depth)):
        x = net.upsample(x, width * 2 ** i)
        x = level(net.concat([x, skips[i]]), width * 2 ** i)
    return net.conv(x, int(rng.choice([1, 4, 21])), k=1, act=None, bn=False)


def _inception(net: _Net, rng) -> str:
    res = int(rng.choice([32, 64, 128]))
    width = int(rng.choice([16, 32, 48]))
    x = net.conv(_image(net, rng, res), width, stride=2 if res > 64 else 1)
    stages = int(rng.integers(2, 5))
    for s in range(stages):
        c = width * 2 ** s
        for _ in range(int(rng.integers(1, 7))):
            branches = []
            n_br = int(rng.integers(2, 5))
            for b in range(n_br):
                kind = int(rng.integers(4)) if b else 0
                if kind == 0:
                    y = net.conv(x, c, k=1)
                elif kind == 1:
                    y = net.conv(net.conv(x, c // 2, k=1), c)
                elif kind == 2:
                    y = net.conv(net.conv(net.conv(x, c // 2, k=1), c), c)
                else:
                    y = net.conv(net.pool(x, 1, kind="avg_pool"), c, k=1)
                branches.append(y)
            x = net.concat(branches)
        if s < stages - 1:  # reduction cell
            a = net.conv(x, c, stride=2)
            b = net.conv(net.conv(x, c // 2, k=1), c, stride=2)
            x = net.concat([a, b, net.pool(x, 2)])
    return net.linear(net.global_pool(x), int(rng.choice([10, 100, 1000])))


def _transformer(net: _Net, rng) -> str:
    kind = str(rng.choice(["encoder", "decoder", "encdec"]))
    t = int(rng.choice([64, 128, 256, 512]))
    d = int(rng.choice([128, 256, 512, 768]))
    heads = max(1, d // 64)
    vocab = int(rng.choice([1000, 8000, 32000]))
    layers = int(rng.integers(2, 17))
    tokens = net.resident("input", (t,), batched=True)
    emb = net.resident("param", (vocab, d))

    def embed(tok):
        return net.node("gather", [tok, emb], (t, d))

    def block(x, ctx, causal):
        x = net.add(x, net.attention(net.layer_norm(x), None, heads, causal))
        if ctx is not None:
            x = net.add(x, net.attention(net.layer_norm(x), ctx, heads))
        return net.add(x, net.mlp(net.layer_norm(x), 4 * d))

    ctx = None
    if kind in ("encoder", "encdec"):
        x = embed(tokens)
        for _ in range(layers):
            x = block(x, None, False)
        ctx = net.layer_norm(x)
        if kind == "encoder":
            return net.linear(ctx, vocab)
    y = embed(net.resident("input", (t,), batched=True) if kind == "encdec" else tokens)
    for _ in range(layers):
        y = block(y, ctx, True)
    return net.linear(net.layer_norm(y), vocab)


def _nas(net: _Net, rng) -> str:
    res = int(rng.choice([32, 64]))
    c = int(rng.choice([16, 24, 36]))
    n_cells = int(rng.integers(3, 15))
    steps = int(rng.integers(3, 6))
    x = net.conv(_image(net, rng, res), 3 * c)
    prev, cur = x, x
    reductions = {n_cells // 3, 2 * n_cells // 3}
    ch = c
    for ci in range(n_cells):
        reduce = ci in reductions
        if reduce:
            ch *= 2
        s0 = net.conv(prev, ch, k=1, stride=2 if net.shape[prev][1] > net.shape[cur][1] else 1)
        s1 = net.conv(cur, ch, k=1)
        states = [s0, s1]
        for _ in range(steps):
            terms = []
            for j in rng.choice(len(states), size=2, replace=False):
                src = states[int(j)]
                stride = 2 if (reduce and int(j) < 2) else 1
                op = int(rng.integers(5))
                if op == 0:  # separable conv: depthwise + pointwise, twice
                    y = net.conv(net.conv(src, ch, k=3, stride=stride, groups=ch, act=None), ch, k=1)
                    y = net.conv(net.conv(y, ch, k=3, groups=ch, act=None), ch, k=1)
                elif op == 1:  # dilated conv
                    y = net.conv(net.conv(src, ch, k=3, stride=stride, groups=ch, act=None), ch, k=1)
                elif op == 2:
                    y = net.pool(src, stride, kind="max_pool")
                elif op == 3:
                    y = net.pool(src, stride, kind="avg_pool")
                else:  # skip connection (a factorised reduce when striding)
                    y = net.conv(src, ch, k=1, stride=2, act=None) if stride == 2 else src
                terms.append(y)
            states.append(net.add(*terms) if terms[0] != terms[1] else terms[0])
        prev, cur = cur, net.concat(states[2:])
    return net.linear(net.global_pool(cur), 10)


_BUILDERS = {"resnet": _resnet, "densenet": _densenet, "unet": _unet, "inception": _inception,
             "transformer": _transformer, "nas": _nas}


def generate(family: str, seed: int, name: str | None = None, mode: str | None = None,
             granularity: str | None = None) -> Graph:
    """One graph of `family`, a pure function of the arguments; `mode`/`granularity` drawn if None.

    Hyperparameters (depth, width, resolution or tokens, batch, optimizer, ...) are drawn from
    a generator seeded with (family index, seed); a draw giving fewer than `MIN_NODES` or more
    than `MAX_NODES` nodes is redrawn from the same stream (at most 200 times).
    """
    if family not in _BUILDERS:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    rng = np.random.default_rng([FAMILIES.index(family), seed, 7])
    mode = mode or str(rng.choice(["fwd", "train"]))
    granularity = granularity or str(rng.choice(["op", "layer"]))
    for attempt in range(200):
        batch = int(rng.choice([1, 2, 4, 8, 16, 32]))
        optimizer = str(rng.choice(["sgd", "adam"]))
        net = _Net(rng, batch, granularity)
        out = _BUILDERS[family](net, rng)
        if mode == "train":
            net.train(out, optimizer)
        if MIN_NODES <= len(net.recs) <= MAX_NODES:
            break
    else:  # pragma: no cover - the families are tuned to land in range
        raise RuntimeError(f"{family} seed {seed}: no draw in [{MIN_NODES}, {MAX_NODES}] nodes")
    meta = {"source": "synthetic_layered", "generator": "data.synthetic_layered", "family": family,
            "seed": int(seed), "mode": mode, "granularity": granularity, "batch": batch,
            "optimizer": optimizer if mode == "train" else None, "draws": attempt + 1,
            "cost_model": COST_MODEL, "dtype": "float32"}
    return Graph.from_records(net.recs, name=name or f"layered_{family}_s{seed}", meta=meta,
                              source="data.synthetic_layered")


def sample_dataset(count: int, seed: int) -> list[tuple[str, str, int]]:
    """(name, family, graph seed) of each graph of the set: families in rotation."""
    seeds = np.random.SeedSequence([seed, 1]).generate_state(count, dtype=np.uint32)
    return [(f"layered_s{seed}_{i:04d}_{FAMILIES[i % len(FAMILIES)]}", FAMILIES[i % len(FAMILIES)], int(seeds[i]))
            for i in range(count)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.synthetic_layered", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="data/graphs/synthetic_layered", help="output folder")
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--manifest", default=None,
                   help="manifest path (default: <folder holding the graphs folder>/manifest_synthetic_layered.json)")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    out_abs = os.path.abspath(a.out)
    graphs_root = os.path.dirname(out_abs)
    manifest_path = a.manifest or os.path.join(os.path.dirname(graphs_root), "manifest_synthetic_layered.json")
    sub = os.path.relpath(out_abs, graphs_root)
    entries = {}
    for name, family, gseed in sample_dataset(a.count, a.seed):
        g = generate(family, gseed, name=name)
        split = FAMILY_SPLIT[family]
        g.meta.update(split=split, dataset_seed=a.seed)
        file_bytes = save_graph(g, os.path.join(a.out, f"{name}.json.gz"))
        entries[name] = {"path": f"{sub}/{name}.json.gz", "family": family, "split": split,
                         "mode": g.meta["mode"], "granularity": g.meta["granularity"], "seed": gseed,
                         "nodes": g.num_nodes, "edges": g.num_data_edges, "control_edges": 0,
                         "total_bytes": int(g.bytes.sum()), "file_bytes": file_bytes, "shipped": True}
    doc = {"format": "regal-manifest/1",
           "description": f"Layered synthetic networks: python -m data.synthetic_layered --count {a.count} --seed {a.seed}",
           "root": os.path.relpath(graphs_root, os.path.dirname(os.path.abspath(manifest_path))),
           "node_range": [MIN_NODES, MAX_NODES], "split_policy": "by family (FAMILY_SPLIT)",
           "splits": {s: [n for n, e in entries.items() if e["split"] == s] for s in ("train", "valid", "test")},
           "families": dict(FAMILY_SPLIT), "graphs": entries}
    write_json(doc, manifest_path)
    for fname in sorted(os.listdir(a.out)):  # files of an earlier, larger --count
        if fname.startswith("layered_") and fname.endswith(".json.gz") and fname[:-8] not in entries:
            os.remove(os.path.join(a.out, fname))
    print(f"wrote {len(entries)} graphs to {a.out} and {manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
