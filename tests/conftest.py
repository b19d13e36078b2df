import os

# Exporting uses torch.compile machinery; keep its caches inside the run.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "pterun-inductor"))
