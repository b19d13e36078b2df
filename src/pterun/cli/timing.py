"""Timing several ways of computing the same thing, fairly, in one process.

Every way is warmed up first, then the ways take turns, one call each per
round, so a slow phase of the machine (another process, a clock change)
lands on all of them alike. CUDA ways are timed with CUDA events around each
call (device time) and, separately, with a host clock that synchronizes
(what a caller waits).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Way:
    name: str
    call: Callable[[], object]
    cuda: bool = False


@dataclass
class Timing:
    name: str
    host_ms: list[float] = field(default_factory=list)
    device_ms: list[float] = field(default_factory=list)

    @property
    def samples(self) -> list[float]:
        """Device time on CUDA (the kernels' own), host time elsewhere."""
        return self.device_ms or self.host_ms

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> tuple[float, float]:
        """The 10th and 90th percentiles."""
        ordered = sorted(self.samples)
        low = ordered[int(0.1 * (len(ordered) - 1))]
        high = ordered[int(0.9 * (len(ordered) - 1))]
        return low, high

    @property
    def host_median(self) -> float:
        return statistics.median(self.host_ms)

    def as_dict(self) -> dict:
        low, high = self.spread
        out = {"name": self.name, "median_ms": self.median, "p10_ms": low, "p90_ms": high, "runs": len(self.samples)}
        if self.device_ms:
            out["host_median_ms"] = self.host_median
        return out


def _nothing() -> None:
    pass


def measure(ways: list[Way], *, warmup: int = 5, repeat: int = 50, min_seconds: float = 0.0,
            warmed: Callable[[], None] = _nothing, timed: Callable[[], None] = _nothing) -> list[Timing]:
    """Times every way ``repeat`` times (more if ``min_seconds`` is not reached), interleaved; ``warmed`` is
    called after each warm-up call and ``timed`` after each round (to show progress)."""
    import torch

    for way in ways:
        for _ in range(warmup):
            way.call()
            warmed()
        if way.cuda:
            torch.cuda.synchronize()
    timings = [Timing(way.name) for way in ways]
    start = time.perf_counter()
    rounds = 0
    while rounds < repeat or time.perf_counter() - start < min_seconds:
        for way, timing in zip(ways, timings):
            if way.cuda:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                begin.record()
                way.call()
                end.record()
                torch.cuda.synchronize()
                timing.host_ms.append((time.perf_counter() - t0) * 1e3)
                timing.device_ms.append(begin.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                way.call()
                timing.host_ms.append((time.perf_counter() - t0) * 1e3)
        rounds += 1
        timed()
    return timings
