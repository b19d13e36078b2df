"""The worker itself: it reports a crash, a hang and a huge allocation instead of suffering them."""

from __future__ import annotations

import os
import signal

import pytest

from tests.executor.malformed.subjects import Mutation, le
from tests.support.malformed_worker import WorkerDied


def test_the_worker_reports_a_crash_and_a_hang(worker, subjects):
    s = subjects["stateful"]
    request = {"pte": s.pte, "ptd": [], "inputs": s.inputs, "levels": [0, 1]}
    worker.ask(request)
    os.kill(worker.proc.pid, signal.SIGSEGV)
    with pytest.raises(WorkerDied, match="SIGSEGV"):
        worker.ask(request)
    worker.ask(request)  # restarted
    with pytest.raises(WorkerDied, match="a hang"):
        worker.ask(request, timeout=0)  # no time to answer
    assert worker.ask(request)["outcomes"][0][0] == "ok"


def test_the_worker_catches_a_huge_allocation(worker, subjects):
    """The memory guard works: an arena far over the headroom is refused, and reported as a PteError."""
    s = subjects["stateful-dense"]
    sizes = [f for f in s.map.named("pte.ExecutionPlan.non_const_buffer_sizes[]")][1]
    mutated = Mutation("pte", [("write", sizes.pos, le(64 << 30, 8))]).apply(s.pte)
    reply = worker.ask({"pte": mutated, "ptd": [], "inputs": s.inputs, "levels": [0, 1]})
    for outcome in reply["outcomes"]:
        assert outcome[0] == "ok"
        failures = [r for r in outcome[1].values() if isinstance(r, tuple)]
        assert any(code == 0x21 and "cannot allocate planned buffer" in msg for _, code, msg in failures), outcome
    assert reply["address_space"] < (64 << 30)
