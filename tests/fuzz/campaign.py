"""A fuzzing campaign: worker processes run seeds until a deadline, the parent watches them (a crash or a
hang is a finding too), then failures are shrunk and saved as regression specs.

Workers write one JSON line per event to a file of their own; a ``start`` with no
``done`` when the worker died is a crash of that program. Every subprocess runs
``python -m tests.fuzz.campaign <worker|shrink|evaluate> ...``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HANG_SECONDS = 300
ISOLATED = ("crash", "hang")  # kinds whose shrinking runs each candidate in a child process


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "pterun-inductor"))
    return env


def _command(*args) -> list[str]:
    return [sys.executable, "-m", "tests.fuzz.campaign", *map(str, args)]


def _use_cache(directory: Path) -> None:
    from tests.support import exporting

    exporting._ROOT = directory
    directory.mkdir(parents=True, exist_ok=True)


# -- in the workers -------------------------------------------------------------------------------------


def worker(args) -> None:
    _use_cache(Path(args.cache))
    from tests.fuzz.generator import generate
    from tests.fuzz.runner import FAILURE, run

    failures = Path(args.failures)
    index = args.first
    with open(args.events, "a", buffering=1) as events:
        while time.time() < args.deadline:
            seed = args.base + index
            try:
                spec = generate(seed)
            except Exception as exc:  # noqa: BLE001 - a generator bug is reported, not fatal
                events.write(
                    json.dumps(
                        {
                            "event": "done",
                            "seed": seed,
                            "lowering": "-",
                            "status": "failure",
                            "kind": "generator",
                            "detail": repr(exc)[:300],
                            "index": index,
                        }
                    )
                    + "\n"
                )
                index += args.stride
                continue
            for lowering in args.lowerings.split(","):
                events.write(
                    json.dumps({"event": "start", "seed": seed, "lowering": lowering, "index": index}) + "\n"
                )
                (failures / f"{seed}.json").write_text(spec.dumps())  # for a crash, read back by the parent
                outcome = run(spec, lowering)
                if outcome.status != FAILURE:
                    (failures / f"{seed}.json").unlink(missing_ok=True)
                events.write(
                    json.dumps(
                        {
                            "event": "done",
                            "seed": seed,
                            "lowering": lowering,
                            "index": index,
                            "status": outcome.status,
                            "kind": outcome.kind,
                            "detail": outcome.detail,
                            "notes": outcome.notes,
                            "nodes": len(spec.nodes),
                            "seconds": round(outcome.seconds, 2),
                        }
                    )
                    + "\n"
                )
                if outcome.status == FAILURE:
                    (failures / f"{seed}-{lowering}.json").write_text(spec.dumps())
            (failures / f"{seed}.json").unlink(missing_ok=True)
            index += args.stride


def evaluate_isolated(spec, lowering: str, cache: Path, timeout: float = HANG_SECONDS) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(spec.dumps())
    try:
        done = subprocess.run(
            _command("evaluate", f.name, lowering, cache),
            env=_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "failure/hang"
    finally:
        os.unlink(f.name)
    if done.returncode < 0:
        return f"failure/crash:{signal.Signals(-done.returncode).name}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("key=")]
    return lines[-1][4:] if lines else f"failure/crash:exit {done.returncode}"


def evaluate(args) -> None:
    _use_cache(Path(args.cache))
    from tests.fuzz.runner import run
    from tests.fuzz.spec import Spec

    spec = Spec.from_json(json.loads(Path(args.spec).read_text()))
    print(f"key={run(spec, args.lowering).key}", flush=True)


def shrink_one(args) -> None:
    _use_cache(Path(args.cache))
    from tests.fuzz import regression
    from tests.fuzz.runner import run
    from tests.fuzz.shrink import shrink
    from tests.fuzz.spec import Spec

    spec = Spec.from_json(json.loads(Path(args.spec).read_text()))
    isolated = any(args.key.split("/")[-1].startswith(k) for k in ISOLATED)

    def key_of(candidate):
        if isolated:
            return evaluate_isolated(candidate, args.lowering, Path(args.cache))
        return run(candidate, args.lowering).key

    found = key_of(spec)
    if found != args.key:  # classified otherwise now (or flaky): nothing to shrink
        print(f"not-reproduced={found}", flush=True)
        return
    small = shrink(spec, args.key, key_of, seconds=args.seconds, log=lambda m: print(m, flush=True))
    outcome = None if isolated else run(small, args.lowering)
    if outcome is None or outcome.key != args.key:
        from tests.fuzz.runner import Outcome

        status, kind = args.key.split("/", 1)
        outcome = Outcome(status, kind, args.detail)
    status = "executorch" if outcome.status == "executorch-only" else "open"
    path = regression.save(small, args.lowering, outcome, Path(args.out), status=status)
    print(f"saved={path}", flush=True)


# -- the parent -----------------------------------------------------------------------------------------


class Worker:
    def __init__(self, slot: int, first: int, args, work: Path):
        self.slot, self.first = slot, first
        self.events = work / f"events-{slot}-{first}.jsonl"
        self.offset = 0
        self.started: dict | None = None
        self.started_at = 0.0
        command = _command(
            "worker",
            "--first",
            first,
            "--stride",
            args.workers,
            "--base",
            args.seed,
            "--lowerings",
            args.lowerings,
            "--deadline",
            args.deadline,
            "--events",
            self.events,
            "--failures",
            work / "failures",
            "--cache",
            work / "cache",
        )
        with open(work / f"worker-{slot}.log", "a") as log:  # the worker writes to its own copy of the file
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def read(self) -> list[dict]:
        if not self.events.exists():
            return []
        with open(self.events) as f:
            f.seek(self.offset)
            text = f.read()
        complete = text[: text.rfind("\n") + 1]
        self.offset += len(complete)
        out = []
        for line in complete.splitlines():
            event = json.loads(line)
            if event["event"] == "start":
                self.started, self.started_at = event, time.time()
            else:
                self.started = None
                out.append(event)
        return out

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


def campaign(args) -> int:
    work = Path(tempfile.mkdtemp(prefix="pterun-fuzz-"))
    (work / "failures").mkdir()
    start = time.time()
    args.deadline = start + 60 * args.minutes
    results: list[dict] = []
    workers = [Worker(i, i, args, work) for i in range(args.workers)]
    while workers:
        time.sleep(0.5)
        for w in list(workers):
            results += w.read()
            hung = w.started and time.time() - w.started_at > HANG_SECONDS
            if w.process.poll() is None and not hung:
                continue
            if hung:
                w.kill()
            results += w.read()
            workers.remove(w)
            if w.started:  # died (or hung) inside a program
                seed, lowering = w.started["seed"], w.started["lowering"]
                kind = "hang" if hung else f"crash:{_signal_name(w.process.returncode)}"
                results.append(
                    {
                        "event": "done",
                        "seed": seed,
                        "lowering": lowering,
                        "status": "failure",
                        "kind": kind,
                        "detail": f"the worker {'hung' if hung else 'died'} running it",
                    }
                )
                spec_file = work / "failures" / f"{seed}.json"
                if spec_file.exists():
                    spec_file.rename(work / "failures" / f"{seed}-{lowering}.json")
                if time.time() < args.deadline:
                    workers.append(Worker(w.slot, w.started["index"] + args.workers, args, work))
    elapsed = time.time() - start
    saved = _shrink_all(results, args, work)
    print(summary(results, elapsed, args, saved))
    if args.report:
        Path(args.report).write_text(
            json.dumps({"results": results, "seconds": elapsed, "saved": [str(p) for p in saved]}, indent=1)
        )
    if args.keep:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any(r["status"] == "failure" for r in results) else 0


def _signal_name(code) -> str:
    try:
        return signal.Signals(-code).name if code and code < 0 else f"exit {code}"
    except ValueError:
        return f"exit {code}"


def _shrink_all(results: list[dict], args, work: Path) -> list[Path]:
    """Shrinks the first failures of each kind (and a few ExecuTorch-only findings), ``workers`` at a time."""
    jobs, per_kind = [], collections.Counter()
    for r in results:
        if r["status"] == "failure":
            limit = args.shrink_per_kind
        elif r["status"] == "executorch-only":
            limit = args.shrink_executorch
        else:
            continue
        group = (r["lowering"], r["status"], r["kind"])
        spec_file = work / "failures" / f"{r['seed']}-{r['lowering']}.json"
        if r["status"] == "executorch-only":
            from tests.fuzz.generator import generate

            spec_file.write_text(generate(r["seed"]).dumps())
        if per_kind[group] >= limit or not spec_file.exists():
            continue
        per_kind[group] += 1
        jobs.append(
            _command(
                "shrink",
                spec_file,
                r["lowering"],
                f"{r['status']}/{r['kind']}",
                r.get("detail", ""),
                args.shrink_seconds,
                work / "cache",
                args.out,
            )
        )
    saved, running = [], []
    while jobs or running:
        while jobs and len(running) < args.workers:
            running.append(
                subprocess.Popen(
                    jobs.pop(0),
                    cwd=ROOT,
                    env=_env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
        time.sleep(0.5)
        for p in [p for p in running if p.poll() is not None]:
            running.remove(p)
            saved += [Path(line[6:]) for line in p.stdout.read().splitlines() if line.startswith("saved=")]
    return saved


def summary(results: list[dict], seconds: float, args, saved: list[Path]) -> str:
    by_status = collections.Counter(r["status"] for r in results)
    programs = len(results)
    per_lowering = collections.Counter(r["lowering"] for r in results)
    lines = [
        (
            f"fuzz campaign: {seconds / 60:.1f} min, {args.workers} worker(s), seeds from {args.seed}, "
            f"lowerings {args.lowerings}"
        ),
        f"programs run: {programs} (" + ", ".join(f"{k} {v}" for k, v in sorted(per_lowering.items())) + ")",
    ]

    def kinds(status: str) -> str:
        counts = collections.Counter(r["kind"] for r in results if r["status"] == status)
        return ", ".join(f"{k or '-'} {v}" for k, v in counts.most_common())

    discards = by_status["discard"]
    lines.append(
        f"exports discarded: {discards} ({100 * discards / max(programs, 1):.1f}%)"
        + (f": {kinds('discard')}" if discards else "")
    )
    differs = sum(1 for r in results if r["status"] == "agree" and r.get("notes"))
    lines.append(f"agreements: {by_status['agree']} ({differs} where both differ from eager PyTorch)")
    lines.append(
        f"executorch-only (not counted): {by_status['executorch-only']}"
        + (f": {kinds('executorch-only')}" if by_status["executorch-only"] else "")
    )
    lines.append(
        f"failures: {by_status['failure']}" + (f": {kinds('failure')}" if by_status["failure"] else "")
    )
    for r in results:
        if r["status"] == "failure":
            lines.append(f"  seed {r['seed']} {r['lowering']}: {r['kind']}: {r.get('detail', '')[:160]}")
    for path in saved:
        lines.append(f"regression spec: {path}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fuzz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    w = sub.add_parser("worker")
    for name in ("first", "stride", "base"):
        w.add_argument(f"--{name}", type=int, required=True)
    w.add_argument("--deadline", type=float, required=True)
    for name in ("lowerings", "events", "failures", "cache"):
        w.add_argument(f"--{name}", required=True)
    e = sub.add_parser("evaluate")
    e.add_argument("spec")
    e.add_argument("lowering")
    e.add_argument("cache")
    s = sub.add_parser("shrink")
    for name in ("spec", "lowering", "key", "detail"):
        s.add_argument(name)
    s.add_argument("seconds", type=float)
    s.add_argument("cache")
    s.add_argument("out")
    args = parser.parse_args(argv)
    {"worker": worker, "evaluate": evaluate, "shrink": shrink_one}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
