"""onnxruntime's transformers optimizer outputs of the base-width exports, for never_slower_peers.py.

The optimizer imports torch, which gsrewrite's environment does not have: run this with the fixture venv
(``/work/fixture-venv/bin/python benchmarks/make_ort_optimized.py NAME...``); it writes
benchmarks/_work/peers/NAME.ortopt.onnx (default fusions, model type from the name, 12 heads, hidden 768).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    out = HERE / "_work" / "peers"
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:]:
        kind = next((k for k in ("bert", "gpt2", "vit") if name.startswith(k)), "bert")
        optimized = optimize_model(str(HERE / "_work" / "base" / f"{name}.onnx"), model_type=kind, num_heads=12,
                                   hidden_size=768, opt_level=1)
        optimized.save_model_to_file(str(out / f"{name}.ortopt.onnx"))
        print(name, optimized.get_fused_operator_statistics())


if __name__ == "__main__":
    main()
