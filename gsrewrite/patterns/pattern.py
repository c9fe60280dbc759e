"""Pattern files: TOML holding a family of patterns, each a match and a replace template.

Reading a pattern file never executes code: it is TOML (data) with templates in the ONNX textual syntax.
Python enters only through *named* checks and computations that plugins register; a pattern file refers to
them by name. See docs/writing_patterns.md for the format.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsrewrite.errors import PatternError
from gsrewrite.model_io.user_files import open_regular
from gsrewrite.patterns.fragments import Fragment, check_calls, expand, required_ops
from gsrewrite.patterns.lint import lint
from gsrewrite.patterns.template import Capture, TemplateGraph, parse_template

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TARGETS = ("onnx", "ort")
#: where the rewritten model will run (``--device``): a pattern may pay off on one kind of device only
DEVICES = ("cpu", "gpu")
_FILE_KEYS = {"family", "description", "fragment", "pattern"}
_PATTERN_KEYS = {
    "name", "description", "target", "opset", "priority", "constants", "optional", "checks", "compute",
    "tolerance", "match", "replace", "base", "devices", "narrows",
}
#: what a pattern takes over from its ``base`` (an earlier pattern of the same file) unless it sets it
_INHERITED = ("match", "opset", "priority", "constants", "optional", "checks", "compute", "tolerance", "devices",
              "narrows")


@dataclass
class Variant:
    """One concrete match template of a pattern (a combination of fragment forms)."""

    label: str
    template: TemplateGraph
    #: the pattern's output names -> the name this variant binds them to (optional steps alias them)
    outputs: dict[str, str] = field(default_factory=dict)
    #: the matcher's search plan for this variant, built on first use (it lives and dies with the variant)
    plan: Any = field(default=None, compare=False, repr=False)

    @property
    def size(self) -> int:
        return len(self.template.nodes)


@dataclass
class Pattern:
    """A rewrite rule: match variants, one replacement, and the named Python it relies on.

    ``match`` may call fragments; its concrete :attr:`variants` are expanded on first use (most patterns
    never are in a given model: :attr:`required_ops` rules them out first).
    """

    name: str
    family: str
    description: str
    replacements: dict[str, TemplateGraph]
    match: TemplateGraph
    fragments: dict[str, Fragment] = field(default_factory=dict)
    opset: tuple[int, int] = (1, 10_000)
    priority: int | None = None
    #: ``priority = "+1"``: each variant's node count plus this (tried before a base's variants of its size)
    priority_offset: int = 0
    constants: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    checks: tuple[str, ...] = ()
    compute: dict[str, str] = field(default_factory=dict)
    tolerance: float = 1e-4
    #: the devices the rewrite pays off on (``--device``); elsewhere the pattern is skipped with a reason
    devices: tuple[str, ...] = DEVICES
    #: target -> the input contracts (:mod:`gsrewrite.contracts`) its replacement narrows the model to: used only
    #: when the user asks for every one of them
    narrows: dict[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = ""
    match_text: str = ""
    replace_texts: dict[str, str] = field(default_factory=dict)
    #: expansions shared by the patterns of one file (``base`` patterns repeat a match text)
    _expansions: dict[str, list[Variant]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def targets(self) -> list[str]:
        return list(self.replacements)

    @functools.cached_property
    def variants(self) -> list[Variant]:
        """The concrete match templates, one per combination of fragment forms (PatternError if none)."""
        key = self.match_text or str(id(self.match))
        variants = self._expansions.get(key)
        if variants is None:
            here = f"{self.source}: pattern {self.name!r} (match)"
            variants = [Variant(label, t, dict(zip(self.match.outputs, t.outputs, strict=True)))
                        for label, t in expand(self.match, self.fragments, here)]
            if not variants:
                raise PatternError(f"{here}: every combination of fragment forms is degenerate")
            self._expansions[key] = variants
        return variants

    @functools.cached_property
    def known_names(self) -> frozenset[str]:
        """Every name a check or computation may read of a match: tensors, node labels and captures of every
        variant, the pattern's outputs, and its computed values."""
        names: set[str] = set(self.compute) | set(self.match.outputs)
        for variant in self.variants:
            names |= template_names(variant.template)
        return frozenset(names)

    @functools.cached_property
    def required_ops(self) -> Counter:
        """(domain, op) counts every variant has: a graph with fewer cannot match (no expansion needed)."""
        return required_ops(self.match, self.fragments)

    def variant_priority(self, variant: Variant) -> int:
        """Explicit priority if set, else the variant's node count (plus ``priority_offset``): larger matches go
        first."""
        return self.priority if self.priority is not None else variant.size + self.priority_offset

    def to_dict(self) -> dict[str, Any]:
        offset = f"{self.priority_offset:+d}" if self.priority is None and self.priority_offset else None
        return {
            "name": self.name, "family": self.family, "description": self.description, "targets": self.targets,
            "devices": list(self.devices), "opset": list(self.opset), "priority": offset or self.priority,
            "variants": len(self.variants), "nodes": max(v.size for v in self.variants), "checks": list(self.checks),
            "compute": dict(self.compute), "narrows": {t: list(c) for t, c in self.narrows.items()},
            "source": self.source,
        }


def load_pattern(path: str | Path) -> list[Pattern]:
    """Read a pattern file (one family, one or more patterns). Raises PatternError on any problem.

    Parsed files are cached per process by path, size and modification time (patterns are not mutated).
    """
    path = Path(path)
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise PatternError(f"pattern file not found: {path}") from None
    except OSError as exc:
        raise PatternError(f"cannot read pattern file {path}: {exc}") from None
    return list(_load_cached(str(path), stat.st_size, stat.st_mtime_ns))


def template_names(template: TemplateGraph) -> set[str]:
    """Tensor names, node labels and capture names of one template."""
    names = set(template.inputs) | set(template.outputs) | set(template.constants) | set(template.producer)
    names |= set(template.consumers)
    for node in template.nodes:
        names.add(node.label)
        names |= {value.name for value in node.attrs.values() if isinstance(value, Capture)}
    return names


@functools.lru_cache(maxsize=256)
def _load_cached(path: str, _size: int, _mtime_ns: int) -> tuple[Pattern, ...]:
    """One file's patterns, parsed."""
    file = Path(path)
    with open_regular(file, "pattern file", PatternError) as f:  # a FIFO would block, a device never end
        try:
            raw = f.read()
        except OSError as exc:
            raise PatternError(f"cannot read pattern file {file}: {exc}") from None
    return tuple(_parse_file(file, raw))


def _parse_file(path: Path, raw: bytes) -> list[Pattern]:
    try:
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text
        data = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise PatternError(f"cannot read pattern file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PatternError(f"{path}: not valid TOML: {exc}") from None
    patterns = parse_pattern_data(data, str(path))
    lint(patterns, str(path), text)
    return patterns


def parse_pattern_data(data: dict[str, Any], where: str) -> list[Pattern]:
    _no_unknown_keys(data, _FILE_KEYS, where)
    family = _require_str(data, "family", where)
    fragments = _fragments(data.get("fragment", []), where)
    entries = data.get("pattern", [])
    if not isinstance(entries, list) or not entries:
        raise PatternError(f"{where}: needs at least one [[pattern]] table")
    expansions: dict[str, list[Variant]] = {}
    patterns = [_pattern(entry, family, fragments, where, expansions) for entry in _with_bases(entries, where)]
    names = [p.name for p in patterns]
    for name in names:
        if names.count(name) > 1:
            raise PatternError(f"{where}: pattern name {name!r} used twice")
    return patterns


def _with_bases(entries: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Resolve ``base = "NAME"``: take over the named earlier pattern's match and the settings not given."""
    seen: dict[str, dict[str, Any]] = {}
    resolved = []
    for entry in entries:
        base_name = entry.get("base")
        if base_name is not None:
            base = seen.get(base_name)
            if base is None:
                raise PatternError(f"{where}: base {base_name!r} must name an earlier pattern of this file")
            merged = {k: base[k] for k in _INHERITED if k in base}
            merged.update({k: v for k, v in entry.items() if k != "base"})
            entry = merged
        if isinstance(entry.get("name"), str):
            seen[entry["name"]] = entry
        resolved.append(entry)
    return resolved


def _fragments(entries: Any, where: str) -> dict[str, Fragment]:
    fragments: dict[str, Fragment] = {}
    for entry in entries:
        name = _require_str(entry, "name", f"{where}: fragment")
        forms = entry.get("forms")
        if not isinstance(forms, list) or not forms:
            raise PatternError(f"{where}: fragment {name!r} needs a non-empty 'forms' list")
        fragments[name] = Fragment(name, [parse_template(f, f"{where}: fragment {name}") for f in forms])
    return fragments


def _pattern(entry: dict[str, Any], family: str, fragments: dict[str, Fragment], where: str,
             expansions: dict[str, list[Variant]]) -> Pattern:
    name = _require_str(entry, "name", f"{where}: pattern")
    here = f"{where}: pattern {name!r}"
    _no_unknown_keys(entry, _PATTERN_KEYS, here)
    match_text = _require_str(entry, "match", here)
    replace_texts = _replace_texts(entry, here)
    match = parse_template(match_text, f"{here} (match)")
    replacements = {t: parse_template(text, f"{here} (replace.{t})") for t, text in replace_texts.items()}
    check_calls(match, fragments, f"{here} (match)")
    priority, offset = _priority(entry, here)
    pattern = Pattern(
        name=name, family=family, description=str(entry.get("description", "")).strip(),
        replacements=replacements, match=match, fragments=fragments, _expansions=expansions,
        opset=_opset_range(entry.get("opset"), here),
        priority=priority, priority_offset=offset, constants=frozenset(_str_list(entry, "constants", here)),
        optional=frozenset(_str_list(entry, "optional", here)),
        checks=tuple(_str_list(entry, "checks", here)), compute=_compute(entry.get("compute", {}), here),
        tolerance=float(entry.get("tolerance", 1e-4)), devices=_devices(entry, here),
        narrows=_narrows(entry, replace_texts, here), source=where,
        match_text=match_text.strip(),
        replace_texts={t: text.strip() for t, text in replace_texts.items()},
    )
    for target, replacement in replacements.items():
        _check_interfaces(pattern, match, replacement, f"{here} (replace.{target})")
    return pattern


def _replace_texts(entry: dict[str, Any], here: str) -> dict[str, str]:
    """``replace = "..."`` (for ``target``, default onnx) or ``replace = {onnx = "...", ort = "..."}``."""
    value = entry.get("replace")
    if isinstance(value, str):
        target = entry.get("target", "onnx")
        if target not in TARGETS:
            raise PatternError(f"{here}: target must be one of {', '.join(TARGETS)}, not {target!r}")
        return {target: value}
    if isinstance(value, dict) and value and all(isinstance(v, str) for v in value.values()):
        unknown = set(value) - set(TARGETS)
        if unknown:
            raise PatternError(f"{here}: replace targets must be among {', '.join(TARGETS)}: {sorted(unknown)}")
        if "target" in entry:
            raise PatternError(f"{here}: give either 'target' with a replace string, or a replace table")
        return dict(value)
    raise PatternError(f"{here}: 'replace' must be a template string or a table of target = template")


def _check_interfaces(p: Pattern, match: TemplateGraph, r: TemplateGraph, here: str) -> None:
    if sorted(r.outputs) != sorted(match.outputs):
        raise PatternError(f"{here}: replace outputs {r.outputs} differ from match outputs {match.outputs}")
    available = set(match.inputs) | set(p.compute)
    for name in r.inputs:
        if name not in available:
            raise PatternError(f"{here}: replace input {name!r} is neither a match input nor computed")
    for name in p.constants | p.optional:
        if name not in match.inputs:
            raise PatternError(f"{here}: 'constants'/'optional' names {name!r}, which is not a match input")
    templates = [match, *(form for fragment in p.fragments.values() for form in fragment.forms)]
    captures = {v.name for t in templates for n in t.nodes for v in n.attrs.values() if isinstance(v, Capture)}
    refs = {v.name for n in r.nodes for v in n.attrs.values() if isinstance(v, Capture)}
    for ref in sorted(refs - captures - set(match.inputs) - set(p.compute)):
        raise PatternError(f"{here}: replace refers to @{ref}, which the match does not capture")


def _opset_range(value: Any, here: str) -> tuple[int, int]:
    if value is None:
        return (1, 10_000)
    if isinstance(value, int):
        return (value, 10_000)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (value[0], value[1])
    raise PatternError(f"{here}: opset must be an integer (minimum) or [min, max], not {value!r}")


def _priority(entry: dict[str, Any], here: str) -> tuple[int | None, int]:
    """``priority = 19`` (absolute), ``priority = "+1"`` (each variant's node count plus 1), or none."""
    value = entry.get("priority")
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value, 0
    if isinstance(value, str) and value[:1] in "+-" and value[1:].strip().isdigit():
        return None, int(value)
    raise PatternError(f"{here}: priority must be an integer or a node-count offset such as \"+1\", not {value!r}")


def _narrows(entry: dict[str, Any], replacements: dict[str, str], here: str) -> dict[str, tuple[str, ...]]:
    """``narrows = { ort = "batch1-chunks" }``, or a list of contracts a replacement needs all of."""
    from gsrewrite.contracts import CONTRACTS

    value = entry.get("narrows", {})
    def named(v: Any) -> bool:
        return isinstance(v, str) or (isinstance(v, list) and bool(v) and all(isinstance(c, str) for c in v))

    if not isinstance(value, dict) or not all(isinstance(k, str) and named(v) for k, v in value.items()):
        raise PatternError(f"{here}: narrows must be a table target -> contract name (or a list of them), "
                           f"not {value!r}")
    out: dict[str, tuple[str, ...]] = {}
    for target, contracts in value.items():
        if target not in replacements:
            raise PatternError(f"{here}: narrows names the target {target!r}, which has no replacement")
        names = (contracts,) if isinstance(contracts, str) else tuple(dict.fromkeys(contracts))
        for contract in names:
            if contract not in CONTRACTS:
                raise PatternError(f"{here}: narrows names the unknown contract {contract!r} "
                                   f"(known: {', '.join(CONTRACTS)})")
        out[target] = names
    return out


def _devices(entry: dict[str, Any], here: str) -> tuple[str, ...]:
    if "devices" not in entry:
        return DEVICES
    devices = _str_list(entry, "devices", here)
    unknown = [d for d in devices if d not in DEVICES]
    if unknown or not devices:
        raise PatternError(f"{here}: devices must be a non-empty list among {', '.join(DEVICES)}, not {devices!r}")
    return tuple(d for d in DEVICES if d in devices)


def _compute(value: Any, here: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise PatternError(f"{here}: compute must be a table of value-name = \"function-name\"")
    return dict(value)


def _require_str(data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise PatternError(f"{where}: missing or empty '{key}'")
    return value


def _str_list(data: dict[str, Any], key: str, where: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PatternError(f"{where}: '{key}' must be a list of names")
    return value


def _no_unknown_keys(data: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(data) - allowed
    if unknown:
        raise PatternError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
