"""The test plugin's hook implementations, one section per hook.

``test.domain.Double`` is this plugin's own op: y = 2 * x, same type and shape as x. ONNX inference does not
know it; the shape handler below types its output.
"""

from __future__ import annotations

from typing import Any

from gsrewrite.plugin_api import hookimpl

DOMAIN = "test.domain"


# --- gsrewrite_infer_shape ------------------------------------------------------------------------------------
@hookimpl
def gsrewrite_infer_shape(node: Any, context: Any) -> list[tuple[Any, Any]] | None:
    if node.domain != DOMAIN or node.op != "Double":
        return None
    x = node.inputs[0]
    return [(x.dtype, None if x.shape is None else list(x.shape))]
