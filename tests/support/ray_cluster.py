"""One local Ray cluster per test session, its workers able to import pterun and the tests package."""

from __future__ import annotations

import logging
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start(**resources):
    import ray

    path = os.pathsep.join(p for p in (str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}}, **resources)
    return ray
