from functools import partial

import pytest

from tests.format import programs


def _exported(name: str, export):
    """A session fixture ``name`` holding what ``export()`` exports (once per session)."""
    return pytest.fixture(scope="session", name=name)(lambda: export())


affine = _exported("affine", programs.affine)
stateful = _exported("stateful", programs.stateful)
external = _exported("external", programs.external)
trainable_external = _exported("trainable_external", programs.trainable_external)
sin_inline = _exported("sin_inline", partial(programs.delegated, inline=True))
sin_segment = _exported("sin_segment", partial(programs.delegated, inline=False))
inline_constants = _exported("inline_constants", programs.inline_constants)
