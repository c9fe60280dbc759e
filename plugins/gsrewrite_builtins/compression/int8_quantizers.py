"""``dynamic-int8`` and ``static-int8``: onnxruntime's quantizers as strategies (gsrewrite adds the selection, the
validation and the report; the quantization is onnxruntime's).

* ``dynamic-int8``: ``quantize_dynamic``'s result (int8 weights per channel or per tensor, activations quantized
  at run time) for the op types it quantizes by default (Conv, MatMul, Attention, LSTM, Gather, Transpose,
  EmbedLayerNormalization; Gemm as MatMul + Add; ``op_types`` to change), the transformer case: embedding tables
  (Gather) included, as onnxruntime does. Models of MatMul/Gemm/Gather are written one weight at a time, the
  same graph and bytes (dynamic_int8.py); the others go to ``quantize_dynamic`` with the weights read in.
* ``static-int8``: ``quantize_static`` in QDQ format with calibration on given inputs (``calibration``: an
  ``.npz`` file or a folder of them, keys = input names) or, without them, on generated inputs; for CNNs.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from gsrewrite.plugin_api import Tolerance, UsageError, is_full, load_model, save_model, writing
from gsrewrite_builtins.compression.common import Compressed, named_copy, node_names, non_finite_weights


class _QuietAdvice(logging.Filter):
    """onnxruntime's quantizers log advice on the root logger ("Please consider to run pre-processing..."):
    gsrewrite's output stays its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("Please consider")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No advice on the root logger, nothing on stdout, and onnxruntime's own log (its calibration sessions)
    limited to fatal errors: a failure is reported once, as one line, by gsrewrite."""
    import onnxruntime

    advice = _QuietAdvice()
    root = logging.getLogger()
    root.addFilter(advice)
    onnxruntime.set_default_logger_severity(4)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.removeFilter(advice)
        onnxruntime.set_default_logger_severity(2)


def _check(name: str, options: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise UsageError(f"strategy {name!r} has no option {unknown[0]!r} (options: {', '.join(allowed)})")


def _quantized_nodes(before: onnx.ModelProto, after: onnx.ModelProto) -> list[str]:
    kept = {n.name for n in after.graph.node}
    return [n.name for n in before.graph.node if n.name and n.name not in kept]


@dataclass
class DynamicInt8:
    name: str = "dynamic-int8"
    description: str = ("onnxruntime quantize_dynamic with its default op types (MatMul/Gemm, Conv, Gather "
                        "embeddings, ...): int8 weights, activations quantized at run time")
    tolerance: Tolerance = field(default_factory=lambda: Tolerance(min_cosine=0.99, min_agreement=0.98,
                                                                   min_top1=0.98))
    options: tuple[str, ...] = ("op_types", "per_channel", "reduce_range", "exclude", "symmetric")

    #: MatMul/Gather models are quantized weight by weight (dynamic_int8.py), reading each weight through
    #: plugin_api.tensor_values; other models go to onnxruntime's quantizer with their weights read in
    reads_references: bool = True
    #: quantized weights by weight and settings, for the model quantized last (a bisection reuses them)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    _cache_owner: Any = field(default=None, repr=False, compare=False)
    #: (model given, the model quantized: a tied head's FusedMatMul as MatMul of a Transpose)
    _unfused: tuple[Any, Any] = field(default=(None, None), repr=False, compare=False)

    def apply(self, model: onnx.ModelProto, **options: Any) -> Compressed:
        _check(self.name, options, self.options)
        from onnxruntime.quantization.registry import IntegerOpsRegistry

        from gsrewrite_builtins.compression.dynamic_int8 import covers, unfused_heads

        if self._unfused[0] is not model:  # one view per model: a bisection's runs keep the quantized weights
            self._unfused = (model, unfused_heads(model))
        model = self._unfused[1]
        op_types = list(options.get("op_types") or ())  # none: quantize_dynamic's own defaults
        asked = ", ".join(op_types) if op_types else "its defaults: " + ", ".join(IntegerOpsRegistry) + \
            " (Gemm as MatMul + Add)"
        names = node_names(model)
        exclude = set(options.get("exclude") or ())
        why_not = covers(model, names, set(op_types or IntegerOpsRegistry), exclude)
        if why_not is None:
            return self._written(model, names, options, set(op_types or IntegerOpsRegistry), exclude)
        from gsrewrite.plugin_api import materialized

        compressed = self._onnxruntime(named_copy(materialized(model)), op_types, options)
        compressed.notes.insert(0, f"onnxruntime's quantize_dynamic of {asked} (the whole model at once: {why_not})")
        return compressed

    def _written(self, model: onnx.ModelProto, names: list[str], options: dict[str, Any], op_types: set[str],
                 exclude: set[str]) -> Compressed:
        from gsrewrite_builtins.compression.dynamic_int8 import Settings, Writer

        if self._cache_owner is not model:  # the cache holds one model's quantized weights
            self._cache, self._cache_owner = {}, model
        settings = Settings(bool(options.get("per_channel", False)), bool(options.get("reduce_range", False)),
                            bool(options.get("symmetric", True)))
        written = Writer(model, names, settings, op_types, exclude, self._cache).write()
        notes = [f"int8 weights as onnxruntime's quantize_dynamic makes them, written one weight at a time: "
                 f"{len(written.matmuls)} MatMul as MatMulInteger, {len(written.gathers)} Gather table(s) as uint8",
                 *_left_float(written.left_float)]
        return Compressed(written.model, notes, [*written.gathers, *written.matmuls])

    def _onnxruntime(self, model: onnx.ModelProto, op_types: list[str], options: dict[str, Any]) -> Compressed:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        poisoned = non_finite_weights(model)
        with writing("the models onnxruntime's quantizer reads and writes"), \
                tempfile.TemporaryDirectory(prefix="gsrewrite-q-") as folder, _quiet():
            source, target = Path(folder, "in.onnx"), Path(folder, "out.onnx")
            external = _save(model, source)
            try:
                quantize_dynamic(source, target, weight_type=QuantType.QInt8, op_types_to_quantize=op_types,
                                 use_external_data_format=external,
                                 per_channel=bool(options.get("per_channel", False)),
                                 reduce_range=bool(options.get("reduce_range", False)),
                                 nodes_to_exclude=[*(options.get("exclude") or ()), *poisoned],
                                 extra_options={"MatMulConstBOnly": True,
                                                "WeightSymmetric": bool(options.get("symmetric", True))})
            except Exception as exc:  # onnxruntime's quantizer failing on this graph: one line
                if is_full(exc):  # its temp folder is full: said by writing()
                    raise
                raise UsageError(f"onnxruntime's quantize_dynamic failed: {str(exc).splitlines()[0]}") from None
            result = load_model(str(target))
        changed = _quantized_nodes(model, result)
        notes = [*_left_float(poisoned)]
        if any(n.op_type == "ConvInteger" for n in result.graph.node):
            notes.append("Conv runs as ConvInteger, which onnxruntime's CPU provider runs slower than float Conv; "
                         "static-int8 suits CNNs")
        return Compressed(result, notes, changed)


@dataclass
class StaticInt8:
    name: str = "static-int8"
    description: str = "onnxruntime quantize_static, QDQ, calibrated on --calibration inputs (CNNs)"
    tolerance: Tolerance = field(default_factory=lambda: Tolerance(min_cosine=0.98, min_agreement=0.98,
                                                                   min_top1=0.98))
    options: tuple[str, ...] = ("calibration", "op_types", "per_channel", "exclude", "calibration_sets")

    def apply(self, model: onnx.ModelProto, **options: Any) -> Compressed:
        _check(self.name, options, self.options)
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        feeds = list(_calibration_feeds(model, options.get("calibration"), int(options.get("calibration_sets")
                                                                                or 8)))
        from gsrewrite.plugin_api import run_once

        run_once(model, feeds[0])  # one time-limited run first: calibration runs the model many times

        class Reader(CalibrationDataReader):  # type: ignore[misc]
            def __init__(self) -> None:
                self._items = iter(feeds)

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self._items, None)

        op_types = list(options.get("op_types") or ["Conv", "MatMul", "Gemm"])
        model = named_copy(model)  # its quantizer excludes nodes by name
        poisoned = non_finite_weights(model)
        with writing("the models onnxruntime's quantizer reads and writes"), \
                tempfile.TemporaryDirectory(prefix="gsrewrite-q-") as folder, _quiet():
            source, target = Path(folder, "in.onnx"), Path(folder, "out.onnx")
            external = _save(model, source)
            try:
                quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ,
                                use_external_data_format=external,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                op_types_to_quantize=op_types, per_channel=bool(options.get("per_channel", True)),
                                nodes_to_exclude=[*(options.get("exclude") or ()), *poisoned])
            except Exception as exc:
                if is_full(exc):  # its temp folder is full: said by writing()
                    raise
                raise UsageError(f"onnxruntime's quantize_static failed: {str(exc).splitlines()[0]}") from None
            result = load_model(str(target))
        where = "given inputs" if options.get("calibration") else "generated inputs (give --calibration for real data)"
        added = sum(1 for n in result.graph.node if n.op_type == "QuantizeLinear")
        return Compressed(result, [f"QDQ int8, calibrated on {len(feeds)} input set(s) from {where}; "
                                   f"{added} QuantizeLinear node(s)", *_left_float(poisoned)])


def _left_float(poisoned: dict[str, str]) -> list[str]:
    if not poisoned:
        return []
    names = "; ".join(f"{node}: weight {weight!r}" for node, weight in list(poisoned.items())[:5])
    return [f"{len(poisoned)} node(s) left float, their weight holds NaN or infinity: {names}"
            + (" ..." if len(poisoned) > 5 else "")]


def _save(model: onnx.ModelProto, path: Path) -> bool:
    """Write ``model`` for onnxruntime's quantizer; True when it had to go to external data (over 2 GB), which the
    quantizer must then be told (``use_external_data_format``) to read and to write."""
    save_model(model, str(path))
    return any(path.parent.glob(f"{path.name}.data*"))


def _calibration_feeds(model: onnx.ModelProto, source: Any, count: int) -> Iterator[dict[str, np.ndarray]]:
    """The calibration inputs: every ``.npz`` of ``source`` (a file, or a folder's ``*.npz``) through gsrewrite's
    loader (regular files only, all of them sized from their headers against the memory budget before any is
    inflated), else ``count`` generated input sets."""
    if source:
        paths = sorted(Path(source).glob("*.npz")) if os.path.isdir(source) else [Path(source)]
        if not paths:
            raise UsageError(f"--calibration {source}: no .npz file there")
        from gsrewrite.plugin_api import load_npz_files

        yield from load_npz_files(paths, "calibration input")
        return
    from gsrewrite.plugin_api import generated_inputs

    yield from generated_inputs(model, count)
