"""``gsrewrite`` with the profiler's onnx-graphsurgeon views built one of two ways (issue 26 item 3).

``gsrewrite/profiling/costs.py`` builds the ``gs.Node`` / ``gs.Variable`` / ``gs.Constant`` a profiler reads by
setting their fields directly (``_light_node``, ``_light_variable``, ``_light_constant``), skipping the
producer/consumer links graphsurgeon's constructors make. ``public`` swaps in the public constructors; ``light``
runs the code as shipped. Time both as whole processes, interleaved (benchmarks/results/code_figures.md)::

    python benchmarks/gs_views.py light profile MODEL      # as shipped
    python benchmarks/gs_views.py public profile MODEL     # gs.Node(...), gs.Variable(...), gs.Constant(...)
"""

from __future__ import annotations

import sys
from typing import Any

import onnx
import onnx_graphsurgeon as gs


def _node(node: onnx.NodeProto, name: str, op_type: str, domain: str, inputs: list[gs.Tensor],
          outputs: list[gs.Tensor]) -> gs.Node:
    from gsrewrite.profiling import costs

    attrs = {a.name: costs._attr(a) for a in node.attribute}
    return gs.Node(op_type, name, attrs, inputs=inputs, outputs=outputs, domain=domain or None)


def _constant(name: str, tensor: onnx.TensorProto) -> gs.Constant:
    from gsrewrite.profiling import costs

    return gs.Constant(name, costs.LazyValues(tensor))


def _variable(name: str, dtype: Any, shape: list[Any] | None) -> gs.Variable:
    return gs.Variable(name, dtype=dtype, shape=shape)


def main() -> None:
    mode, argv = sys.argv[1], sys.argv[2:]
    if mode == "public":
        from gsrewrite.profiling import costs

        costs._light_node, costs._light_constant, costs._light_variable = (  # type: ignore[assignment]
            _node, _constant, _variable)
    elif mode != "light":
        raise SystemExit("usage: gs_views.py light|public COMMAND ...")
    from gsrewrite.cli import main as cli

    cli(argv, prog_name="gsrewrite")


if __name__ == "__main__":
    main()
