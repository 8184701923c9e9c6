"""A second JAX framework: Flax (linen) models traced to XLA HLO and imported as regal-graph/1.

    python -m data.flax_models --out data/graphs/flax_hlo          # needs flax (pip install flax==0.12.8)

The same pipeline as the Haiku zoo (`data.build_dataset`), with models written in Flax's
`linen` API instead of Haiku, so layer code, parameter trees, initialisers, BatchNorm state
handling and attention implementation (`nn.MultiHeadDotProductAttention`) all come from
another library. Each variant is traced in two modes,

    fwd:   (params, batch_stats, x)                          -> predictions   (inference)
    train: (params, batch_stats, opt_state, x, y, dropout key)
                                      -> (params, batch_stats, opt_state, loss)
           jax.value_and_grad of the loss, then an optax update (SGD + momentum with weight
           decay for the CNNs, AdamW with clipping elsewhere),

on `jax.ShapeDtypeStruct` arguments from `jax.eval_shape` (no weight is materialised), pinned
to the CPU backend, and imported at two stages with `regal.hlo.parse_hlo`: `pre`
(`lowered.compiler_ir("hlo").as_hlo_text()`) and `opt` (`lowered.compile().as_text()`, XLA:CPU's
fused, scheduled module). Recurrent models are unrolled in Python (a `while` loop would be one
node). Graphs outside 50-20,000 nodes are dropped. Names are `flax_<variant>_b<batch>_<mode>_<stage>`;
writes `<out>/*.json.gz` and `data/manifest_flax.json` (families split train/valid/test as in
`FAMILY_SPLIT`). Deterministic for the same jax/jaxlib/flax on the same machine.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import linen as nn  # noqa: E402

__all__ = ["FAMILY_SPLIT", "MODELS", "MIN_NODES", "MAX_NODES", "abstract_args", "fwd_fn", "train_fn", "main"]

MIN_NODES, MAX_NODES = 50, 20_000
f32, i32 = jnp.float32, jnp.int32

#: Family-level split of this source.
FAMILY_SPLIT = {"mlp": "train", "vgg": "train", "resnet": "train", "gpt": "train", "rnn": "train",
                "bert": "valid", "autoencoder": "valid", "unet": "test", "vit": "test"}


# ------------------------------------------------------------------------------ modules
class MLP(nn.Module):
    widths: tuple[int, ...]
    classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool):
        x = x.reshape(x.shape[0], -1)
        for w in self.widths:
            x = nn.Dropout(0.1, deterministic=not train)(nn.gelu(nn.Dense(w)(x)))
        return nn.Dense(self.classes)(x)


class VGG(nn.Module):
    cfg: tuple
    classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool):
        for c in self.cfg:
            if c == "M":
                x = nn.max_pool(x, (2, 2), (2, 2))
            else:
                x = nn.relu(nn.BatchNorm(use_running_average=not train)(nn.Conv(c, (3, 3), use_bias=False)(x)))
        x = x.reshape(x.shape[0], -1)
        x = nn.Dropout(0.5, deterministic=not train)(nn.relu(nn.Dense(256)(x)))
        return nn.Dense(self.classes)(x)


class ResBlock(nn.Module):
    width: int
    stride: int
    bottleneck: bool

    @nn.compact
    def __call__(self, x, train: bool):
        bn = lambda: nn.BatchNorm(use_running_average=not train)  # noqa: E731
        s = (self.stride, self.stride)
        if self.bottleneck:
            out = self.width * 4
            y = nn.relu(bn()(nn.Conv(self.width, (1, 1), use_bias=False)(x)))
            y = nn.relu(bn()(nn.Conv(self.width, (3, 3), s, use_bias=False)(y)))
            y = bn()(nn.Conv(out, (1, 1), use_bias=False)(y))
        else:
            out = self.width
            y = nn.relu(bn()(nn.Conv(self.width, (3, 3), s, use_bias=False)(x)))
            y = bn()(nn.Conv(self.width, (3, 3), use_bias=False)(y))
        if x.shape[-1] != out or self.stride != 1:
            x = bn()(nn.Conv(out, (1, 1), s, use_bias=False)(x))
        return nn.relu(x + y)


class ResNet(nn.Module):
    blocks: tuple[int, ...]
    width: int = 32
    bottleneck: bool = False
    classes: int = 100

    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.relu(nn.BatchNorm(use_running_average=not train)(nn.Conv(self.width, (3, 3), use_bias=False)(x)))
        for i, n in enumerate(self.blocks):
            for j in range(n):
                x = ResBlock(self.width * 2 ** i, 2 if (j == 0 and i > 0) else 1, self.bottleneck)(x, train)
        return nn.Dense(self.classes)(jnp.mean(x, axis=(1, 2)))


class Block(nn.Module):
    """Pre-LN transformer block (self-attention, optional causal mask, GELU MLP)."""
    dim: int
    heads: int
    causal: bool

    @nn.compact
    def __call__(self, x, train: bool):
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2])) if self.causal else None
        y = nn.MultiHeadDotProductAttention(self.heads, dropout_rate=0.1, deterministic=not train)(
            nn.LayerNorm()(x), mask=mask)
        x = x + y
        y = nn.Dense(self.dim)(nn.gelu(nn.Dense(4 * self.dim)(nn.LayerNorm()(x))))
        return x + nn.Dropout(0.1, deterministic=not train)(y)


class GPT(nn.Module):
    layers: int
    dim: int
    heads: int
    vocab: int = 8192
    seq: int = 128

    @nn.compact
    def __call__(self, tokens, train: bool):
        emb = nn.Embed(self.vocab, self.dim)
        x = emb(tokens) + self.param("pos", nn.initializers.normal(0.02), (self.seq, self.dim))
        for _ in range(self.layers):
            x = Block(self.dim, self.heads, True)(x, train)
        return emb.attend(nn.LayerNorm()(x))  # tied output embedding


class BERT(nn.Module):
    layers: int
    dim: int
    heads: int
    vocab: int = 8192
    seq: int = 128
    classes: int = 4

    @nn.compact
    def __call__(self, tokens, train: bool):
        x = nn.Embed(self.vocab, self.dim)(tokens)
        x = x + self.param("pos", nn.initializers.normal(0.02), (self.seq, self.dim))
        for _ in range(self.layers):
            x = Block(self.dim, self.heads, False)(x, train)
        return nn.Dense(self.classes)(nn.tanh(nn.Dense(self.dim)(nn.LayerNorm()(x)[:, 0])))


class ViT(nn.Module):
    layers: int
    dim: int
    heads: int
    patch: int = 4
    classes: int = 100

    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Conv(self.dim, (self.patch, self.patch), (self.patch, self.patch))(x)
        x = x.reshape(x.shape[0], -1, self.dim)
        cls = self.param("cls", nn.initializers.zeros, (1, 1, self.dim))
        x = jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, self.dim)), x], axis=1)
        x = x + self.param("pos", nn.initializers.normal(0.02), x.shape[1:])
        for _ in range(self.layers):
            x = Block(self.dim, self.heads, False)(x, train)
        return nn.Dense(self.classes)(nn.LayerNorm()(x)[:, 0])


class RNNLM(nn.Module):
    """Stacked LSTM or GRU language model, unrolled over the sequence in Python."""
    cell: str
    layers: int
    hidden: int
    vocab: int = 4096

    @nn.compact
    def __call__(self, tokens, train: bool):
        x = nn.Embed(self.vocab, self.hidden)(tokens)
        for _ in range(self.layers):
            cell = nn.OptimizedLSTMCell(self.hidden) if self.cell == "lstm" else nn.GRUCell(self.hidden)
            carry = cell.initialize_carry(jax.random.key(0), x[:, 0].shape)
            outs = []
            for t in range(x.shape[1]):
                carry, y = cell(carry, x[:, t])
                outs.append(y)
            x = jnp.stack(outs, axis=1)
        return nn.Dense(self.vocab)(x)


class UNet(nn.Module):
    depth: int
    width: int
    classes: int = 4

    @nn.compact
    def __call__(self, x, train: bool):
        def conv2(x, c):
            for _ in range(2):
                x = nn.relu(nn.GroupNorm(num_groups=min(8, c))(nn.Conv(c, (3, 3))(x)))
            return x
        skips = []
        for i in range(self.depth):
            x = conv2(x, self.width * 2 ** i)
            skips.append(x)
            x = nn.max_pool(x, (2, 2), (2, 2))
        x = conv2(x, self.width * 2 ** self.depth)
        for i in reversed(range(self.depth)):
            x = nn.ConvTranspose(self.width * 2 ** i, (2, 2), (2, 2))(x)
            x = conv2(jnp.concatenate([x, skips[i]], axis=-1), self.width * 2 ** i)
        return nn.Conv(self.classes, (1, 1))(x)


class ConvAE(nn.Module):
    """Convolutional autoencoder with a dense bottleneck."""
    widths: tuple[int, ...]
    latent: int = 64

    @nn.compact
    def __call__(self, x, train: bool):
        shape = x.shape
        for w in self.widths:
            x = nn.silu(nn.Conv(w, (3, 3), (2, 2))(x))
        inner = x.shape
        z = nn.Dense(self.latent)(x.reshape(shape[0], -1))
        x = nn.Dense(math.prod(inner[1:]))(z).reshape(inner)
        for w in reversed(self.widths[:-1]):
            x = nn.silu(nn.ConvTranspose(w, (3, 3), (2, 2))(x))
        return nn.ConvTranspose(shape[-1], (3, 3), (2, 2))(x)


# ------------------------------------------------------------------------------ zoo
def _sgd():
    return optax.chain(optax.add_decayed_weights(5e-4), optax.sgd(0.1, momentum=0.9))


def _adamw():
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, weight_decay=0.01))


def _xent(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def _mse(pred, target):
    return jnp.mean((pred - target) ** 2)


@dataclass(frozen=True)
class Spec:
    name: str
    family: str
    module: nn.Module
    inputs: Callable[[int], tuple[Any, Any]]  # batch -> (x, y) ShapeDtypeStructs
    loss: Callable
    optimizer: Callable
    fwd_batch: int
    train_batch: int
    notes: str = ""


def _img(hw, c=3, classes=None, recon=False):
    def inputs(b):
        x = jax.ShapeDtypeStruct((b, hw, hw, c), f32)
        if recon:
            return x, x
        if classes is not None:  # segmentation: per-pixel labels
            return x, jax.ShapeDtypeStruct((b, hw, hw), i32)
        return x, jax.ShapeDtypeStruct((b,), i32)
    return inputs


def _tok(seq, per_token=True):
    def inputs(b):
        return (jax.ShapeDtypeStruct((b, seq), i32),
                jax.ShapeDtypeStruct((b, seq) if per_token else (b,), i32))
    return inputs


MODELS: dict[str, Spec] = {s.name: s for s in [
    Spec("mlp_4x512", "mlp", MLP((512,) * 4), _img(28, 1), _xent, _adamw, 8, 32, "GELU MLP, dropout, 784 inputs"),
    Spec("mlp_12x256", "mlp", MLP((256,) * 12), _img(28, 1), _xent, _adamw, 32, 8, "GELU MLP, dropout, 784 inputs"),
    Spec("vgg8", "vgg", VGG((32, "M", 64, "M", 128, 128, "M", 256, 256, "M")), _img(32), _xent, _sgd, 8, 32,
         "VGG-style CNN with BatchNorm, 32x32x3"),
    Spec("vgg13", "vgg", VGG((32, 32, "M", 64, 64, "M", 128, 128, "M", 256, 256, "M", 256, 256, "M")), _img(32),
         _xent, _sgd, 32, 8, "VGG-13-style CNN with BatchNorm, 32x32x3"),
    Spec("resnet18", "resnet", ResNet((2, 2, 2, 2)), _img(64), _xent, _sgd, 8, 8, "ResNet-18 layout, width 32, 64x64x3"),
    Spec("resnet26_bottleneck", "resnet", ResNet((2, 2, 2, 2), width=16, bottleneck=True), _img(64), _xent, _sgd,
         1, 32, "bottleneck ResNet-26, width 16, 64x64x3"),
    Spec("gpt_4l", "gpt", GPT(4, 256, 4), _tok(128), _xent, _adamw, 8, 8, "decoder-only LM, tied embeddings, d=256"),
    Spec("gpt_8l", "gpt", GPT(8, 384, 6, seq=64), _tok(64), _xent, _adamw, 1, 4, "decoder-only LM, d=384, 64 tokens"),
    Spec("lstm_2l", "rnn", RNNLM("lstm", 2, 256), _tok(24), _xent, _adamw, 8, 8, "2-layer LSTM LM unrolled over 24 steps"),
    Spec("gru_1l", "rnn", RNNLM("gru", 1, 384), _tok(32), _xent, _adamw, 32, 4, "GRU LM unrolled over 32 steps"),
    Spec("bert_4l", "bert", BERT(4, 256, 4), _tok(128, per_token=False), _xent, _adamw, 8, 8,
         "encoder classifier, d=256, 128 tokens"),
    Spec("bert_6l", "bert", BERT(6, 192, 3, seq=64), _tok(64, per_token=False), _xent, _adamw, 32, 1,
         "encoder classifier, d=192, 64 tokens"),
    Spec("conv_ae", "autoencoder", ConvAE((32, 64, 128)), _img(32, recon=True), _mse, _adamw, 8, 32,
         "conv autoencoder, dense bottleneck, 32x32x3"),
    Spec("conv_ae_deep", "autoencoder", ConvAE((16, 32, 64, 128, 256), latent=128), _img(64, recon=True), _mse,
         _adamw, 1, 8, "conv autoencoder, 5 strided convs, 64x64x3"),
    Spec("unet_d3", "unet", UNet(3, 16), _img(64, classes=4), _xent, _adamw, 8, 8, "U-Net, depth 3, GroupNorm, 64x64"),
    Spec("unet_d4", "unet", UNet(4, 16), _img(96, classes=4), _xent, _adamw, 1, 4, "U-Net, depth 4, GroupNorm, 96x96"),
    Spec("vit_4l", "vit", ViT(4, 192, 3), _img(32), _xent, _adamw, 8, 8, "ViT, patch 4 on 32x32 (65 tokens)"),
    Spec("vit_8l", "vit", ViT(8, 256, 4, patch=8), _img(64), _xent, _adamw, 32, 4, "ViT, patch 8 on 64x64 (65 tokens)"),
]}


def _variables(spec: Spec, x) -> tuple[Any, Any]:
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    v = jax.eval_shape(lambda k, x: spec.module.init({"params": jax.random.wrap_key_data(k)}, x, False), key, x)
    return v["params"], v.get("batch_stats", {})


def fwd_fn(spec: Spec) -> Callable:
    def fwd(params, stats, x):
        return spec.module.apply({"params": params, "batch_stats": stats} if stats else {"params": params}, x, False)
    return fwd


def train_fn(spec: Spec) -> Callable:
    opt = spec.optimizer()

    def step(params, stats, opt_state, x, y, key):
        def loss_fn(p):
            variables = {"params": p, "batch_stats": stats} if stats else {"params": p}
            out, new = spec.module.apply(variables, x, True, rngs={"dropout": jax.random.wrap_key_data(key)},
                                         mutable=["batch_stats"] if stats else [])
            return spec.loss(out, y), new.get("batch_stats", stats)
        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_stats, opt_state, loss
    return step


def abstract_args(spec: Spec, mode: str) -> tuple:
    batch = spec.fwd_batch if mode == "fwd" else spec.train_batch
    x, y = spec.inputs(batch)
    params, stats = _variables(spec, x)
    if mode == "fwd":
        return params, stats, x
    opt_state = jax.eval_shape(spec.optimizer().init, params)
    return params, stats, opt_state, x, y, jax.ShapeDtypeStruct((2,), jnp.uint32)


def build(spec: Spec, mode: str, out_dir: str) -> list[dict]:
    """Trace one (variant, mode), import both stages, save those in range; one record per stage."""
    import flax

    from data._files import save_graph
    from regal.hlo import parse_hlo
    batch = spec.fwd_batch if mode == "fwd" else spec.train_batch
    args = abstract_args(spec, mode)
    t0 = time.perf_counter()
    lowered = jax.jit(fwd_fn(spec) if mode == "fwd" else train_fn(spec)).lower(*args)
    texts = {"pre": lowered.compiler_ir("hlo").as_hlo_text(), "opt": lowered.compile().as_text()}
    trace_s = time.perf_counter() - t0
    num_params = int(sum(math.prod(a.shape) for a in jax.tree_util.tree_leaves(args[0])))
    records = []
    for stage in ("pre", "opt"):
        name = f"flax_{spec.name}_b{batch}_{mode}_{stage}"
        g = parse_hlo(texts[stage], name=name, source=f"{name}.hlo")
        rec = {"name": name, "nodes": g.num_nodes}
        if not MIN_NODES <= g.num_nodes <= MAX_NODES:
            records.append(dict(rec, status="out of range"))
            continue
        split = FAMILY_SPLIT[spec.family]
        g.meta.update(model=f"{spec.name}_b{batch}_{mode}", family=spec.family, variant=spec.name, batch=batch,
                      mode=mode, stage=stage, split=split, description=spec.notes, num_parameters=num_params,
                      framework="flax.linen", flax_version=flax.__version__, jax_version=jax.__version__)
        file_bytes = save_graph(g, os.path.join(out_dir, f"{name}.json.gz"))
        records.append(dict(rec, status="kept", path=f"{os.path.basename(out_dir)}/{name}.json.gz",
                            family=spec.family, variant=spec.name, batch=batch, mode=mode, stage=stage,
                            split=split, edges=g.num_data_edges, control_edges=g.num_control_edges,
                            total_bytes=int(g.bytes.sum()), file_bytes=file_bytes, trace_s=round(trace_s, 1)))
    return records


def main(argv: list[str] | None = None) -> int:
    from data._files import write_source_manifest
    p = argparse.ArgumentParser(prog="python -m data.flax_models", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="data/graphs/flax_hlo", help="output folder")
    p.add_argument("--only", action="append", default=None, metavar="VARIANT", help="build only this variant")
    p.add_argument("--manifest", default=None, help="default: <folder holding the graphs folder>/manifest_flax.json")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    out_abs = os.path.abspath(a.out)
    graphs_root = os.path.dirname(out_abs)
    manifest_path = a.manifest or os.path.join(os.path.dirname(graphs_root), "manifest_flax.json")
    t0 = time.perf_counter()
    kept: dict[str, dict] = {}
    for spec in MODELS.values():
        if a.only and spec.name not in a.only:
            continue
        for mode in ("fwd", "train"):
            try:
                recs = build(spec, mode, a.out)
            except Exception as e:  # a model that does not trace: log it, keep building
                print(f"{spec.name} {mode}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            for r in recs:
                print(f"[{time.perf_counter() - t0:5.0f}s] {r['name']}: {r['status']} ({r['nodes']} nodes)", flush=True)
                if r["status"] == "kept":
                    kept[r["name"]] = {k: v for k, v in r.items() if k not in ("name", "status", "trace_s")}
    kept = write_source_manifest(kept, a.out, manifest_path, a.only, description=__doc__.split("\n")[0],
                                 node_range=(MIN_NODES, MAX_NODES), split_policy="by family (FAMILY_SPLIT)",
                                 families=FAMILY_SPLIT)
    print(f"wrote {len(kept)} graphs to {a.out} and {manifest_path}; {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
