"""Calls from several threads: who may use a method's one set of planned memory, and when.

``execute()`` holds the method's lock for the whole call (inputs, run,
outputs): threads sharing a method take turns and never see each other's
values. The step-by-step calls each hold the lock too, but a sequence of them
cannot be made atomic, so the method remembers which thread is half-way
through one and refuses calls that would mix into it (InvalidState naming
both threads), rather than wait for a sequence that may never end:

- from a thread's first set_input(s) to its run(), other threads cannot set
  inputs, set an output, run or execute;
- get_outputs() returns the outputs of the calling thread's own last run or
  execute; when another thread has run the method since, those are gone, and
  it is refused.

A call from inside the method's own execution (a kernel or delegate calling
back) is refused too: it would overwrite the memory the running call uses.
See docs/threads.md.
"""

from __future__ import annotations

import threading

from pterun.errors import InvalidState

_get_ident = threading.get_ident
_ADVICE = "use execute(), which is atomic, or one method per thread (program.load_method(name, cached=False))"


class CallGuard:
    def __init__(self, where: str, lock: threading.Lock | None = None) -> None:
        self.where = where
        self.lock = lock or threading.Lock()  # another's: methods sharing memory take turns (shared.py)
        self.busy = False  # inside the compiled function, run by thread self.ran_by
        self.stepper: threading.Thread | None = None  # the thread between its set_input(s) and run
        self.ran_by: int | None = None  # the ident of the thread whose run produced the outputs

    def locked(self, what: str) -> threading.Lock:
        """The lock, for a call that is not from inside the method's own execution."""
        # Checked before waiting for the lock: the thread running the method holds it.
        if self.busy and self.ran_by == _get_ident():
            raise self.reentered(what)
        return self.lock

    def claim(self, what: str) -> None:
        """Under the lock: the calling thread begins or continues setting inputs."""
        stepper = self.stepper
        if stepper is None or stepper.ident != _get_ident():
            if stepper is not None and stepper.is_alive():
                raise self._interleaved(stepper, what)
            self.stepper = threading.current_thread()

    def check_free(self, what: str) -> None:
        """Under the lock: no other thread is half-way through setting inputs."""
        stepper = self.stepper
        if stepper is not None and stepper.ident != _get_ident():
            if stepper.is_alive():
                raise self._interleaved(stepper, what)
            self.stepper = None  # a thread that ended half-way: what it set is abandoned

    def start(self) -> None:
        """Under the lock: the calling thread runs the method now."""
        self.ran_by = _get_ident()
        self.busy = True

    def check_owner(self) -> None:
        """Under the lock: the outputs are the calling thread's."""
        if self.ran_by != _get_ident():
            raise self._not_yours()

    def _interleaved(self, stepper: threading.Thread, what: str) -> InvalidState:
        return InvalidState(
            f"{self.where}: {_thread(stepper)} has set inputs and not run yet; {_thread()} cannot {what} "
            f"until it has. Step-by-step calls (set_inputs, run, get_outputs) from several threads cannot be "
            f"mixed: {_ADVICE}"
        )

    def _not_yours(self) -> InvalidState:
        ran_by = next((t for t in threading.enumerate() if t.ident == self.ran_by), None)
        who = _thread(ran_by) if ran_by is not None else f"a thread that has ended (id {self.ran_by})"
        return InvalidState(
            f"{self.where}: its outputs are from a call by {who}; {_thread()} has not run it since "
            f"(another thread's call came between this thread's run and get_outputs, or it never ran). "
            f"{_ADVICE[0].upper()}{_ADVICE[1:]}"
        )

    def reentered(self, what: str) -> InvalidState:
        return InvalidState(
            f"{self.where}: cannot {what} from inside its own execution (a kernel or delegate calling back "
            f"into the method would overwrite the memory the running call uses)"
        )


def _thread(thread: threading.Thread | None = None) -> str:
    thread = thread or threading.current_thread()
    return f"thread {thread.name!r} (id {thread.ident})"
