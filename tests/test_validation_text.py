"""Real text for token ids (gsrewrite/validation/text.py): with a tokenizer, a decoder's validation feeds windows of
encoded English instead of uniform ids, through the library and `optimize --tokenizer`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_decoder_inputs import decoder

from gsrewrite.errors import UsageError
from gsrewrite.validation import Validator
from gsrewrite.validation.text import PASSAGES, text_tokens

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
tokenizers = pytest.importorskip("tokenizers", reason="real text needs the tokenizers package (dev extra)")


def _tokenizer(folder: Path, size: int = 20) -> Path:
    """A word-level tokenizer of ``size`` ids over the passages' most common words (the toy decoder's table)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = " ".join(PASSAGES).split()
    common = [w for w, _ in sorted(((w, words.count(w)) for w in set(words)), key=lambda x: (-x[1], x[0]))]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(common[: size - 1])}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def test_token_ids_come_from_real_text(tmp_path: Path) -> None:
    folder = _tokenizer(tmp_path / "tok")
    stream = text_tokens(folder)
    validator = Validator(decoder(), tokenizer=str(folder))
    for input_set in validator.sets:
        ids = input_set.feed(0)["input_ids"]
        assert "real text" in input_set.described["input_ids"]["values"]
        for row in ids:  # a window of the encoded passages
            starts = [i for i in range(stream.size) if stream[i] == row[0]]
            assert any(np.array_equal(np.resize(np.roll(stream, -i), row.size), row) for i in starts), row
    assert validator.check(decoder()).ok


def test_a_folder_without_a_tokenizer_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no tokenizer\.json"):
        Validator(decoder(), tokenizer=str(tmp_path))


def test_optimize_validates_on_real_text_through_the_installed_script(tmp_path: Path) -> None:
    import onnx

    model = tmp_path / "decoder.onnx"
    onnx.save(decoder(), model)
    done = subprocess.run([str(GSREWRITE), "validate", str(model), str(model), "--json"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0
    done = subprocess.run([str(GSREWRITE), "optimize", str(model), str(tmp_path / "out.onnx"), "--json",
                           "--tokenizer", str(_tokenizer(tmp_path / "tok"))], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    sizes = json.loads(done.stdout)["validation"]["sizes"]
    assert all("real text" in s["inputs"]["input_ids"]["values"] for s in sizes)
