"""The shape engine: what every tensor's type and shape is, as integers or symbolic expressions in the input dims.

* :mod:`~gsrewrite.shapes.symdim`: symbolic dims (canonical integer polynomials, ``//``/``%``/max/min atoms);
* :mod:`~gsrewrite.shapes.values`: the values of the small tensors shape arithmetic computes (integers, exact
  fractions), and :mod:`~gsrewrite.shapes.rules`: each standard op's output shapes and values from its inputs';
* :mod:`~gsrewrite.shapes.walk`: the symbolic walk over a model (If/Loop/Scan bodies too), with the plugin shape
  handlers and ONNX's inference as fallback (:mod:`~gsrewrite.shapes.handlers`); it marks what it found only by
  assuming something of the sizes (``Info.exact``);
* :mod:`~gsrewrite.shapes.graph_values`: the same rules over an onnx-graphsurgeon graph as the simplify passes
  leave it, with no assumption (every value holds for every size: the simplifier folds them), one walk per graph
  kept current;
* :mod:`~gsrewrite.shapes.inference`: ``infer_shapes``, the one entry point graph import and ``extract`` use
  (ONNX's inference and the handlers, the walk filling what they leave unknown);
* :mod:`~gsrewrite.shapes.input_shapes`: ``--input-shape``, the one grammar and parser of every command;
* :mod:`~gsrewrite.shapes.dim_relations`, :mod:`~gsrewrite.shapes.dim_minimums`: what the walk proves about the
  input dims (dims that follow from others; the smallest sizes the ops accept), for validation's inputs.

It walks ONNX protos and onnx-graphsurgeon graphs (a shape handler gets an onnx-graphsurgeon node, as the hook
says) and imports nothing of :mod:`gsrewrite.graph` (conversion, folding, rewiring), which sits above it
(docs/design.md, "Layers").
"""
