"""The graph layer: everything the rewrite engine and the simplifier share, and nothing of either.

* :mod:`~gsrewrite.graph.core`: import/export between ONNX and onnx-graphsurgeon (one exporter), toposort,
  cleanup, constant access, name sources;
* :mod:`~gsrewrite.graph.conversion`: import with shape inference, export merging opsets;
* :mod:`~gsrewrite.graph.evaluate`, :mod:`~gsrewrite.graph.fold`, :mod:`~gsrewrite.graph.fold_cost`: evaluating
  nodes on constants and folding them within a budget;
* :mod:`~gsrewrite.graph.rewiring`, :mod:`~gsrewrite.graph.noops`, :mod:`~gsrewrite.graph.twins`,
  :mod:`~gsrewrite.graph.constant_nodes`: small edits both layers make (bypassing no-ops, merging equal nodes,
  Constant nodes to initializers);
* :mod:`~gsrewrite.graph.subgraph`: the self-contained part of a model between tensors (``extract``).

What a tensor's shape is (ONNX's inference, the plugin shape handlers, the symbolic walk) is the layer below,
:mod:`gsrewrite.shapes`; graph import asks it once (:func:`gsrewrite.shapes.inference.infer_shapes`).

Layers: the ``gsrewrite layers`` contract of ``[tool.importlinter]`` in pyproject.toml (docs/design.md, "Layers").
"""
