"""Built-in compression strategies, registered through ``gsrewrite_register_compression_strategies`` like any
plugin's: ``fp16``, ``bf16`` (float16.py), ``dynamic-int8``, ``static-int8`` (int8_quantizers.py, onnxruntime's
quantizers), ``int8``, ``int4`` (weight_only.py, gsrewrite's own numerics in numerics.py)."""

from __future__ import annotations

from typing import Any

from gsrewrite.plugin_api import hookimpl


@hookimpl
def gsrewrite_register_compression_strategies(registry: Any) -> None:
    from gsrewrite_builtins.compression.float16 import BFloat16Weights, Float16
    from gsrewrite_builtins.compression.int8_quantizers import DynamicInt8, StaticInt8
    from gsrewrite_builtins.compression.weight_only import WeightOnly

    for strategy in (Float16(), BFloat16Weights(), DynamicInt8(), StaticInt8(), WeightOnly(8), WeightOnly(4)):
        registry.add(strategy)
