"""How many intra-op threads a method's calls run on: chosen at load, set on the calling thread only.

PyTorch's CPU kernels split their work with OpenMP (``torch.__config__.parallel_info()``) and MKL.
``torch.set_num_threads(n)`` is process-wide: it stores ``n`` for threads that have not run a
kernel yet, resizes the pthreadpool that NNPACK, QNNPACK and XNNPACK kernels share, clears oneDNN's
primitive cache, and sets the calling thread's OpenMP and MKL counts. Those two counts are per
thread: OpenMP's ``nthreads-var`` belongs to each thread's own data environment, and MKL's
``mkl_set_num_threads_local`` only binds the calling thread. Setting them is all a call needs, and
nothing another thread sees changes; the pthreadpool and the process-wide count stay as they are.

A call sets both to the method's count and puts back what the thread had (``Threads.enter`` /
``exit``); when they already agree, nothing is set. Where the process has no OpenMP runtime that
can be found (PyTorch's native thread pool, a build without OpenMP) calls run on whatever the
thread has, and ``Method.num_threads`` says so by reporting it.

The count (``load_program(..., num_threads=)``):

* ``None`` (the default): one thread when every operator of the method is small: no call writes
  more than ``SMALL`` elements (the grain PyTorch's elementwise kernels split work by) or touches
  more than ``READ`` in all. Such operators gain little from a second thread, yet some (softmax)
  still start a parallel region, whose threads wait for each other and, on a busy machine, for the
  scheduler. Otherwise the calling thread's PyTorch setting (``torch.get_num_threads()``), but no
  more than the cores other processes have left free over the last second (``_Load``): an OpenMP
  region waits for its slowest thread, and a thread that shares a core with a busy process waits for
  the scheduler's time slice, so one call can take milliseconds longer than the whole computation.
* an int ``n >= 1``: ``n``, whatever the machine's load.

Either way a call runs no more threads than there are cores the process may use, less those other
calls of pterun hold at that moment: running calls hold their threads in one process-wide count, so
two methods called at once on two Python threads share the cores instead of oversubscribing them.

A method that ``torch.compile`` compiled (``compile=True``) is the exception: its count is fixed at load
(``num_threads``, else ``torch.get_num_threads()`` then, no more than the cores) and every call runs on it,
whatever the load. TorchInductor writes its CPU code for one thread count, and Dynamo guards the compiled
code on ``torch.get_num_threads()``: a count that followed the load would compile the method again each
time it moved, minutes on a large method, until Dynamo's recompilation limit sends it back to Python.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import time
from collections.abc import Callable, Sequence

import torch

from pterun.errors import InvalidArgument
from pterun.executor.load.steps import DelegateStep, KernelStep
from pterun.format import Kind, ListValue, Plan, TensorSpec

SMALL = 32768  # elements a call writes; at::internal::GRAIN_SIZE, below which elementwise kernels use one thread
READ = 8 * SMALL  # elements a call touches in all: a product this size is tens of µs on one core

_OPENMP_NAMES = ("libgomp", "libomp", "libiomp5")


def check_num_threads(value) -> int | None:
    """``num_threads`` as load_program takes it: None (chosen per method) or an int of at least 1."""
    if value is None or (type(value) is int and value >= 1):
        return value
    raise InvalidArgument(f"num_threads must be None or an int of at least 1; got {value!r}")


@functools.cache
def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _loaded_libraries() -> list[str]:
    try:
        with open("/proc/self/maps") as maps:
            return sorted({line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6
                           and line.split(None, 5)[5].startswith("/")})
    except OSError:
        return []


@functools.cache
def _setters() -> tuple[Callable[[int], None], Callable[[int], int] | None] | None:
    """(set OpenMP's count for this thread, set MKL's for this thread or None), from the libraries
    PyTorch loaded; None when there is no OpenMP runtime to set."""
    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    libraries = _loaded_libraries()
    torch_cpu = next((p for p in libraries if os.path.basename(p).startswith("libtorch_cpu")), None)
    # The OpenMP runtime torch links: looked up through libtorch_cpu, which searches its own dependencies.
    # Other wheels bundle copies of their own (sentencepiece's libgomp), whose counts torch never reads.
    omp = getattr(ctypes.CDLL(torch_cpu), "omp_set_num_threads", None) if torch_cpu is not None else None
    if omp is None:
        openmp = next((p for p in libraries if os.path.basename(p).startswith(_OPENMP_NAMES)), None)
        if openmp is None:
            return None
        omp = ctypes.CDLL(openmp).omp_set_num_threads
    omp.restype, omp.argtypes = None, (ctypes.c_int,)
    mkl = None
    if torch_cpu is not None:
        mkl = getattr(ctypes.CDLL(torch_cpu), "MKL_Set_Num_Threads_Local", None)
        if mkl is not None:
            mkl.restype, mkl.argtypes = ctypes.c_int, (ctypes.c_int,)
    return omp, mkl


class _Load:
    """The cores other processes leave free, from /proc/stat, sampled at most every ``INTERVAL`` seconds.

    The machine's busy time less this process's own, over the time since the last sample, as a share
    of the machine, times the cores this process may use; the least of the last ``KEPT`` samples, so a
    core counts as free only once it has been free for a second (a second thread on a core another
    process takes back costs milliseconds a call; one thread too few costs at most half the call).
    Without /proc/stat every core counts as free.
    """

    INTERVAL = 0.25
    KEPT = 4

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next = 0.0
        self.free = float(cores())
        self.last: tuple[int, int, float] | None = None
        self.recent: list[float] = []
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def free_cores(self) -> float:
        if time.monotonic() >= self.next and self.lock.acquire(blocking=False):
            try:
                self._sample()
            finally:
                self.lock.release()
        return self.free

    def _sample(self) -> None:
        self.next = time.monotonic() + self.INTERVAL
        try:
            with open("/proc/stat", "rb") as stat:
                fields = [int(f) for f in stat.readline().split()[1:9]]
        except (OSError, ValueError):
            return
        total = sum(fields)
        busy = total - fields[3] - fields[4]  # less idle and iowait
        own = time.process_time()
        last, self.last = self.last, (total, busy, own)
        if last is None:
            others = self._running_now()
        elif total > last[0]:
            others = max(0.0, (busy - last[1]) - (own - last[2]) * self.tick) / (total - last[0])
        else:
            return
        self.recent = [*self.recent[1 - self.KEPT:], cores() * (1.0 - min(1.0, others))]
        self.free = min(self.recent)

    @staticmethod
    def _running_now() -> float:
        # Before there are two samples to compare: the tasks running on the machine right now, less this one.
        try:
            with open("/proc/loadavg", "rb") as loadavg:
                running = int(loadavg.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            return 0.0
        return max(0, running - 1) / (os.cpu_count() or 1)


_LOAD = _Load()


class _Held:
    """Threads held by running calls, process-wide."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: list[int] = []  # one entry per running call: its threads (append and remove are atomic)


_HELD = _Held()
_CORES = cores()


def _elements(values, vi: int) -> int:
    value = values[vi]
    if isinstance(value, TensorSpec):
        return value.numel
    if isinstance(value, ListValue) and value.kind in (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST):
        return sum(values[i].numel for i in value.items if i >= 0 and isinstance(values[i], TensorSpec))
    return 0


def small_method(plan: Plan, steps: Sequence) -> tuple[bool, int, int]:
    """Whether every call of the method is small, and the most elements a call writes and reads in all
    (-1: a delegate, whose work cannot be judged from its arguments)."""
    most_written = most = 0
    values = plan.values
    for step in steps:
        if isinstance(step, DelegateStep):
            return False, -1, -1
        if not isinstance(step, KernelStep):
            continue
        b = step.binding
        written = sum(_elements(values, step.args[p]) for p in (*b.writes, *b.mutates))
        most_written = max(most_written, written)
        most = max(most, sum(_elements(values, vi) for vi in step.args))
    return most_written <= SMALL and most <= READ, most_written, most


class Threads:
    """The intra-op threads of one method's calls."""

    __slots__ = ("count", "reason", "fixed", "_omp", "_mkl")

    def __init__(self, count: int | None, reason: str, *, small: bool = False, fixed: bool = False) -> None:
        self.count = count  # None: the calling thread's PyTorch setting
        self.reason = reason
        self.fixed = fixed  # every call runs on count, shared cores or not
        setters = _setters()
        self._omp: Callable[[int], None] | None = setters[0] if setters is not None else None
        self._mkl: Callable[[int], int] | None = setters[1] if setters is not None else None
        if small:
            self._mkl = None  # MKL runs products this small on one thread by itself: one call in and out less

    @classmethod
    def choose(cls, requested: int | None, plan: Plan, steps: Sequence, *, compiled: bool = False) -> Threads:
        if compiled:
            count = min(requested or torch.get_num_threads(), cores())
            return cls(count, "num_threads, fixed for compiled code" if requested is not None
                       else "torch.get_num_threads() at load, fixed for compiled code", fixed=True)
        if requested is not None:
            return cls(requested, "num_threads")
        small, written, most = small_method(plan, steps)
        if small:
            return cls(1, f"every operator is small: at most {written} elements written and {most} in all per call",
                       small=True)
        _LOAD.free_cores()  # a first sample, so the first call does not start from nothing
        return cls(None, "torch.get_num_threads(), on the cores other processes leave free")

    def planned(self) -> int:
        """The threads a call from this thread would run on now, with no other call of pterun running."""
        if self._omp is None:
            return torch.get_num_threads()
        if self.count is not None:
            return min(self.count, cores())
        return max(1, min(torch.get_num_threads(), cores(), int(_LOAD.free_cores() + 0.25)))

    def enter(self):
        """Sets this thread's counts for a call; returns what ``exit`` needs to put them back."""
        current = torch.get_num_threads()  # also runs PyTorch's per-thread initialization first
        want = self.count
        if want is None:
            want = max(1, min(current, int(_LOAD.free_cores() + 0.25)))
        running = _HELD.running
        if want > 1 and not self.fixed:
            with _HELD.lock:
                want = max(1, min(want, _CORES - sum(running)))
                running.append(want)
        else:
            running.append(want)
        if want == current or self._omp is None:
            return want, 0, None
        self._omp(want)
        return want, current, (self._mkl(want) if self._mkl is not None else None)

    def exit(self, saved) -> None:
        want, current, mkl = saved
        _HELD.running.remove(want)
        # enter set the counts where it found setters (current, mkl: what they were).
        if current and self._omp is not None:
            self._omp(current)
            if mkl is not None and self._mkl is not None:
                self._mkl(mkl)
