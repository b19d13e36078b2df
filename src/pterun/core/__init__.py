"""Vocabulary shared by memory, kernels, backends and the executor: devices, dtypes, layouts. No file format."""
