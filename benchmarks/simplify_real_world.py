"""simplify against onnxsim and onnxslim on the real-world-shaped fixtures (tests/fixtures/real_world.py):
node count of each tool's output, whether onnxruntime's outputs agree with the original's on the sample inputs,
wall time. ``pip install '.[bench]'`` for the peers.

    python benchmarks/simplify_real_world.py        # prints a markdown table
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "fixtures"))

from real_world import build_all  # noqa: E402


def _gsrewrite(path: Path, out: Path, inputs: Path) -> None:
    import gsrewrite
    from gsrewrite.pipelines import ValidationOptions

    result = gsrewrite.simplify(str(path), validate=ValidationOptions(inputs=str(inputs)))
    gsrewrite.save_model(result.model, out)


def _onnxsim(path: Path, out: Path, inputs: Path) -> None:
    import onnxsim

    model, ok = onnxsim.simplify(onnx.load(path))
    if not ok:
        raise RuntimeError("onnxsim's own check failed")
    onnx.save(model, out)


def _onnxslim(path: Path, out: Path, inputs: Path) -> None:
    import onnxslim

    onnx.save(onnxslim.slim(onnx.load(path)), out)


TOOLS: dict[str, Callable[[Path, Path, Path], None]] = {
    "gsrewrite simplify": _gsrewrite, "onnxsim": _onnxsim, "onnxslim": _onnxslim}


def _agrees(original: Path, candidate: Path, feeds: dict[str, np.ndarray]) -> bool:
    runs = []
    for path in (original, candidate):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        runs.append(session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()}))
    return all(np.allclose(a, b, atol=1e-4, rtol=1e-3) for a, b in zip(*runs, strict=True))


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, feeds) in build_all().items():
            path, inputs = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}.npz"
            onnx.save(model, path)
            np.savez(inputs, **feeds)
            row = [name, str(len(model.graph.node))]
            for tool, run in TOOLS.items():
                out = Path(tmp) / f"{name}.{tool.split()[0]}.onnx"
                start = time.perf_counter()
                try:
                    run(path, out, inputs)
                except Exception as exc:  # a peer failing is a result
                    row.append(f"fails ({type(exc).__name__})")
                    continue
                seconds = time.perf_counter() - start
                nodes = len(onnx.load(out).graph.node)
                try:
                    verdict = "ok" if _agrees(path, out, feeds) else "MISMATCH"
                except Exception as exc:  # onnxruntime rejects the peer's output
                    verdict = f"does not load ({type(exc).__name__})"
                row.append(f"{nodes} {verdict} {seconds:.2f}s")
            rows.append(row)
    print("| model | nodes | " + " | ".join(TOOLS) + " |")
    print("|---" * (len(TOOLS) + 2) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
