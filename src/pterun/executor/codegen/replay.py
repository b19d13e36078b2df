"""A run of steps that make native calls alone, made again as one native call.

A decode step of an 8da4w language model is a few hundred native calls (the XNNPACK delegates' quantizations and
4-bit products, the fused RMSNorms, attentions over the KV cache and SiLU-products between them), each behind
Python that finds its pointers and checks its tensors: on one CPU thread that Python took about a fifth of the
step. The generated code wraps each run of consecutive steps whose kernels can say that a call was native calls
alone (``ran_natively``: the fused kernels of ``kernels/fused.py`` and ``kernels/llm/cached_attention.py``, small
float arithmetic of ``kernels/binary.py``, layer norms of ``kernels/layer_norm.py``, the XNNPACK delegate where its
translation is native calls alone), with the views between them, in a ``Replay``:

    if not _replay84((v163, v163, v164, ...), v204, v264, v80):   # the attentions' positions, then the state
        try:
            pterun_rms_norm(c81, c1, 1e-05, out=c322)                # else the steps, as without it, recorded
            delegate_XnnpackBackend(a85)
            pterun_cached_attention(c325, c323, c324, v204, v264, c26, c27, v163, v163, v164, ...)
            ...
            _replay84.keep(v204, v264, v80)
        finally:
            _replay84.stop()

A call that does not replay records the native calls its steps make (``native/module.c``: any other native call
spoils the recording). The recording is kept where every step says its call was native calls alone, with the
state the calls were made for: the thread count, the sizes of the planned tensors whose sizes change (planned and
constant tensors keep their bytes, and the executor keeps a resized one in its dim order), the address, sizes,
strides and dtype of tensors made per call (views, inputs), and the other values the steps read (a size the
views take). A later call in that same state makes the same native calls on the same pointers, as the steps
would: their choices depend on nothing else (no tensor's values are read to choose), so it makes them in one
native call instead, each attention at the call's own positions (checked for every attention before the first
call is made: positions one refuses leave every byte to the steps, which refuse them as they do). Any other state
runs the steps, and the next call in the state they left records them; a run that cannot be recorded stops trying
after a few calls. A view in the run is left unmade, so a run ends before one that a later step reads; a step's
Python state (a delegate's last translation, a kernel's prepared arguments) is left as the recorded call left it,
which is what the steps would have left. Where the run is the whole method, the call pins no precision itself: the
replay pins it around the steps when they run (``around``), and a replayed call makes native calls alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from pterun import native

_threads = torch.get_num_threads
_replay = native.kernels.replay if native.kernels is not None else None

ATTEMPTS = 4  # calls that record and fail before a run stops recording (a step that is not native calls alone)


class Replay:
    def __init__(self, fixed: tuple[torch.Tensor, ...], checks: tuple[Callable[[], object], ...]) -> None:
        self._fixed = fixed  # the steps' planned tensors whose sizes change; those made per call are passed in
        self._checks = checks  # each step's ran_natively, for its last call: true where it was native calls alone
        self._said: list = []
        self._calls: object | None = None  # the recorded calls (a capsule), or None
        self._state: object = ()  # the state the calls were recorded in (and left)
        self._left: object = ()  # the state the last call that ran the steps left
        self._recording = False
        self._failures = 0
        self.replayed = 0  # calls made as the recorded calls
        # What the steps need around them and a replayed call does not (enter() -> a token for exit): the precision
        # the method pins for them, where the run is the whole method (its calls then pin nothing themselves).
        self.around: Any = None
        self._entered: object = None

    def __call__(self, positions: tuple[int, ...], *moving) -> bool:
        """Makes the recorded calls where the state is as recorded (True), its attentions at ``positions``; else
        runs the steps (False), recording them where the state is the one the last call that ran them left: a first
        call in a state may do what later ones do not (translate a delegate for new sizes, run a kernel's probe on
        values of its own). Positions an attention refuses leave it to the steps, which say why."""
        calls = self._calls
        if calls is not None or self._failures < ATTEMPTS:  # else given up: the steps, at no cost beyond this call
            now = self._now(moving)
            if calls is not None and now == self._state:
                if _replay(calls, *positions):  # type: ignore[misc]  # replays exist only where the kernels do
                    self.replayed += 1
                    return True
            else:
                self._recording = self._failures < ATTEMPTS and now == self._left
                if self._recording:
                    native.kernels.record_start()  # type: ignore[union-attr]
        if self.around is not None:
            self._entered = self.around.enter()
        return False

    def keep(self, *moving) -> None:
        """After the steps ran: ends the recording, kept where each step made native calls alone."""
        if self._calls is None and self._failures >= ATTEMPTS:
            return
        self._left = left = self._now(moving)
        if not self._recording:
            return
        self._recording = False
        calls = native.kernels.record_stop()  # type: ignore[union-attr]
        # What each step says of its call, kept with the recording: a delegate's translation (whose buffers the
        # calls write) lives as long as the calls do.
        said = [check() for check in self._checks]
        if calls is not None and all(said):
            self._calls, self._state, self._said = calls, left, said
        else:
            self._failures += 1

    def stop(self) -> None:
        """After the steps ran: ends a recording a failing step left running (after ``keep``, nothing is recording),
        and what ``around`` entered."""
        if self._recording:
            self._recording = False
            native.kernels.record_stop()  # type: ignore[union-attr]
        if self.around is not None:
            self.around.exit(self._entered)

    def _now(self, moving: tuple) -> object:
        if not moving and not self._fixed:
            return _threads()  # the whole state of a run of fixed tensors alone
        return (_threads(), tuple([t.shape for t in self._fixed]),
                tuple([(t.data_ptr(), t.shape, t.stride(), t.dtype) if isinstance(t, torch.Tensor) else t
                       for t in moving]))
