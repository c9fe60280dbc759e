"""``gsrewrite example-hello MODEL``: count the MyRelu nodes of a model, using gsrewrite's API."""

from __future__ import annotations

import click

from gsrewrite_example import OP_TYPE
from gsrewrite_example.plugin import is_my_relu


@click.command("example-hello")
@click.argument("model", type=click.Path(dir_okay=False))
def example_hello(model: str) -> None:
    """Print how many example.com MyRelu nodes MODEL has, and the bytes they touch."""
    import onnx_graphsurgeon as gs

    from gsrewrite.plugin_api import load_model, profile_op

    graph = gs.import_onnx(load_model(model))
    nodes = [node for node in graph.nodes if is_my_relu(node)]
    costs = [profile_op(node, None) for node in nodes]  # answered by this plugin, through gsrewrite
    sizes = [cost.memory_bytes for cost in costs if cost is not None and cost.memory_bytes is not None]
    touched = f"{sum(sizes)} bytes" if len(sizes) == len(nodes) else "unknown bytes"
    click.echo(f"{len(nodes)} {OP_TYPE} node(s) in {model}, {touched} touched")
