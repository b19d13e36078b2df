"""A worker process that loads, describes and runs program files for the malformed-input tests.

A test in the pytest process could not survive the three failures a mutated
file may cause, so the worker observes them instead:

* a crash (a segfault in a reader or kernel) ends the worker;
* a hang is a reply that does not come within ``PTERUN_FUZZ_TIMEOUT`` seconds;
* a huge allocation fails: the worker runs under ``RLIMIT_AS`` set to its
  address space after warming up plus ``PTERUN_FUZZ_HEADROOM_MB`` (1 GiB). A
  limit on address space rather than a watch on resident memory catches an
  allocation at the moment it is asked for (lazily backed memory maps and
  ``torch.empty`` would otherwise succeed and go unnoticed until touched), and
  it makes the failure deterministic: the allocation is refused and must come
  back as ``MemoryAllocationFailed`` or another PteError. The worker runs with
  one thread and one malloc arena so its address space stays predictable.

Each file is loaded at the verification levels a request names, and every
method of it loaded, described and executed. Besides a crash or a hang, two
more outcomes are reported as errors: a ``PteError`` with code ``Internal``
(an exception a kernel or backend did not expect: a check missing at load),
and a write into the caller's memory (the program's ``bytes`` changed after
the run; a program read from a read-only map would fault instead).

:class:`Worker` is the test's end: it starts this file as ``python
malformed_worker.py --worker SCRATCH`` and sends it pickled requests.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = float(os.environ.get("PTERUN_FUZZ_TIMEOUT", "30"))
HEADROOM_MB = int(os.environ.get("PTERUN_FUZZ_HEADROOM_MB", "1024"))


def _describe(meta) -> None:
    """Everything MethodMeta reports, so its readers see the mutated plan too."""
    from pterun.errors import PteError

    for i in range(meta.num_inputs()):
        meta.input_tag(i)
        try:
            meta.input_tensor_meta(i).nbytes()
        except PteError:  # not a tensor
            pass
    for i in range(meta.num_outputs()):
        meta.output_tag(i)
    for i in range(meta.num_memory_planned_buffers()):
        meta.memory_planned_buffer_size(i)
        meta.memory_planned_buffer_device(i)
    for i in range(meta.num_backends()):
        meta.get_backend_name(i)
    meta.operators()
    repr(meta)


def _exercise(runtime, pte, ptd: list, level: int, inputs: dict) -> tuple:
    """Loads a program and runs every method; returns ("ok", outputs) or ("pte", code, message)."""
    from pterun.errors import PteError

    results = {}
    try:
        program = runtime.load_program(pte, verification=level, data_path=ptd or None)
        for name in sorted(program.method_names):
            try:
                _describe(program.metadata(name))
                method = program.load_method(name)
                results[name] = method.execute(list(inputs.get(name, ())))
            except PteError as exc:
                results[name] = ("pte", int(exc.code), str(exc))
    except PteError as exc:
        return ("pte", int(exc.code), str(exc))
    return ("ok", results)


def _verdict(outcome: tuple, codes) -> tuple:
    """The outcome, or ("error", why) for an invalid error code or an Internal one (a check missing at load)."""
    errors = [outcome] if outcome[0] == "pte" else [r for r in outcome[1].values() if isinstance(r, tuple)]
    for _, code, message in errors:
        if code not in set(codes) or code == 0:
            return ("error", f"invalid error code {code}: {message}")
        if code == codes.Internal:
            return ("error", f"Internal: {message}")
    return outcome


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _worker_main() -> None:
    import hashlib
    import mmap
    import resource

    # Replies go to the original stdout; anything a library prints goes to stderr.
    reply = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    sys.path.insert(0, str(REPO))

    import torch

    from pterun.errors import ErrorCode
    from pterun.runtime import Runtime
    from tests.format import build
    from tests.format.programs import sin_backend_registries

    runtime = Runtime(sin_backend_registries())
    # Warm up (kernel tables, code generation, torch's lazy state) before the
    # limit is set, so that the headroom is what the files get.
    warm = build.program([build.add_constant(build.Tensor(data_buffer_idx=1))],
                         constant_buffers=[b"", build.floats(1, 2)])
    runtime.load_program(warm).load_method("forward").execute([torch.ones(2)])
    limit = _address_space() + (HEADROOM_MB << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    scratch = Path(sys.argv[2])
    count = 0
    while True:
        head = requests.read(8)
        if len(head) < 8:
            return
        request = pickle.loads(requests.read(struct.unpack("<Q", head)[0]))
        outcomes = []
        for level in request["levels"]:
            pte, ptd = request["pte"], list(request["ptd"])
            written = []
            if request.get("source") == "path":
                # A new name each time: rewriting a file that a mapping still covers could fault it.
                count += 1
                pte = scratch / f"program-{count}.pte"
                pte.write_bytes(request["pte"])
                for i, data in enumerate(request["ptd"]):
                    ptd[i] = scratch / f"data-{count}-{i}.ptd"
                    ptd[i].write_bytes(data)
                written = [pte, *ptd]
            elif request.get("source") == "memoryview":
                pte = memoryview(bytearray(pte))
            elif request.get("source") == "readonly":
                # A read-only map: a write into the program's bytes faults (and the worker dies).
                count += 1
                path = scratch / f"program-{count}.pte"
                path.write_bytes(request["pte"])
                with open(path, "rb") as f:
                    pte = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
                written = [path]
            digest = hashlib.sha256(pte).digest() if isinstance(pte, bytes) else None
            try:
                outcome = _verdict(_exercise(runtime, pte, ptd, level, request["inputs"]), ErrorCode)
                if digest is not None and hashlib.sha256(pte).digest() != digest:
                    outcome = ("error", "the program's bytes were written")
                elif request.get("summary") and outcome[0] == "ok":
                    # Outputs of a mutated file are not compared (and may be of dtypes that do not pickle).
                    outcome = ("ok", {k: r if isinstance(r, tuple) else "ran" for k, r in outcome[1].items()})
            except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails on it
                outcome = ("error", "".join(traceback.format_exception(exc)))
            for path in written:
                path.unlink()
            outcomes.append(outcome)
        payload = pickle.dumps({"outcomes": outcomes, "address_space": _address_space()})
        reply.write(struct.pack("<Q", len(payload)) + payload)


class WorkerDied(Exception):
    pass


class Worker:
    """A worker process that answers one request at a time, restarted when it dies or hangs."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - kept open across restarts, closed by close()
        self.scratch = tempfile.TemporaryDirectory(prefix="pterun-fuzz-")

    def start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="1",
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        self.stderr.seek(0)
        self.stderr.truncate()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", self.scratch.name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, env=env, cwd=str(REPO),
        )

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        self.stop()
        self.stderr.close()
        self.scratch.cleanup()

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-3000:]

    def ask(self, request: dict, timeout: float = TIMEOUT) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
            timeout += 120  # importing torch and warming up, on a busy machine
        proc = self.proc
        payload = pickle.dumps(request)
        try:
            proc.stdin.write(struct.pack("<Q", len(payload)) + payload)
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        deadline = time.monotonic() + timeout
        buf = b""
        need = 8
        fd = proc.stdout.fileno()
        while len(buf) < need:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                self.stop()
                raise WorkerDied(f"no reply within {timeout:.0f} s (a hang)")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = proc.wait()
                tail = self.stderr_tail()
                self.proc = None
                what = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
                raise WorkerDied(f"the worker died ({what}); its stderr ends:\n{tail}")
            buf += chunk
            if len(buf) >= 8 and need == 8:
                need = 8 + struct.unpack_from("<Q", buf)[0]
        return pickle.loads(buf[8:need])


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _worker_main()
