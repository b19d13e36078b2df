"""Kernel sources are assembled from the shared prelude and snippets (no GPU needed)."""

from __future__ import annotations

import importlib.resources
import re

from pterun.backends.webgpu import wgsl

SHADERS = importlib.resources.files("pterun.backends.webgpu").joinpath("shaders")
SNIPPETS = sorted(p.name for p in SHADERS.iterdir() if p.name.startswith("_") and p.name.endswith(".wgsl"))
FAMILIES = sorted(
    p.name.removesuffix(".wgsl")
    for p in SHADERS.iterdir()
    if p.name.endswith(".wgsl") and not p.name.startswith("_") and p.name != "common.wgsl"
)


def test_every_include_is_resolved_and_every_snippet_used():
    assert len(FAMILIES) >= 19 and SNIPPETS, "premise: the kernels and their snippets are next to each other"
    used = set()
    for family in FAMILIES:
        own = SHADERS.joinpath(f"{family}.wgsl").read_text()
        used.update(re.findall(r'^#include "(.*)"$', own, re.MULTILINE))
        source = wgsl.source(family)
        assert "#include" not in source, f"{family}: an include is left unresolved"
        assert source.count("fn main(") == 1, f"{family}: one entry point"
    assert sorted(used) == SNIPPETS
