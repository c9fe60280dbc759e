"""The hook implementations of gsrewrite-example (the entry point ``example`` points at this module).

Each dispatch hook returns ``None`` for nodes it does not know, so gsrewrite asks the next plugin.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gsrewrite.plugin_api import OpCost, TensorType, hookimpl
from gsrewrite_example import DOMAIN, OP_TYPE

if TYPE_CHECKING:
    import click
    import onnx_graphsurgeon as gs


def is_my_relu(node: gs.Node) -> bool:
    """Whether ``node`` is ``example.com::MyRelu``."""
    return node.domain == DOMAIN and node.op == OP_TYPE


def _nbytes(tensor: Any) -> int | None:
    import numpy as np

    shape = tensor.shape
    if tensor.dtype is None or shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return math.prod(shape) * np.dtype(tensor.dtype).itemsize


@hookimpl
def gsrewrite_infer_shape(node: gs.Node, context: Any) -> list[TensorType] | None:
    """MyRelu is elementwise: its output has the input's dtype and shape."""
    if not is_my_relu(node):
        return None
    x = node.inputs[0]
    return [(x.dtype, None if x.shape is None else list(x.shape))]


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    """MyRelu has no multiply-accumulates and no weights; it reads its input and writes as much."""
    if not is_my_relu(node):
        return None
    nbytes = _nbytes(node.inputs[0])
    return OpCost(macs=0, params=0, memory_bytes=None if nbytes is None else 2 * nbytes)


@hookimpl
def gsrewrite_cli_commands() -> list[click.Command]:
    """Add ``gsrewrite example-hello``."""
    from gsrewrite_example.cli import example_hello

    return [example_hello]
