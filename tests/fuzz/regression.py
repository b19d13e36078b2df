"""Regression specs: a shrunk failing program saved as JSON under tests/fuzz/regressions/, replayed by
test_regressions.py.

``status`` says what the replay expects: ``fixed`` (pterun now agrees with
ExecuTorch), ``open`` (a pterun bug not fixed yet: the test is an expected failure
that turns into an error once the bug is fixed, so the file gets updated), or
``executorch`` (ExecuTorch's own bug: pterun agrees with eager PyTorch, and the
replay checks it still does).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from tests.fuzz.runner import Outcome
from tests.fuzz.spec import Spec

DIRECTORY = Path(__file__).resolve().parent / "regressions"


def save(
    spec: Spec,
    lowering: str,
    outcome: Outcome,
    directory: Path = DIRECTORY,
    *,
    status: str = "open",
    reason: str = "",
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(spec.dumps().encode()).hexdigest()[:10]
    kind = re.sub(r"[^a-z0-9]+", "-", outcome.kind.lower()).strip("-") or outcome.status
    path = directory / f"{lowering}-{kind}-{digest}.json"
    data = {
        "lowering": lowering,
        "found": outcome.key,
        "detail": outcome.detail,
        "status": status,
        "reason": reason,
        "program": spec.describe().splitlines(),
        "spec": spec.to_json(),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def load(path: Path) -> tuple[dict, Spec]:
    data = json.loads(Path(path).read_text())
    return data, Spec.from_json(data["spec"])


def all_files(directory: Path = DIRECTORY) -> list[Path]:
    return sorted(directory.glob("*.json")) if directory.exists() else []
