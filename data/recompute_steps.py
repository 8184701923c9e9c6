"""Training steps for the recompute benchmark (issue 53): whole steps at sizes where activations matter.

    .venv/bin/python -m data.recompute_steps                    # every graph not yet written (resumable)
    .venv/bin/python -m data.recompute_steps --only gpt_6l_d512_s512_b8 --force
    .venv/bin/python -m data.recompute_steps --manifest-only    # rewrite data/manifest_recompute.json from the files

Writes `data/graphs/recompute/<name>.json.gz` and `data/manifest_recompute.json`. Every graph is
one training step (forward, backward, optimizer update), from four sources, so that whole sources
can be held out from tuning:

- `torch-cnn`: convolutional nets written here in plain `torch.nn` after their papers (ResNet-18/34,
  MobileNetV2, DenseNet-121, U-Net, VGG-16-BN, EfficientNet-B0), 128-224 pixels, batch 16-32,
  SGD with momentum or Adam. The source the recompute search's settings are tuned on.
- `torch-seq`: sequence models in plain `torch.nn` (GPT-style decoders at 512 and 1024 tokens, a
  BERT-style encoder, an LSTM language model, a BART-style encoder-decoder), initialised as in
  their papers (N(0, 0.02) weights; the LSTM uniform in +-0.05), Adam.
- `jax-hlo`: Haiku training steps of the repository's zoo (`data.models`, `data.nets`) at larger
  inputs and batches than the shipped corpus, lowered to XLA HLO and compiled by XLA:CPU (`opt`
  stage, `regal.hlo.parse_hlo`).
- `flax-hlo`: Flax (linen) training steps of `data.flax_models`, the same way (needs flax 0.12.8,
  the `data` extra; the source is skipped with a message when flax is not installed).

**Costs.** The torch graphs' op costs are measured where they run: the traced program
(`regal.torch.trace(..., split_outputs=True)`, which keeps the FX program and real
arguments) is run on this CPU by a `torch.fx.Interpreter` that times every node
(`time.perf_counter` around `run_node`), with one thread (`torch.set_num_threads(1)`, restored
afterwards), one warm-up run and the median of three timed runs, each on fresh copies of the
arguments. A graph node's `cost` is the time of the FX node it was made from (the importer names
a node after its FX node; the alloc nodes of a multi-output op, `<name>:<k>`, cost 0: their op's
node carries the time); FX nodes folded into no graph node (views, `getitem`) add nothing, their
time is recorded in `meta["folded_seconds"]`. `meta["cost_model"]` says
"measured: CPU, torch <version>, 1 thread, median of 3". The HLO graphs keep the importer's
roofline cost model (`meta["cost_model"]`, a dict; the manifest says "roofline").

**What may be recomputed** (SPEC.md sections 1 and 3b, field `recompute`). The torch graphs keep
the marks of `regal.torch`'s importer: `recompute: false` for an op that writes in place (the
optimizer's updates) and the non-resident tensor it overwrites, an op that writes an argument
beside its output (BatchNorm's running statistics), an op that fills alloc nodes (with
`split_outputs`, every op of several new outputs: BatchNorm, LayerNorm, convolution backward,
max-pool with indices) and random draws (none here: no dropout). `meta["recompute_false"]` counts
the pinned nodes with bytes by op; the manifest says it (`recompute_policy`). HLO programs are
functional (JAX's random bits are a pure function of the key): every node may be recomputed.

**One change to the importer's graph** (`finish_torch`, `meta["alloc_control_inputs"]`): the
control inputs of the alloc nodes (`split_outputs`: each further output of a multi-output op is a
node of its own, whose control inputs are the op's inputs) are dropped. They only keep an alloc
node from booking its bytes before the op's inputs exist, which a search never gains from (it
only adds bytes: without recomputation the lowest peak is the same with or without them); but SPEC.md 3b
orders every instance of a control input before the first instance of its successor, so with
them no input of a multi-output op could be recomputed after that op's alloc nodes, which rules
out every activation a convolution's backward reads (on ResNet-18 at 224x224: no recomputation
at all at any budget with them; 29 % below the flagship at 10 % more compute without them).

Names are `<model>_b<batch>` with the model's size in the name. Graphs are deterministic in
structure for the same torch / jax version; measured costs vary from run to run by a few percent.
A graph whose file exists is not built again (`--force` rebuilds it); each graph is built in its
own spawned process (`--timeout`, default 1800 s).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Callable, NamedTuple

__all__ = ["SOURCES", "TORCH_MODELS", "HLO_MODELS", "HELD_OUT", "TUNE_SOURCE", "MAX_NODES", "build", "main"]

MAX_NODES = 6000
TUNE_SOURCE = "torch-cnn"
HELD_OUT = ("torch-seq", "jax-hlo", "flax-hlo")
OUT = os.path.join("data", "graphs", "recompute")
MANIFEST = os.path.join("data", "manifest_recompute.json")
RUNS = 3            # timed runs per graph (the median is kept), after one warm-up

SOURCES = {
    "torch-cnn": "convolutional nets in plain torch.nn, traced with regal.torch (make_fx); op costs measured "
                 "on this CPU (1 thread, median of 3)",
    "torch-seq": "sequence models in plain torch.nn, traced with regal.torch (make_fx); op costs measured on "
                 "this CPU (1 thread, median of 3)",
    "jax-hlo": "Haiku training steps (data.models / data.nets) lowered to HLO and compiled by XLA:CPU (opt "
               "stage); roofline op costs (regal.hlo)",
    "flax-hlo": "Flax linen training steps (data.flax_models) lowered to HLO and compiled by XLA:CPU (opt "
                "stage); roofline op costs (regal.hlo)",
}

RECOMPUTE_POLICY = ("torch graphs: recompute false as regal.torch's importer marks it (split_outputs): in-place "
                    "writes and the non-resident tensors they overwrite, ops writing an argument beside their "
                    "output (BatchNorm's running statistics), ops filling alloc nodes (every multi-output op: "
                    "BatchNorm, LayerNorm, convolution backward, max-pool with indices, ...), random draws. "
                    "HLO graphs: every node recomputable (functional programs; JAX's random bits are a pure "
                    "function of the key)")


# =================================================================================== torch models
def _torch_models():
    """The torch model classes (imported lazily: the HLO builds do not need torch)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def conv_bn(cin, cout, k, stride=1, groups=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout))

    class BasicBlock(nn.Module):
        """ResNet basic block (He et al. 2016): two 3x3 conv-BN, ReLU, identity or 1x1 projection shortcut."""

        def __init__(self, cin, cout, stride):
            super().__init__()
            self.a = conv_bn(cin, cout, 3, stride)
            self.b = conv_bn(cout, cout, 3)
            self.down = None if stride == 1 and cin == cout else conv_bn(cin, cout, 1, stride)

        def forward(self, x):
            y = self.b(F.relu(self.a(x)))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        """ResNet-18/34 (basic blocks), ImageNet stem (7x7 conv, max pool), 1000 classes."""

        def __init__(self, layers, classes=1000):
            super().__init__()
            self.stem = nn.Sequential(conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for i, (n, c) in enumerate(zip(layers, (64, 128, 256, 512))):
                for j in range(n):
                    blocks.append(BasicBlock(cin, c, 2 if j == 0 and i > 0 else 1))
                    cin = c
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

    class InvertedResidual(nn.Module):
        """MobileNetV2 block (Sandler et al. 2018): 1x1 expand, 3x3 depthwise, 1x1 linear project."""

        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hid = cin * t
            layers = [] if t == 1 else [conv_bn(cin, hid, 1), nn.ReLU6()]
            layers += [conv_bn(hid, hid, 3, stride, groups=hid), nn.ReLU6(), conv_bn(hid, cout, 1)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                   (6, 320, 1, 1)]
            layers, cin = [conv_bn(3, 32, 3, 2), nn.ReLU6()], 32
            for t, c, n, s in cfg:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers += [conv_bn(cin, 1280, 1), nn.ReLU6()]
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(1280, classes)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))

    class DenseLayer(nn.Module):
        """DenseNet-BC layer (Huang et al. 2017): BN-ReLU-1x1 conv (4k) - BN-ReLU-3x3 conv (k) on the
        concatenation of every earlier feature map of the block."""

        def __init__(self, cin, k):
            super().__init__()
            self.n1, self.c1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, 4 * k, 1, bias=False)
            self.n2, self.c2 = nn.BatchNorm2d(4 * k), nn.Conv2d(4 * k, k, 3, 1, 1, bias=False)

        def forward(self, feats):
            x = torch.cat(feats, 1)
            return self.c2(F.relu(self.n2(self.c1(F.relu(self.n1(x))))))

    class DenseNet(nn.Module):
        """DenseNet-121: growth 32, blocks (6, 12, 24, 16), compression 0.5, ImageNet stem."""

        def __init__(self, blocks=(6, 12, 24, 16), k=32, classes=1000):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 2 * k, 7, 2, 3, bias=False), nn.BatchNorm2d(2 * k), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            c = 2 * k
            self.blocks, self.trans = nn.ModuleList(), nn.ModuleList()
            for i, n in enumerate(blocks):
                layers = nn.ModuleList()
                for j in range(n):
                    layers.append(DenseLayer(c + j * k, k))
                self.blocks.append(layers)
                c += n * k
                if i < len(blocks) - 1:
                    self.trans.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False),
                                                    nn.AvgPool2d(2)))
                    c //= 2
            self.norm = nn.BatchNorm2d(c)
            self.fc = nn.Linear(c, classes)

        def forward(self, x):
            x = self.stem(x)
            for i, layers in enumerate(self.blocks):
                feats = [x]
                for layer in layers:
                    feats.append(layer(feats))
                x = torch.cat(feats, 1)
                if i < len(self.trans):
                    x = self.trans[i](x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.norm(x)), 1), 1))

    class UNet(nn.Module):
        """U-Net (Ronneberger et al. 2015) with BatchNorm: double 3x3 conv-BN-ReLU per level, max-pool
        down, 2x2 transposed conv up, skip concatenation, 1x1 conv to per-pixel class scores."""

        def __init__(self, base=32, depth=4, classes=8):
            super().__init__()

            def double(cin, cout):
                return nn.Sequential(conv_bn(cin, cout, 3), nn.ReLU(), conv_bn(cout, cout, 3), nn.ReLU())
            chans = [base * 2 ** i for i in range(depth + 1)]
            self.down = nn.ModuleList([double(3, chans[0])] + [double(chans[i], chans[i + 1]) for i in range(depth)])
            self.up = nn.ModuleList([nn.ConvTranspose2d(chans[i + 1], chans[i], 2, 2) for i in reversed(range(depth))])
            self.dec = nn.ModuleList([double(2 * chans[i], chans[i]) for i in reversed(range(depth))])
            self.head = nn.Conv2d(chans[0], classes, 1)

        def forward(self, x):
            skips = []
            for i, block in enumerate(self.down):
                x = block(x if i == 0 else F.max_pool2d(x, 2))
                skips.append(x)
            x = skips.pop()
            for up, dec in zip(self.up, self.dec):
                x = dec(torch.cat([skips.pop(), up(x)], 1))
            return self.head(x)

    class VGG(nn.Module):
        """VGG-16 with BatchNorm (Simonyan & Zisserman 2015), the paper's 4096-4096 head on the last
        feature map (4x4 at 128x128)."""

        CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

        def __init__(self, hw=128, classes=1000):
            super().__init__()
            layers, c = [], 3
            for v in self.CFG:
                if v == "M":
                    layers.append(nn.MaxPool2d(2))
                else:
                    layers += [conv_bn(c, v, 3), nn.ReLU()]
                    c = v
            self.features = nn.Sequential(*layers)
            s = hw // 32
            self.head = nn.Sequential(nn.Linear(512 * s * s, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                                      nn.Linear(4096, classes))

        def forward(self, x):
            return self.head(torch.flatten(self.features(x), 1))

    class MBConv(nn.Module):
        """EfficientNet / MnasNet block (Tan & Le 2019): 1x1 expand, kxk depthwise, squeeze-excite
        (ratio 0.25 of the input channels), 1x1 project; SiLU; identity skip when shapes match."""

        def __init__(self, cin, cout, k, stride, t):
            super().__init__()
            hid = cin * t
            self.expand = None if t == 1 else conv_bn(cin, hid, 1)
            self.dw = conv_bn(hid, hid, k, stride, groups=hid)
            sq = max(1, cin // 4)
            self.se1, self.se2 = nn.Conv2d(hid, sq, 1), nn.Conv2d(sq, hid, 1)
            self.project = conv_bn(hid, cout, 1)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            h = x if self.expand is None else F.silu(self.expand(x))
            h = F.silu(self.dw(h))
            s = torch.sigmoid(self.se2(F.silu(self.se1(F.adaptive_avg_pool2d(h, 1)))))
            h = self.project(h * s)
            return x + h if self.residual else h

    class EfficientNet(nn.Module):
        """EfficientNet-B0 (no stochastic depth, no dropout: random ops)."""

        CFG = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
               (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]

        def __init__(self, classes=1000):
            super().__init__()
            layers, cin = [], 32
            for t, k, s, c, n in self.CFG:
                for i in range(n):
                    layers.append(MBConv(cin, c, k, s if i == 0 else 1, t))
                    cin = c
            self.stem = conv_bn(3, 32, 3, 2)
            self.blocks = nn.Sequential(*layers)
            self.head = conv_bn(cin, 1280, 1)
            self.fc = nn.Linear(1280, classes)

        def forward(self, x):
            x = F.silu(self.head(self.blocks(F.silu(self.stem(x)))))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def paper_init(module):
        """GPT-2 / BERT / BART initialisation: Linear and Embedding weights N(0, 0.02), biases 0 (the
        default N(0, 1) embeddings give logits so large that the softmax's gradient is full of
        denormal floats, whose products run tens of times slower on a CPU)."""
        for m in module.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    class Attention(nn.Module):
        """Multi-head attention written out (QK^T, softmax, AV; the attention matrix is a tensor of the
        step), or through F.scaled_dot_product_attention (`sdpa`: PyTorch's fused CPU kernel)."""

        def __init__(self, d, heads, causal=False, cross=False, sdpa=False):
            super().__init__()
            self.h, self.causal, self.cross, self.sdpa = heads, causal, cross, sdpa
            if cross:
                self.q, self.kv = nn.Linear(d, d), nn.Linear(d, 2 * d)
            else:
                self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)

        def forward(self, x, mem=None, mask=None):
            b, t, d = x.shape
            if self.cross:
                q, (k, v) = self.q(x), self.kv(mem).split(d, dim=2)
            else:
                q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (z.view(b, z.shape[1], self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
            if self.sdpa:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal and mask is None)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.h))
                if self.causal:
                    att = att.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
                if mask is not None:
                    att = att + mask
                y = F.softmax(att, dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        """Transformer block: pre-LN (GPT-2) or post-LN (BERT, BART); GELU MLP of width 4d; optional
        cross-attention (a decoder's)."""

        def __init__(self, d, heads, causal=False, cross=False, pre_ln=True, sdpa=False):
            super().__init__()
            self.pre_ln = pre_ln
            self.ln1, self.att = nn.LayerNorm(d), Attention(d, heads, causal, sdpa=sdpa)
            self.ln_x, self.xatt = (nn.LayerNorm(d), Attention(d, heads, cross=True)) if cross else (None, None)
            self.ln2, self.mlp = nn.LayerNorm(d), nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, mem=None, mask=None):
            if self.pre_ln:
                x = x + self.att(self.ln1(x), mask=mask)
                if self.xatt is not None:
                    x = x + self.xatt(self.ln_x(x), mem)
                return x + self.mlp(self.ln2(x))
            x = self.ln1(x + self.att(x, mask=mask))
            if self.xatt is not None:
                x = self.ln_x(x + self.xatt(x, mem))
            return self.ln2(x + self.mlp(x))

    class GPT(nn.Module):
        """GPT-2-style decoder LM (Radford et al. 2019): learned positions, pre-LN causal blocks, final
        LayerNorm, LM head tied to the token embedding; (tokens, targets) -> next-token loss."""

        def __init__(self, vocab, d, layers, heads, seq):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList([Block(d, heads, causal=True) for _ in range(layers)])
            self.ln = nn.LayerNorm(d)
            paper_init(self)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    class BERT(nn.Module):
        """BERT-style encoder (Devlin et al. 2019): token, position and segment embeddings, LayerNorm,
        post-LN blocks with F.scaled_dot_product_attention under a padding mask, an MLM head (dense,
        GELU, LayerNorm, decoder tied to the embedding); (tokens, padding mask, labels) -> loss."""

        def __init__(self, vocab, d, layers, heads, seq):
            super().__init__()
            self.tok, self.pos, self.seg = nn.Embedding(vocab, d), nn.Embedding(seq, d), nn.Embedding(2, d)
            self.ln = nn.LayerNorm(d)
            self.blocks = nn.ModuleList([Block(d, heads, pre_ln=False, sdpa=True) for _ in range(layers)])
            self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
            self.bias = nn.Parameter(torch.zeros(vocab))
            paper_init(self)

        def forward(self, idx, keep, labels):
            t = idx.shape[1]
            x = self.ln(self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
                        + self.seg(torch.zeros_like(idx)))
            mask = keep[:, None, None, :]
            for blk in self.blocks:
                x = blk(x, mask=mask)
            logits = self.head(x) @ self.tok.weight.t() + self.bias
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    class LSTMLM(nn.Module):
        """LSTM language model (Zaremba et al. 2014, 'medium' layers): embedding, 2-layer LSTM of 650 units,
        linear decoder; (tokens, targets) -> loss. Traced as the LSTM cells' ops (regal.torch)."""

        def __init__(self, vocab, d, layers):
            super().__init__()
            self.emb, self.rnn, self.out = nn.Embedding(vocab, d), nn.LSTM(d, d, layers, batch_first=True), nn.Linear(d, vocab)
            for p in self.parameters():   # the paper's initialisation: uniform in [-0.05, 0.05]
                nn.init.uniform_(p, -0.05, 0.05)

        def forward(self, idx, targets):
            y, _ = self.rnn(self.emb(idx))
            logits = self.out(y)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    class Seq2Seq(nn.Module):
        """BART-style encoder-decoder (Lewis et al. 2020): shared embeddings, learned positions, post-LN
        blocks, causal decoder self-attention and cross-attention, tied LM head;
        (source, target input, target labels) -> loss."""

        def __init__(self, vocab, d, enc, dec, heads, seq):
            super().__init__()
            self.emb, self.pos_e, self.pos_d = nn.Embedding(vocab, d), nn.Embedding(seq, d), nn.Embedding(seq, d)
            self.ln_e, self.ln_d = nn.LayerNorm(d), nn.LayerNorm(d)
            self.enc = nn.ModuleList([Block(d, heads, pre_ln=False) for _ in range(enc)])
            self.dec = nn.ModuleList([Block(d, heads, causal=True, cross=True, pre_ln=False) for _ in range(dec)])
            paper_init(self)

        def forward(self, src, tgt_in, labels):
            ar = torch.arange(src.shape[1], device=src.device)
            x = self.ln_e(self.emb(src) + self.pos_e(ar))
            for blk in self.enc:
                x = blk(x)
            y = self.ln_d(self.emb(tgt_in) + self.pos_d(torch.arange(tgt_in.shape[1], device=src.device)))
            for blk in self.dec:
                y = blk(y, mem=x)
            logits = y @ self.emb.weight.t()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    return dict(ResNet=ResNet, MobileNetV2=MobileNetV2, DenseNet=DenseNet, UNet=UNet, VGG=VGG,
                EfficientNet=EfficientNet, GPT=GPT, BERT=BERT, LSTMLM=LSTMLM, Seq2Seq=Seq2Seq)


class TorchModel(NamedTuple):
    source: str
    family: str
    make: Callable          # classes dict -> module
    inputs: Callable        # () -> tuple of tensors
    loss: str               # "xent": cross-entropy of the output against the last input; "self": the output
    optimizer: str          # the importer's: "sgd" (momentum 0.9) or "adam"
    description: str


def _images(b, hw, classes=1000, seg=False):
    def make():
        import torch
        x = torch.randn(b, 3, hw, hw)
        y = torch.randint(0, classes, (b, hw, hw) if seg else (b,))
        return x, y
    return make


def _tokens(b, t, vocab, n_extra=1, mask=False, t2=None):
    def make():
        import torch
        out = [torch.randint(0, vocab, (b, t))]
        if mask:   # BERT's padding mask: the last eighth of each sequence is padding
            keep = torch.ones(b, t, dtype=torch.bool)
            keep[:, t - t // 8:] = False
            out.append(keep)
        if t2 is not None:
            out.append(torch.randint(0, vocab, (b, t2)))
        for _ in range(n_extra):
            out.append(torch.randint(0, vocab, (b, t2 or t)))
        return tuple(out)
    return make


TORCH_MODELS: dict[str, TorchModel] = {
    "resnet18_224_b32": TorchModel("torch-cnn", "resnet", lambda c: c["ResNet"]((2, 2, 2, 2)), _images(32, 224),
                                   "xent", "sgd", "ResNet-18, 224x224, batch 32, SGD momentum"),
    "resnet34_160_b32": TorchModel("torch-cnn", "resnet", lambda c: c["ResNet"]((3, 4, 6, 3)), _images(32, 160),
                                   "xent", "adam", "ResNet-34, 160x160, batch 32, Adam"),
    "mobilenetv2_192_b32": TorchModel("torch-cnn", "mobilenet", lambda c: c["MobileNetV2"](), _images(32, 192),
                                      "xent", "sgd", "MobileNetV2 (inverted residuals, ReLU6, BatchNorm), 192x192, "
                                      "batch 32, SGD momentum"),
    "densenet121_128_b16": TorchModel("torch-cnn", "densenet", lambda c: c["DenseNet"](), _images(16, 128),
                                      "xent", "sgd", "DenseNet-121 (BC, growth 32), 128x128, batch 16, SGD momentum"),
    "unet_d4_c32_128_b16": TorchModel("torch-cnn", "unet", lambda c: c["UNet"](32, 4, 8),
                                      _images(16, 128, 8, seg=True), "xent", "adam",
                                      "U-Net with BatchNorm, depth 4, 32-512 channels, 128x128, batch 16, 8-class "
                                      "per-pixel cross-entropy, Adam"),
    "vgg16bn_128_b32": TorchModel("torch-cnn", "vgg", lambda c: c["VGG"](128), _images(32, 128), "xent", "sgd",
                                  "VGG-16 with BatchNorm, 4096-4096 head, 128x128, batch 32, SGD momentum"),
    "efficientnet_b0_160_b32": TorchModel("torch-cnn", "efficientnet", lambda c: c["EfficientNet"](),
                                          _images(32, 160), "xent", "adam",
                                          "EfficientNet-B0 (MBConv, SiLU, squeeze-excite, BatchNorm), 160x160, "
                                          "batch 32, Adam"),
    "gpt_6l_d512_s512_b8": TorchModel("torch-seq", "gpt", lambda c: c["GPT"](8192, 512, 6, 8, 512),
                                      _tokens(8, 512, 8192), "self", "adam",
                                      "GPT-2-style decoder, 6 layers, d=512, 8 heads, 512 tokens, vocab 8192, "
                                      "batch 8, attention written out, Adam"),
    "gpt_4l_d512_s1024_b4": TorchModel("torch-seq", "gpt", lambda c: c["GPT"](8192, 512, 4, 8, 1024),
                                       _tokens(4, 1024, 8192), "self", "adam",
                                       "GPT-2-style decoder, 4 layers, d=512, 8 heads, 1024 tokens, vocab 8192, "
                                       "batch 4, attention written out, Adam"),
    "bert_6l_d512_s512_b8": TorchModel("torch-seq", "bert", lambda c: c["BERT"](8192, 512, 6, 8, 512),
                                       _tokens(8, 512, 8192, mask=True), "self", "adam",
                                       "BERT-style encoder, 6 layers, d=512, 8 heads, 512 tokens (1/8 padding), "
                                       "vocab 8192, batch 8, fused SDPA attention, MLM head, Adam"),
    "lstm_2l_h650_s64_b64": TorchModel("torch-seq", "lstm", lambda c: c["LSTMLM"](10000, 650, 2),
                                       _tokens(64, 64, 10000), "self", "adam",
                                       "LSTM LM (Zaremba medium layers: 2 of 650, vocab 10000), 64 steps, batch 64, "
                                       "Adam"),
    "bart_3x3_d512_s256_b8": TorchModel("torch-seq", "bart", lambda c: c["Seq2Seq"](8192, 512, 3, 3, 8, 256),
                                        _tokens(8, 256, 8192, t2=256), "self", "adam",
                                        "BART-style encoder-decoder, 3+3 layers, d=512, 8 heads, 256 -> 256 tokens, "
                                        "vocab 8192, batch 8, Adam"),
}


# ====================================================================================== HLO models
class HloModel(NamedTuple):
    source: str
    family: str
    base: str               # a variant of data.models.MODELS / data.flax_models.MODELS
    batch: int
    inputs: Callable        # () -> the spec's inputs function (batch -> ...), larger than the base's
    description: str
    module: Callable | None = None   # flax: () -> the module, where the base's is sized for its inputs


def _hk_images(hw, seg_classes=None):
    def make():
        from data import models
        return models._seg_inputs(hw, seg_classes) if seg_classes else models._image_inputs(hw)
    return make


def _hk_tokens(t):
    def make():
        from data import models
        return models.token_inputs(t)
    return make


def _hk_seq2seq(src, tgt):
    def make():
        from data import models
        return models._seq2seq_inputs(src, tgt)
    return make


def _flax_images(hw, classes=None):
    def make():
        from data import flax_models
        return flax_models._img(hw, classes=classes)
    return make


def _flax_tokens(t, per_token=True):
    def make():
        from data import flax_models
        return flax_models._tok(t, per_token)
    return make


def _flax_module(cls: str, *args, **kw):
    from data import flax_models
    return getattr(flax_models, cls)(*args, **kw)


HLO_MODELS: dict[str, HloModel] = {
    "hk_resnet18_128_b32": HloModel("jax-hlo", "resnet", "resnet18", 32, _hk_images(128),
                                    "Haiku hk.nets.ResNet18, 128x128, batch 32, SGD momentum + weight decay"),
    "hk_unet_d4_c32_bn_128_b16": HloModel("jax-hlo", "unet", "unet_d4_c32_bn", 16, _hk_images(128, 4),
                                          "Haiku U-Net, depth 4, 32 channels, BatchNorm, 128x128, batch 16, Adam"),
    "hk_mixer_b8_c256_64_b32": HloModel("jax-hlo", "mlp_mixer", "mixer_b8_c256", 32, _hk_images(64),
                                        "Haiku MLP-Mixer, 8 blocks, C=256, patch 4 on 64x64 (256 tokens), batch 32, "
                                        "AdamW"),
    "hk_transformer_enc_l6_d384_s512_b8": HloModel("jax-hlo", "transformer_enc", "transformer_enc_l6_d384", 8,
                                                   _hk_tokens(512), "Haiku pre-LN encoder LM, 6 layers, d=384, "
                                                   "512 tokens, batch 8, AdamW"),
    "hk_transformer_dec_l4_d256_s256_b16": HloModel("jax-hlo", "transformer_dec", "transformer_dec_l4_d256", 16,
                                                    _hk_seq2seq(256, 256), "Haiku encoder-decoder, 4+4 layers, "
                                                    "d=256, 256 -> 256 tokens, batch 16, AdamW"),
    "hk_lstm_l1_h512_t64_b32": HloModel("jax-hlo", "lstm", "lstm_l1_h512_t64", 32, _hk_tokens(64),
                                        "Haiku LSTM LM, 1 layer of 512, static_unroll over 64 steps, batch 32, Adam "
                                        "with clipping"),
    "hk_vit_l8_d256_64_b32": HloModel("jax-hlo", "vit", "vit_l8_d256", 32, _hk_images(64),
                                      "Haiku ViT, 8 layers, d=256, patch 4 on 64x64 (257 tokens), batch 32, AdamW"),
    "flax_resnet18_128_b32": HloModel("flax-hlo", "resnet", "resnet18", 32, _flax_images(128),
                                      "Flax ResNet-18 layout (width 32), 128x128, batch 32, SGD momentum"),
    "flax_gpt_4l_s512_b8": HloModel("flax-hlo", "gpt", "gpt_4l", 8, _flax_tokens(512),
                                    "Flax decoder-only LM, 4 layers, d=256, 512 tokens, batch 8, AdamW",
                                    lambda: _flax_module("GPT", 4, 256, 4, seq=512)),
    "flax_unet_d4_128_b16": HloModel("flax-hlo", "unet", "unet_d4", 16, _flax_images(128, 4),
                                     "Flax U-Net, depth 4, GroupNorm, 128x128, batch 16, AdamW"),
    "flax_vit_8l_128_b32": HloModel("flax-hlo", "vit", "vit_8l", 32, _flax_images(128),
                                    "Flax ViT, 8 layers, d=256, patch 8 on 128x128 (257 tokens), batch 32, AdamW"),
}


def _source_of(name: str) -> str:
    return (TORCH_MODELS[name] if name in TORCH_MODELS else HLO_MODELS[name]).source


# ===================================================================================== torch build
def _timed_runs(gm, args, runs: int = RUNS) -> tuple[dict, list, dict]:
    """{FX node name: median seconds over `runs` timed runs (after one warm-up)}, each run's total,
    and how busy the machine was: each run's CPU seconds of this thread (`time.thread_time`, which
    a busy machine does not inflate) and the load average before and after. One thread, restored
    afterwards; every run on fresh copies of the arguments."""
    import torch
    import torch.fx

    class Timer(torch.fx.Interpreter):
        def __init__(self, module):
            super().__init__(module)
            self.seconds, self.cpu = {}, 0.0

        def run_node(self, n):
            c0, t0 = time.thread_time(), time.perf_counter()
            out = super().run_node(n)
            self.seconds[n.name] = time.perf_counter() - t0
            self.cpu += time.thread_time() - c0
            return out

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    load = [round(os.getloadavg()[0], 2)]
    cpu = []
    try:
        per_run = []
        for r in range(runs + 1):
            fresh = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
            timer = Timer(gm)
            with torch.no_grad():
                timer.run(*fresh)
            if r:   # run 0 is the warm-up
                per_run.append(timer.seconds)
                cpu.append(round(timer.cpu, 4))
            del fresh, timer
    finally:
        torch.set_num_threads(threads)
    load.append(round(os.getloadavg()[0], 2))
    return ({k: statistics.median(p[k] for p in per_run) for k in per_run[0]}, [sum(p.values()) for p in per_run],
            {"cpu_seconds": cpu, "load_average": load})


def build_torch(name: str, out_path: str) -> dict:
    """Trace one torch model's training step, measure its op costs, write the graph; its record."""
    import torch

    from data._files import save_graph
    from regal.graph import Graph
    from regal.torch.tracing import trace

    spec = TORCH_MODELS[name]
    torch.manual_seed(0)
    model = spec.make(_torch_models())
    inputs = spec.inputs()
    if spec.loss == "xent":
        def loss_fn(out, *args):
            return torch.nn.functional.cross_entropy(out, args[-1])
    else:
        def loss_fn(out, *args):
            return out
    t0 = time.perf_counter()
    tr = trace(model, inputs, training=True, optimizer=spec.optimizer, loss_fn=loss_fn, name=name,
               split_outputs=True)
    trace_s = time.perf_counter() - t0
    g = tr.graph
    if g.num_nodes > MAX_NODES:
        raise ValueError(f"{name}: {g.num_nodes} nodes, more than {MAX_NODES}")
    t1 = time.perf_counter()
    seconds, totals, busy = _timed_runs(tr.graph_module, tr.args)
    measure_s = time.perf_counter() - t1
    index = g.index
    records = g.to_records()
    folded = sum(s for k, s in seconds.items() if k not in index)
    for r in records:
        if r.get("resident"):
            continue
        r["cost"] = float(seconds.get(r["id"], 0.0))   # alloc nodes ("<op>:<k>") cost 0: the op carries the time
    version = torch.__version__.split("+")[0]
    meta = dict(g.meta)
    meta.update(cost_model=f"measured: CPU, torch {version}, 1 thread, median of {RUNS}",
                recompute_source=spec.source, family=spec.family, variant=name, description=spec.description,
                optimizer=spec.optimizer, mode="train", batch=int(inputs[0].shape[0]), framework="pytorch",
                torch_version=version, num_parameters=int(sum(p.numel() for p in model.parameters())),
                step_seconds=[round(s, 4) for s in totals], step_cpu_seconds=busy["cpu_seconds"],
                load_average=busy["load_average"], folded_seconds=round(folded, 6),
                recompute_false=_pinned(g), recompute_policy=RECOMPUTE_POLICY, trace_seconds=round(trace_s, 1),
                measure_seconds=round(measure_s, 1))
    graph = finish_torch(Graph.from_records(records, name=name, meta=meta, source=name))
    save_graph(graph, out_path)
    return {"name": name, "nodes": graph.num_nodes, "trace_s": round(trace_s, 1), "measure_s": round(measure_s, 1),
            "step_s": round(statistics.median(totals), 3)}


ALLOC_CONTROL = ("dropped: an alloc node's control inputs (its op's inputs) are left out; they only kept it "
                 "from booking its bytes before the op's inputs exist (booking earlier only adds bytes: without "
                 "recomputation the lowest peak is the same), and "
                 "under SPEC.md 3b they would order every instance of each input before the alloc node, so no "
                 "input of a multi-output op (every activation a convolution backward reads) could be recomputed")


def finish_torch(graph):
    """The torch graph as shipped: the alloc nodes' control inputs dropped (ALLOC_CONTROL), and
    whether the node order (PyTorch's traced order) is topological. Idempotent."""
    import numpy as np
    from regal.graph import Graph
    if graph.meta.get("alloc_control_inputs") != "dropped":
        recs = graph.to_records()
        dropped = 0
        for r in recs:
            if r.get("op") == "alloc" and r.get("control_inputs"):
                dropped += len(r["control_inputs"])
                r["control_inputs"] = []
        meta = {**graph.meta, "alloc_control_inputs": "dropped", "alloc_control_edges_dropped": dropped}
        graph = Graph.from_records(recs, name=graph.name, meta=meta, source=graph.name)
    graph.meta["traced_order_topological"] = _is_topological(graph, np.arange(graph.num_nodes))
    return graph


def _pinned(graph) -> dict:
    """The non-resident nodes marked `recompute: false`, counted by op (those with bytes only)."""
    from collections import Counter
    import numpy as np
    pinned = graph.no_recompute & ~graph.resident & (graph.bytes > 0)
    return dict(Counter(graph.ops[v] for v in np.flatnonzero(pinned)).most_common())


def _is_topological(graph, order) -> bool:
    """Whether `order` puts every data and control input of a node before it."""
    import numpy as np
    pos = np.empty(graph.num_nodes, dtype=np.int64)
    pos[np.asarray(order)] = np.arange(graph.num_nodes)
    owner = np.repeat(np.arange(graph.num_nodes), np.diff(graph.pred_ptr))
    return bool((pos[graph.pred_idx] < pos[owner]).all())


# ======================================================================================= HLO build
def build_hlo(name: str, out_path: str) -> dict:
    """Lower one Haiku / Flax training step to HLO, compile it (XLA:CPU), import the `opt` stage."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import dataclasses

    import jax

    from data._files import save_graph
    from regal.hlo import parse_hlo

    spec = HLO_MODELS[name]
    if spec.source == "jax-hlo":
        from data import models
        base = models.MODELS[spec.base]
        ms = dataclasses.replace(base, inputs=spec.inputs())
        args = models.abstract_args(ms, spec.batch, "train")
        fn = models.train_fn(ms)
        extra = {"framework": "haiku"}
    else:
        import flax
        from data import flax_models
        base = flax_models.MODELS[spec.base]
        ms = dataclasses.replace(base, inputs=spec.inputs(), train_batch=spec.batch,
                                 **({"module": spec.module()} if spec.module else {}))
        args = flax_models.abstract_args(ms, "train")
        fn = flax_models.train_fn(ms)
        extra = {"framework": "flax.linen", "flax_version": flax.__version__}
    t0 = time.perf_counter()
    text = jax.jit(fn).lower(*args).compile().as_text()
    trace_s = time.perf_counter() - t0
    g = parse_hlo(text, name=name, source=f"{name}.hlo")
    if g.num_nodes > MAX_NODES:
        raise ValueError(f"{name}: {g.num_nodes} nodes, more than {MAX_NODES}")
    g.meta.update(recompute_source=spec.source, family=spec.family, variant=name, base_variant=spec.base,
                  description=spec.description, mode="train", stage="opt", batch=spec.batch,
                  num_parameters=int(sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(args[0]))),
                  jax_version=jax.__version__, trace_seconds=round(trace_s, 1), **extra)
    save_graph(g, out_path)
    return {"name": name, "nodes": g.num_nodes, "trace_s": round(trace_s, 1)}


def build(name: str, out_dir: str = OUT) -> dict:
    path = os.path.join(out_dir, f"{name}.json.gz")
    return build_torch(name, path) if name in TORCH_MODELS else build_hlo(name, path)


def _child(name: str, out_dir: str, conn) -> None:
    try:
        conn.send(build(name, out_dir))
    except BaseException as e:  # noqa: BLE001 - one graph never takes the build down
        conn.send({"name": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]})
    conn.close()


def _run_child(name: str, out_dir: str, timeout: float) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(name, out_dir, child))
    p.start()
    child.close()
    if parent.poll(timeout):
        try:
            rec = parent.recv()
        except EOFError:
            rec = {"name": name, "error": "the build process died"}
    else:
        rec = {"name": name, "error": f"timed out after {timeout:.0f} s"}
        p.terminate()
    p.join()
    if p.exitcode not in (0, None) and "error" not in rec:
        rec["error"] = f"exit code {p.exitcode}"
    return rec


# ======================================================================================== manifest
def write_manifest(out_dir: str = OUT, path: str = MANIFEST) -> dict:
    """The manifest of the graphs in `out_dir` that a model of this file names (read from the files)."""
    import regal
    from data._files import write_json
    graphs = {}
    for name in list(TORCH_MODELS) + list(HLO_MODELS):
        f = os.path.join(out_dir, f"{name}.json.gz")
        if not os.path.exists(f):
            continue
        g = regal.load(f)
        m = g.meta
        source = _source_of(name)
        cost_model = m["cost_model"] if isinstance(m.get("cost_model"), str) else "roofline (regal.hlo): " + \
            ", ".join(f"{k} {v}" for k, v in sorted(m.get("cost_model", {}).items()))
        graphs[name] = {"path": f"recompute/{name}.json.gz", "source": source, "family": m.get("family"),
                        "split": "tune" if source == TUNE_SOURCE else "held_out", "description": m.get("description"),
                        "batch": m.get("batch"), "optimizer": m.get("optimizer"), "nodes": g.num_nodes,
                        "edges": g.num_data_edges, "control_edges": g.num_control_edges,
                        "recompute_false": int(g.no_recompute.sum()), "total_bytes": int(g.bytes.sum()),
                        "step_cost_s": round(float(g.cost[~g.resident].sum()), 6), "cost_model": cost_model,
                        "file_bytes": os.path.getsize(f)}
    doc = {"format": "regal-manifest/1", "description": __doc__.split("\n")[0], "root": "graphs",
           "node_range": [0, MAX_NODES], "split_policy": f"by source: {TUNE_SOURCE} is the source the recompute "
           f"search's settings are tuned on ('tune'); every other source is held out ('held_out')",
           "tune_source": TUNE_SOURCE, "held_out_sources": list(HELD_OUT), "sources": SOURCES,
           "recompute_policy": RECOMPUTE_POLICY, "alloc_control_inputs": ALLOC_CONTROL,
           "splits": {"tune": [n for n, e in graphs.items() if e["split"] == "tune"],
                      "held_out": [n for n, e in graphs.items() if e["split"] == "held_out"]},
           "by_source": {s: [n for n, e in graphs.items() if e["source"] == s] for s in SOURCES},
           "graphs": graphs}
    write_json(doc, path)
    return doc


def _refinish(name: str, path: str) -> str:
    """A torch graph written before `finish_torch` existed: finished now (its costs kept)."""
    import regal
    from data._files import save_graph
    if name not in TORCH_MODELS:
        return ""
    g = regal.load(path)
    if g.meta.get("alloc_control_inputs") == "dropped":
        return ""
    save_graph(finish_torch(g), path)
    return " (alloc control inputs dropped)"


def _flax_available() -> bool:
    try:
        import flax  # noqa: F401
        return True
    except ImportError:
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.recompute_steps", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=OUT)
    p.add_argument("--manifest", default=MANIFEST)
    p.add_argument("--only", action="append", default=None, metavar="NAME", help="build only this graph (repeatable)")
    p.add_argument("--source", action="append", default=None, choices=list(SOURCES), help="build only this source")
    p.add_argument("--force", action="store_true", help="rebuild graphs whose file exists")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per graph (default 1800)")
    p.add_argument("--manifest-only", action="store_true", help="only rewrite the manifest from the files")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    if not a.manifest_only:
        names = [n for n in list(TORCH_MODELS) + list(HLO_MODELS)
                 if (not a.only or n in a.only) and (not a.source or _source_of(n) in a.source)]
        t0 = time.perf_counter()
        for name in names:
            path = os.path.join(a.out, f"{name}.json.gz")
            if os.path.exists(path) and not a.force:
                note = _refinish(name, path)
                print(f"[{time.perf_counter() - t0:6.0f}s] {name}: exists, skipped{note}", flush=True)
                continue
            if _source_of(name) == "flax-hlo" and not _flax_available():
                print(f"[{time.perf_counter() - t0:6.0f}s] {name}: skipped (flax not installed: "
                      "pip install -c constraints.txt flax==0.12.8)", flush=True)
                continue
            rec = _run_child(name, a.out, a.timeout)
            print(f"[{time.perf_counter() - t0:6.0f}s] {name}: {json.dumps(rec)}", flush=True)
            write_manifest(a.out, a.manifest)
    doc = write_manifest(a.out, a.manifest)
    print(f"manifest: {len(doc['graphs'])} graphs -> {a.manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
