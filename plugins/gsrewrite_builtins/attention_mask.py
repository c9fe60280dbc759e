"""Check and computations of ``attention-mask-index``: an additive padding bias back to the raw 2-D mask.

Exporters turn the ``attention_mask`` input ([batch, sequence] of 1/0) into an additive score bias ([batch, 1,
1 or sequence, sequence] of 0 / a very negative value) with a dozen small nodes whose spelling changes with every
exporter and library version (Unsqueeze/Cast/Sub/Mul, or Expand/Where, or a Range/GreaterOrEqual/And grid).
onnxruntime's Attention takes the raw mask itself (``mask_index`` [batch, sequence], int32) and uses a faster
kernel for it. Rather than one template per spelling, the check proves what the bias computes: the nodes that
produce it may read only constants, that one 2-D integer/bool graph input, and the *shapes* of other inputs;
the check then runs those nodes in onnxruntime on masks with holes in different places and requires the
padding rule exactly: 0 where the mask is 1, one fixed very negative value where it is 0, the same for every
query row and head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.engine.legalize import legalize
from gsrewrite.engine.match import CheckFailed, Match

#: Most nodes the bias computation may have (exporters use 5-40).
MAX_MASK_NODES = 64
#: A masked position must be at least this negative (onnxruntime's own default is -10000).
MAX_FILTER_VALUE = -1e4
#: Ops that read only the shape of their input: other graph inputs may reach the bias through these.
_SHAPE_READERS = frozenset({"Shape", "Size"})


@dataclass(frozen=True)
class PaddingBias:
    """What a proven bias computes: the raw mask input and the value masked positions get."""

    mask: gs.Variable
    filter_value: float


#: id(bias tensor) -> (bias tensor, PaddingBias or the reason it is not one); the check runs once per tensor
_ANALYSED: dict[int, tuple[gs.Tensor, PaddingBias | str]] = {}


def padding_mask_bias(match: Match) -> str | None:
    """The bound ``bias`` is an additive padding bias computed from one 2-D mask input (proven by running it)."""
    result = _analysis(match)
    return result if isinstance(result, str) else None


def padding_mask_input(match: Match) -> gs.Variable:
    """The raw [batch, sequence] mask input the bias was computed from."""
    return _proven(match).mask


def padding_mask_filter(match: Match) -> float:
    """The value the bias gives masked positions (onnxruntime's ``mask_filter_value``)."""
    return _proven(match).filter_value


def _proven(match: Match) -> PaddingBias:
    result = _analysis(match)
    if isinstance(result, str):
        raise CheckFailed(result)
    return result


def _analysis(match: Match) -> PaddingBias | str:
    bias = match.tensor("bias")
    if bias is None:
        return "no additive bias"
    cached = _ANALYSED.get(id(bias))
    if cached is not None and cached[0] is bias:
        return cached[1]
    if len(_ANALYSED) > 256:
        _ANALYSED.clear()
    try:
        result: PaddingBias | str = _analyse(match, bias)
    except _NotPadding as exc:
        result = str(exc)
    _ANALYSED[id(bias)] = (bias, result)
    return result


class _NotPadding(Exception):
    """Why a bias is not a padding bias (the check's reason)."""


def _analyse(match: Match, bias: gs.Tensor) -> PaddingBias:
    nodes, value_inputs, shape_inputs = _computation(match.graph, bias)
    if len(value_inputs) != 1:
        raise _NotPadding(f"the bias depends on {len(value_inputs)} graph inputs' values, not on one mask")
    mask = value_inputs[0]
    if mask.shape is None or len(mask.shape) != 2:
        raise _NotPadding(f"the bias comes from '{mask.name}', which is not a 2-D mask")
    if mask.dtype is None or np.dtype(mask.dtype).kind not in "biu":
        raise _NotPadding(f"the bias comes from '{mask.name}' of type {mask.dtype}, not an integer/bool mask")
    dims = _test_dims(mask)
    feeds_per_case = [_feeds(mask, shape_inputs, dims, case) for case in range(2)]
    model = _submodel(match, nodes, [mask, *shape_inputs], bias)
    filter_value: float | None = None
    for feeds in feeds_per_case:
        value = _run(model, feeds)
        filter_value = _check_padding(value, feeds[mask.name], filter_value)
    assert filter_value is not None
    return PaddingBias(mask, filter_value)


def _computation(graph: gs.Graph, bias: gs.Tensor) -> tuple[list[gs.Node], list[gs.Variable], list[gs.Variable]]:
    """The nodes computing ``bias``; the graph inputs whose values they read, and the tensors (inputs or
    intermediates) whose shapes only they read — the computation stops there: their values do not matter."""
    graph_inputs = {id(t) for t in graph.inputs}
    nodes: dict[int, gs.Node] = {}
    value_inputs: dict[int, gs.Variable] = {}
    shape_sources: dict[int, gs.Variable] = {}
    pending = [bias]
    seen: set[int] = set()
    while pending:
        tensor = pending.pop()
        if id(tensor) in seen or isinstance(tensor, gs.Constant):
            continue
        seen.add(id(tensor))
        if id(tensor) in graph_inputs:
            value_inputs[id(tensor)] = tensor
            continue
        if not tensor.inputs:
            raise _NotPadding(f"'{tensor.name}' has no producer and is not a graph input")
        node = tensor.inputs[0]
        if node.domain not in (None, "", "ai.onnx") or any(isinstance(v, gs.Graph) for v in node.attrs.values()):
            raise _NotPadding(f"the bias is computed by {node.op} (domain or subgraph not supported)")
        nodes[id(node)] = node
        if len(nodes) > MAX_MASK_NODES:
            raise _NotPadding(f"the bias is computed by more than {MAX_MASK_NODES} nodes")
        for source in node.inputs:
            if node.op in _SHAPE_READERS and isinstance(source, gs.Variable):
                shape_sources[id(source)] = source
            elif source.name:
                pending.append(source)
    # a tensor whose value is computed anyway needs no stand-in for its shape
    shape_only = [t for key, t in shape_sources.items() if key not in seen]
    ordered = [n for n in graph.nodes if id(n) in nodes]  # the graph is topologically sorted
    return ordered, list(value_inputs.values()), shape_only


def _test_dims(mask: gs.Variable) -> tuple[int, int]:
    """Concrete (batch, sequence) for the mask: static dims as declared, symbolic ones small (2 and 7)."""
    batch, sequence = mask.shape
    return (batch if isinstance(batch, int) and batch > 0 else 2,
            sequence if isinstance(sequence, int) and sequence > 0 else 7)


def _feeds(mask: gs.Variable, shape_inputs: list[gs.Variable], dims: tuple[int, int],
           case: int) -> dict[str, np.ndarray]:
    """Inputs for one test: a mask with holes in different places per row, zeros for shape-only inputs."""
    batch, sequence = dims
    rows = np.arange(batch)[:, None]
    cols = np.arange(sequence)[None, :]
    holes = (cols + rows + case) % 3 == 2
    holes[0, :] = case == 1  # row 0: no padding at all, then everything padded...
    holes[0, 0] = False  # ...but the first position (a fully masked row has no defined attention)
    mask_value = (~holes).astype(np.dtype(mask.dtype))
    feeds = {mask.name: mask_value}
    named = {d: size for d, size in zip(mask.shape, (batch, sequence), strict=True) if isinstance(d, str)}
    for tensor in shape_inputs:
        shape = []
        for axis, d in enumerate(tensor.shape or ()):
            if isinstance(d, int) and d > 0:
                shape.append(d)
            elif isinstance(d, str) and d in named:
                shape.append(named[d])
            else:  # an unnamed or differently named dim: assume it follows the mask's axis
                shape.append((batch, sequence)[axis] if axis < 2 else 1)
        feeds[tensor.name] = np.zeros(shape, dtype=np.dtype(tensor.dtype) if tensor.dtype is not None else np.int64)
    return feeds


def _submodel(match: Match, nodes: list[gs.Node], inputs: list[gs.Variable], bias: gs.Tensor) -> bytes:
    """The bias computation alone as a serialized model (the nodes are copied, the graph is not touched)."""
    env: dict[int, gs.Tensor] = {}

    def copy(tensor: gs.Tensor) -> gs.Tensor:
        if id(tensor) not in env:
            if isinstance(tensor, gs.Constant):
                env[id(tensor)] = gs.Constant(tensor.name, tensor.values)
            else:
                env[id(tensor)] = gs.Variable(tensor.name, dtype=tensor.dtype, shape=tensor.shape)
        return env[id(tensor)]

    sub_inputs = [copy(t) for t in inputs]
    for t in sub_inputs:
        t.shape = [None] * len(t.shape or ())
    sub_nodes = [gs.Node(n.op, n.name, dict(n.attrs), [copy(t) if t.name else gs.Variable.empty() for t in n.inputs],
                         [copy(t) if t.name else gs.Variable.empty() for t in n.outputs]) for n in nodes]
    out = copy(bias)
    out.shape = None
    sub = gs.Graph(nodes=sub_nodes, inputs=sub_inputs, outputs=[out], opset=match.opset)
    legalize(sub)  # the engine's canonical spelling (axes as attributes, ...) back to the opset's
    model = gs.export_onnx(sub, do_type_check=False)
    model.ir_version = min(model.ir_version, 8)
    del model.graph.value_info[:]
    return model.SerializeToString()


def _run(model: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return np.asarray(session.run(None, feeds)[0])
    except Exception as exc:  # onnxruntime's exception types are not public
        raise _NotPadding(f"cannot evaluate the bias computation: {str(exc).splitlines()[0][:600]}") from None


def _check_padding(value: np.ndarray, mask: np.ndarray, filter_value: float | None) -> float:
    """The masked value, when ``value`` is exactly the padding bias of ``mask`` (else _NotPadding)."""
    if value.dtype.kind != "f" or value.ndim > 4 or value.ndim < 1:
        raise _NotPadding(f"the bias has dtype {value.dtype} and rank {value.ndim}, not a float score bias")
    batch, sequence = mask.shape
    full = value.reshape((1,) * (4 - value.ndim) + value.shape)
    if full.shape[-1] != sequence or full.shape[0] not in (1, batch):
        raise _NotPadding(f"the bias has shape {list(value.shape)}, not [batch, ., ., {sequence}]")
    full = np.broadcast_to(full, (batch, *full.shape[1:]))
    keep = np.broadcast_to(mask.astype(bool)[:, None, None, :], full.shape)
    if np.any(full[keep] != 0):
        raise _NotPadding("the bias is not 0 where the mask is 1")
    masked = full[~keep]
    if masked.size == 0:
        return filter_value if filter_value is not None else MAX_FILTER_VALUE
    if np.any(masked != masked.flat[0]) or not float(masked.flat[0]) <= MAX_FILTER_VALUE:
        raise _NotPadding("the bias is not one very negative value where the mask is 0")
    found = max(float(masked.flat[0]), float(np.finfo(np.float32).min))  # -inf: the most negative finite float
    if filter_value is not None and found != filter_value:
        raise _NotPadding("the bias gives masked positions different values for different masks")
    return found


CHECKS = {"padding_mask_bias": padding_mask_bias}
COMPUTATIONS = {"padding_mask_input": padding_mask_input, "padding_mask_filter": padding_mask_filter}

