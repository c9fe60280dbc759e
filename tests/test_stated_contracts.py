"""A model gsrewrite rewrote under input contracts states them (metadata_props); later commands read them back:
``validate`` and ``compress`` try only the inputs the contracts keep, as optimize did (before, validate failed on
optimize's own output: the chunk set at batch 2, which GroupQueryAttention refuses)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import gsrewrite
from gsrewrite.contracts import METADATA_KEY, state, stated
from gsrewrite.errors import UsageError, ValidationError
from gsrewrite.pipelines import RewriteOptions, optimize
from gsrewrite.validation import validate

FIXTURES = Path(__file__).parent / "fixtures" / "models"
LLAMA = FIXTURES / "llama.dynamo_kv.onnx"
GSREWRITE = Path(sys.executable).parent / "gsrewrite"


@pytest.fixture(scope="module")
def chunked() -> onnx.ModelProto:
    model = optimize(str(LLAMA), rewrite=RewriteOptions(contracts=("batch1-chunks",))).model
    assert any(n.op_type == "GroupQueryAttention" for n in model.graph.node)
    return model


def test_stated_reads_back_what_state_wrote() -> None:
    model = onnx.ModelProto()
    state(model, ["batch1-chunks", "unpadded-prompts"])
    assert stated(model) == ("batch1-chunks", "unpadded-prompts")
    model.metadata_props[0].value += "; from-the-future: a contract this version does not know"
    assert stated(model) == ("batch1-chunks", "unpadded-prompts")
    state(model, [])
    assert stated(model) == () and not any(p.key == METADATA_KEY for p in model.metadata_props)


def test_validate_tries_the_chunk_set_at_batch_one_for_a_chunked_candidate(chunked: onnx.ModelProto) -> None:
    report = validate(str(LLAMA), chunked)
    assert report.ok, report.summary()
    chunk = next(s["shapes"] for s in report.sizes if s["name"] == "chunk")
    assert chunk["input_ids"][0] == 1 and chunk["input_ids"][1] > 1
    with pytest.raises(ValidationError):  # the same candidate without its contract: refused at batch 2
        validate(str(LLAMA), chunked, contracts=())


def test_validate_refuses_a_candidate_whose_cache_layout_changed(tmp_path: Path, chunked: onnx.ModelProto) -> None:
    shared = onnx.ModelProto()
    shared.CopyFrom(chunked)
    state(shared, ["batch1-chunks", "shared-kv-buffer"])
    with pytest.raises(UsageError, match="shared-kv-buffer"):
        validate(str(LLAMA), shared)
    path = tmp_path / "shared.onnx"
    onnx.save(shared, str(path))
    done = subprocess.run([str(GSREWRITE), "validate", str(LLAMA), str(path)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and "shared-kv-buffer" in done.stderr and "Traceback" not in done.stderr


def test_compress_keeps_the_contracts_of_its_input(chunked: onnx.ModelProto) -> None:
    """The chunk set runs (at batch 1) instead of being skipped as inputs the original rejects."""
    skipped: list[str] = []

    class Listen(logging.Handler):  # on the validator's own logger: other tests may stop its propagation
        def emit(self, record: logging.LogRecord) -> None:
            if "skips the chunk" in record.getMessage():
                skipped.append(record.getMessage())

    logger = logging.getLogger("gsrewrite.validation.validator")
    handler, level = Listen(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        result = gsrewrite.compress(chunked, "int8", min_elements=1, min_top1=0.0)  # random weights: near ties
        assert result.ok, result.report()
        assert stated(result.model) == ("batch1-chunks",)
        assert not skipped
        gsrewrite.compress(chunked, "int8", min_elements=1, min_top1=0.0, contracts=())
        assert skipped
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_genai_folders_model_is_compressed_and_validated_against_itself(tmp_path: Path) -> None:
    """The shared buffer's past dims (max_length) are sized as the past the mask implies, so compress generates a
    decoder's inputs for a --target genai model (before: a chunk at batch 2 that GroupQueryAttention refused, for
    an unrelated buffer length), and validate compares two models of the same cache layout."""
    folder = tmp_path / "genai"
    made = subprocess.run([str(GSREWRITE), "optimize", str(LLAMA), str(folder), "--target", "genai", "-q"],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    model, small = folder / "model.onnx", tmp_path / "bf16.onnx"
    done = subprocess.run([str(GSREWRITE), "compress", str(model), "-s", "bf16", "--min-top1", "0.9", "-o",
                           str(small)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and small.exists(), done.stderr
    checked = subprocess.run([str(GSREWRITE), "validate", str(model), str(small), "--min-cosine", "0.999",
                              "--min-top1", "0.9"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and "OK:" in checked.stdout + checked.stderr, checked.stderr
    assert "chunk 1x4" in checked.stdout + checked.stderr  # the decoder's sets, the chunk at batch 1
