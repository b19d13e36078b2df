"""A method's steps written as Python: its own code (generate.py), the pure function torch.compile traces
(functional.py, torch_compile.py), and errors mapped back to the instruction that raised (failures.py)."""
