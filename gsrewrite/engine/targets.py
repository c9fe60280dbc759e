"""What a rewrite may emit for a target: never an op the model's opset (or the target runtime) cannot hold.

* ``onnx``: standard ONNX ops only, each defined at the model's opset (Gelu needs 20, LayerNormalization 17,
  Attention/RMSNormalization/RotaryEmbedding 23). Below that the pattern is skipped with a reason; the user
  may raise the model's opset with ``--opset``.
* ``ort``: additionally the onnxruntime contrib ops (domain ``com.microsoft``) and the few standard-domain ops
  onnxruntime registers for every opset (LayerNormalization, SimplifiedLayerNormalization).

The device (``cpu``, the default, or ``gpu``) says where the model will run: a pattern that pays off on one
kind only says so (``devices`` in its file) and is skipped, with a reason, for the other.
onnxruntime's SkipLayerNormalization is the case: a fused kernel on GPU, several times slower than
LayerNormalization on CPU.
"""

from __future__ import annotations

from gsrewrite.engine.opforms import first_opset, op_exists
from gsrewrite.errors import UsageError
from gsrewrite.patterns.pattern import DEVICES, Pattern
from gsrewrite.patterns.template import TemplateGraph

TARGETS = ("onnx", "ort")
ORT_DOMAIN = "com.microsoft"
#: standard-domain ops onnxruntime runs at any opset (it registers them from opset 1).
ORT_ANY_OPSET = frozenset({"LayerNormalization", "SimplifiedLayerNormalization"})


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise UsageError(f"unknown target {target!r}; choose one of: {', '.join(TARGETS)}")
    return target


def check_device(device: str) -> str:
    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r}; choose one of: {', '.join(DEVICES)}")
    return device


def device_reason(pattern: Pattern, device: str) -> str:
    """Why ``pattern`` is not used for ``device`` ("" if it is)."""
    if device in pattern.devices:
        return ""
    return f"pays off on {'/'.join(pattern.devices)} only, not {device} (--device {pattern.devices[0]} selects it)"


def choose_replacement(pattern: Pattern, target: str, opset: int) -> tuple[TemplateGraph | None, str]:
    """The replacement ``pattern`` uses for ``target`` at ``opset``, or (None, why none can be used).

    For ``ort`` an ``ort`` replacement is preferred and the ``onnx`` one is the fallback; ``onnx`` uses only
    the ``onnx`` replacement.
    """
    low, high = pattern.opset
    if not low <= opset <= high:
        return None, f"applies to opset {low}..{high}, the model has {opset}"
    order = ["ort", "onnx"] if target == "ort" else ["onnx"]
    reasons = []
    for name in order:
        replacement = pattern.replacements.get(name)
        if replacement is None:
            continue
        reason = _template_reason(replacement, target, opset)
        if not reason:
            return replacement, ""
        reasons.append(reason)
    if not reasons:
        return None, "has only onnxruntime contrib replacements; use --target ort"
    return None, reasons[-1]


def _template_reason(replacement: TemplateGraph, target: str, opset: int) -> str:
    for node in replacement.nodes:
        reason = _emit_reason(node.op, node.domain, target, opset)
        if reason:
            return reason
    return ""


def _emit_reason(op: str, domain: str, target: str, opset: int) -> str:
    if domain == ORT_DOMAIN:
        return "" if target == "ort" else f"{domain}.{op} is an onnxruntime contrib op; use --target ort"
    if domain:
        return ""  # a custom domain: the plugin that provides the pattern answers for it
    if op_exists(op, opset):
        return ""
    if target == "ort" and op in ORT_ANY_OPSET:
        return ""
    first = first_opset(op)
    if first is None:
        return f"{op} is not a standard ONNX op"
    return f"{op} needs opset {first}, the model has {opset} (raise it with --opset {first})"

