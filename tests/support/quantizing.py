"""PT2E quantization by ExecuTorch's XNNPACK quantizer: export, prepare_pt2e, calibrate, convert_pt2e."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

SCHEMES = {
    "per-channel": {"is_per_channel": True},
    "per-tensor": {"is_per_channel": False},
    "dynamic": {"is_per_channel": True, "is_dynamic": True},
}


class _Holder(torch.nn.Module):
    # eval() on a converted graph module returns None; the exporter expects the module back.
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


def _by_range(config):
    """The config with static activations observed by their range (MinMaxObserver) where XNNPACK's config runs
    a histogram search: the same program, its scales from the calibration's extremes. The search took 0.8 s
    per observer in convert_pt2e (over two minutes for the suite's MobileNetV2), and what the tests check is
    the integer arithmetic at whatever scales the program holds."""
    from dataclasses import replace

    from torchao.quantization.pt2e.observer import HistogramObserver, MinMaxObserver

    def observed(spec):
        made = getattr(getattr(spec, "observer_or_fake_quant_ctr", None), "p", None)  # with_args' partial
        if spec is None or spec.is_dynamic or getattr(made, "func", None) is not HistogramObserver:
            return spec
        return replace(spec, observer_or_fake_quant_ctr=MinMaxObserver.with_args(**made.keywords))

    return replace(config, input_activation=observed(config.input_activation),
                   output_activation=observed(config.output_activation))


def quantize(
    module: torch.nn.Module, example: tuple, calibration: Iterable[tuple], scheme: str,
    after: Callable[[torch.fx.GraphModule], torch.fx.GraphModule] | None = None, *, by_range: bool = True,
) -> torch.nn.Module:
    """``module`` quantized with the symmetric config ``SCHEMES[scheme]``, calibrated on each input tuple of
    ``calibration``, and (``after`` may rewrite the converted graph first) ready for the exporter.
    ``by_range=False`` keeps XNNPACK's histogram observers (the benchmarks export as users do)."""
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = xnnpack_quantizer.get_symmetric_quantization_config(**SCHEMES[scheme])
    quantizer = xnnpack_quantizer.XNNPACKQuantizer().set_global(_by_range(config) if by_range else config)
    prepared = prepare_pt2e(torch.export.export(module, example).module(), quantizer)
    for inputs in calibration:
        prepared(*inputs)
    converted = convert_pt2e(prepared)
    if after is not None:
        converted = after(converted)
    allow_exported_model_train_eval(converted)  # the exporter puts the module in eval mode
    return _Holder(converted)
