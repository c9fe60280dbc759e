"""A decoder's validation inputs as generation makes them (gsrewrite/validation/prefill.py): the past is the
original's own prefill of token ids, the mask continues the prefill's with the new tokens visible, positions
count the visible tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_decoder_inputs import decoder

from gsrewrite.validation import Validator
from gsrewrite.validation.prefill import cache_pairs

FIXTURES = Path(__file__).parent / "fixtures" / "models"
GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _model_with(inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    graph = helper.make_graph([], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs])
    return helper.make_model(graph)


@pytest.mark.parametrize(("inputs", "outputs", "expected"), [
    (["past_key_values.0.key", "past_key_values.0.value"], ["logits", "present.0.key", "present.0.value"],
     {"past_key_values.0.key": "present.0.key", "past_key_values.0.value": "present.0.value"}),
    (["past.1"], ["present.1", "present.0"], {"past.1": "present.1"}),
    (["past_key_values.0.decoder.key", "past_key_values.0.encoder.key"], ["present.0.decoder.key"],
     {"past_key_values.0.decoder.key": "present.0.decoder.key"}),  # the cross-attention cache has no present
    (["past_key"], ["out", "present"], {"past_key": "present"}),  # one to one, in order
    (["cache_k_3"], ["present_k_3", "present_v_3"], {"cache_k_3": "present_k_3"}),
])
def test_each_past_input_pairs_with_the_present_it_feeds_back_from(inputs: list[str], outputs: list[str],
                                                                   expected: dict[str, str]) -> None:
    assert cache_pairs(_model_with(inputs, outputs), inputs) == expected


def test_the_past_is_the_originals_own_prefill_of_token_ids() -> None:
    """The toy decoder's present is Concat(past, token embedding + position embedding): every cached position of
    a prefilled past is a row of the token table plus the row of its position, as a real prefill makes it."""
    model = decoder()
    wte, wpe = (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    validator = Validator(model)
    sets = {s.size.name: s for s in validator.sets}
    assert set(sets) == {"decode", "prefill", "chunk", "long past"}
    for name in ("decode", "chunk", "long past"):
        feed = sets[name].feed(0)
        past, mask = feed["past_key"], feed["attention_mask"]
        length = past.shape[2]
        assert length > 0 and (mask[:, length:] == 1).all()  # the new tokens are always visible
        visible = np.cumsum(mask, axis=1) - 1
        positions = np.where(mask == 0, 1, visible)
        assert (feed["position_ids"] == positions[:, length:]).all()
        for row in range(past.shape[0]):
            for t in range(length):
                token = past[row, :, t, :].reshape(-1) - wpe[positions[row, t]]
                assert np.abs(wte - token).max(axis=1).min() < 1e-5, (name, row, t)
    assert "after its own prefill" in sets["decode"].described["past_key"]["values"]
    assert validator.check(model).ok


@pytest.mark.parametrize("stem", ["llama.dynamo_kv", "gpt2.legacy14_kv"])
def test_a_real_exports_past_comes_from_its_prefill(stem: str) -> None:
    validator = Validator(str(FIXTURES / f"{stem}.onnx"))
    decode = next(s for s in validator.sets if s.size.name == "decode")
    feed = decode.feed(0)
    pasts = [name for name in feed if name.startswith("past_key_values")]
    assert pasts and all("after its own prefill" in decode.described[n]["values"] for n in pasts)
    # the same feed twice: the candidate runs exactly what the original ran
    again = decode.feed(0)
    assert all(np.array_equal(feed[n], again[n]) for n in feed)
    # not noise: a prefill's values are no standard normal draw
    assert not np.allclose(np.std(feed[pasts[0]]), 1.0, atol=0.05)


def test_validate_reports_prefilled_inputs_through_the_installed_script(tmp_path: Path) -> None:
    model = tmp_path / "decoder.onnx"
    onnx.save(decoder(), model)
    done = subprocess.run([str(GSREWRITE), "validate", str(model), str(model), "--json"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    sizes = {s["name"]: s for s in json.loads(done.stdout)["sizes"]}
    assert "after its own prefill" in sizes["decode"]["inputs"]["past_key"]["values"]
    assert sizes["chunk"]["shapes"]["input_ids"][1] > 1
