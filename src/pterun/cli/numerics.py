"""How far a value is from its reference: max abs error, relative error, SNR.

* max abs: ``max |value - reference|`` over the elements;
* relative: that, divided by the reference's largest magnitude (``max |reference|``), so that elements near
  zero do not blow it up (0 when both are all zeros, inf when only the reference is);
* SNR: ``10 log10(sum reference^2 / sum (value - reference)^2)`` in dB, inf when they are equal.

A value that is a list of tensors is compared as all its elements together. A row is over the threshold
when its relative error is above it, or when the values cannot be compared (a shape differs, or one is
missing); the first such row is the one to look at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch.utils._pytree import tree_leaves


@dataclass(frozen=True)
class Gap:
    max_abs: float
    relative: float
    snr_db: float
    problem: str | None = None  # why the values cannot be compared
    judged: bool = True  # False: shown, never over (the values may not be meant to be the same)

    def over(self, threshold: float) -> bool:
        if not self.judged:
            return False
        return self.problem is not None or math.isnan(self.relative) or self.relative > threshold

    def as_dict(self) -> dict:
        def number(x: float):  # JSON has no inf or nan
            return x if math.isfinite(x) else str(x)

        out = {"max_abs": number(self.max_abs), "relative": number(self.relative), "snr_db": number(self.snr_db)}
        if self.problem:
            out["problem"] = self.problem
        return out


def _flat(value) -> tuple[torch.Tensor, list[tuple[int, ...]]] | None:
    leaves = [v for v in tree_leaves(value) if v is not None]
    if not leaves or not all(isinstance(v, (torch.Tensor, bool, int, float)) for v in leaves):
        return None
    tensors = [torch.as_tensor(v).detach().cpu().to(torch.float64) for v in leaves]
    return torch.cat([t.reshape(-1) for t in tensors]), [tuple(t.shape) for t in tensors]


def gap(value, reference, *, judged: bool = True) -> Gap:
    """How far ``value`` is from ``reference`` (tensors, scalars, or lists of them)."""
    found = _gap(value, reference)
    return found if judged else replace(found, judged=False)


def _gap(value, reference) -> Gap:
    a, b = _flat(value), _flat(reference)
    if a is None or b is None:
        return Gap(math.nan, math.nan, math.nan, "not tensors or numbers")
    (x, x_shapes), (r, r_shapes) = a, b
    if x_shapes != r_shapes:
        return Gap(math.nan, math.nan, math.nan, f"shape {_shapes(x_shapes)}, reference {_shapes(r_shapes)}")
    if x.numel() == 0:
        return Gap(0.0, 0.0, math.inf)
    diff = x - r
    finite = torch.isfinite(x) & torch.isfinite(r)
    same = (x == r) | (torch.isnan(x) & torch.isnan(r))
    diff = torch.where(same, torch.zeros_like(diff), diff)
    if not bool((finite | same).all()):
        return Gap(math.inf, math.inf, -math.inf, "non-finite values differ")
    max_abs = float(diff.abs().max())
    scale = float(torch.where(finite, r, torch.zeros_like(r)).abs().max())
    relative = max_abs / scale if scale else (0.0 if max_abs == 0 else math.inf)
    noise = float((diff * diff).sum())
    signal = float((torch.where(finite, r, torch.zeros_like(r)) ** 2).sum())
    snr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal else -math.inf)
    return Gap(max_abs, relative, snr)


def _shapes(shapes: list[tuple[int, ...]]) -> str:
    return ", ".join(str(list(s)) for s in shapes)


def first_over(gaps: list[Gap], threshold: float) -> int | None:
    """The index of the first gap over ``threshold``, or None."""
    return next((i for i, g in enumerate(gaps) if g.over(threshold)), None)


def fmt(x: float, spec: str = ".3g") -> str:
    """``x`` for a table: "-" for nan, inf and -inf as words."""
    if math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)
