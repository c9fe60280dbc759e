"""Constant rotary tables for a model whose positions are bounded (``shared-kv-buffer``: no position reaches the
buffer's length), as onnxruntime-genai's builder stores them.

An export computes each step's rotary rows from the position ids (``cos(position * inv_freq)``: Range, Cos, Sin,
Reshape, Slice and Pad around GroupQueryAttention or RotaryEmbedding, some 35 small nodes a step that cost
~0.25 ms of a 8 ms int4 decode step of SmolLM2-135M). Once the positions are bounded by ``rows``, those rows are
one table computed here, and the ops read row ``position_ids[b, s]`` of it, the model's own position ids.

The table is the model's own subgraph evaluated in onnxruntime over the positions 0 .. rows - 1 (not a formula
recognised from the exporter's nodes), and it is taken only where that subgraph is a function of each token's
position alone: it reads no weights and no input but the token ids, the mask and the position ids (their shapes,
for the table's layout), and evaluated again for single positions across the range, for a chunk of consecutive
positions and for a batch of two rows of different positions, each token's rows equal the table's row at its
position. A rotary that scales with the sequence length (dynamic NTK, LongRoPE's long factors) fails those and
keeps its per-step nodes, with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gsrewrite.pipelines.decoder_signature import DecoderSignature
from gsrewrite.pipelines.layout_subgraph import layout_model, layout_session
from gsrewrite.pipelines.layout_subgraph import prune as prune  # the rewrites' cleanup, named here as before

log = logging.getLogger(__name__)

#: op (domain, type) -> the indices of its (position ids, cos cache, sin cache) inputs
ROTARY_INPUTS = {("com.microsoft", "GroupQueryAttention"): (9, 7, 8),
                 ("com.microsoft", "RotaryEmbedding"): (1, 2, 3)}
#: the largest initializer (bytes) the table's subgraph may read: an inverse-frequency vector, index constants
_SMALL = 1 << 16
#: how far a token's evaluated rows may be from the table's (float32 rounding of cos/sin of the same argument
#: evaluated in another shape: a vectorised and a scalar loop)
_ATOL = 1e-6
_PREFIX = "rotary-tables"
#: the fewest rows a table gets: validation's longest past (256) and a chunk fit below it
MIN_ROWS = 512

Triple = tuple[str, str, str]


def constant_rotary_tables(model: onnx.ModelProto, signature: DecoderSignature, rows: int, *,
                           rotating_attention: bool) -> int | str:
    """Give every rotary op of ``model`` (changed in place) constant cos/sin tables of ``rows`` positions and the
    model's position ids; the number of ops changed, or why none (``model`` unchanged).

    ``rotating_attention``: GroupQueryAttention's own rotary too. Over an empty past it rotates token (b, s) by
    row ``position_ids[0, 0] + s`` (onnxruntime 1.32, CPU), which the per-token tables of the export make exact at
    batch 1 and a constant table only for position ids that run on from the first: the ``unpadded-prompts``
    contract (a prompt's positions the same consecutive run in every row) must be accepted for it."""
    if signature.position_ids is None:
        return "the model has no position ids input to index a constant table with"
    if rows < 2:
        return f"a table of {rows} position(s)"
    users = _rotary_users(model.graph)
    if not rotating_attention:
        users = [(node, triple) for node, triple in users if node.op_type != "GroupQueryAttention"]
    if not users:
        return "no RotaryEmbedding (nor, under unpadded-prompts, GroupQueryAttention) reads a rotary table"
    fed = {name for name in (signature.input_ids, signature.position_ids, signature.attention_mask) if name}
    triples = sorted({triple for _node, triple in users})
    sub = layout_model(model, [name for triple in triples for name in triple], fed, "the rotary table", _SMALL)
    if isinstance(sub, str):
        return sub
    try:
        evaluate = _Evaluator(sub, signature)
    except Exception as error:
        return f"the rotary table could not be evaluated: {type(error).__name__}: {str(error)[:200]}"
    tables = evaluate.tables(triples, rows)
    if isinstance(tables, str):
        return tables
    position = _positions(model.graph, signature)
    done: dict[Triple, tuple[str, str]] = {}
    for index, triple in enumerate(triples):
        names = f"{_PREFIX}/cos_{index}", f"{_PREFIX}/sin_{index}"
        for name, table in zip(names, tables[triple], strict=True):
            model.graph.initializer.append(numpy_helper.from_array(table, name))
        done[triple] = names
    for node, triple in users:
        at = ROTARY_INPUTS[(node.domain, node.op_type)]
        node.input[at[0]], node.input[at[1]], node.input[at[2]] = position, *done[triple]
    removed = prune(model.graph)
    log.info("rotary tables: %d op(s) read constant tables of %d positions; %d per-step node(s) gone",
             len(users), rows, removed)
    return len(users)


def _rotary_users(graph: onnx.GraphProto) -> list[tuple[onnx.NodeProto, Triple]]:
    """Each rotary op with its (position ids, cos, sin) inputs (GroupQueryAttention only with ``do_rotary``)."""
    out = []
    for node in graph.node:
        at = ROTARY_INPUTS.get((node.domain, node.op_type))
        if at is None or len(node.input) <= max(at) or not all(node.input[i] for i in at):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "GroupQueryAttention" and not attrs.get("do_rotary", 0):
            continue
        out.append((node, (node.input[at[0]], node.input[at[1]], node.input[at[2]])))
    return out


class _Evaluator:
    """The table's subgraph in onnxruntime, fed token layouts: each token's cos and sin rows."""

    def __init__(self, sub: onnx.ModelProto, signature: DecoderSignature) -> None:
        self.session = layout_session(sub)
        self.dtypes = {value.name: helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
                       for value in sub.graph.input}
        self.signature = signature

    def rows(self, positions: np.ndarray, triples: Iterable[Triple]) -> dict[Triple, tuple[np.ndarray, np.ndarray]]:
        """Each triple's (cos, sin) rows of every token ([B, S, width]) when the model is fed ``positions``
        ([B, S]) with a mask of ones as long as the largest position + 1."""
        signature = self.signature
        batch, length = positions.shape
        feeds: dict[str, np.ndarray] = {}
        for name, dtype in self.dtypes.items():
            if name == signature.position_ids:
                feeds[name] = positions.astype(dtype)
            elif name == signature.attention_mask:
                feeds[name] = np.ones((batch, int(positions.max()) + 1), dtype)
            else:  # the token ids: their shape only
                feeds[name] = np.zeros((batch, length), dtype)
        names = [o.name for o in self.session.get_outputs()]
        got = dict(zip(names, self.session.run(None, feeds), strict=True))
        out = {}
        for pos, cos, sin in triples:
            ids = np.broadcast_to(np.asarray(got[pos]), (batch, length)).astype(np.int64)
            out[(pos, cos, sin)] = (np.asarray(got[cos])[ids], np.asarray(got[sin])[ids])
        return out

    def tables(self, triples: list[Triple], rows: int) -> dict[Triple, tuple[np.ndarray, np.ndarray]] | str:
        """Each triple's (cos, sin) table of ``rows`` positions, checked to be each token's rows whatever the
        layout; or why not."""
        try:
            whole = self.rows(np.arange(rows, dtype=np.int64)[None], triples)
            tables = {triple: (cos[0], sin[0]) for triple, (cos, sin) in whole.items()}
            for positions in _layouts(rows):
                for triple, (cos, sin) in self.rows(positions, triples).items():
                    expected = tables[triple]
                    for got, table in ((cos, expected[0]), (sin, expected[1])):
                        if got.shape[-1] != table.shape[-1] or not np.allclose(got, table[positions], rtol=0,
                                                                               atol=_ATOL):
                            return f"the rotary rows at positions {positions.min()}..{positions.max()} " \
                                   f"(layout {list(positions.shape)}) are not the table's: the rotary depends on " \
                                   "more than each token's position"
        except Exception as error:
            return f"the rotary table could not be evaluated: {type(error).__name__}: {str(error)[:200]}"
        return tables


def _layouts(rows: int) -> list[np.ndarray]:
    """Token layouts the table must hold for: single positions across the range (a decode step at each), a chunk
    of consecutive positions and a batch of two rows at different positions."""
    singles = sorted({0, 1, 2, rows // 3, rows // 2, rows - 2, rows - 1} & set(range(rows)))
    layouts = [np.array([[p]], np.int64) for p in singles]
    chunk = min(7, rows)
    layouts.append(np.arange(rows - chunk, rows, dtype=np.int64)[None])
    if rows >= 2 * chunk:
        layouts.append(np.stack([np.arange(chunk), np.arange(rows // 2, rows // 2 + chunk)]).astype(np.int64))
    return layouts


def _positions(graph: onnx.GraphProto, signature: DecoderSignature) -> str:
    """The model's position ids as int64 (what the rotary ops index with): the input itself or a Cast of it."""
    assert signature.position_ids is not None
    spec = next(value for value in graph.input if value.name == signature.position_ids)
    if spec.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        return signature.position_ids
    name = f"{_PREFIX}/position_ids"
    graph.node.insert(0, helper.make_node("Cast", [signature.position_ids], [name], to=onnx.TensorProto.INT64,
                                          name=name))
    return name


def tables_of(model: onnx.ModelProto) -> Mapping[str, int]:
    """The constant rotary tables this step stored in ``model``: name -> rows."""
    return {t.name: int(t.dims[0]) for t in model.graph.initializer if t.name.startswith(f"{_PREFIX}/")
            and t.dims}
