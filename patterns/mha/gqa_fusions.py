"""Checks and computations of the stages after ``gqa-past``: rotary inside GroupQueryAttention (``gqa-rotary``)
and one packed QKV projection (``gqa-packing``).

``gqa-rotary``: gqa-past feeds GroupQueryAttention Q and K as ``Reshape(Transpose(RotaryEmbedding(Transpose(
Reshape(projection)))))`` (the heads go BNSH for RotaryEmbedding and back). With ``do_rotary`` the op rotates the
projections' heads itself, reading the caches' row ``position_ids[b, s]`` for token (b, s) as RotaryEmbedding did
(onnxruntime 1.32, CPU), except over an empty past, where every row is rotated with the first row's positions
``position_ids[0, 0] + s``: the ids RotaryEmbedding read are each token's own row of per-token tables
(``rotary-positions``: ``b * sequence + s``), so that step is exact at batch 1 and for rows of equal positions,
which is the ``unpadded-prompts`` contract. The op also wants caches of at least total_sequence_length rows
(padded with zeros the ids never reach) and head sizes of a multiple of 16.

``gqa-rotary-3d``: without that contract, RotaryEmbedding stays but rotates the projections [B, S, heads *
size] (its ``num_heads`` given), the same computation, so the transposes around it go all the same.

``gqa-packing``: GroupQueryAttention's ``query`` may hold Q, K and V packed ([B, S, (H + 2 Hkv) dh], key and value
empty), so three projections of one input become one MatMul over the concatenated weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import Match, constant_values, dim_of, reads

#: onnxruntime's GroupQueryAttention rotates only heads of this multiple ("head_size shall be a multiple of 16")
ROTARY_HEAD_SIZE_MULTIPLE = 16
#: RotaryEmbedding attributes and the value under which GroupQueryAttention's rotary computes the same
_ROTARY_DEFAULTS = {"interleaved": 0, "rotary_embedding_dim": 0, "scale": 1.0, "is_packed_batching": 0}


def _heads_of(match: Match, lin: str, split: str, merge: str) -> tuple[int, int] | str:
    """(heads, head size) when ``lin`` [B, S, D] is split into [B, S, heads, head size] (the node labelled
    ``split``) and merged to [B, S, D] again (``merge``), so that the round trip through the heads layout is the
    identity on ``lin``; else why not."""
    nodes = match.node(split), match.node(merge)
    shape = match.shape(lin)
    if nodes[0] is None or nodes[1] is None:
        return f"{lin} is not split into heads and merged back"
    heads, back = nodes[0].outputs[0].shape, _merged_shape(nodes[1], nodes[0].outputs[0].shape)
    if shape is None or heads is None or back is None or len(shape) != 3 or len(heads) != 4 or len(back) != 3:
        return f"{lin} {shape} -> {heads} -> {back}: not [batch, sequence, hidden] split into heads and back"
    lead = [dim_of(d) for d in shape[:2]]
    if None in lead or any([dim_of(d) for d in dims[:2]] != lead for dims in (heads, back)):
        return f"{lin} {shape} -> {heads} -> {back}: the batch and sequence do not provably stay"
    if not isinstance(heads[2], int) or not isinstance(heads[3], int) or dim_of(back[2]) != dim_of(shape[2]):
        return f"{lin} {shape} is split into {heads} and merged to {back}: not a known head count and size"
    return heads[2], heads[3]


def _merged_shape(merge: Any, heads: list[Any] | None) -> list[Any] | None:
    """The shape ``merge`` (a Reshape of the [B, S, heads, size] layout, after the transposes that cancel) gives:
    its inferred one, or, for gqa-past's untyped replacement, what its target [0, 0, -1] makes of ``heads``."""
    if merge.outputs[0].shape is not None:
        return list(merge.outputs[0].shape)
    target = merge.inputs[1]
    if heads is None or len(heads) != 4 or not isinstance(target, gs.Constant) or merge.attrs.get("allowzero", 0):
        return None
    if constant_values(target).reshape(-1).tolist() != [0, 0, -1]:
        return None
    if not isinstance(heads[2], int) or not isinstance(heads[3], int):
        return None
    return [heads[0], heads[1], heads[2] * heads[3]]


def _attribute(node: Any, name: str, default: Any) -> Any:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _round_trips(match: Match) -> tuple[dict[str, int], int] | str:
    """GroupQueryAttention's (Q and KV head counts, head size) when Q, K and V go from their projections into
    heads and back unchanged but for RotaryEmbedding of Q and K (with those heads), else why not."""
    gqa = match.node("gqa")
    assert gqa is not None
    if int(_attribute(gqa, "do_rotary", 0)) or len(gqa.inputs) > 11 or len(gqa.outputs) > 3:
        return "GroupQueryAttention already rotates, or takes inputs this stage does not carry over"
    heads = {"q": int(_attribute(gqa, "num_heads", 0)), "k": int(_attribute(gqa, "kv_num_heads", 0))}
    size = None
    for name in ("q", "k"):
        found = _heads_of(match, f"{name}_lin", f"{name}_split", f"{name}_merge")
        if isinstance(found, str):
            return found
        if found[0] != heads[name] or size not in (None, found[1]):
            return f"{name} has {found[0]} heads of {found[1]}, GroupQueryAttention {heads[name]}"
        size = found[1]
    v = _heads_of(match, "v_lin", "v/split", "v/merge")
    if isinstance(v, str) or v != (heads["k"], size):
        return f"V is not {heads['k']} heads of {size} split and merged back: {v}"
    assert size is not None
    return heads, size


@reads("gqa", "k_lin", "k_merge", "k_split", "q_lin", "q_merge", "q_split", "v/merge", "v/split", "v_lin")
def gqa_rotary_3d_inputs(match: Match) -> str | None:
    """As :func:`gqa_rotary_inputs` without GroupQueryAttention's own rotary: RotaryEmbedding computes the same on
    the projections [B, S, heads * size] (``num_heads`` given) as on their heads [B, heads, S, size]."""
    found = _round_trips(match)
    return found if isinstance(found, str) else None


@reads("cos", "gqa", "k_cos", "k_lin", "k_merge", "k_pos", "k_rotary", "k_sin", "k_split", "pos", "q_lin",
       "q_merge", "q_rotary", "q_split", "sin", "v/merge", "v/split", "v_lin")
def gqa_rotary_inputs(match: Match) -> str | None:
    """Q, K and V go from their projections into heads and back unchanged but for RotaryEmbedding of Q and K
    (half-split, full head, unscaled, over one table and one [batch, sequence] of ids), with the heads the op has."""
    found = _round_trips(match)
    if isinstance(found, str):
        return found
    _, size = found
    for name in ("q", "k"):
        rotary = match.node(f"{name}_rotary")
        assert rotary is not None
        for key, default in _ROTARY_DEFAULTS.items():
            value = _attribute(rotary, key, default)
            if value != default and not (key == "rotary_embedding_dim" and value == size):
                return f"{name}'s RotaryEmbedding has {key} = {value}: not GroupQueryAttention's rotary"
    if size % ROTARY_HEAD_SIZE_MULTIPLE:
        return f"head size {size}: onnxruntime's GroupQueryAttention rotates multiples of {ROTARY_HEAD_SIZE_MULTIPLE}"
    for name in ("pos", "cos", "sin"):
        if not same_computation(match.tensor(name), match.tensor(f"k_{name}")):
            return f"Q and K rotate with different {name} (GroupQueryAttention takes one)"
    table, ids, query = _cache_dims(match.tensor("cos")), _ids_dims(match.tensor("pos")), match.shape("q_lin")
    if table is None or len(table) != 2 or table[1] != size // 2:
        return f"the cos cache has shape {table}, not [rows, {size // 2}] (a rotary over the whole head)"
    if ids is None or query is None or len(ids) != 2 or [dim_of(d) for d in ids] != [dim_of(d) for d in query[:2]] \
            or match.dtype("pos") not in (None, np.dtype(np.int64)):
        return f"the position ids {ids} ({match.dtype('pos')}) are not int64 [batch, sequence] of Q {query}"
    return _own_rows(match.tensor("pos"))


def _producer(tensor: Any, op: str) -> Any:
    node = tensor.inputs[0] if isinstance(tensor, gs.Variable) and tensor.inputs else None
    return node if node is not None and node.op == op and not node.domain else None


def _ints(tensor: Any) -> list[int] | None:
    return constant_values(tensor).reshape(-1).tolist() if isinstance(tensor, gs.Constant) else None


def _cache_dims(cache: Any) -> list[Any] | None:
    """A rotary cache's dims: inferred, or (for a replacement's untyped table) through ``Slice(Reshape(t, [-1, n]),
    [0], [e], [-1])``, rotary-positions' first half of the flattened table."""
    if cache.shape is not None:
        return list(cache.shape)
    node = _producer(cache, "Slice")
    if node is not None and len(node.inputs) in (4, 5) and _ints(node.inputs[1]) == [0] \
            and _ints(node.inputs[3]) == [-1] and (len(node.inputs) == 4 or _ints(node.inputs[4]) == [1]):
        dims, end = _cache_dims(node.inputs[0]), _ints(node.inputs[2])
        if dims and isinstance(dims[-1], int) and end and len(end) == 1:
            return [*dims[:-1], max(0, min(end[0], dims[-1]))]
        return None
    node = _producer(cache, "Reshape")
    target = _ints(node.inputs[1]) if node is not None else None
    if target is None or node.attrs.get("allowzero", 0) or 0 in target or target.count(-1) > 1:
        return None
    return [d if d > 0 else None for d in target]


def _ids_dims(ids: Any) -> list[Any] | None:
    """Position ids' dims: inferred, or (untyped) those of ``Reshape``/``Expand`` to ``Concat(Slice(Shape(t),
    [i], [i + 1]), ...)``, the [batch, sequence] rotary-positions reads off a table or x."""
    if ids.shape is not None:
        return list(ids.shape)
    node = _producer(ids, "Reshape") or _producer(ids, "Expand")
    concat = _producer(node.inputs[1], "Concat") if node is not None else None
    if concat is None or concat.attrs.get("axis") != 0:
        return None
    dims = []
    for part in concat.inputs:
        piece = _producer(part, "Slice")
        shape = _producer(piece.inputs[0], "Shape") if piece is not None else None
        if shape is None or len(piece.inputs) > 4 or shape.inputs[0].shape is None or shape.attrs:
            return None
        start, end = _ints(piece.inputs[1]), _ints(piece.inputs[2])
        axes = _ints(piece.inputs[3]) if len(piece.inputs) == 4 else [0]
        source = list(shape.inputs[0].shape)
        if axes != [0] or not start or not end or start[0] < 0 or end != [start[0] + 1] or start[0] >= len(source):
            return None
        dims.append(source[start[0]])
    return dims


def same_computation(a: Any, b: Any, depth: int = 16) -> bool:
    """``a`` and ``b`` are one tensor, equal constants, or outputs of nodes of one op, attributes and (recursively)
    equal inputs: two replacements' copies of one computation before the pass merges them."""
    if a is b:
        return True
    if isinstance(a, gs.Constant) and isinstance(b, gs.Constant):
        x, y = constant_values(a), constant_values(b)
        return x.dtype == y.dtype and x.shape == y.shape and x.size <= 1 << 16 and bool(np.array_equal(x, y))
    if depth == 0 or isinstance(a, gs.Constant) or isinstance(b, gs.Constant) or len(a.inputs) != 1 \
            or len(b.inputs) != 1:
        return False
    x, y = a.inputs[0], b.inputs[0]
    if (x.op, x.domain, x.outputs.index(a), len(x.inputs)) != (y.op, y.domain, y.outputs.index(b), len(y.inputs)) \
            or x.attrs != y.attrs:
        return False
    return all(same_computation(i, j, depth - 1) for i, j in zip(x.inputs, y.inputs, strict=True))


def _own_rows(ids: Any) -> str | None:
    """None when the ids are ``Reshape(Range(0, n, 1))`` (each token's own row of per-token tables, from 0), maybe
    expanded over the batch: over an empty past GroupQueryAttention then reads row s for token (b, s), the row of
    token (0, s) (the first row's: see the module)."""
    node = ids.inputs[0] if ids.inputs else None
    if node is not None and node.op == "Expand":
        node = node.inputs[0].inputs[0] if node.inputs[0].inputs else None
    if node is not None and node.op == "Reshape":
        node = node.inputs[0].inputs[0] if node.inputs[0].inputs else None
    if node is None or node.op != "Range":
        return "the position ids are not each token's own row (Reshape(Range(0, n, 1)), rotary-positions' ids)"
    start, _, step = node.inputs
    bounds = [constant_values(t).reshape(-1).tolist() if isinstance(t, gs.Constant) else None for t in (start, step)]
    if bounds != [[0], [1]] or constant_values(start).dtype != np.int64:
        return f"the position ids count from {bounds[0]} by {bounds[1]} (None: computed), not int64 from 0 by 1"
    return None


@reads("gqa", "wk", "wq", "wv", "x", optional=("bk", "bq", "bv"))
def packable_gqa_projections(match: Match) -> str | None:
    """Constant [D, heads * size] weights (and [heads * size] biases) of one 3-D input, as many columns as
    GroupQueryAttention's Q heads and KV heads take, the op reading nothing past its bias."""
    gqa = match.node("gqa")
    assert gqa is not None
    if len(gqa.inputs) > 11 or len(gqa.outputs) > 3:
        return "GroupQueryAttention takes inputs past attention_bias (head_sink, scales, ...)"
    weights = [match.constant(w) for w in ("wq", "wk", "wv")]
    if any(w is None or w.ndim != 2 for w in weights):
        return "the projection weights are not constant matrices"
    wq, wk, wv = weights
    assert wq is not None and wk is not None and wv is not None
    heads, kv_heads = int(_attribute(gqa, "num_heads", 0)), int(_attribute(gqa, "kv_num_heads", 0))
    size = wq.shape[1] // heads if heads > 0 else 0
    if wq.shape[0] != wk.shape[0] or wk.shape != wv.shape or size * heads != wq.shape[1] \
            or wk.shape[1] != size * kv_heads or len({w.dtype for w in weights}) != 1:
        return (f"projections {[list(w.shape) for w in weights]} are not {heads} Q and {kv_heads} KV heads of one size "
                "over one input")
    for name, width in (("bq", wq.shape[1]), ("bk", wk.shape[1]), ("bv", wv.shape[1])):
        if match.tensor(name) is not None:
            bias = match.constant(name)
            if bias is None or bias.shape != (width,) or bias.dtype != wq.dtype:
                return f"the bias {name} is not a constant [{width}] of the weights' type"
    shape = match.shape("x")
    if shape is None or len(shape) != 3 or shape[2] != wq.shape[0]:
        return f"the input has shape {shape}, not [batch, sequence, {wq.shape[0]}]"
    return None


CHECKS: dict[str, Callable[[Match], str | None]] = {"gqa_rotary_inputs": gqa_rotary_inputs,
                                                     "gqa_rotary_3d_inputs": gqa_rotary_3d_inputs,
                                                     "packable_gqa_projections": packable_gqa_projections}
@reads("gqa")
def gqa_q_heads(match: Match) -> int:
    return int(_attribute(match.node("gqa"), "num_heads", 0))


@reads("gqa")
def gqa_kv_heads(match: Match) -> int:
    return int(_attribute(match.node("gqa"), "kv_num_heads", 0))


COMPUTATIONS: dict[str, Callable[[Match], Any]] = {"gqa_q_heads": gqa_q_heads, "gqa_kv_heads": gqa_kv_heads}
