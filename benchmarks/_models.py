"""The benchmark models: discovery in a folder, families, and what peers must be told about them.

A model folder holds ``X.onnx`` with optional ``X.inputs.npz`` (keys = graph input names) and
``X.outputs.npz`` (reference outputs); ``X`` is ``<family>.<exporter variant>`` (``bert.legacy14``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

#: ../shared/models next to the checkout (where the project keeps the real exports).
DEFAULT_FOLDER = Path(__file__).resolve().parents[2] / "shared" / "models"
#: --quick: one model per family and exporter, small enough for a fast look.
QUICK = ["bert.legacy14", "gpt2.dynamo", "vit.legacy", "resnet.legacy_bn"]
#: onnxruntime.transformers.optimizer model_type per family (what its docs and its own export scripts use).
ORT_MODEL_TYPE = {
    "bert": "bert", "distilbert": "bert", "roberta": "bert", "vit": "vit", "wav2vec2": "bert",
    "gpt2": "gpt2", "llama": "gpt2", "t5": "t5", "whisper": "bart", "bart": "bart", "clip": "clip",
    "swin": "swin", "phi": "phi",
}
#: Expected fusions for the shared models (their MANIFEST.md says it in prose): 4-layer transformers with
#: 9 norms (embeddings and final included) and 4 GELUs; every Conv+BatchNormalization pair folded.
DEFAULT_EXPECTED = {
    "bert": {"attention": 4, "norm": 9, "gelu": 4},
    "gpt2": {"attention": 4, "norm": 9, "gelu": 4},
    "vit": {"attention": 4, "norm": 9, "gelu": 4},
    "resnet": {"bn_left": 0},
}
#: MANIFEST "expected fusions" keys -> the fused-op categories of _metrics.FUSED_OPS.
_MANIFEST_KEYS = {"attention": "attention", "layernorm": "norm", "rmsnorm": "norm", "gelu": "gelu",
                  "conv_bn": "bn_left"}
#: Families whose transformer blocks the fusion targets of issue 4 cover.
TRANSFORMERS = {"bert", "distilbert", "roberta", "vit", "wav2vec2", "gpt2", "llama", "t5", "whisper"}


@dataclass(frozen=True)
class ModelCase:
    """One benchmark model and its data files (None when absent)."""

    name: str
    path: Path
    inputs: Path | None
    outputs: Path | None

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def variant(self) -> str:
        return self.name.split(".", 1)[1] if "." in self.name else ""

    @property
    def ort_model_type(self) -> str:
        """The transformers optimizer's model_type; ``bert`` (its default) for families it has none for."""
        return ORT_MODEL_TYPE.get(self.family, "bert")

    @property
    def is_transformer(self) -> bool:
        return self.family in TRANSFORMERS


def discover(folder: Path, patterns: list[str] | None = None, quick: bool = False) -> list[ModelCase]:
    """The models of ``folder`` (sorted), filtered by glob ``patterns`` on the name, or the QUICK set."""
    cases = []
    for path in sorted(folder.glob("*.onnx")):
        name = path.name[: -len(".onnx")]
        if quick and not patterns and name not in QUICK:
            continue
        if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
            continue
        inputs, outputs = folder / f"{name}.inputs.npz", folder / f"{name}.outputs.npz"
        cases.append(ModelCase(name, path, inputs if inputs.exists() else None,
                               outputs if outputs.exists() else None))
    if quick and not cases:  # a folder without the QUICK names: its first four models
        return discover(folder, patterns)[:4]
    return cases


def expected_fusions(folder: Path) -> dict[str, dict[str, int]]:
    """Expected fused-op counts per model name, from the folder's MANIFEST.md "expected fusions" column.

    Conv+BN pairs become ``bn_left: 0``. Models the manifest does not cover get ``DEFAULT_EXPECTED`` by family
    (see ``expected_for``).
    """
    manifest = folder / "MANIFEST.md"
    if not manifest.exists():
        return {}
    rows = [line.strip().strip("|").split("|") for line in manifest.read_text().splitlines()
            if line.startswith("|")]
    if not rows:
        return {}
    header = [cell.strip() for cell in rows[0]]
    if "expected fusions" not in header or "file" not in header:
        return {}
    col, file_col = header.index("expected fusions"), header.index("file")
    found = {}
    for row in rows[2:]:
        name = row[file_col].strip().removesuffix(".onnx")
        found[name] = _parse_expected(row[col])
    return found


def _parse_expected(text: str) -> dict[str, int]:
    expected: dict[str, int] = {}
    for item in text.split(","):
        key, _, count = item.strip().rpartition(" ")
        category = _MANIFEST_KEYS.get(key)
        if category == "bn_left":
            expected["bn_left"] = 0
        elif category and count.isdigit():
            expected[category] = expected.get(category, 0) + int(count)
    return expected


def expected_for(case: ModelCase, manifest: dict[str, dict[str, int]]) -> dict[str, int]:
    """What a complete fusion of ``case`` contains (empty when unknown)."""
    if case.name in manifest:
        return manifest[case.name]
    return dict(DEFAULT_EXPECTED.get(case.family, {}))
