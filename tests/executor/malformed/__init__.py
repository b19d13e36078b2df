"""Malformed programs and data files: every failure is a PteError, never a crash, hang or huge allocation.

Real exported programs are mutated where it matters: truncated at the
boundaries of the headers, tables, vectors and segments; bits flipped in the
headers, in offsets and in indices; bytes overwritten at random; sizes
(tensor sizes, arena sizes, segment offsets and sizes, vector lengths) set to
huge values; indices retargeted at other values of the file. Each mutated
file is loaded at both verification levels, and every method of it loaded,
described and executed, in a worker process (tests/support/malformed_worker.py)
that reports a crash, a hang, a huge allocation, an ``Internal`` error and a
write into the caller's bytes as failures. Each file either loads or raises a
:class:`pterun.errors.PteError` carrying a real ExecuTorch error code.

After the tests the unmodified programs must still load and give the outputs
they gave before any mutated file was read.

``PTERUN_FUZZ_EXAMPLES`` sets the number of examples per test (default 60:
the whole directory runs in about a minute on two cores); raise it for longer
runs.
"""
