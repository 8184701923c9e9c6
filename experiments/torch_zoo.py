"""The PyTorch programs regal's plans are run on (`experiments.torch_plans`): a zoo built locally.

Every model comes from its constructor with random weights: torchvision CNNs and a ViT
(`torchvision.models.*(weights=None)`), BERT and GPT-2 from small Hugging Face configs (the
constructors of `data.torch_corpus`), an MLP-Mixer, a U-Net and a small GPT written here, and
the dense-connectivity CNN of `experiments.torch_steps`. Nothing is downloaded. Each program is
`(module, example_inputs, mode)`, mode None (forward) or the optimizer of one training step
("sgd" / "adam"). Sizes are small enough for a 2-core CPU. `TORCH_ONLY`: the programs that need
nothing beyond torch.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["PROGRAMS", "TORCH_ONLY", "make", "MlpMixer", "SmallGPT", "UNet"]


class _MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
        self.ch = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class MlpMixer(nn.Module):
    """MLP-Mixer (Tolstikhin et al., 2021): patch embedding, token- and channel-mixing MLPs."""

    def __init__(self, image: int = 64, patch: int = 8, dim: int = 128, depth: int = 4, classes: int = 100):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.blocks = nn.Sequential(*[_MixerBlock((image // patch) ** 2, dim) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


def _conv(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    """U-Net (Ronneberger et al., 2015): an encoder, a decoder and skip connections."""

    def __init__(self, width: int = 16, depth: int = 3, classes: int = 2):
        super().__init__()
        chans = [width * 2 ** k for k in range(depth + 1)]
        self.down = nn.ModuleList([_conv(3, chans[0])] + [_conv(chans[k], chans[k + 1]) for k in range(depth)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(chans[k + 1], chans[k], 2, stride=2) for k in reversed(range(depth))])
        self.dec = nn.ModuleList([_conv(2 * chans[k], chans[k]) for k in reversed(range(depth))])
        self.out = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        skips = []
        for k, block in enumerate(self.down):
            x = block(x if k == 0 else nn.functional.max_pool2d(x, 2))
            skips.append(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips[:-1])):
            x = dec(torch.cat([up(x), skip], 1))
        return self.out(x)


class _GPTBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(self.n1(x)).split(d, 2))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x))


class SmallGPT(nn.Module):
    """A GPT written here (no transformers needed): token and position embeddings, pre-norm
    causal attention blocks, GELU MLPs, a language-model head tied to the token embedding."""

    def __init__(self, vocab: int = 2000, dim: int = 128, layers: int = 4, heads: int = 4, ctx: int = 128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.blocks = nn.Sequential(*[_GPTBlock(dim, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return self.head(self.norm(self.blocks(x)))


def _dense_cnn():
    from experiments.torch_steps import DenseCNN
    return DenseCNN(), (torch.randn(8, 3, 32, 32),)


def _corpus(name: str):
    from data.torch_corpus import MODELS
    _, make_model, inputs, wrap, _, _ = MODELS[name]
    model = make_model()
    return (wrap(model) if wrap is not None else model), inputs()


def _tv(name: str, hw: int, batch: int):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None), (torch.randn(batch, 3, hw, hw),)
    return build


# name -> (builder, mode, description)
PROGRAMS = {
    "resnet18_fwd": (_tv("resnet18", 64, 8), None, "torchvision ResNet-18, batch 8, 64x64, forward"),
    "resnet18_sgd": (_tv("resnet18", 64, 8), "sgd", "torchvision ResNet-18, batch 8, 64x64, SGD step"),
    "resnet18_adam": (_tv("resnet18", 64, 8), "adam", "torchvision ResNet-18, batch 8, 64x64, Adam step"),
    "resnet50_sgd": (_tv("resnet50", 64, 4), "sgd", "torchvision ResNet-50, batch 4, 64x64, SGD step"),
    "mobilenet_v3_small_adam": (_tv("mobilenet_v3_small", 96, 8), "adam",
                                "torchvision MobileNetV3-Small, batch 8, 96x96, Adam step"),
    "densenet121_sgd": (_tv("densenet121", 64, 4), "sgd", "torchvision DenseNet-121, batch 4, 64x64, SGD step"),
    "vit_s8_fwd": (lambda: _corpus("vit_s8_64"), None, "torchvision ViT, 6 layers, d=384, batch 8, forward"),
    "vit_s8_adam": (lambda: _corpus("vit_s8_64"), "adam", "torchvision ViT, 6 layers, d=384, batch 8, Adam step"),
    "bert_4l_adam": (lambda: _corpus("bert_4l"), "adam", "transformers BERT, 4 layers, d=256, 8x128 tokens, Adam step"),
    "gpt2_4l_fwd": (lambda: _corpus("gpt2_4l"), None, "transformers GPT-2, 4 layers, d=256, 4x128 tokens, forward"),
    "gpt2_4l_adam": (lambda: _corpus("gpt2_4l"), "adam", "transformers GPT-2, 4 layers, d=256, 4x128 tokens, Adam step"),
    "mixer_sgd": (lambda: (MlpMixer(), (torch.randn(8, 3, 64, 64),)), "sgd", "MLP-Mixer, 4 blocks, d=128, batch 8, SGD step"),
    "unet_fwd": (lambda: (UNet(), (torch.randn(4, 3, 64, 64),)), None, "U-Net, 3 levels, width 16, batch 4, forward"),
    "unet_sgd": (lambda: (UNet(), (torch.randn(4, 3, 64, 64),)), "sgd", "U-Net, 3 levels, width 16, batch 4, SGD step"),
    # plain torch only (no torchvision / transformers): the six programs of the d = 2 and 4 run (issue 55)
    "gpt_small_fwd": (lambda: (SmallGPT(), (torch.randint(0, 2000, (4, 128)),)), None,
                      "GPT written here, 4 layers, d=128, tied head, 4x128 tokens, forward"),
    "gpt_small_adam": (lambda: (SmallGPT(), (torch.randint(0, 2000, (4, 128)),)), "adam",
                       "GPT written here, 4 layers, d=128, tied head, 4x128 tokens, Adam step"),
    "dense_cnn_sgd": (_dense_cnn, "sgd", "dense-connectivity CNN (experiments.torch_steps), BatchNorm, batch 8, "
                      "32x32, SGD step"),
}

#: The zoo programs that need nothing beyond torch (the core venv runs them).
TORCH_ONLY = ("mixer_sgd", "unet_fwd", "unet_sgd", "gpt_small_fwd", "gpt_small_adam", "dense_cnn_sgd")


def make(name: str):
    """`(module, example_inputs, mode)` of a zoo program, built with seed 0."""
    build, mode, _ = PROGRAMS[name]
    torch.manual_seed(0)
    module, inputs = build()
    return module, inputs, mode
