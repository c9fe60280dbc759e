"""A disk cache of parsed pattern files, in JSON: reading TOML and parsing ~120 templates costs ~9 ms per process.

An entry holds what :func:`gsrewrite.patterns.pattern.parse_pattern_data` built from one file, as plain data
(names, template nodes, attribute values, constant arrays): loading it runs no code from the cache, so that a
pattern file's promise (reading it never executes code) holds for its cache too. The key is a hash of the
file's path and bytes and of the parser's own source, so an edited file or a changed parser never meets an old
entry. Anything the encoding does not cover (an attribute of another kind) is simply not cached; a missing,
unreadable or corrupt entry means parsing the file as usual; failing to write one is not an error.

The folder is ``$GSREWRITE_CACHE_DIR`` (an empty value turns the cache off), else ``$XDG_CACHE_HOME/gsrewrite``,
else ``~/.cache/gsrewrite``; entries live in its ``patterns`` subfolder.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gsrewrite.patterns.fragments import Fragment
from gsrewrite.patterns.template import Capture, TemplateGraph, TNode

if TYPE_CHECKING:
    from gsrewrite.patterns.pattern import Pattern

log = logging.getLogger(__name__)

CACHE_ENV = "GSREWRITE_CACHE_DIR"
_FORMAT = 1


class _Uncacheable(Exception):
    """A value the JSON encoding does not cover: the file is parsed every time instead."""


def cache_folder() -> Path | None:
    """Where entries go, or None when ``$GSREWRITE_CACHE_DIR`` is set empty (no cache)."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return Path(configured) / "patterns" if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gsrewrite" / "patterns"


def load(path: Path, raw: bytes) -> list[Pattern] | None:
    """The patterns cached for the file ``path`` holding ``raw``, or None (no entry, or an unusable one)."""
    entry = _entry(path, raw)
    if entry is None:
        return None
    try:
        data = json.loads(entry.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.debug("pattern cache entry %s unreadable: %s", entry, exc)
        return None
    try:
        return _decode_file(data)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        log.debug("pattern cache entry %s unusable: %s", entry, exc)
        return None


def store(path: Path, raw: bytes, patterns: list[Pattern]) -> None:
    """Cache ``patterns``, parsed from ``raw`` (the bytes of ``path``); quietly does nothing when it cannot."""
    entry = _entry(path, raw)
    if entry is None or not patterns:
        return
    try:
        text = json.dumps(_encode_file(patterns), separators=(",", ":"))
    except _Uncacheable as exc:
        log.debug("%s is not cached: %s", path, exc)
        return
    from gsrewrite.model_io.saving import PendingFile

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        pending = PendingFile(str(entry))
        try:
            pending.file.write(text.encode("utf-8"))
            pending.commit()
        finally:
            pending.discard()  # nothing left to remove once committed
    except OSError as exc:  # a read-only home, a full disk: parse every time
        log.debug("cannot write pattern cache entry %s: %s", entry, exc)


def _entry(path: Path, raw: bytes) -> Path | None:
    folder = cache_folder()
    if folder is None:
        return None
    try:
        digest = hashlib.sha256(_parser_digest())
    except OSError:  # the parser's source cannot be read (a frozen install): no key, no cache
        return None
    digest.update(str(path.resolve()).encode("utf-8", "surrogateescape") + b"\0")
    digest.update(raw)
    return folder / f"{digest.hexdigest()[:40]}.json"


@functools.lru_cache(maxsize=1)
def _parser_digest() -> bytes:
    """A hash of the code that turns pattern files into objects (and of this encoding): entries made by another
    version of it are never used."""
    from gsrewrite.patterns import fragments, pattern, template

    digest = hashlib.sha256(f"format {_FORMAT}".encode())
    for source in (pattern.__file__, template.__file__, fragments.__file__, __file__):
        if not source:
            raise OSError("module without a file")
        digest.update(Path(source).read_bytes())
    return digest.digest()


# --- encoding ---------------------------------------------------------------------------------------------
def _encode_file(patterns: list[Pattern]) -> dict[str, Any]:
    fragments = patterns[0].fragments
    if any(p.fragments is not fragments for p in patterns):
        raise _Uncacheable("patterns of one file with different fragment tables")
    return {
        "format": _FORMAT,
        "fragments": {name: [_encode_template(t) for t in f.forms] for name, f in fragments.items()},
        "patterns": [_encode_pattern(p) for p in patterns],
    }


def _encode_pattern(p: Pattern) -> dict[str, Any]:
    return {
        "name": p.name, "family": p.family, "description": p.description,
        "replacements": {target: _encode_template(t) for target, t in p.replacements.items()},
        "match": _encode_template(p.match), "opset": list(p.opset), "priority": p.priority,
        "constants": sorted(p.constants), "optional": sorted(p.optional), "checks": list(p.checks),
        "compute": dict(p.compute), "tolerance": p.tolerance, "devices": list(p.devices), "source": p.source,
        "match_text": p.match_text, "replace_texts": dict(p.replace_texts),
    }


def _encode_template(t: TemplateGraph) -> dict[str, Any]:
    return {
        "name": t.name, "inputs": list(t.inputs), "outputs": list(t.outputs),
        "constants": {name: _encode_array(value) for name, value in t.constants.items()},
        "nodes": [[n.op, n.domain, list(n.inputs), list(n.outputs),
                   {k: _encode_value(v) for k, v in n.attrs.items()}, n.label] for n in t.nodes],
    }


def _encode_value(value: Any) -> Any:
    if isinstance(value, bool):
        raise _Uncacheable(f"attribute value {value!r}")
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, tuple) and all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
                                        for v in value):
        return {"tuple": list(value)}
    if isinstance(value, np.ndarray):
        return {"array": _encode_array(value)}
    if isinstance(value, Capture):
        return {"capture": [value.name, value.type]}
    raise _Uncacheable(f"attribute value of type {type(value).__name__}")


def _encode_array(value: np.ndarray) -> list[Any]:
    if value.dtype.kind not in "biuf":
        raise _Uncacheable(f"constant of dtype {value.dtype}")
    return [value.dtype.str, list(value.shape), value.ravel().tolist()]


# --- decoding ---------------------------------------------------------------------------------------------
def _decode_file(data: dict[str, Any]) -> list[Pattern]:
    from gsrewrite.patterns.pattern import Pattern

    if data.get("format") != _FORMAT:
        raise ValueError(f"format {data.get('format')!r}")
    fragments = {name: Fragment(name, [_decode_template(t) for t in forms])
                 for name, forms in data["fragments"].items()}
    expansions: dict[str, Any] = {}  # shared by the patterns of one file, as parse_pattern_data shares it
    return [
        Pattern(
            name=p["name"], family=p["family"], description=p["description"],
            replacements={target: _decode_template(t) for target, t in p["replacements"].items()},
            match=_decode_template(p["match"]), fragments=fragments, opset=(p["opset"][0], p["opset"][1]),
            priority=p["priority"], constants=frozenset(p["constants"]), optional=frozenset(p["optional"]),
            checks=tuple(p["checks"]), compute=dict(p["compute"]), tolerance=float(p["tolerance"]),
            devices=tuple(p["devices"]),
            source=p["source"], match_text=p["match_text"], replace_texts=dict(p["replace_texts"]),
            _expansions=expansions,
        )
        for p in data["patterns"]
    ]


def _decode_template(t: dict[str, Any]) -> TemplateGraph:
    nodes = [TNode(op, domain, list(inputs), list(outputs), {k: _decode_value(v) for k, v in attrs.items()}, label)
             for op, domain, inputs, outputs, attrs, label in t["nodes"]]
    constants = {name: _decode_array(value) for name, value in t["constants"].items()}
    return TemplateGraph(t["name"], list(t["inputs"]), list(t["outputs"]), constants, nodes)


def _decode_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if "tuple" in value:
        return tuple(value["tuple"])
    if "array" in value:
        return _decode_array(value["array"])
    name, kind = value["capture"]
    return Capture(name, kind)


def _decode_array(value: list[Any]) -> np.ndarray:
    dtype, shape, items = value
    kind = np.dtype(dtype)
    if kind.kind not in "biuf":
        raise ValueError(f"constant of dtype {kind}")
    return np.array(items, dtype=kind).reshape(shape)
