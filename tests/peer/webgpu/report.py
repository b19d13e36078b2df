"""A run of ExecuTorch's WebGPU tests (scripts/webgpu-suite.sh's JUnit XML) summarized: the counts, and
each failing test with its reason, grouped by the operator pterun's WebGPU backend lacks where that is
the reason.

    python -m tests.peer.webgpu.report webgpu-suite.xml
"""

from __future__ import annotations

import collections
import re
import sys
import xml.etree.ElementTree as ET

_MISSING = re.compile(r"unsupported op: ([\w.]+)(?: \(and ([^)]*)\))?")


def outcomes(path: str) -> list[tuple[str, str, str]]:
    """(test id, outcome, reason) for every test case of the report."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        test = name if name.startswith("test_op_case") else f"{cls}::{name}"
        outcome, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error"}.get(child.tag, "skipped")
                if child.tag == "skipped" and child.get("type") == "pytest.xfail":
                    outcome = "xfailed"
                reason = (child.get("message") or child.text or "").strip()
        rows.append((test, outcome, reason))
    return rows


def main(path: str) -> None:
    rows = outcomes(path)
    counts = collections.Counter(outcome for _, outcome, _ in rows)
    print(f"{len(rows)} tests: " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))
    missing: collections.Counter = collections.Counter()
    for test, outcome, reason in rows:
        if outcome in ("failed", "error", "xfailed"):
            found = _MISSING.search(reason)
            if found:
                for op in [found.group(1), *(found.group(2) or "").split(", ")]:
                    if op:
                        missing[op] += 1
            print(f"{outcome:8} {test}: {reason.splitlines()[0][:300] if reason else ''}")
    if missing:
        print("operators the failures lack (tests each blocks):")
        for op, n in missing.most_common():
            print(f"  {n:4} {op}")


if __name__ == "__main__":
    main(sys.argv[1])
