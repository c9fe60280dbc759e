"""The highest ONNX IR version the installed onnxruntime accepts.

onnx writes models with its newest IR version (onnx 1.23 writes IR 14) even when the installed
onnxruntime only reads older ones. :func:`max_ir_version` asks onnxruntime once per process, by loading
a one-node model stamped with each IR version from the newest down, and falls back to a table of known
releases if probing is impossible. :func:`clamp_ir_version` only ever lowers a version.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

import onnx
from onnx import TensorProto, helper

log = logging.getLogger(__name__)

#: (onnxruntime major, minor) -> highest IR version that release reads; used when probing fails.
_KNOWN_RELEASES: tuple[tuple[tuple[int, int], int], ...] = (
    ((1, 31), 13),
    ((1, 23), 11),
    ((1, 18), 10),
    ((1, 15), 9),
    ((1, 14), 8),
    ((1, 3), 7),
)
_OLDEST_PROBED = 7  # opset 13, used by the probe model, needs IR >= 7


def clamp_ir_version(ir_version: int) -> int:
    """``ir_version`` lowered to what onnxruntime accepts; never raised.

    A version the installed release is known to read (the table) is returned without probing: probing
    creates onnxruntime sessions, which costs tens of milliseconds in a fresh process.
    """
    if ir_version <= known_ir_version():
        return ir_version
    return min(ir_version, max_ir_version())


@functools.cache
def known_ir_version() -> int:
    """The IR version the installed onnxruntime reads according to the table (0 without onnxruntime)."""
    try:
        from importlib.metadata import version

        return ir_version_from_table(version("onnxruntime"))
    except Exception:  # not installed (or unreadable metadata): nothing is known
        return 0


@functools.cache
def max_ir_version() -> int:
    """Highest IR version the installed onnxruntime loads (probed once, then cached)."""
    try:
        import onnxruntime
    except ImportError:
        log.debug("onnxruntime is not installed; not clamping IR versions")
        return onnx.IR_VERSION
    probed = _probe(onnxruntime)
    if probed is not None:
        return probed
    return ir_version_from_table(onnxruntime.__version__)


def _probe(onnxruntime: ModuleType) -> int | None:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    for ir_version in range(onnx.IR_VERSION, _OLDEST_PROBED - 1, -1):
        data = _probe_model(ir_version).SerializeToString()
        try:
            onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for unsupported IR
            log.debug("onnxruntime rejects IR version %d: %s", ir_version, str(exc).splitlines()[0])
            continue
        log.debug("onnxruntime accepts IR version %d", ir_version)
        return ir_version
    return None


def _probe_model(ir_version: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "ir_probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir_version
    return model


def ir_version_from_table(ort_version: str) -> int:
    """The IR version a given onnxruntime release reads, from the table of known releases."""
    try:
        major, minor = (int(part) for part in ort_version.split(".")[:2])
    except ValueError:
        return _KNOWN_RELEASES[-1][1]
    for release, ir_version in _KNOWN_RELEASES:
        if (major, minor) >= release:
            return ir_version
    return _KNOWN_RELEASES[-1][1]
