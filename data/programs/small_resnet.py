"""A small ResNet-style CNN (three stages of two residual blocks, batch 16, 32x32 images):
the program `regal torch data/programs/small_resnet.py:make` traces, optimizes and runs.

`make()` returns `(module, example_inputs)`, the shape every `regal torch FILE.py:FN` takes.
"""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.skip(x))


class SmallResNet(nn.Module):
    def __init__(self, width: int = 16, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        chans = [width, 2 * width, 4 * width]
        blocks, cin = [], width
        for k, c in enumerate(chans):
            blocks += [Block(cin, c, 1 if k == 0 else 2), Block(c, c, 1)]
            cin = c
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def make():
    torch.manual_seed(0)
    return SmallResNet(), (torch.randn(16, 3, 32, 32),)
