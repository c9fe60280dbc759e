"""``fp16`` (compute in half precision) and ``bf16`` (weights stored as bfloat16, computed in float).

``fp16`` uses onnxruntime's float16 converter (``onnxruntime.transformers.float16``, the onnxconverter-common
converter onnxruntime ships), with the graph's inputs and outputs kept float32 by default (``keep_io_types``)
and these left in float32: the converter's own list, ops whose precision or range fp16 cannot hold (Range,
the reductions that sum or multiply many values, Pow and Exp-based ops whose results overflow 65504, and
CumSum), plus every node reading a weight outside fp16's range (reported: such weights stay float32 instead of
being clipped). Casts appear only where a float32 region meets a float16 one. Values between 1e4 and 65504 are
kept (the converter's own default would clip them to 1e4).

A mask's fill value is the exception to keeping: exporters fill masked scores with float32's lowest (-3.4e38), a
stand-in for minus infinity. Kept float32 it became -inf at the Cast into the float16 attention, and a query whose
keys are all masked (a padded query row) then gave NaN in GroupQueryAttention, NaN that later steps read back from
the cache (0 x NaN). Small float tensors whose values are in fp16's range or at least :data:`FILL_BEYOND` in
magnitude are written with those at fp16's largest finite magnitude instead, reported. Such a row still differs
from the original's (float32's lowest absorbs every score, 65504 only those below 16: the original attends
uniformly, fp16 does not), which is what the ``unpadded-queries`` contract gives up: fp16 of a GroupQueryAttention
decoder validates under it.

``bf16`` stores each float weight as bfloat16 with a Cast back to float (onnxruntime folds it when the session
loads): half the file, float32 compute, runs wherever the original does.
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import EncodeError
from onnx import helper, numpy_helper

from gsrewrite.plugin_api import Tolerance, UsageError
from gsrewrite_builtins.compression.common import Compressed, consumers, initializer_map, named_copy, unique_name

FP16_MAX = 65504.0
#: a float32 value at least this large in magnitude is a stand-in for infinity (a mask's fill value)
FILL_BEYOND = 1e30
#: the largest tensor (elements) read as fill values
FILL_ELEMENTS = 4096
#: ops kept float32 besides the converter's list
KEEP_FP32 = ("Range", "ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp", "CumSum",
             "Pow", "Exp", "Softplus", "ReduceL1", "Einsum")


@dataclass
class Float16:
    name: str = "fp16"
    description: str = ("float16 weights and compute (inputs/outputs stay float32 by default; range-sensitive "
                        "ops stay float32)")
    tolerance: Tolerance = field(default_factory=lambda: Tolerance(min_cosine=0.999, min_agreement=0.99,
                                                                   min_top1=0.99))
    options: tuple[str, ...] = ("keep_io_types", "exclude", "keep_ops")

    def apply(self, model: onnx.ModelProto, **options: Any) -> Compressed:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise UsageError(f"strategy 'fp16' has no option {unknown[0]!r} (options: {', '.join(self.options)})")
        from onnxruntime.transformers import float16

        keep_io = bool(options.get("keep_io_types", True))
        blocked_nodes = set(options.get("exclude") or ())
        source = named_copy(model)  # the converter blocks nodes by name: name them first
        graph = source.graph
        inits = initializer_map(graph)
        out_of_range: list[str] = []
        fills: dict[str, onnx.TensorProto] = {}  # name -> the tensor as it was (restored after the conversion)
        for tensor in inits.values():
            if tensor.data_type != onnx.TensorProto.FLOAT:
                continue
            values = numpy_helper.to_array(tensor)
            if not values.size or float(np.abs(values).max()) <= FP16_MAX:
                continue
            magnitude = np.abs(values)
            if values.size <= FILL_ELEMENTS and bool(np.all((magnitude <= FP16_MAX) | (magnitude >= FILL_BEYOND))):
                fills[tensor.name] = onnx.TensorProto()
                fills[tensor.name].CopyFrom(tensor)
                clipped = np.clip(values, -FP16_MAX, FP16_MAX).astype(np.float32)
                tensor.CopyFrom(numpy_helper.from_array(clipped, tensor.name))
            else:
                out_of_range.append(tensor.name)
        if out_of_range:
            wanted = set(out_of_range)
            blocked_nodes |= {n.name for n in graph.node if wanted & set(n.input)}
        op_block = [*float16.DEFAULT_OP_BLOCK_LIST, *KEEP_FP32, *(options.get("keep_ops") or ())]
        quiet = logging.getLogger("onnxruntime.transformers.float16")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        def convert(model_in: onnx.ModelProto, shape_infer: bool) -> onnx.ModelProto:
            with contextlib.redirect_stdout(io.StringIO()):
                return float16.convert_float_to_float16(
                    model_in, keep_io_types=keep_io, op_block_list=op_block, node_block_list=sorted(blocked_nodes),
                    disable_shape_infer=not shape_infer, max_finite_val=FP16_MAX)

        try:
            try:
                converted = convert(source, True)
            except (EncodeError, ValueError) as exc:  # over 2 GB: its shape inference serializes the model
                if "serialize" not in str(exc):  # convert without it (validation checks the result, as always)
                    raise
                if source is model:  # without shape inference the converter edits the model it is given
                    source = onnx.ModelProto()
                    source.CopyFrom(model)
                converted = convert(source, False)
        except Exception as exc:  # the converter's failure on an odd graph: one line, nothing written
            raise UsageError(f"the float16 converter failed: {str(exc).splitlines()[0] if str(exc) else exc}") \
                from None
        finally:
            quiet.setLevel(level)
            for name, tensor in fills.items():  # the model given is left as it came
                inits[name].CopyFrom(tensor)
        casts = sum(1 for n in converted.graph.node if n.op_type == "Cast") - \
            sum(1 for n in model.graph.node if n.op_type == "Cast")
        notes = [f"float16 compute; inputs/outputs {'kept float32' if keep_io else 'float16'}; "
                 f"{casts} Cast(s) added at float32/float16 boundaries"]
        kept_ops = sorted({n.op_type for n in model.graph.node if n.op_type in op_block})
        if kept_ops:
            notes.append("kept float32: " + ", ".join(kept_ops))
        if fills:
            notes.append(f"{len(fills)} mask fill value(s) beyond float16's range written as +-{FP16_MAX:g}: "
                         + ", ".join(sorted(fills)[:5]))
        if out_of_range:
            notes.append(f"{len(out_of_range)} weight(s) beyond float16's range kept float32: "
                         + ", ".join(out_of_range[:5]))
        return Compressed(converted, notes)


@dataclass
class BFloat16Weights:
    name: str = "bf16"
    description: str = "weights stored as bfloat16, computed in float32 (a Cast per weight, folded at load)"
    tolerance: Tolerance = field(default_factory=lambda: Tolerance(min_cosine=0.999, min_agreement=0.99,
                                                                   min_top1=0.99))
    options: tuple[str, ...] = ("min_elements",)

    def apply(self, model: onnx.ModelProto, **options: Any) -> Compressed:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise UsageError(f"strategy 'bf16' has no option {unknown[0]!r} (options: {', '.join(self.options)})")
        import ml_dtypes

        min_elements = int(options.get("min_elements") or 1024)
        result = onnx.ModelProto()
        result.CopyFrom(model)
        graph = result.graph
        inits = initializer_map(graph)
        readers = consumers(graph)
        outputs = {o.name for o in graph.output}
        casts: list[onnx.NodeProto] = []
        converted = 0
        for tensor in inits.values():
            if tensor.data_type != onnx.TensorProto.FLOAT or int(np.prod(tensor.dims)) < min_elements \
                    or tensor.name in outputs or not readers.get(tensor.name):
                continue
            values = numpy_helper.to_array(tensor).astype(ml_dtypes.bfloat16)
            stored = unique_name(result, f"{tensor.name}_bf16")
            bf16 = onnx.TensorProto()
            bf16.name = stored
            bf16.data_type = onnx.TensorProto.BFLOAT16
            bf16.dims.extend(tensor.dims)
            bf16.raw_data = values.view(np.uint16).tobytes()
            graph.initializer.append(bf16)
            casts.append(helper.make_node("Cast", [stored], [tensor.name], name=f"{stored}_cast",
                                          to=onnx.TensorProto.FLOAT))
            converted += 1
        keep = {c.output[0] for c in casts}
        remaining = [t for t in graph.initializer if t.name not in keep]
        del graph.initializer[:]
        graph.initializer.extend(remaining)
        nodes = [*casts, *graph.node]
        del graph.node[:]
        graph.node.extend(nodes)
        return Compressed(result, [f"{converted} weight(s) stored as bfloat16"])
