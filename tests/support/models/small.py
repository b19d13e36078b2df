"""Small hand-written modules several tests export: multi-layer perceptrons and convolutional nets.

Each takes its sizes (and activations) as arguments, so one class serves every test that needs one of its
kind; a test draws the weights under its own seed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Activation = Callable[[torch.Tensor], torch.Tensor]


class MLP(torch.nn.Module):
    """final(fc2(act(fc1(x))))."""

    def __init__(self, width: int, hidden: int, out: int, act: Activation, final: Activation) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, out)
        self.act, self.final = act, final

    def forward(self, x):
        return self.final(self.fc2(self.act(self.fc1(x))))


class ResidualMLP(torch.nn.Module):
    """Three linear layers, the middle one in a residual branch: fc3(h + act(fc2(h))), h = relu(fc1(x))."""

    def __init__(self, width: int, hidden: int, out: int, act: Activation = torch.relu) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.fc3 = torch.nn.Linear(hidden, out)
        self.act = act

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = h + self.act(self.fc2(h))
        return self.fc3(h)


class ConvNet(torch.nn.Module):
    """A convolution with batch norm, a strided one, global average pooling and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.relu(self.conv2(y))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


class ConvBlock(torch.nn.Module):
    """A convolution, a depthwise one in a residual branch, and outputs through pooling and upsampling."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = torch.nn.MaxPool2d(2)

    # No batch norm: ExecuTorch's portable kernel for it takes contiguous tensors only.
    def forward(self, x):
        y = torch.relu(self.conv(x))
        z = self.dw(y) + y
        return z, y.mean((2, 3)), self.pool(z), torch.nn.functional.interpolate(z, scale_factor=2.0)


class BranchyConvNet(torch.nn.Module):
    """Convolutions (plain, strided, depthwise) with batch norm and ReLU/ReLU6, max pooling, a residual
    add, a channel concatenation, a multiply, global average pooling and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = torch.nn.Conv2d(16, 16, 1)
        self.down = torch.nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.side = torch.nn.Conv2d(16, 8, 1, stride=2)
        self.gate = torch.nn.Conv2d(32, 32, 1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.stem(x)))
        y = y + self.pw(torch.nn.functional.relu6(self.dw(y)))
        y = torch.nn.functional.max_pool2d(y, 2)
        y = torch.cat([torch.relu(self.down(y)), self.side(y)], dim=1)
        y = y * self.gate(y)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


class ConvDecoder(torch.nn.Module):
    """A transposed convolution between convolutions, with a hardtanh (a clamp)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)
        self.head = torch.nn.Conv2d(6, 4, 3, padding=1)

    def forward(self, x):
        y = self.up(torch.relu(self.enc(x)))
        return self.head(torch.nn.functional.hardtanh(y, -0.5, 0.5))


class SwiGLUMLP(torch.nn.Module):
    """A Llama feed-forward block: down(silu(gate(x)) * up(x))."""

    def __init__(self, dim: int = 48, hidden: int = 136) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.up = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))
