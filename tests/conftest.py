import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Exporting uses torch.compile machinery; keep its caches inside the run.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "pterun-inductor"))


def pytest_addoption(parser):
    parser.addoption(
        "--no-skips", action="store_true",
        help="fail every test that skips (the GPU suite uses it: a skipped GPU test is a test that did not run)",
    )


_PROGRAMS = pytest.StashKey[Path]()


class _SharedPrograms:
    """One directory of exported programs for a run and all its xdist workers (made by the controller),
    so each program is exported once per run, not once per worker. Gone when the run ends."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="pterun-programs-"))

    def pytest_configure_node(self, node) -> None:  # xdist: what a worker is started with
        node.workerinput["pterun_programs"] = str(self.directory)


def pytest_configure(config):
    from tests.support import exporting

    if os.environ.get("PTERUN_PROGRAM_CACHE"):
        return  # the developer's cache, kept across runs
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        exporting.use_root(Path(workerinput["pterun_programs"]))
        return
    shared = _SharedPrograms()
    exporting.use_root(shared.directory)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(shared, "pterun-shared-programs")
    config.stash[_PROGRAMS] = shared.directory


def pytest_unconfigure(config):
    directory = config.stash.get(_PROGRAMS, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    import importlib.util

    import torch

    for item in items:
        # A test of an optional extra skips where the extra is not installed, even under --no-skips: the GPU
        # machine cannot hold every extra (Ray's wheel is larger than what travels there).
        for marker in item.iter_markers("needs_package"):
            name, reason = marker.args
            try:
                found = importlib.util.find_spec(name) is not None
            except ModuleNotFoundError:  # its parent package is missing
                found = False
            if not found:
                item.add_marker(pytest.mark.skip(reason=reason))
                item.user_properties.append(("optional", True))

    # Files holding a test marked slow go first (the sort is stable: every file stays whole and in order):
    # xdist hands files to its workers in this order, so the long ones start at once instead of ending the
    # run on one worker while the other waits.
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)
    if torch.cuda.is_available():
        return
    no_gpu = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu-tests.sh runs these on a GPU machine)")
    for item in items:
        # The marker, not the keyword: keywords include the names of the folders above a test, so a checkout
        # under a folder named "gpu" would skip every test.
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(no_gpu)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and not hasattr(report, "wasxfail") and item.config.getoption("--no-skips")
            and ("optional", True) not in item.user_properties):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"skipped, and --no-skips forbids skipping: {reason}"
