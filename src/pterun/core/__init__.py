"""Vocabulary shared by memory, kernels, backends and the executor: devices, dtypes, layouts (and the collector
held off during loads). No file format."""
