"""Models the tests share: small configs, random weights, no downloads.

Real models come from libraries we did not write (transformers, ExecuTorch's
own examples), shrunk to a few hundred thousand parameters so each exports in
seconds on two cores. Every builder returns a :class:`Model`: the module (in
eval mode, weights drawn under a fixed seed) and a function making inputs for
a given seed, so a test can export with one set of inputs and run with others.
``MODELS`` maps a name to its builder; ``@builder(...)`` registers one.

Hand-written modules that several tests export (MLPs, convolutional nets)
are in :mod:`tests.support.models.small`.
"""

from tests.support.models import dynamic, examples, language, vision_audio  # noqa: F401 - they register models
from tests.support.models.dynamic import SEQ_LENGTHS
from tests.support.models.registry import MODELS, VOCAB, Model, build, builder, randn, tokens

__all__ = ["MODELS", "SEQ_LENGTHS", "VOCAB", "Model", "build", "builder", "randn", "tokens"]
