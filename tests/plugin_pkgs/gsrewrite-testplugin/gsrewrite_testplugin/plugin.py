"""The test plugin's hook implementations, one section per hook.

``test.domain.Double`` is this plugin's own op: y = 2 * x, same type and shape as x. ONNX inference does not
know it; the shape handler below types its output.
"""

from __future__ import annotations

from importlib import resources
from types import SimpleNamespace
from typing import Any

from gsrewrite.plugin_api import hookimpl, reads

DOMAIN = "test.domain"


# --- gsrewrite_infer_shape ------------------------------------------------------------------------------------
@hookimpl
def gsrewrite_infer_shape(node: Any, context: Any) -> list[tuple[Any, Any]] | None:
    if node.domain != DOMAIN or node.op != "Double":
        return None
    x = node.inputs[0]
    return [(x.dtype, None if x.shape is None else list(x.shape))]


# --- gsrewrite_register_patterns ------------------------------------------------------------------------------
@reads("first")
def first_is_relu(match: Any) -> str | None:
    return None if match.node("first") is not None else "no first Relu"


@hookimpl
def gsrewrite_register_patterns(registry: Any) -> None:
    registry.add_check("testplugin_first_is_relu", first_is_relu)
    registry.add_directory(resources.files("gsrewrite_testplugin") / "patterns")


# --- gsrewrite_register_passes --------------------------------------------------------------------------------
class CountRelus:
    """A pass that changes nothing and says how many Relu nodes it saw (``changes`` stays 0)."""

    name = "testplugin-count-relus"
    description = "The test plugin's pass: counts Relu nodes, changes nothing."
    default = False

    def run(self, graph: Any) -> Any:
        return SimpleNamespace(graph=graph, modified=False, changes=0)


@hookimpl
def gsrewrite_register_passes(registry: Any) -> None:
    registry.add(CountRelus())


# --- gsrewrite_profile_op -------------------------------------------------------------------------------------
@hookimpl
def gsrewrite_profile_op(node: Any, context: Any) -> Any:
    """Double costs one multiply per element (the dims may be symbolic: they multiply like ints)."""
    if node.domain != DOMAIN or node.op != "Double":
        return None
    from gsrewrite.plugin_api import OpCost

    shape = node.inputs[0].shape
    if shape is None:
        return OpCost(macs=None)
    total: Any = 1
    for d in shape:
        total = total * d
    return OpCost(macs=total)


# --- gsrewrite_register_compression_strategies ----------------------------------------------------------------
class HalfWeights:
    """A third-party strategy: float weights rounded to float16 precision and stored back as float32 (the file
    does not shrink; it is here to show the hook, the validation and the report)."""

    name = "testplugin-round16"
    description = "The test plugin's strategy: float weights rounded to float16 precision."
    options = ("min_elements",)

    def __init__(self) -> None:
        from gsrewrite.plugin_api import Tolerance

        self.tolerance = Tolerance(min_cosine=0.999)

    def apply(self, model: Any, **options: Any) -> Any:
        import numpy as np
        import onnx
        from onnx import numpy_helper

        result = onnx.ModelProto()
        result.CopyFrom(model)
        for i, tensor in enumerate(result.graph.initializer):
            if tensor.data_type == onnx.TensorProto.FLOAT and np.prod(tensor.dims) >= options.get("min_elements", 1):
                values = numpy_helper.to_array(tensor).astype(np.float16).astype(np.float32)
                result.graph.initializer[i].CopyFrom(numpy_helper.from_array(values, tensor.name))
        return result


@hookimpl
def gsrewrite_register_compression_strategies(registry: Any) -> None:
    registry.add(HalfWeights())
