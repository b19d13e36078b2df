"""Whether this run is CI's (``CI=true``, as CI services set it): there, what ``.ci/run`` installs must be found,
so a test that needs it fails instead of skipping."""

from __future__ import annotations

import os
from collections.abc import Mapping


def on_ci(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get("CI", "").strip().lower() in ("true", "1")
