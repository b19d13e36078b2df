"""The native kernels (src/pterun/native): one C extension on Python's stable ABI, linked to no
torch, so the wheel serves every Python from 3.11 and every torch pterun supports. Optional: where it cannot be
built (no C compiler), pterun installs without it and runs every program on its PyTorch path."""

from setuptools import Extension, setup

NATIVE = "src/pterun/native"

setup(
    ext_modules=[Extension(
        "pterun.native._kernels",
        sources=[f"{NATIVE}/{name}.c"
                 for name in ("module", "cpu", "quantize", "convert", "qb4w", "q8", "qconv", "qbinary", "qpool",
                              "vunary", "vsoftmax", "sdpa", "fused", "dwconv", "gemm",
                              "cached_attention", "silu", "move", "norm", "fpool", "replay")],
        depends=[f"{NATIVE}/native.h", f"{NATIVE}/vlanes.h"],
        # No contraction of a * b + c into a fused multiply-add the kernels did not ask for: their results
        # must round as XNNPACK's do. Instruction sets beyond the baseline are chosen per function at run time.
        extra_compile_args=["-O3", "-std=c11", "-ffp-contract=off", "-fvisibility=hidden", "-Wall"],
        extra_link_args=["-pthread"],
        libraries=["m"],
        define_macros=[("Py_LIMITED_API", "0x030B0000")],
        py_limited_api=True,
        optional=True,
    )],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
