"""FlatBuffers machinery shared by the file format and the delegate backends: the verifier, union members.

Its own layer, beneath both ``pterun.format`` and ``pterun.backends``, because both read
flatbuffers (programs and data files; XNNPACK and Vulkan graphs) and neither may import the
other: backends never see the format. It is not part of ``pterun.core`` because the format layer
knows no torch, not even through a package it imports, and ``pterun.core`` is torch's vocabulary.
So this package imports nothing but the standard library and ``pterun.errors``.
"""
