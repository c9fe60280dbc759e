"""Generated inputs a model accepts: input dims the graph ties together (a decoder's mask over its past and new
tokens), positions inside the model's tables, values an input is compared with; decoders validated at a decode
step, a prefill and a long past."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

from gsrewrite.errors import ValidationError
from gsrewrite.shapes.dim_relations import solve_input_dims
from gsrewrite.validation import validate
from gsrewrite.validation.dims import LONG_PAST, input_dims
from gsrewrite.validation.sizes import CHUNK_TOKENS

GSREWRITE = Path(sys.executable).parent / "gsrewrite"

#: the mask bias, read as a whole (``add``: its length must be the keys') or by index over the keys (``gather``:
#: any longer mask runs too, as transformers' GatherND does)
_MASK = {
    "add": "m = Cast <to = 1> (attention_mask)",
    "gather": """shape = Shape (present)
                 two = Constant <value = int64[1] {2}> ()
                 three = Constant <value = int64[1] {3}> ()
                 keys1 = Slice (shape, two, three)
                 zero = Constant <value = int64 {0}> ()
                 one = Constant <value = int64 {1}> ()
                 keys = Squeeze (keys1)
                 index = Range (zero, keys, one)
                 picked = Gather <axis = 1> (attention_mask, index)
                 m = Cast <to = 1> (picked)""",
}


def decoder(mask_dim: str = "total_sequence", read: str = "add", rows: int = 64) -> onnx.ModelProto:
    """A one-head-pair toy decoder with a cache: token + position embeddings, K = the hidden state split into 2
    heads, present = Concat(past, K), attention over it with the padding bias of ``attention_mask``."""
    text = f"""
    <ir_version: 10, opset_import: ["" : 17]>
    decoder (int64[batch, sequence] input_ids, int64[batch, MASK] attention_mask,
             int64[batch, sequence] position_ids, float[batch, 2, past_sequence, 4] past_key)
        => (float[batch, 2, sequence, 4] out, float[batch, 2, TOTAL, 4] present) {{
        x = Gather (wte, input_ids)
        p = Gather (wpe, position_ids)
        h = Add (x, p)
        target = Constant <value = int64[4] {{0, 0, 2, 4}}> ()
        h4 = Reshape (h, target)
        k = Transpose <perm = [0, 2, 1, 3]> (h4)
        present = Concat <axis = 2> (past_key, k)
        kt = Transpose <perm = [0, 1, 3, 2]> (present)
        scores = MatMul (k, kt)
        {_MASK[read]}
        axes = Constant <value = int64[2] {{1, 2}}> ()
        m4 = Unsqueeze (m, axes)
        onef = Constant <value = float {{1.0}}> ()
        big = Constant <value = float {{-10000.0}}> ()
        inverted = Sub (onef, m4)
        bias = Mul (inverted, big)
        biased = Add (scores, bias)
        probs = Softmax <axis = -1> (biased)
        out = MatMul (probs, present)
    }}
    """
    model = onnx.parser.parse_model(text)
    for value_info in (*model.graph.input, *model.graph.output):  # the parser reads no expression dims
        for dim in value_info.type.tensor_type.shape.dim:
            if dim.dim_param in ("MASK", "TOTAL"):
                dim.dim_param = mask_dim if dim.dim_param == "MASK" else "past_sequence + sequence"
    rng = np.random.default_rng(0)
    model.graph.initializer.extend([
        numpy_helper.from_array(rng.standard_normal((20, 8)).astype(np.float32), "wte"),
        numpy_helper.from_array(rng.standard_normal((rows, 8)).astype(np.float32), "wpe"),
    ])
    return model


def _mask_lengths(report) -> list[tuple[str, int, int, int]]:
    """Per size set: name, mask length, past length, new tokens."""
    return [(s["name"], s["shapes"]["attention_mask"][1], s["shapes"]["past_key"][2], s["shapes"]["input_ids"][1])
            for s in report.sizes]


@pytest.mark.parametrize("read", ["add", "gather"])
def test_a_decoder_mask_spans_past_and_new_tokens(read: str) -> None:
    model = decoder(read=read)
    report = validate(model, model)
    assert report.ok
    sets = _mask_lengths(report)
    assert [s[0] for s in sets] == ["decode", "prefill", "chunk", "long past"]
    assert all(mask == past + new for _, mask, past, new in sets), sets
    decode, prefill, chunk, long = sets
    assert decode[3] == 1 and decode[2] > 0  # a decode step: one new token over a cache
    assert prefill[2] == 0 and prefill[3] > 1  # a prefill: no cache, several tokens
    assert chunk[2] == decode[2] and chunk[3] == CHUNK_TOKENS  # several new tokens over the cache, at batch 2
    assert long[2] > decode[2]


def test_the_relation_read_by_broadcasting_is_derived_and_one_by_index_is_suggested() -> None:
    required = solve_input_dims(decoder(read="add"))
    assert required.describe() == ["total_sequence = past_sequence + sequence"]
    suggested = solve_input_dims(decoder(read="gather"))
    assert suggested.derived == {}
    assert [(str(a), str(b)) for a, b in suggested.suggested] == [("total_sequence", "past_sequence + sequence")]


def test_a_declared_mask_length_of_past_plus_one_means_one_new_token() -> None:
    model = decoder(mask_dim="past_sequence + 1", read="gather")
    report = validate(model, model)
    assert report.ok
    assert all(new == 1 and mask == past + 1 for _, mask, past, new in _mask_lengths(report))


def test_positions_follow_the_past_and_stay_inside_the_position_table() -> None:
    model = decoder(rows=40)
    dims = input_dims(model)
    assert dims.position_rows == {"position_ids": 40} and dims.is_decoder
    report = validate(model, model)
    long = next(s for s in report.sizes if s["name"] == "long past")
    assert long["shapes"]["past_key"][2] == min(LONG_PAST, 40 - 1)
    assert "up to 39" in long["inputs"]["position_ids"]["values"]


def test_an_input_compared_with_constants_takes_one_of_them(tmp_path: Path) -> None:
    """silero's VAD: ``sr`` picks a branch by Equal(sr, 8000) / Equal(sr, 16000); other rates fail to run."""
    text = """
    <ir_version: 10, opset_import: ["" : 17]>
    vad (float[batch, samples] x, int64 sr) => (float[batch, samples] y) {
        k8 = Constant <value = int64 {8000}> ()
        k16 = Constant <value = int64 {16000}> ()
        is8 = Equal (sr, k8)
        is16 = Equal (sr, k16)
        known = Or (is8, is16)
        y = If (known) <
            then_branch = g1 () => (float[batch, samples] a) { a = Identity (x) },
            else_branch = g2 () => (float[batch, samples] b) {
                bad = Constant <value = int64[2] {7, -1}> ()
                b = Reshape (x, bad)
            }
        >
    }
    """
    model = onnx.parser.parse_model(text)
    report = validate(model, model)
    assert report.ok
    assert report.inputs["sr"]["values"].startswith("8000, of the values the graph compares it with")
    path = tmp_path / "vad.onnx"
    onnx.save(model, path)
    result = subprocess.run([str(GSREWRITE), "optimize", str(path), str(tmp_path / "out.onnx")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("read", ["add", "gather"])
def test_the_installed_cli_optimizes_a_decoder_without_flags(tmp_path: Path, read: str) -> None:
    path = tmp_path / "decoder.onnx"
    onnx.save(decoder(read=read), path)
    result = subprocess.run([str(GSREWRITE), "optimize", str(path), str(tmp_path / "out.onnx")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_when_no_generated_set_runs_the_error_says_what_was_tried() -> None:
    text = """
    <ir_version: 10, opset_import: ["" : 17]>
    broken (float[batch, n] x) => (float[7, m] y) {
        bad = Constant <value = int64[2] {7, -1}> ()
        y = Reshape (x, bad)
    }
    """
    model = onnx.parser.parse_model(text)
    with pytest.raises(ValidationError, match="other input set"):
        validate(model, model)
