"""The subprocess side of compare.py: one tool run, one probe, or one latency measurement per process.

    python benchmarks/_worker.py tool RESULT.json NAME SRC OUT HINTS_JSON
    python benchmarks/_worker.py probe RESULT.json MODEL INPUTS REFERENCE|-
    python benchmarks/_worker.py latency RESULT.json INPUTS RUNS MODEL [MODEL ...]

Each writes its result as JSON to RESULT.json, or ``{"error": ...}`` when the tool or onnxruntime raised.
A process that dies (a C++ abort in a peer) writes nothing; the parent (_isolate.py) reports the signal.
``tool`` times only the adapter call (load -> optimize -> save): imports happen before the clock starts.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any


def _tool(name: str, src: str, out: str, hints: str) -> dict[str, Any]:
    import _tools

    tool = _tools.TOOLS[name]
    _tools.prepare(tool)
    start = time.perf_counter()
    try:
        note = tool.run(Path(src), Path(out), json.loads(hints))
    except NotImplementedError as exc:
        return {"unavailable": str(exc)}
    seconds = time.perf_counter() - start
    if not Path(out).exists():
        return {"error": "no output model written", "seconds": seconds}
    return {"seconds": seconds, "note": note}


def _probe(model: str, inputs: str, reference: str) -> dict[str, Any]:
    import _metrics

    return _metrics.probe(Path(model), Path(inputs), None if reference == "-" else Path(reference))


def _latency(inputs: str, runs: str, *models: str) -> dict[str, Any]:
    import _metrics

    return {"latency": _metrics.latencies([Path(m) for m in models], Path(inputs), int(runs))}


COMMANDS = {"tool": _tool, "probe": _probe, "latency": _latency}


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    if len(argv) < 2 or argv[0] not in COMMANDS:
        print(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    command, result_path, *args = argv
    try:
        result = COMMANDS[command](*args)
    except Exception as exc:  # the tool's or onnxruntime's failure is a result, not a crash
        first = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ""
        result = {"error": f"{type(exc).__name__}: {first}",
                  "trace": traceback.format_exc(limit=-3)[-2000:]}
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
