"""Benchmark models written out in the repo (random weights, nothing downloaded).

Each factory returns (module in eval mode, example inputs):
  resnet18            ResNet-18, 1x3x224x224
  transformer_layer   torch.nn.TransformerEncoderLayer, d_model 768, 12 heads, seq 128, batch 1
  mobilenet_blocks    MobileNetV2-style inverted-residual stack (depthwise 3x3), 1x3x224x224
  resnext_blocks      ResNeXt-50 32x4d's stem and first two stages (grouped 3x3, 32 groups), 1x3x224x224
  speech_frontend     wav2vec 2.0's convolutional feature encoder (seven 1-d convolutions) and a Conformer
                      convolution module (pointwise, depthwise k=31, pointwise), 1 s of 16 kHz audio (1x16000)
  dcgan_generator     DCGAN's generator (transposed convolutions 4x4, stride 2, batch norms), 1x100x1x1 -> 1x3x64x64
  video_blocks        R3D-18's stem (3x7x7 conv3d) and first stage (two 3x3x3 basic blocks), 8 frames of 56x56
  resnet50            ResNet-50 (bottleneck blocks: 1x1, 3x3, 1x1), 1x3x224x224
  gpt_prefill         a GPT-2-style decoder block (d_model 768, 12 heads, causal attention, GELU MLP), a 128-token
                      prompt, batch 1
  gpt_decode          the same block decoding one token against a 128-token key/value cache
  efficientnet_b0     EfficientNet-B0 (MBConv blocks: depthwise 3x3 and 5x5, squeeze-and-excitation, SiLU),
                      1x3x224x224
  vit_b16             ViT-B/16 (16x16 patches, 12 pre-norm encoder layers of d_model 768), 1x3x224x224
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class Classifier(nn.Module):
    """A stem, a stack of layers, global average pooling and a linear classifier (submodules made in that order)."""

    def __init__(self, stem: nn.Module, layers: list[nn.Module], features: int, classes: int):
        super().__init__()
        self.stem = stem
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(features, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


def resnet_stem() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1))


class ResNet18(Classifier):
    def __init__(self, classes: int = 1000):
        stem = resnet_stem()
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        super().__init__(stem, layers, cin, classes)


class ResNet50(Classifier):
    def __init__(self, classes: int = 1000):
        layers, cin = [], 64
        for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            for i in range(blocks):
                layers.append(ResNeXtBottleneck(cin, width, width * 4, stride if i == 0 else 1, groups=1))
                cin = width * 4
        super().__init__(resnet_stem(), layers, cin, classes)


class GPTBlock(nn.Module):
    """GPT-2's decoder block (pre-norm, fused query/key/value projection, causal attention, GELU MLP). forward(x,
    past_k, past_v): x [batch, new tokens, dim] attends to the cached keys/values [batch, heads, past, head_dim]
    and to the new tokens before it; returns the block's output and the updated cache."""

    def __init__(self, dim: int = 768, heads: int = 12):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x, past_k, past_v):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for y in self.qkv(self.ln1(x)).split(d, dim=2))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        past = k.shape[2] - t
        causal = torch.ones(t, k.shape[2], dtype=torch.bool).tril(past)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x)), k, v


class MBConv(nn.Module):
    """EfficientNet's block: 1x1 expansion (unless `expand` is 1), depthwise k x k, squeeze-and-excitation on a
    quarter of the input channels, 1x1 projection; a residual add where the shape is kept."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int):
        super().__init__()
        hidden, squeeze = cin * expand, max(1, cin // 4)
        self.expand = (nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.SiLU())
                       if expand != 1 else nn.Identity())
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, k, stride, k // 2, groups=hidden, bias=False),
                                       nn.BatchNorm2d(hidden), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(hidden, squeeze, 1), nn.SiLU(),
                                nn.Conv2d(squeeze, hidden, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.depthwise(self.expand(x))
        y = self.project(y * self.se(y))
        return x + y if self.residual else y


class EfficientNetB0(Classifier):
    STAGES = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
              (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]  # expand, kernel, stride, channels out, blocks

    def __init__(self, classes: int = 1000):
        stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU())
        layers, cin = [], 32
        for expand, k, stride, cout, blocks in self.STAGES:
            for i in range(blocks):
                layers.append(MBConv(cin, cout, k, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(nn.Sequential(nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.SiLU()))
        super().__init__(stem, layers, 1280, classes)


class ViT(nn.Module):
    """ViT-B/16: 16x16 patches embedded by a strided convolution, a class token, learned positions, pre-norm
    encoder layers, the class token's features classified."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, depth: int = 12, heads: int = 12,
                 classes: int = 1000):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.encoder = nn.Sequential(*(nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                                                  batch_first=True, norm_first=True)
                                       for _ in range(depth)))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetBlocks(Classifier):
    """The first stages of MobileNetV2 (to 14x14), then pooling and a classifier."""

    def __init__(self, classes: int = 1000):
        stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6())
        cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 2, 2)]  # expand, out, repeats, stride
        layers, cin = [], 32
        for expand, cout, repeats, stride in cfg:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        super().__init__(stem, layers, cin, classes)


class ResNeXtBottleneck(nn.Module):
    """A bottleneck block (1x1, 3x3 of `groups` groups, 1x1) with its residual; ResNet-50's with groups=1."""

    def __init__(self, cin: int, width: int, cout: int, stride: int, groups: int = 32):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.block(x) + (x if self.down is None else self.down(x)))


class ResNeXtBlocks(Classifier):
    """ResNeXt-50 32x4d's stem and first two stages (to 28x28), then pooling and a classifier."""

    def __init__(self, classes: int = 1000):
        stem = resnet_stem()
        layers, cin = [], 64
        for width, cout, repeats, stride in [(128, 256, 3, 1), (256, 512, 4, 2)]:
            for i in range(repeats):
                layers.append(ResNeXtBottleneck(cin, width, cout, stride if i == 0 else 1))
                cin = cout
        super().__init__(stem, layers, cin, classes)


class ConformerConv(nn.Module):
    """The Conformer's convolution module on [batch, time, dim]: pointwise conv to 2*dim, GLU, depthwise conv,
    batch norm, SiLU, pointwise conv, residual."""

    def __init__(self, dim: int, kernel: int = 31):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.block = nn.Sequential(
            nn.Conv1d(dim, 2 * dim, 1), nn.GLU(dim=1),
            nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim), nn.BatchNorm1d(dim), nn.SiLU(),
            nn.Conv1d(dim, dim, 1))

    def forward(self, x):
        return x + self.block(self.norm(x).transpose(1, 2)).transpose(1, 2)


class SpeechFrontend(nn.Module):
    """wav2vec 2.0's feature encoder (conv1d 512 channels: kernel 10 stride 5, four of kernel 3 stride 2, two of
    kernel 2 stride 2; group norm after the first, GELU after each), its projection to `dim`, one Conformer
    convolution module."""

    def __init__(self, dim: int = 256):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv1d(1, 512, 10, 5, bias=False), nn.GroupNorm(512, 512), nn.GELU()]
        for kernel in (3, 3, 3, 3, 2, 2):
            layers += [nn.Conv1d(512, 512, kernel, 2, bias=False), nn.GELU()]
        self.encoder = nn.Sequential(*layers)
        self.project = nn.Sequential(nn.LayerNorm(512), nn.Linear(512, dim))
        self.conformer = ConformerConv(dim)

    def forward(self, wave):
        features = self.encoder(wave.unsqueeze(1)).transpose(1, 2)
        return self.conformer(self.project(features))


def dcgan_generator_module(latent: int = 100, width: int = 64) -> nn.Module:
    """DCGAN's generator: a 4x4 transposed convolution from the latent vector, then four of stride 2 to 64x64."""
    layers: list[nn.Module] = []
    channels = [latent, width * 8, width * 4, width * 2, width]
    for i, (cin, cout) in enumerate(zip(channels, channels[1:])):
        layers += [nn.ConvTranspose2d(cin, cout, 4, 1 if i == 0 else 2, 0 if i == 0 else 1, bias=False),
                   nn.BatchNorm2d(cout), nn.ReLU()]
    return nn.Sequential(*layers, nn.ConvTranspose2d(width, 3, 4, 2, 1, bias=False), nn.Tanh())


class BasicBlock3d(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv3d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm3d(channels), nn.ReLU(),
            nn.Conv3d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm3d(channels))

    def forward(self, x):
        return torch.relu(self.block(x) + x)


def video_blocks_module(width: int = 64) -> nn.Module:
    """R3D-18's stem and first stage, then pooling and a classifier over 400 classes (Kinetics)."""
    stem = nn.Sequential(nn.Conv3d(3, width, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False), nn.BatchNorm3d(width),
                         nn.ReLU())
    return nn.Sequential(stem, BasicBlock3d(width), BasicBlock3d(width), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                         nn.Linear(width, 400))


def _ready(model: nn.Module) -> nn.Module:
    torch.manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def _image_model(make) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """A model of a 224x224 RGB image: made after seeding, with one random image."""
    torch.manual_seed(0)
    return _ready(make()), (torch.randn(1, 3, 224, 224),)


def resnet18():
    return _image_model(ResNet18)


def transformer_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, batch_first=True)
    return _ready(layer), (torch.randn(1, 128, 768),)


def mobilenet_blocks():
    return _image_model(MobileNetBlocks)


def resnext_blocks():
    return _image_model(ResNeXtBlocks)


def speech_frontend():
    torch.manual_seed(0)
    return _ready(SpeechFrontend()), (torch.randn(1, 16000),)


def dcgan_generator():
    torch.manual_seed(0)
    return _ready(dcgan_generator_module()), (torch.randn(1, 100, 1, 1),)


def video_blocks():
    torch.manual_seed(0)
    return _ready(video_blocks_module()), (torch.randn(1, 3, 8, 56, 56),)


def resnet50():
    return _image_model(ResNet50)


def _gpt(tokens: int, past: int):
    torch.manual_seed(0)
    cache = torch.randn(1, 12, past, 64)
    return _ready(GPTBlock()), (torch.randn(1, tokens, 768), cache, cache.clone())


def gpt_prefill():
    return _gpt(128, 0)


def gpt_decode():
    return _gpt(1, 128)


def efficientnet_b0():
    return _image_model(EfficientNetB0)


def vit_b16():
    return _image_model(ViT)


MODELS = {"resnet18": resnet18, "transformer_layer": transformer_layer, "mobilenet_blocks": mobilenet_blocks,
          "resnext_blocks": resnext_blocks, "speech_frontend": speech_frontend, "dcgan_generator": dcgan_generator,
          "video_blocks": video_blocks, "resnet50": resnet50, "gpt_prefill": gpt_prefill, "gpt_decode": gpt_decode,
          "efficientnet_b0": efficientnet_b0, "vit_b16": vit_b16}
