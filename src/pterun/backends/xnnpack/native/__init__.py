"""pterun's native kernels: C sources (native.h says what they promise) and the extension ``_kernels`` that
setup.py builds from them; ``nodes/native.py`` is how the translators call it."""
