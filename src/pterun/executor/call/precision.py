"""Float32 computed in float32 while a method runs, whatever the process has set.

PyTorch keeps process-wide switches that let float32 matrix products and
convolutions run on reduced-precision units: cuDNN's convolutions use TF32 on
NVIDIA GPUs *by default*, ``torch.set_float32_matmul_precision("high")`` turns
on TF32 for cuBLAS (and oneDNN), ``"medium"`` lets oneDNN use bfloat16 on CPUs
that have it, and an ``autocast`` region runs whole operators in half
precision. ExecuTorch's kernels compute float32 in float32, so a program must
not change its results with the caller's settings: while a method runs, the
switches are set to what the program was loaded for and put back afterwards.

``load_program(..., allow_tf32=True)`` asks for TF32 instead: float32 matrix
products and convolutions on CUDA then round their inputs to 10 mantissa bits
(relative error about 1e-3 per product; see docs/precision.md).

The switches are global to the process (autocast's are per thread), so:

* concurrent calls share one setting: the first call in sets it, the last one
  out restores it, and a call that needs the other setting waits for the
  others to finish (a nested call, such as a delegate running a program of its
  own, runs under its caller's setting);
* code in other threads that runs while a method does sees pterun's setting.

Settings are read and written through PyTorch's per-operator precision API
(``fp32_precision`` of cuda/mkldnn matmul, conv, rnn), keeping the legacy
``allow_tf32`` and ``float32_matmul_precision`` views consistent with it, since
PyTorch refuses to run (or to compile) when the two disagree. What is put back
is each setting's effective value.
"""

from __future__ import annotations

import threading

import torch

_get = torch._C._get_fp32_precision_getter
_autocast = torch._C._is_any_autocast_enabled
_set = torch._C._set_fp32_precision_setter

_CUDNN = (("cuda", "conv"), ("cuda", "rnn"))
_MKLDNN = (("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn"))
_EXACT = ("none", "ieee")  # "none" inherits, and every parent defaults to "none": IEEE arithmetic


class _Switches:
    """The process's precision switches: pinned by the first call in, restored by the last one out."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._depth = 0
        self._tf32 = False
        self._local = threading.local()
        self._saved: tuple = ([], {})

    def enter(self, tf32: bool) -> None:
        local = self._local
        nested = getattr(local, "depth", 0)
        with self._lock:
            if nested == 0:
                while self._depth and self._tf32 != tf32:
                    self._lock.wait()
                if self._depth == 0:
                    self._tf32 = tf32
                    self._saved = _pin(tf32)
            self._depth += 1
        local.depth = nested + 1

    def exit(self) -> None:
        local = self._local
        local.depth -= 1
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                _restore(self._saved)
                self._saved = ([], {})
                self._lock.notify_all()


_SWITCHES = _Switches()


class Precision:
    """A context manager: the precision a program was loaded for, for the duration of a call.

    ``host``: every kernel of the method runs on the CPU (no other device, delegates only of backends that run
    CPU kernels alone), so only the CPU's switches matter; when they are already exact and no call holds them,
    a call sets nothing (a tiny program's call is a few microseconds; pinning and restoring costs about three).
    """

    __slots__ = ("tf32", "host", "_guards")

    def __init__(self, *, tf32: bool = False, host: bool = False) -> None:
        self.tf32 = tf32
        self.host = host
        self._guards = threading.local()  # autocast guards, per thread: autocast state is per thread

    def enter(self) -> bool:
        """Pins the precision for a call on this thread; True where it did, and ``exit(True)`` must follow."""
        if self.host and _SWITCHES._depth == 0 and not _autocast() and _get("mkldnn", "matmul") in _EXACT and \
                _get("mkldnn", "conv") in _EXACT and _get("mkldnn", "rnn") in _EXACT:
            # No call holds the switches and the CPU's are exact: the call finds them as it needs them. Nothing then
            # pins them, so no call's exit can put back a setting other than exact while this call runs; the only
            # change it can see is one the process makes meanwhile, as with pinning. (Written out: these checks are
            # a good part of a small CPU call's fixed cost.)
            return False
        _SWITCHES.enter(self.tf32)
        if _autocast():
            guard = torch._C._DisableAutocast()
            guard.__enter__()
            self._guards.__dict__.setdefault("stack", []).append(guard)
        return True

    def exit(self, pinned: bool) -> None:
        """Puts back what ``enter`` pinned (where it returned True)."""
        if not pinned:
            return
        stack = self._guards.__dict__.get("stack")
        if stack:
            stack.pop().__exit__(None, None, None)
        _SWITCHES.exit()

    def __enter__(self) -> None:
        self._guards.pinned = self.enter()

    def __exit__(self, *exc) -> None:
        self.exit(self._guards.pinned)


def _pin(tf32: bool) -> tuple[list, dict[tuple[str, str], str]]:
    """Sets the switches for exact float32 (or TF32 on CUDA); returns what to put back.

    The legacy switches (``float32_matmul_precision``, cuDNN's ``allow_tf32``) also reset the
    per-operator values they cover, so they are put back first and the per-operator values after.
    """
    legacy: list = []
    changed: dict[tuple[str, str], str] = {}

    def pin(key, value):
        if _get(*key) != value:
            changed.setdefault(key, _get(*key))
            _set(*key, value)

    # CPUs: oneDNN may compute float32 in bfloat16 or TF32 where the hardware has it.
    for key in _MKLDNN:
        if _get(*key) not in _EXACT:
            pin(key, "ieee")
    if not torch.cuda.is_initialized():
        return legacy, changed  # no CUDA kernel runs in a process that has not set CUDA up
    want = "tf32" if tf32 else "ieee"
    if (_get("cuda", "matmul") == "tf32") != tf32:
        # cuBLAS checks the legacy matmul precision against the per-operator one: change both.
        try:
            legacy.append((torch._C._set_float32_matmul_precision, torch._C._get_float32_matmul_precision()))
        except RuntimeError:  # the caller mixed legacy and per-operator switches; PyTorch refuses to read them
            pin(("cuda", "matmul"), want)
        else:
            for key in (("cuda", "matmul"), ("mkldnn", "matmul")):
                changed.setdefault(key, _get(*key))
            torch._C._set_cublas_allow_tf32(tf32)
    if any((_get(*key) == "tf32") != tf32 for key in _CUDNN):
        try:
            legacy.append((torch._C._set_cudnn_allow_tf32, torch._C._get_cudnn_allow_tf32()))
            for key in _CUDNN:
                changed.setdefault(key, _get(*key))
            torch._C._set_cudnn_allow_tf32(tf32)
        except RuntimeError:
            pass  # the caller mixed legacy and per-operator switches; PyTorch refuses to read the legacy one
        for key in _CUDNN:
            pin(key, want)
    return legacy, changed


def _restore(saved: tuple[list, dict[tuple[str, str], str]]) -> None:
    legacy, changed = saved
    for setter, value in reversed(legacy):
        setter(value)
    for key, value in changed.items():
        _set(*key, value)


class Unpinned(Precision):
    """The precision of a method whose call pins nothing itself: its generated code is one replay (codegen/replay.py),
    which pins ``precision`` around the steps when it runs them, and a replayed call makes native calls alone."""

    __slots__ = ()

    def enter(self) -> bool:
        return False

    def exit(self, pinned: bool) -> None:
        pass
