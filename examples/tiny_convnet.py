"""A tiny convolutional network for trying the model path: `autotune extract examples/tiny_convnet.py:model`.

A factory returns `(module, example_inputs)`; autotune exports the module with torch.export at those shapes.
"""

import torch
from torch import nn


def model():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, 10),
    ).eval()
    return net, (torch.randn(1, 3, 32, 32),)
