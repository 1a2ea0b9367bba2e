"""Small PyTorch models for the model-path tests; each factory returns (module, example_inputs)."""

from __future__ import annotations

import torch
from torch import nn


class ConvNet(nn.Module):
    """conv+bn+relu, depthwise conv, two same-shape convs (one task, weight 2), pooling, linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.relu(self.dw(y))
        y = torch.relu(self.conv2(y)) + y
        y = torch.relu(self.conv3(y))
        return self.fc(torch.flatten(self.pool(y), 1))


class TinyAttention(nn.Module):
    """Single-head-per-call attention block with a residual and a layer norm."""

    def __init__(self, dim: int = 32, heads: int = 2):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.norm(x + self.proj(y))


class GroupedBlock(nn.Module):
    """A ResNeXt-style bottleneck (1x1, grouped 3x3 + batch norm, 1x1, residual), then a strided, dilated grouped
    convolution, a dilated depthwise one, a depthwise one with a channel multiplier of 2, a grouped one strided over
    H only (DeepSpeech2's, a text recogniser's), one dilated over W only (an undilated one over the data's phases) and
    one both strided and dilated over W only (left to TVM)."""

    def __init__(self):
        super().__init__()
        self.reduce = nn.Conv2d(16, 32, 1, bias=False)
        self.grouped = nn.Conv2d(32, 32, 3, padding=1, groups=4, bias=False)
        self.bn = nn.BatchNorm2d(32)
        self.expand = nn.Conv2d(32, 16, 1)
        self.down = nn.Conv2d(16, 24, 3, stride=2, padding=2, dilation=2, groups=2)
        self.dilated_dw = nn.Conv2d(24, 24, 3, padding=2, dilation=2, groups=24)
        self.multiplier = nn.Conv2d(24, 48, 3, padding=1, groups=24)
        self.rows = nn.Conv2d(48, 24, 3, stride=(2, 1), padding=1, groups=3)
        self.wide = nn.Conv2d(24, 8, 3, padding=(1, 2), dilation=(1, 2))
        self.strided_wide = nn.Conv2d(8, 8, 3, stride=2, padding=(1, 2), dilation=(1, 2))

    def forward(self, x):
        y = torch.relu(self.reduce(x))
        y = torch.relu(self.bn(self.grouped(y)))
        y = self.down(self.expand(y) + x)
        y = self.multiplier(torch.relu(self.dilated_dw(y)))
        return self.strided_wide(torch.relu(self.wide(torch.relu(self.rows(y)))))


class Conv1dBlock(nn.Module):
    """1-d convolutions (strided with a bias; depthwise, k=7, with a batch norm; grouped and dilated), then an
    Inception-style 1x7 and 3x1 conv2d pair, padded along one axis only."""

    def __init__(self):
        super().__init__()
        self.strided = nn.Conv1d(8, 16, 3, stride=2, padding=1)
        self.depthwise = nn.Conv1d(16, 16, 7, padding=3, groups=16, bias=False)
        self.bn = nn.BatchNorm1d(16)
        self.grouped = nn.Conv1d(16, 24, 3, padding=2, dilation=2, groups=4)
        self.row = nn.Conv2d(24, 16, (1, 7), padding=(0, 3))
        self.column = nn.Conv2d(16, 8, (3, 1), padding=(1, 0), bias=False)

    def forward(self, x):
        y = torch.relu(self.bn(self.depthwise(torch.relu(self.strided(x)))))
        y = self.grouped(y).unsqueeze(2)
        return self.column(torch.relu(self.row(torch.cat([y, 2 * y], dim=2))))


class UpsampleBlock(nn.Module):
    """Transposed convolutions: U-Net's 2x2 stride 2, DCGAN's 4x4 stride 2 padding 1, a 3x3 stride 2 with an output
    padding, a stride (2, 1) one, grouped ones (groups 2; FCN's depthwise 4x4 stride 2 upsampling; a depthwise
    stride 1), dilated ones (stride 1; stride 2) and a 1-d one as in a vocoder (kernel 16, stride 8)."""

    def __init__(self):
        super().__init__()
        self.unet = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.dcgan = nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1, bias=False)
        self.odd = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.rows = nn.ConvTranspose2d(4, 4, (3, 1), stride=(2, 1), padding=(1, 0))
        self.grouped = nn.ConvTranspose2d(4, 4, 3, padding=1, groups=2)
        self.bilinear = nn.ConvTranspose2d(4, 4, 4, stride=2, padding=1, groups=4, bias=False)
        self.smooth = nn.ConvTranspose2d(4, 4, 3, padding=1, groups=4)
        self.dilated = nn.ConvTranspose2d(4, 4, 3, padding=2, dilation=2)
        self.dilated_up = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=3, dilation=2)
        self.vocoder = nn.ConvTranspose1d(4, 2, 16, stride=8, padding=4)

    def forward(self, x):
        y = self.rows(self.odd(torch.relu(self.dcgan(torch.relu(self.unet(x))))))
        y = self.dilated_up(self.dilated(self.smooth(self.bilinear(self.grouped(y)))))
        return self.vocoder(y.mean(dim=2))


class VideoBlock(nn.Module):
    """3-d convolutions: 3x3x3 with a batch norm, a (2+1)-d pair (1x3x3 strided over H and W, 3x1x1 over time), a
    2x2x2 stride 2, a depth-dilated grouped one, a depthwise one and one with an H stride unlike its W stride."""

    def __init__(self):
        super().__init__()
        self.full = nn.Conv3d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm3d(8)
        self.spatial = nn.Conv3d(8, 8, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
        self.temporal = nn.Conv3d(8, 8, (3, 1, 1), padding=(1, 0, 0))
        self.down = nn.Conv3d(8, 8, 2, stride=2)
        self.grouped = nn.Conv3d(8, 8, 3, padding=(2, 1, 1), dilation=(2, 1, 1), groups=2)
        self.depthwise = nn.Conv3d(8, 8, 3, padding=1, groups=8)
        self.uneven = nn.Conv3d(8, 4, 1, stride=(1, 2, 1))

    def forward(self, x):
        y = torch.relu(self.bn(self.full(x)))
        y = self.down(torch.relu(self.temporal(self.spatial(y))))
        return self.uneven(self.depthwise(self.grouped(y)))


def _init(model: nn.Module, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    for m in model.modules():
        # non-trivial running stats, so the bn math is exercised
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def _example(make, *shape: int):
    """(module in eval mode with its batch norms' statistics drawn, one input of `shape`), seeded."""
    torch.manual_seed(0)
    return _init(make(), 1), (torch.randn(*shape),)


def convnet():
    return _example(ConvNet, 1, 3, 16, 16)


def tiny_attention():
    return _example(TinyAttention, 1, 16, 32)


def grouped_block():
    return _example(GroupedBlock, 1, 16, 12, 12)


def conv1d_block():
    return _example(Conv1dBlock, 1, 8, 40)


def upsample_block():
    return _example(UpsampleBlock, 1, 8, 3, 5)


def video_block():
    return _example(VideoBlock, 1, 3, 6, 10, 10)
