import os

import pytest

# Exporting uses torch.compile machinery; keep its caches inside the run.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "pterun-inductor"))


def pytest_addoption(parser):
    parser.addoption(
        "--no-skips", action="store_true",
        help="fail every test that skips (the GPU suite uses it: a skipped GPU test is a test that did not run)",
    )


def pytest_collection_modifyitems(config, items):
    import torch

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
    if report.skipped and not hasattr(report, "wasxfail") and item.config.getoption("--no-skips"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"skipped, and --no-skips forbids skipping: {reason}"
