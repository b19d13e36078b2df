"""What a call of a loaded method runs: Method, its inputs' binders, output slots, the call's guard, precision and
threads, and CUDA graphs."""
