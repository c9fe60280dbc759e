"""The exporter spellings the pattern tests already write (tests/patterns/*.py), imported rather than copied.

tests/patterns is not a package (and the repository's top-level ``patterns`` package would shadow it), so the
modules are loaded by path under private names.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PATTERN_TESTS = Path(__file__).resolve().parent.parent / "patterns"


def _load(stem: str) -> ModuleType:
    name = f"_fuzz_spellings_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PATTERN_TESTS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_mha, _mask, _gqa, _gelu = _load("test_mha"), _load("test_attention_mask"), _load("test_gqa"), _load("test_gelu")
_embed, _rotary = _load("test_embed_layernorm"), _load("test_rotary")

#: score spellings: name -> (text computing ``s`` from ``q`` and ``kt``, with the constant ``c``)
SCORES: dict[str, str] = {name: text for name, (text, _) in _mha.SCORES.items()}
#: key spellings computing ``kt`` [B, H, dh, S] from ``k_lin`` (only those without a fixed sequence length)
KEYS: dict[str, str] = {name: text for name, text in _mha.KEYS.items() if "flat3" not in text}
#: padding-bias spellings computing ``bias`` from ``mask`` (HF BERT legacy; HF GPT-2 causal + padding)
PADDING_LEGACY: str = _mask.LEGACY
CAUSAL_GPT2: str = _mask.CAUSAL
#: transformers' repeat_kv as the legacy exporter writes it (placeholders ``{x}`` and ``{axis}``)
REPEAT_KV: str = _gqa.REPEAT_KV
#: the three associations of 0.5 * x * p (``x``, ``p``, ``half`` -> ``y``)
GELU_PRODUCTS: dict[str, str] = dict(_gelu.PRODUCTS)
#: position ids ``pids`` from the shape of ``ids``: a sliced position buffer, or a Range
POSITIONS: dict[str, str] = {"sliced": _embed.POSITIONS_SLICED, "range": _embed.POSITIONS_RANGE}
#: rotate-half rotary of a named tensor (``x`` -> ``yx``; reads s1, e1, s2, e2, axes, cos, sin)
rotary_of = _rotary._rotary_of
