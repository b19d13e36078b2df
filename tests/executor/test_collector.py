"""Loads hold Python's cyclic collector off, and give it back as it was (pterun/core/collection.py)."""

from __future__ import annotations

import gc
import os
import threading
import traceback

import torch

import pterun
from tests.executor import programs


def _load(pte):
    return pterun.Runtime.get().load_program(pte).load_method("forward")


def test_a_load_runs_no_collection_and_leaves_the_collector_on():
    exported = programs.add_mul()
    collections: list[int] = []

    def seen(phase, info):
        if phase == "start":
            # where it ran: inside the load's work (its file reading, its passes), or around it
            inside = any(f"pterun{os.sep}format{os.sep}" in frame.filename
                         or f"pterun{os.sep}executor{os.sep}load" in frame.filename
                         for frame in traceback.extract_stack())
            collections.append(inside)

    assert gc.isenabled(), "premise: the collector is on, as in a user's process"
    thresholds = gc.get_threshold()
    gc.callbacks.append(seen)
    try:
        runtime = pterun.Runtime.get()
        gc.set_threshold(1)  # a collection at every new object, where the collector runs
        [[] for _ in range(3)]
        assert collections, "premise: the collector runs outside a load"
        collections.clear()
        method = runtime.load_program(exported.pte).load_method("forward")
        during = list(collections)
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(seen)
    # Collections as the calls begin and end, where they make objects before and after the hold; none inside.
    assert during and not any(during), "collections inside the load's work"
    assert gc.isenabled()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    assert torch.equal(method.execute([x, y])[0], x + y)


def test_a_collector_the_process_turned_off_stays_off():
    exported = programs.add_mul()
    gc.disable()
    try:
        _load(exported.pte)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_loads_in_several_threads_give_the_collector_back_once_all_end():
    exported = programs.add_mul()
    errors: list[BaseException] = []

    def load():
        try:
            for _ in range(5):
                _load(exported.pte)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert gc.isenabled()
