"""Vocabulary shared by every layer above the format: devices, dtypes, layouts."""
