"""ExecuTorch's WebGPU tests that fail on pterun, each with its reason (test id -> reason).

Ids are an op_tests case's ``op/case`` or an ops/ test's ``module.Class.method``. Every one left fails
before pterun runs anything: upstream's own export or assertions fail in ExecuTorch 1.5.1's wheel.
"""

from __future__ import annotations

_NOT_DELEGATED = "export side: the Vulkan partitioner of ExecuTorch 1.5.1 leaves the program on the CPU"

FAILURES: dict[str, str] = {
    "test_adamw.TestAdamwStep.test_export_delegates": (
        "export side: torch.export cannot functionalize et_vk::adamw_step (a custom operator returning its "
        "mutated arguments)"
    ),
    "test_conv_with_clamp.ConvWithClampTest.test_export_delegates": _NOT_DELEGATED + " (conv_with_clamp)",
    "test_q4gsw_requant.TestQ4gswRequant.test_export_delegates": (
        "export side: et_vk::q4gsw_requant has no out variant, so to_executorch fails"
    ),
    "test_quantized_linear_backward.TestQuantizedLinearBackward.test_op_matches_fp64_golden": (
        "export side: torchao's IntxUnpackedToInt8Tensor does not implement et_vk.linear_q4gsw_backward"
    ),
    "test_reduce.TestReduce.test_export_delegates": _NOT_DELEGATED + " (sum and mean of a middle dimension)",
    "test_to_copy.ToCopyTest.test_float_passthrough_delegates": _NOT_DELEGATED + " (a float-to-float copy)",
}
