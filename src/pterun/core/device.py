"""Devices: a type (CPU, CUDA) and an index, parsed from and printed as "cuda:1"."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pterun.enums import DEVICE_TYPE_LABELS, DeviceType
from pterun.errors import InvalidArgument

_EXPECTED = " or ".join(DEVICE_TYPE_LABELS)


@dataclass(frozen=True, slots=True)
class Device:
    type: DeviceType = DeviceType.CPU
    index: int = 0

    @classmethod
    def parse(cls, spec: str | torch.device | Device | None) -> Device:
        """``spec`` as a device; None is :data:`DEFAULT_DEVICE`."""
        if spec is None:
            return DEFAULT_DEVICE
        if isinstance(spec, Device):
            return spec
        if isinstance(spec, str):
            try:
                spec = torch.device(spec)
            except RuntimeError:
                raise InvalidArgument(f"{spec!r} is not a device; expected 'cpu', 'cuda' or 'cuda:N'") from None
        if isinstance(spec, torch.device):
            try:
                kind = DeviceType[spec.type.upper()]
            except KeyError:
                raise InvalidArgument(f"device {str(spec)!r} is not supported; expected {_EXPECTED}") from None
            return cls(kind, spec.index or 0)
        raise InvalidArgument(f"{spec!r} is not a device")

    @classmethod
    def of(cls, tensor: torch.Tensor) -> Device:
        return cls.parse(tensor.device)

    @property
    def torch(self) -> torch.device:
        return torch.device("cpu") if self.type == DeviceType.CPU else torch.device(self.type.label, self.index)

    @property
    def is_cpu(self) -> bool:
        return self.type == DeviceType.CPU

    def __str__(self) -> str:
        return "cpu" if self.is_cpu else f"{self.type.label}:{self.index}"


CPU = Device(DeviceType.CPU, 0)
# Where a program runs when nobody names a device: the CPU, as ExecuTorch's runtime runs. Every layer that
# has no device (a load without device=, a backend's context, the CLI without --device) asks Device.parse(None).
DEFAULT_DEVICE = CPU

__all__ = ["CPU", "DEFAULT_DEVICE", "Device", "DeviceType"]

