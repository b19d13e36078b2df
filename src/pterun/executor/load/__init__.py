"""A method's load before code generation: values and arenas, delegates, steps, their checks and the passes
that rewrite them (passes.py)."""
