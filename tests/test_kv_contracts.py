"""The KV-cache contracts (``shared-kv-buffer``, ``int8-kv-cache``): opt-in, made after the fusions, validated on the
inputs the contract turns the original's into (a NaN-padded shared buffer; an int8 cache with its scales), stated
in the result and the model; skipped with the reason when no fused attention owns the cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from gsrewrite.contracts import METADATA_KEY
from gsrewrite.errors import UsageError, ValidationError
from gsrewrite.pipelines import RewriteOptions, optimize
from gsrewrite.pipelines.apply import Fusions, apply_fusions
from gsrewrite.pipelines.decoder_signature import decoder_signature
from gsrewrite.validation.candidate_inputs import PaddedCache, QuantizedCache
from gsrewrite.validation.validator import Validator

FIXTURES = Path(__file__).parent / "fixtures" / "models"
LLAMA = FIXTURES / "llama.dynamo_kv.onnx"
ALL = ("batch1-chunks", "shared-kv-buffer", "int8-kv-cache")


@pytest.fixture(scope="module")
def both() -> object:
    return optimize(str(LLAMA), rewrite=RewriteOptions(contracts=ALL, max_length=300))


def _inputs(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    return {i.name: i for i in model.graph.input}


def test_shared_buffer_and_int8_cache_are_made_validated_and_stated(both: object) -> None:
    result = both
    assert result.contracts == sorted(ALL) and result.validation.ok  # type: ignore[attr-defined]
    # the int8 cache's room: 2.5x is tried first (real text needs it), this tiny decoder validates at 1.25x
    assert set(result.dropped) == {"int8-kv-cache (2.5x room)"}  # type: ignore[attr-defined]
    assert result.validation.criterion.min_cosine == 0.99  # type: ignore[attr-defined]  # int8: a compression's
    model = result.model  # type: ignore[attr-defined]
    past = _inputs(model)["past_key_values.0.key"].type.tensor_type
    assert past.elem_type == onnx.TensorProto.INT8 and past.shape.dim[2].dim_param == "max_length"
    stated = {p.key: p.value for p in model.metadata_props}[METADATA_KEY]
    assert all(f"{name}:" in stated for name in ALL)
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == 4 and all(n.input[12].endswith("key_scale") and n.input[13].endswith("value_scale")
                                 for n in gqa)
    # no Shape of the cache is left: the past length comes from the mask
    assert not [n for n in model.graph.node if n.op_type == "Shape" and n.input[0].startswith("past_key_values")]


def test_the_padded_feed_tells_a_model_that_reads_the_past_length_from_its_shape() -> None:
    """The validation's padded buffer has teeth: the fused model without the contract fails on it."""
    fused = optimize(str(LLAMA), rewrite=RewriteOptions(contracts=("batch1-chunks",))).model
    signature = decoder_signature(fused)
    validator = Validator(onnx.load(str(LLAMA)), contracts=("batch1-chunks",),
                          candidate_inputs=PaddedCache(signature.pairs, signature.input_ids))
    with pytest.raises(ValidationError, match=r"GatherND|invalid index"):
        validator.check(fused)


def test_candidate_inputs_translate_a_feed_and_back() -> None:
    pairs = {"past.0.key": "present.0.key"}
    feed = {"ids": np.zeros((1, 2), np.int64), "past.0.key": np.ones((1, 2, 3, 4), np.float32)}
    padded = PaddedCache(pairs, "ids", 8).feed(feed)["past.0.key"]
    assert padded.shape == (1, 2, 8, 4) and np.isnan(padded[:, :, 3:]).all()
    assert PaddedCache(pairs, "ids", 4).feed(feed)["past.0.key"].shape[2] == 5 + 13  # too short: past + new + slack
    cut = PaddedCache(pairs, "ids", 8).outputs({"present.0.key": np.zeros((1, 2, 8, 4))},
                                               {"present.0.key": np.zeros((1, 2, 5, 4))})
    assert cut["present.0.key"].shape == (1, 2, 5, 4)
    scale = np.full((1, 2, 1, 4), 0.5, np.float32)
    quantized = QuantizedCache(pairs, {"past.0.key": scale})
    assert (quantized.feed(feed)["past.0.key"] == 2).all() and quantized.feed(feed)["past.0.key"].dtype == np.int8
    back = quantized.outputs({"present.0.key": np.full((1, 2, 5, 4), 4, np.int8)}, {})
    assert np.allclose(back["present.0.key"], 2.0)


@pytest.mark.parametrize(("model", "contracts", "reason"), [
    ("llama.dynamo_kv.onnx", ("shared-kv-buffer",), "--contract batch1-chunks"),  # no GroupQueryAttention
    ("gpt2.dynamo_kv.onnx", ("shared-kv-buffer", "int8-kv-cache"), "is not the present GroupQueryAttention makes"),
])
def test_a_contract_without_a_fused_cache_is_skipped_with_the_reason(model: str, contracts: tuple[str, ...],
                                                                       reason: str) -> None:
    result = apply_fusions(str(FIXTURES / model), Fusions(("all",), options=RewriteOptions(contracts=contracts)))
    assert result.contracts == [] and not result.dropped
    assert all(reason in result.skipped[name] for name in contracts), result.skipped


def test_a_kv_contract_of_a_model_without_a_cache_is_refused() -> None:
    with pytest.raises(UsageError, match="--contract int8-kv-cache needs a decoder with a KV cache"):
        optimize(str(FIXTURES / "bert.dynamo.onnx"), rewrite=RewriteOptions(contracts=("int8-kv-cache",)))
