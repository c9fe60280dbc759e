"""onnxruntime-genai's model builder on the SmolLM2 HF folder, and its own generate loop."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_NEW = 48


def command(hf: Path, out: Path, precision: str, cache: Path) -> list[str]:
    """The builder's command line (as documented by onnxruntime-genai)."""
    return [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
            "-p", precision, "-e", "cpu", "-c", str(cache)]  # fmt: skip


def build(hf: Path, out: Path, precision: str) -> dict[str, Any]:
    """Run the builder (``precision``: fp32 / int4) into ``out``; its log goes to ``out/../<out name>.log``."""
    logfile = out.with_name(out.name + ".log")
    with tempfile.TemporaryDirectory() as cache:
        cmd = command(hf, out, precision, Path(cache))
        log.info("running %s", " ".join(cmd))
        start = time.perf_counter()
        with logfile.open("w") as fh:
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            subprocess.run(cmd, check=True, stdout=fh, stderr=subprocess.STDOUT, env=env)
        seconds = time.perf_counter() - start
    shown = ["python", "-m", "onnxruntime_genai.models.builder", "-i", hf.name, "-o", out.name, "-p", precision,
             "-e", "cpu"]  # fmt: skip
    log.info("builder %s: %.1f s", precision, seconds)
    return {"command": " ".join(shown), "build_s": round(seconds, 1)}


def generate(model_dir: Path, prompt: str, max_new: int = MAX_NEW) -> tuple[str, float]:
    """onnxruntime-genai's greedy generate loop on ``prompt`` (already chat-templated): (answer, seconds)."""
    import onnxruntime_genai as og

    if hasattr(og, "disable_telemetry_events"):
        og.disable_telemetry_events()
    start = time.perf_counter()
    model = og.Model(str(model_dir))
    tok = og.Tokenizer(model)
    ids = tok.encode(prompt)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + max_new, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(ids)
    while not gen.is_done():
        gen.generate_next_token()
    text = tok.decode(gen.get_sequence(0)[len(ids) :])
    return text, time.perf_counter() - start
