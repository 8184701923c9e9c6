"""Haiku network definitions for the model zoo (`data/models.py` picks variants and losses).

Every network is a plain Haiku module or function called inside `hk.transform_with_state`;
`is_training` switches BatchNorm statistics, dropout and sampling. Shapes are NHWC for images,
[batch, time] for token and audio sequences. The layer structures follow the papers named in
each docstring; widths and input resolutions are reduced so that tracing stays fast.
"""

from __future__ import annotations

from typing import Sequence

import haiku as hk
import jax
import jax.numpy as jnp

__all__ = [
    "VGG", "DenseNet", "MobileNetV2", "UNet", "VQVAE", "ConvVAE", "MlpVAE", "TransformerBlock", "ViT",
    "MlpMixer", "WaveNet", "TransformerLM", "Seq2SeqTransformer", "RecurrentLM", "GraphNet",
]


def _bn(x: jax.Array, is_training: bool, name: str | None = None) -> jax.Array:
    return hk.BatchNorm(create_scale=True, create_offset=True, decay_rate=0.9, name=name)(x, is_training)


def _ln(x: jax.Array, name: str | None = None) -> jax.Array:
    return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, name=name)(x)


def _dropout(x: jax.Array, rate: float, is_training: bool) -> jax.Array:
    return hk.dropout(hk.next_rng_key(), rate, x) if is_training and rate > 0 else x


# ---------------------------------------------------------------------------------- vision
class VGG(hk.Module):
    """VGG (Simonyan and Zisserman, 2015), CIFAR-sized: 3x3 conv stacks, max pools, 3 FC layers.

    `config` lists output channels, with "M" for a 2x2 max pool.
    """

    def __init__(self, config: Sequence[int | str], num_classes: int, batch_norm: bool,
                 fc_size: int = 512, name: str | None = None):
        super().__init__(name=name)
        self.config, self.num_classes, self.batch_norm, self.fc_size = config, num_classes, batch_norm, fc_size

    def __call__(self, x: jax.Array, is_training: bool) -> jax.Array:
        for c in self.config:
            if c == "M":
                x = hk.max_pool(x, window_shape=(1, 2, 2, 1), strides=(1, 2, 2, 1), padding="VALID")
                continue
            x = hk.Conv2D(int(c), 3, with_bias=not self.batch_norm)(x)
            if self.batch_norm:
                x = _bn(x, is_training)
            x = jax.nn.relu(x)
        x = hk.Flatten()(x)
        for _ in range(2):
            x = _dropout(jax.nn.relu(hk.Linear(self.fc_size)(x)), 0.5, is_training)
        return hk.Linear(self.num_classes)(x)


class DenseNet(hk.Module):
    """DenseNet-BC (Huang et al., 2017): dense blocks of BN-ReLU-Conv1x1-BN-ReLU-Conv3x3 layers
    whose outputs are concatenated, joined by transitions that halve channels and resolution."""

    def __init__(self, blocks: Sequence[int], growth: int, num_classes: int, imagenet_stem: bool,
                 name: str | None = None):
        super().__init__(name=name)
        self.blocks, self.growth, self.num_classes, self.imagenet_stem = blocks, growth, num_classes, imagenet_stem

    def __call__(self, x: jax.Array, is_training: bool) -> jax.Array:
        k = self.growth
        if self.imagenet_stem:
            x = hk.Conv2D(2 * k, 7, stride=2, with_bias=False)(x)
            x = jax.nn.relu(_bn(x, is_training))
            x = hk.max_pool(x, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        else:
            x = hk.Conv2D(2 * k, 3, with_bias=False)(x)
        for b, num_layers in enumerate(self.blocks):
            for _ in range(num_layers):
                h = hk.Conv2D(4 * k, 1, with_bias=False)(jax.nn.relu(_bn(x, is_training)))
                h = hk.Conv2D(k, 3, with_bias=False)(jax.nn.relu(_bn(h, is_training)))
                x = jnp.concatenate([x, h], axis=-1)
            if b + 1 < len(self.blocks):
                x = hk.Conv2D(x.shape[-1] // 2, 1, with_bias=False)(jax.nn.relu(_bn(x, is_training)))
                x = hk.avg_pool(x, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        x = jnp.mean(jax.nn.relu(_bn(x, is_training)), axis=(1, 2))
        return hk.Linear(self.num_classes)(x)


class MobileNetV2(hk.Module):
    """MobileNetV2 (Sandler et al., 2018): inverted residual blocks with depthwise 3x3 convs."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))  # (expansion, channels, repeats, stride)

    def __init__(self, width: float, num_classes: int, name: str | None = None):
        super().__init__(name=name)
        self.width, self.num_classes = width, num_classes

    def _ch(self, c: int) -> int:
        return max(8, int(c * self.width + 4) // 8 * 8)

    def __call__(self, x: jax.Array, is_training: bool) -> jax.Array:
        x = jax.nn.relu6(_bn(hk.Conv2D(self._ch(32), 3, stride=2, with_bias=False)(x), is_training))
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                cin, cout, stride = x.shape[-1], self._ch(c), s if i == 0 else 1
                h = x
                if t != 1:
                    h = jax.nn.relu6(_bn(hk.Conv2D(cin * t, 1, with_bias=False)(h), is_training))
                h = hk.DepthwiseConv2D(1, 3, stride=stride, with_bias=False)(h)
                h = jax.nn.relu6(_bn(h, is_training))
                h = _bn(hk.Conv2D(cout, 1, with_bias=False)(h), is_training)
                x = x + h if stride == 1 and cin == cout else h
        x = jax.nn.relu6(_bn(hk.Conv2D(max(1280, self._ch(1280)), 1, with_bias=False)(x), is_training))
        return hk.Linear(self.num_classes)(jnp.mean(x, axis=(1, 2)))


def _double_conv(x: jax.Array, c: int, batch_norm: bool, is_training: bool) -> jax.Array:
    for _ in range(2):
        x = hk.Conv2D(c, 3, with_bias=not batch_norm)(x)
        if batch_norm:
            x = _bn(x, is_training)
        x = jax.nn.relu(x)
    return x


class UNet(hk.Module):
    """U-Net (Ronneberger et al., 2015): a conv encoder, a transposed-conv decoder, and skip
    connections that concatenate encoder features into the decoder at each resolution."""

    def __init__(self, depth: int, base_channels: int, num_classes: int, batch_norm: bool,
                 name: str | None = None):
        super().__init__(name=name)
        self.depth, self.base, self.num_classes, self.batch_norm = depth, base_channels, num_classes, batch_norm

    def __call__(self, x: jax.Array, is_training: bool) -> jax.Array:
        skips = []
        for d in range(self.depth):
            x = _double_conv(x, self.base * 2 ** d, self.batch_norm, is_training)
            skips.append(x)
            x = hk.max_pool(x, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        x = _double_conv(x, self.base * 2 ** self.depth, self.batch_norm, is_training)
        for d in reversed(range(self.depth)):
            x = hk.Conv2DTranspose(self.base * 2 ** d, 2, stride=2)(x)
            x = jnp.concatenate([skips[d], x], axis=-1)
            x = _double_conv(x, self.base * 2 ** d, self.batch_norm, is_training)
        return hk.Conv2D(self.num_classes, 1)(x)


def _residual_stack(x: jax.Array, hidden: int, residual_hidden: int, num_layers: int) -> jax.Array:
    for _ in range(num_layers):
        h = hk.Conv2D(residual_hidden, 3)(jax.nn.relu(x))
        x = x + hk.Conv2D(hidden, 1)(jax.nn.relu(h))
    return jax.nn.relu(x)


class VQVAE(hk.Module):
    """VQ-VAE (van den Oord et al., 2017): strided conv encoder with a residual stack, a vector
    quantizer (plain or EMA codebook), and a mirrored transposed-conv decoder.

    Returns {"recon", "vq_loss", "perplexity"} (codebook usage, as Haiku's quantizer reports it).
    """

    def __init__(self, hidden: int, residual_hidden: int, num_residual: int, embedding_dim: int,
                 num_embeddings: int, num_downsamples: int, ema: bool, name: str | None = None):
        super().__init__(name=name)
        self.hidden, self.rh, self.nr = hidden, residual_hidden, num_residual
        self.d, self.k, self.nd, self.ema = embedding_dim, num_embeddings, num_downsamples, ema

    def __call__(self, x: jax.Array, is_training: bool) -> dict:
        h = x
        for i in range(self.nd):
            h = jax.nn.relu(hk.Conv2D(self.hidden // 2 if i + 1 < self.nd else self.hidden, 4, stride=2)(h))
        h = hk.Conv2D(self.hidden, 3)(h)
        h = _residual_stack(h, self.hidden, self.rh, self.nr)
        z = hk.Conv2D(self.d, 1, name="pre_vq")(h)
        if self.ema:
            vq = hk.nets.VectorQuantizerEMA(self.d, self.k, commitment_cost=0.25, decay=0.99)
        else:
            vq = hk.nets.VectorQuantizer(self.d, self.k, commitment_cost=0.25)
        q = vq(z, is_training=is_training)
        h = hk.Conv2D(self.hidden, 3)(q["quantize"])
        h = _residual_stack(h, self.hidden, self.rh, self.nr)
        for i in range(self.nd):
            last = i + 1 == self.nd
            h = hk.Conv2DTranspose(x.shape[-1] if last else self.hidden // 2, 4, stride=2)(h)
            if not last:
                h = jax.nn.relu(h)
        return {"recon": h, "vq_loss": q["loss"], "perplexity": q["perplexity"]}


def _gaussian_latent(h: jax.Array, latent: int, is_training: bool) -> tuple:
    mu = hk.Linear(latent, name="mu")(h)
    logvar = hk.Linear(latent, name="logvar")(h)
    z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(hk.next_rng_key(), mu.shape) if is_training else mu
    return z, mu, logvar


class ConvVAE(hk.Module):
    """Convolutional VAE (Kingma and Welling, 2014): strided conv encoder to (mu, log sigma^2),
    reparameterised sample while training, transposed-conv decoder to Bernoulli logits."""

    def __init__(self, channels: Sequence[int], latent: int, name: str | None = None):
        super().__init__(name=name)
        self.channels, self.latent = tuple(channels), latent

    def __call__(self, x: jax.Array, is_training: bool) -> dict:
        h = x
        for c in self.channels:
            h = jax.nn.leaky_relu(hk.Conv2D(c, 4, stride=2)(h))
        shape = h.shape[1:]
        z, mu, logvar = _gaussian_latent(hk.Flatten()(h), self.latent, is_training)
        h = jax.nn.relu(hk.Linear(shape[0] * shape[1] * shape[2])(z)).reshape((-1,) + shape)
        for c in reversed(self.channels[:-1]):
            h = jax.nn.leaky_relu(hk.Conv2DTranspose(c, 4, stride=2)(h))
        logits = hk.Conv2DTranspose(x.shape[-1], 4, stride=2)(h)
        return {"logits": logits, "mu": mu, "logvar": logvar}


class MlpVAE(hk.Module):
    """Fully connected VAE (Kingma and Welling, 2014) on flattened images."""

    def __init__(self, hidden: Sequence[int], latent: int, name: str | None = None):
        super().__init__(name=name)
        self.hidden, self.latent = tuple(hidden), latent

    def __call__(self, x: jax.Array, is_training: bool) -> dict:
        h = x
        for w in self.hidden:
            h = jax.nn.relu(hk.Linear(w)(h))
        z, mu, logvar = _gaussian_latent(h, self.latent, is_training)
        h = z
        for w in reversed(self.hidden):
            h = jax.nn.relu(hk.Linear(w)(h))
        return {"logits": hk.Linear(x.shape[-1])(h), "mu": mu, "logvar": logvar}


# ---------------------------------------------------------------------------- attention
class TransformerBlock(hk.Module):
    """Pre-LayerNorm transformer layer (Vaswani et al., 2017): self-attention (optionally
    causal), optional cross-attention to an encoder memory, and a GELU feed-forward layer."""

    def __init__(self, num_heads: int, model_size: int, ff_size: int, dropout: float,
                 cross_attention: bool = False, name: str | None = None):
        super().__init__(name=name)
        self.h, self.d, self.ff, self.p, self.cross = num_heads, model_size, ff_size, dropout, cross_attention

    def _attn(self, name: str) -> hk.MultiHeadAttention:
        return hk.MultiHeadAttention(self.h, self.d // self.h, model_size=self.d,
                                     w_init=hk.initializers.VarianceScaling(1.0), name=name)

    def __call__(self, x, is_training, mask=None, memory=None, memory_mask=None):
        h = _ln(x, "ln_self")
        x = x + _dropout(self._attn("self_attention")(h, h, h, mask=mask), self.p, is_training)
        if self.cross:
            h = _ln(x, "ln_cross")
            x = x + _dropout(self._attn("cross_attention")(h, memory, memory, mask=memory_mask),
                             self.p, is_training)
        h = _ln(x, "ln_ff")
        h = hk.Linear(self.d, name="ff_out")(jax.nn.gelu(hk.Linear(self.ff, name="ff_in")(h)))
        return x + _dropout(h, self.p, is_training)


def _embed_tokens(tokens: jax.Array, vocab: int, d: int, name: str) -> jax.Array:
    x = hk.Embed(vocab, d, name=f"{name}_embed")(tokens)
    pos = hk.get_parameter(f"{name}_pos", [tokens.shape[1], d], init=hk.initializers.TruncatedNormal(0.02))
    return x + pos[None]


class TransformerLM(hk.Module):
    """Encoder-only transformer (BERT-style, Devlin et al., 2019) predicting a token per position."""

    def __init__(self, vocab: int, num_layers: int, num_heads: int, model_size: int, dropout: float = 0.1,
                 name: str | None = None):
        super().__init__(name=name)
        self.vocab, self.L, self.h, self.d, self.p = vocab, num_layers, num_heads, model_size, dropout

    def __call__(self, tokens: jax.Array, is_training: bool) -> jax.Array:
        x = _dropout(_embed_tokens(tokens, self.vocab, self.d, "tok"), self.p, is_training)
        for i in range(self.L):
            x = TransformerBlock(self.h, self.d, 4 * self.d, self.p, name=f"layer_{i}")(x, is_training)
        return hk.Linear(self.vocab, name="lm_head")(_ln(x, "ln_final"))


class Seq2SeqTransformer(hk.Module):
    """Encoder-decoder transformer (Vaswani et al., 2017): the decoder stack has causal
    self-attention and cross-attention to the encoder output; teacher-forced training."""

    def __init__(self, vocab: int, enc_layers: int, dec_layers: int, num_heads: int, model_size: int,
                 dropout: float = 0.1, name: str | None = None):
        super().__init__(name=name)
        self.vocab, self.le, self.ld, self.h, self.d, self.p = vocab, enc_layers, dec_layers, num_heads, model_size, dropout

    def __call__(self, source: jax.Array, target_in: jax.Array, is_training: bool) -> jax.Array:
        m = _dropout(_embed_tokens(source, self.vocab, self.d, "src"), self.p, is_training)
        for i in range(self.le):
            m = TransformerBlock(self.h, self.d, 4 * self.d, self.p, name=f"enc_{i}")(m, is_training)
        m = _ln(m, "ln_enc")
        t = target_in.shape[1]
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None]
        y = _dropout(_embed_tokens(target_in, self.vocab, self.d, "tgt"), self.p, is_training)
        for i in range(self.ld):
            y = TransformerBlock(self.h, self.d, 4 * self.d, self.p, cross_attention=True,
                                 name=f"dec_{i}")(y, is_training, mask=causal, memory=m)
        return hk.Linear(self.vocab, name="lm_head")(_ln(y, "ln_dec"))


class ViT(hk.Module):
    """Vision Transformer (Dosovitskiy et al., 2021): patch embedding, class token, learned
    positions, pre-LN transformer layers, linear head on the class token."""

    def __init__(self, patch: int, num_layers: int, num_heads: int, model_size: int, num_classes: int,
                 dropout: float = 0.1, name: str | None = None):
        super().__init__(name=name)
        self.patch, self.L, self.h, self.d, self.nc, self.p = patch, num_layers, num_heads, model_size, num_classes, dropout

    def __call__(self, x: jax.Array, is_training: bool) -> jax.Array:
        x = hk.Conv2D(self.d, self.patch, stride=self.patch, padding="VALID", name="patch_embed")(x)
        b = x.shape[0]
        x = x.reshape(b, -1, self.d)
        cls = hk.get_parameter("cls", [1, 1, self.d], init=jnp.zeros)
        x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, self.d)), x], axis=1)
        pos = hk.get_parameter("pos", [x.shape[1], self.d], init=hk.initializers.TruncatedNormal(0.02))
        x = _dropout(x + pos[None], self.p, is_training)
        for i in range(self.L):
            x = TransformerBlock(self.h, self.d, 4 * self.d, self.p, name=f"layer_{i}")(x, is_training)
        return hk.Linear(self.nc, name="head")(_ln(x, "ln_final")[:, 0])


class MlpMixer(hk.Module):
    """MLP-Mixer (Tolstikhin et al., 2021): patch embedding, then blocks of token-mixing and
    channel-mixing MLPs with LayerNorm and residual connections."""

    def __init__(self, patch: int, num_blocks: int, channels: int, token_hidden: int, channel_hidden: int,
                 num_classes: int, name: str | None = None):
        super().__init__(name=name)
        self.patch, self.n, self.c, self.ts, self.cs, self.nc = patch, num_blocks, channels, token_hidden, channel_hidden, num_classes

    def __call__(self, x: jax.Array, is_training: bool) -> jax.Array:
        del is_training
        x = hk.Conv2D(self.c, self.patch, stride=self.patch, padding="VALID", name="stem")(x)
        x = x.reshape(x.shape[0], -1, self.c)
        for i in range(self.n):
            with hk.experimental.name_scope(f"block_{i}"):
                h = jnp.swapaxes(_ln(x, "ln_token"), 1, 2)
                h = hk.Linear(x.shape[1], name="token_out")(jax.nn.gelu(hk.Linear(self.ts, name="token_in")(h)))
                x = x + jnp.swapaxes(h, 1, 2)
                h = _ln(x, "ln_channel")
                x = x + hk.Linear(self.c, name="channel_out")(jax.nn.gelu(hk.Linear(self.cs, name="channel_in")(h)))
        return hk.Linear(self.nc, name="head")(jnp.mean(_ln(x, "ln_final"), axis=1))


# ----------------------------------------------------------------------------- sequence
class WaveNet(hk.Module):
    """WaveNet (van den Oord et al., 2016): causal conv, stacks of dilated causal convs with gated
    tanh/sigmoid units, residual and skip 1x1 convs, and a 256-way softmax over mu-law samples."""

    def __init__(self, num_stacks: int, layers_per_stack: int, residual: int, skip: int,
                 quantization: int = 256, name: str | None = None):
        super().__init__(name=name)
        self.ns, self.lps, self.r, self.s, self.q = num_stacks, layers_per_stack, residual, skip, quantization

    @staticmethod
    def _causal(x: jax.Array, channels: int, kernel: int, dilation: int, name: str) -> jax.Array:
        x = jnp.pad(x, ((0, 0), ((kernel - 1) * dilation, 0), (0, 0)))
        return hk.Conv1D(channels, kernel, rate=dilation, padding="VALID", name=name)(x)

    def __call__(self, samples: jax.Array, is_training: bool) -> jax.Array:
        del is_training
        x = self._causal(jax.nn.one_hot(samples, self.q), self.r, 2, 1, "causal_in")
        skip = 0.0
        for s in range(self.ns):
            for i in range(self.lps):
                d = 2 ** i
                f = self._causal(x, self.r, 2, d, f"filter_{s}_{i}")
                g = self._causal(x, self.r, 2, d, f"gate_{s}_{i}")
                z = jnp.tanh(f) * jax.nn.sigmoid(g)
                skip = skip + hk.Conv1D(self.s, 1, name=f"skip_{s}_{i}")(z)
                x = x + hk.Conv1D(self.r, 1, name=f"res_{s}_{i}")(z)
        h = hk.Conv1D(self.s, 1, name="post_1")(jax.nn.relu(skip))
        return hk.Conv1D(self.q, 1, name="post_2")(jax.nn.relu(h))


class RecurrentLM(hk.Module):
    """Stacked LSTM (Hochreiter and Schmidhuber, 1997) or GRU (Cho et al., 2014) language model,
    unrolled with `hk.static_unroll` so every time step is its own set of ops in the graph."""

    def __init__(self, cell: str, vocab: int, embed: int, hidden: int, num_layers: int,
                 name: str | None = None):
        super().__init__(name=name)
        self.cell, self.vocab, self.embed, self.hidden, self.L = cell, vocab, embed, hidden, num_layers

    def __call__(self, tokens: jax.Array, is_training: bool) -> jax.Array:
        del is_training
        make = {"lstm": hk.LSTM, "gru": hk.GRU}[self.cell]
        core = hk.DeepRNN([make(self.hidden, name=f"{self.cell}_{i}") for i in range(self.L)])
        x = jnp.swapaxes(hk.Embed(self.vocab, self.embed)(tokens), 0, 1)  # time major
        y, _ = hk.static_unroll(core, x, core.initial_state(tokens.shape[0]), time_major=True)
        return hk.Linear(self.vocab, name="softmax")(jnp.swapaxes(y, 0, 1))


# -------------------------------------------------------------------------------- graphs
class GraphNet(hk.Module):
    """Message passing over a batch of graphs given as edge lists, with `segment_sum`
    aggregation (no jraph needed). `kind`:
      "gcn": degree-normalised neighbour mean plus self loop (Kipf and Welling, 2017);
      "gin": MLP((1 + eps) h + sum of neighbours) (Xu et al., 2019);
      "interaction": edge MLP on (edge, sender, receiver), node MLP on (node, summed edges)
                     (Battaglia et al., 2016).
    """

    def __init__(self, kind: str, num_layers: int, hidden: int, num_classes: int, name: str | None = None):
        super().__init__(name=name)
        self.kind, self.L, self.hidden, self.nc = kind, num_layers, hidden, num_classes

    def __call__(self, nodes, edges, senders, receivers, is_training: bool) -> jax.Array:
        n = nodes.shape[0]
        h = jax.nn.relu(hk.Linear(self.hidden, name="encode_nodes")(nodes))
        e = jax.nn.relu(hk.Linear(self.hidden, name="encode_edges")(edges))
        deg = jax.ops.segment_sum(jnp.ones_like(receivers, dtype=h.dtype), receivers, n)[:, None]
        for i in range(self.L):
            with hk.experimental.name_scope(f"layer_{i}"):
                if self.kind == "gcn":
                    m = hk.Linear(self.hidden, name="w")(h)
                    agg = jax.ops.segment_sum(m[senders], receivers, n) / jnp.maximum(deg, 1.0)
                    h = jax.nn.relu(_ln(agg + hk.Linear(self.hidden, name="self")(h)))
                elif self.kind == "gin":
                    eps = hk.get_parameter("eps", [], init=jnp.zeros)
                    agg = jax.ops.segment_sum(h[senders], receivers, n)
                    h2 = hk.nets.MLP([self.hidden, self.hidden], name="mlp")((1 + eps) * h + agg)
                    h = h + jax.nn.relu(_bn(h2, is_training))
                else:
                    e = e + hk.nets.MLP([self.hidden, self.hidden], name="edge_mlp")(
                        jnp.concatenate([e, h[senders], h[receivers]], axis=-1))
                    agg = jax.ops.segment_sum(e, receivers, n)
                    h = h + hk.nets.MLP([self.hidden, self.hidden], name="node_mlp")(
                        jnp.concatenate([h, agg], axis=-1))
                    h = _ln(h)
        return hk.Linear(self.nc, name="decode")(h)
