"""The WGSL source of each kernel family: the shared prelude, shared snippets, and placeholders.

A kernel is ``shaders/common.wgsl`` followed by ``shaders/<family>.wgsl``, in
which a line ``#include "_name.wgsl"`` stands for that file of ``shaders/``
(helpers several kernels share: the entry point of one-invocation-per-element
kernels, the broadcasting index walk, workgroup reductions). Each family is
assembled once; a dispatch only fills in its ``${NAME}`` placeholders (element
types, formulas), never shapes, so resizing a graph never makes a new source.
"""

from __future__ import annotations

import importlib.resources
import re
from string import Template

_INCLUDE = re.compile(r'^#include "(_\w+\.wgsl)"$', re.MULTILINE)
_TEMPLATES: dict[str, Template] = {}


def _read(name: str) -> str:
    return importlib.resources.files(__package__).joinpath("shaders", name).read_text()


def source(family: str) -> str:
    """The family's WGSL with the prelude and its includes in place, placeholders left as they are."""
    text = _INCLUDE.sub(lambda m: _read(m.group(1)), _read(f"{family}.wgsl"))
    return _read("common.wgsl") + "\n" + text


def render(family: str, **subs) -> str:
    """The WGSL for ``family`` with its ``${NAME}`` placeholders filled in."""
    template = _TEMPLATES.get(family)
    if template is None:
        template = _TEMPLATES[family] = Template(source(family))
    return template.substitute(**subs)
