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
        if spec is None:
            return CPU
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

__all__ = ["CPU", "Device", "DeviceType"]

