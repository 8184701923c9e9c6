"""The model zoo: real Haiku networks, grouped in families of variants, ready to be traced.

A `ModelSpec` holds a Haiku function (`net(features, is_training) -> outputs`), the abstract
shapes of its inputs for a batch size, its loss and its optimizer. `fwd_fn(spec)` and
`train_fn(spec)` build the two traced programs:

    fwd:   (params, state, features)                      -> predictions        (inference)
    train: (params, state, opt_state, features, targets, key)
                                                         -> (params, state, opt_state, loss)
           one step: jax.value_and_grad of the loss, then an optax update.

`abstract_args(spec, batch, mode)` gives `jax.ShapeDtypeStruct`s for every argument, computed
with `jax.eval_shape`, so tracing never materialises a weight. Families and their variants are
listed in `MODELS` (variant name -> spec), in a fixed order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from data import nets

__all__ = ["ModelSpec", "MODELS", "FAMILIES", "fwd_fn", "train_fn", "abstract_args", "classify_loss",
           "adamw", "token_inputs", "tokens_net"]

f32, i32 = jnp.float32, jnp.int32


def _sds(shape, dtype=f32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


@dataclass(frozen=True)
class ModelSpec:
    """One model variant.

    name: variant name, e.g. "resnet50"; family: e.g. "resnet".
    net: Haiku function (features: dict, is_training: bool) -> outputs (dict with "pred").
    inputs: batch -> (features, targets), dicts of ShapeDtypeStruct.
    loss: (outputs, targets) -> scalar.
    optimizer: () -> optax.GradientTransformation.
    fwd_batches, train_batches: batch sizes traced in each mode. Left empty, `_add` fills them
        by rotating over (1, 8, 32) within the family, so each variant is traced at two batch
        sizes and each family at all three without tripling near-identical graphs.
    """

    name: str
    family: str
    net: Callable[[dict, bool], dict]
    inputs: Callable[[int], tuple[dict, dict]]
    loss: Callable[[dict, dict], jax.Array]
    optimizer: Callable[[], optax.GradientTransformation]
    notes: str = ""
    fwd_batches: tuple[int, ...] = ()
    train_batches: tuple[int, ...] = ()


# ------------------------------------------------------------------------------ losses
def _xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def classify_loss(out, tgt):
    """Mean softmax cross-entropy of the logits `out["pred"]` against the integers `tgt["labels"]`."""
    return _xent(out["pred"], tgt["labels"])


def _vae_loss(out, tgt):
    recon = optax.sigmoid_binary_cross_entropy(out["pred"], tgt["image"]).reshape(out["pred"].shape[0], -1).sum(-1)
    kl = 0.5 * jnp.sum(jnp.exp(out["logvar"]) + out["mu"] ** 2 - 1.0 - out["logvar"], axis=-1)
    return jnp.mean(recon + kl)


def _vqvae_loss(out, tgt):
    return jnp.mean((out["pred"] - tgt["image"]) ** 2) / 0.06 + out["vq_loss"]


# --------------------------------------------------------------------------- optimizers
def _sgd():
    return optax.chain(optax.add_decayed_weights(5e-4), optax.sgd(0.1, momentum=0.9))


def _adam():
    return optax.adam(1e-3)


def adamw():
    """AdamW (learning rate 3e-4, weight decay 0.01) after clipping the global gradient norm to 1."""
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, weight_decay=0.01))


def _adam_clip():
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))


# --------------------------------------------------------------------------- input kinds
def _image_inputs(hw: int, channels: int = 3):
    def inputs(b):
        return {"image": _sds((b, hw, hw, channels))}, {"labels": _sds((b,), i32)}
    return inputs


def _recon_inputs(shape):
    def inputs(b):
        x = _sds((b,) + tuple(shape))
        return {"image": x}, {"image": x}
    return inputs


def token_inputs(seq: int):
    """batch -> ({"tokens": int32[b, seq]}, {"labels": int32[b, seq]}): a language model's inputs."""
    def inputs(b):
        return {"tokens": _sds((b, seq), i32)}, {"labels": _sds((b, seq), i32)}
    return inputs


def _image_net(make):
    def net(f, is_training):
        return {"pred": make()(f["image"], is_training)}
    return net


MODELS: dict[str, ModelSpec] = {}


_FWD_ROTATION, _TRAIN_ROTATION = (1, 8, 32), (32, 1, 8)


def _add(spec: ModelSpec) -> None:
    assert spec.name not in MODELS, spec.name
    k = sum(s.family == spec.family for s in MODELS.values())
    MODELS[spec.name] = replace(spec, fwd_batches=spec.fwd_batches or (_FWD_ROTATION[k % 3],),
                                train_batches=spec.train_batches or (_TRAIN_ROTATION[k % 3],))


# ------------------------------------------------------------------------------- vision
for _name, _cls in (("resnet18", hk.nets.ResNet18), ("resnet34", hk.nets.ResNet34),
                    ("resnet50", hk.nets.ResNet50), ("resnet101", hk.nets.ResNet101),
                    ("resnet152", hk.nets.ResNet152)):
    _add(ModelSpec(_name, "resnet", _image_net(lambda c=_cls: c(num_classes=10)), _image_inputs(64),
                   classify_loss, _sgd, notes="hk.nets ResNet, 64x64x3 input, 10 classes"))

_VGG = {"vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
        "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
        "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
                  512, 512, 512, 512, "M"]}
for _name, _bn in (("vgg11", False), ("vgg16", True), ("vgg19", True)):
    _add(ModelSpec(_name + ("_bn" if _bn else ""), "vgg",
                   _image_net(lambda c=_VGG[_name], bn=_bn: nets.VGG(c, 10, bn)), _image_inputs(32),
                   classify_loss, _sgd, notes="CIFAR VGG, 32x32x3 input"))

for _name, _blocks, _k, _stem, _hw in (("densenet40", (6, 6, 6), 12, False, 32),
                                       ("densenet64", (10, 10, 10), 16, False, 32),
                                       ("densenet121", (6, 12, 24, 16), 32, True, 64)):
    _add(ModelSpec(_name, "densenet", _image_net(lambda b=_blocks, k=_k, s=_stem: nets.DenseNet(b, k, 10, s)),
                   _image_inputs(_hw), classify_loss, _sgd, notes=f"DenseNet-BC, growth {_k}, {_hw}x{_hw} input"))


def _mobilenet_v1(width: float):
    chans = [max(8, int(c * width)) for c in (64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024)]
    return lambda: hk.nets.MobileNetV1(channels=chans, num_classes=10)


for _name, _make in (("mobilenet_v1_050", _mobilenet_v1(0.5)), ("mobilenet_v1_100", _mobilenet_v1(1.0)),
                     ("mobilenet_v2_050", lambda: nets.MobileNetV2(0.5, 10)),
                     ("mobilenet_v2_100", lambda: nets.MobileNetV2(1.0, 10))):
    _add(ModelSpec(_name, "mobilenet", _image_net(_make), _image_inputs(64), classify_loss, _sgd,
                   notes="depthwise separable convs, 64x64x3 input"))


def _seg_inputs(hw: int, num_classes: int):
    def inputs(b):
        return {"image": _sds((b, hw, hw, 3))}, {"labels": _sds((b, hw, hw), i32)}
    return inputs


for _name, _d, _c, _bn in (("unet_d3_c16", 3, 16, False), ("unet_d4_c32_bn", 4, 32, True),
                           ("unet_d5_c16_bn", 5, 16, True)):
    _add(ModelSpec(_name, "unet", _image_net(lambda d=_d, c=_c, bn=_bn: nets.UNet(d, c, 4, bn)),
                   _seg_inputs(64, 4), classify_loss, _adam, notes="64x64x3 input, 4-class per-pixel labels"))


def _vqvae_net(**kw):
    def net(f, is_training):
        out = nets.VQVAE(**kw)(f["image"], is_training)
        return {"pred": out["recon"], "vq_loss": out["vq_loss"]}
    return net


for _name, _kw, _hw in (("vqvae_h64_r2_k128", dict(hidden=64, residual_hidden=32, num_residual=2, embedding_dim=32,
                                                   num_embeddings=128, num_downsamples=2, ema=False), 32),
                        ("vqvae_h128_r2_k512_ema", dict(hidden=128, residual_hidden=32, num_residual=2, embedding_dim=64,
                                                        num_embeddings=512, num_downsamples=2, ema=True), 32),
                        ("vqvae_h128_r4_k512_d3", dict(hidden=128, residual_hidden=64, num_residual=4, embedding_dim=64,
                                                       num_embeddings=512, num_downsamples=3, ema=False), 64)):
    _add(ModelSpec(_name, "vqvae", _vqvae_net(**_kw), _recon_inputs((_hw, _hw, 3)), _vqvae_loss, _adam,
                   notes=f"{_hw}x{_hw}x3 input"))


def _vae_net(make):
    def net(f, is_training):
        out = make()(f["image"], is_training)
        return {"pred": out["logits"], "mu": out["mu"], "logvar": out["logvar"]}
    return net


for _name, _make, _shape in (("vae_mlp", lambda: nets.MlpVAE((512, 256), 32), (784,)),
                             ("vae_conv_small", lambda: nets.ConvVAE((32, 64), 16), (32, 32, 1)),
                             ("vae_conv_large", lambda: nets.ConvVAE((32, 64, 128, 256), 64), (64, 64, 3))):
    _add(ModelSpec(_name, "vae", _vae_net(_make), _recon_inputs(_shape), _vae_loss, _adam))

for _name, _p, _l, _h, _d in (("vit_l4_d128", 4, 4, 4, 128), ("vit_l6_d192", 4, 6, 3, 192),
                              ("vit_l8_d256", 4, 8, 8, 256), ("vit_l12_d384", 4, 12, 6, 384)):
    _add(ModelSpec(_name, "vit", _image_net(lambda p=_p, l=_l, h=_h, d=_d: nets.ViT(p, l, h, d, 10)),
                   _image_inputs(32), classify_loss, adamw, notes="patch 4 on 32x32x3: 64 tokens + class token"))

for _name, _n, _c, _ts, _cs in (("mixer_b4_c128", 4, 128, 64, 512), ("mixer_b8_c256", 8, 256, 128, 1024),
                                ("mixer_b12_c192", 12, 192, 96, 768)):
    _add(ModelSpec(_name, "mlp_mixer",
                   _image_net(lambda n=_n, c=_c, ts=_ts, cs=_cs: nets.MlpMixer(4, n, c, ts, cs, 10)),
                   _image_inputs(32), classify_loss, adamw, notes="patch 4 on 32x32x3: 64 tokens"))


# ----------------------------------------------------------------------------- sequence
def _mlp_net(widths):
    def net(f, is_training):
        return {"pred": hk.nets.MLP(list(widths) + [10])(f["image"])}
    return net


for _name, _depth, _w in (("mlp_d4_w1024", 4, 1024), ("mlp_d8_w512", 8, 512), ("mlp_d16_w256", 16, 256),
                          ("mlp_d32_w256", 32, 256)):
    _add(ModelSpec(_name, "mlp", _mlp_net([_w] * _depth),
                   lambda b: ({"image": _sds((b, 784))}, {"labels": _sds((b,), i32)}),
                   classify_loss, _adam, notes="784-dim input, ReLU hidden layers, 10 classes"))


def tokens_net(make):
    """A ModelSpec net that runs `make()` (a Haiku module) on `features["tokens"]`."""
    def net(f, is_training):
        return {"pred": make()(f["tokens"], is_training)}
    return net


for _cell, _fam in (("lstm", "lstm"), ("gru", "gru")):
    for _l, _h, _t in ((1, 256, 16), (2, 256, 32), (1, 512, 64), (3, 128, 24)):
        _add(ModelSpec(f"{_cell}_l{_l}_h{_h}_t{_t}", _fam,
                       tokens_net(lambda c=_cell, l=_l, h=_h: nets.RecurrentLM(c, 2000, 128, h, l)),
                       token_inputs(_t), classify_loss, _adam_clip,
                       notes=f"{_cell.upper()} LM, vocab 2000, static_unroll over {_t} steps"))

for _name, _l, _h, _d, _t in (("transformer_enc_l2_d128", 2, 4, 128, 64), ("transformer_enc_l4_d256", 4, 4, 256, 128),
                              ("transformer_enc_l6_d384", 6, 6, 384, 128),
                              ("transformer_enc_l12_d512", 12, 8, 512, 128)):
    _add(ModelSpec(_name, "transformer_enc",
                   tokens_net(lambda l=_l, h=_h, d=_d: nets.TransformerLM(8000, l, h, d)),
                   token_inputs(_t), classify_loss, adamw, notes=f"vocab 8000, sequence {_t}"))


def _seq2seq_net(**kw):
    def net(f, is_training):
        return {"pred": nets.Seq2SeqTransformer(**kw)(f["source"], f["target_in"], is_training)}
    return net


def _seq2seq_inputs(src: int, tgt: int):
    def inputs(b):
        return ({"source": _sds((b, src), i32), "target_in": _sds((b, tgt), i32)},
                {"labels": _sds((b, tgt), i32)})
    return inputs


for _name, _le, _ld, _h, _d in (("transformer_dec_l2_d128", 2, 2, 4, 128), ("transformer_dec_l4_d256", 4, 4, 4, 256),
                                ("transformer_dec_l6_d256", 6, 6, 8, 256)):
    _add(ModelSpec(_name, "transformer_dec",
                   _seq2seq_net(vocab=8000, enc_layers=_le, dec_layers=_ld, num_heads=_h, model_size=_d),
                   _seq2seq_inputs(64, 48), classify_loss, adamw,
                   notes="encoder-decoder; decoder: causal self-attention + cross-attention; 64 -> 48 tokens"))

for _name, _s, _lps, _r, _t in (("wavenet_s1_l10", 1, 10, 32, 1024), ("wavenet_s2_l10", 2, 10, 64, 1024),
                                ("wavenet_s3_l8", 3, 8, 32, 512)):
    _add(ModelSpec(_name, "wavenet",
                   lambda f, t, s=_s, lps=_lps, r=_r: {"pred": nets.WaveNet(s, lps, r, 2 * r)(f["samples"], t)},
                   lambda b, t=_t: ({"samples": _sds((b, t), i32)}, {"labels": _sds((b, t), i32)}),
                   classify_loss, _adam, notes=f"{_t} mu-law samples, 256 classes"))


# -------------------------------------------------------------------------------- graphs
_GNN_NODES, _GNN_EDGES, _GNN_FEATURES = 128, 512, 32


def _gnn_inputs(b):
    n, e = b * _GNN_NODES, b * _GNN_EDGES
    feats = {"nodes": _sds((n, _GNN_FEATURES)), "edges": _sds((e, 8)),
             "senders": _sds((e,), i32), "receivers": _sds((e,), i32)}
    return feats, {"labels": _sds((n,), i32)}


for _name, _kind, _l, _h in (("gnn_gcn_l4", "gcn", 4, 128), ("gnn_gin_l6", "gin", 6, 128),
                             ("gnn_interaction_l4", "interaction", 4, 64)):
    _add(ModelSpec(_name, "gnn",
                   lambda f, t, k=_kind, l=_l, h=_h: {"pred": nets.GraphNet(k, l, h, 8)(
                       f["nodes"], f["edges"], f["senders"], f["receivers"], t)},
                   _gnn_inputs, classify_loss, _adam,
                   notes=f"batch b = b graphs of {_GNN_NODES} nodes / {_GNN_EDGES} edges (edge lists are inputs)"))

FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(s.family for s in MODELS.values()))


# ------------------------------------------------------------------------------ tracing
def _transformed(spec: ModelSpec) -> hk.TransformedWithState:
    return hk.transform_with_state(spec.net)


def fwd_fn(spec: ModelSpec) -> Callable:
    """(params, state, features) -> predictions, with is_training=False."""
    t = _transformed(spec)

    def fwd(params, state, features):
        out, _ = t.apply(params, state, None, features, False)
        return out["pred"]
    return fwd


def train_fn(spec: ModelSpec) -> Callable:
    """One training step: value_and_grad of the loss, then the spec's optax update."""
    t = _transformed(spec)
    opt = spec.optimizer()

    def step(params, state, opt_state, features, targets, key):
        def loss_fn(p):
            out, new_state = t.apply(p, state, key, features, True)
            return spec.loss(out, targets), new_state
        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state, opt_state, loss
    return step


def abstract_args(spec: ModelSpec, batch: int, mode: str) -> tuple[Any, ...]:
    """ShapeDtypeStructs for `fwd_fn(spec)` (mode "fwd") or `train_fn(spec)` (mode "train")."""
    t = _transformed(spec)
    features, targets = spec.inputs(batch)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    params, state = jax.eval_shape(lambda k, f: t.init(k, f, True), key, features)
    if mode == "fwd":
        return params, state, features
    if mode == "train":
        opt_state = jax.eval_shape(spec.optimizer().init, params)
        return params, state, opt_state, features, targets, key
    raise ValueError(f"unknown mode {mode!r} (expected 'fwd' or 'train')")

