"""A Griffe extension: the reStructuredText roles in pterun's docstrings (:class:`X`, :meth:`Y`) as code."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|exc|obj):`~?([^`]+)`")


class RolesAsCode(griffe.Extension):
    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
