"""Node translators by family; ``TRANSLATORS`` maps each supported XNNPACK node type to its translator."""

from pterun.backends.xnnpack.nodes import conv, convert, elementwise, layout, linear, pooling

TRANSLATORS = {
    **elementwise.TRANSLATORS,
    **linear.TRANSLATORS,
    **conv.TRANSLATORS,
    **pooling.TRANSLATORS,
    **layout.TRANSLATORS,
    **convert.TRANSLATORS,
}

__all__ = ["TRANSLATORS"]
