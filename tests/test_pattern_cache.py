"""The disk cache of parsed pattern files: the same patterns as parsing, and never in the way."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from gsrewrite.patterns import cache
from gsrewrite.patterns import pattern as pattern_module
from gsrewrite.patterns.pattern import load_pattern

BUILTIN = sorted(Path(str(resources.files("gsrewrite_patterns"))).rglob("*.toml"))


def _same(a: object, b: object, where: str = "") -> None:
    """Deep equality of parsed patterns (dataclasses, containers, NumPy arrays with their dtypes)."""
    assert type(a) is type(b), where
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            if f.name not in ("_expansions",):
                _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _fresh(path: Path) -> list:
    return pattern_module._parse_file(path, path.read_bytes())


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    pattern_module._load_cached.cache_clear()
    yield tmp_path / "patterns"
    pattern_module._load_cached.cache_clear()


@pytest.mark.parametrize("path", BUILTIN, ids=[p.stem for p in BUILTIN])
def test_every_builtin_file_comes_back_from_the_cache_as_parsed(path: Path, cache_dir: Path) -> None:
    raw = path.read_bytes()
    parsed = _fresh(path)
    cache.store(path, raw, parsed)
    cached = cache.load(path, raw)
    assert cached is not None and len(cached) == len(parsed)
    for a, b in zip(parsed, cached, strict=True):
        _same(a, b, a.name)
        assert [v.label for v in a.variants] == [v.label for v in b.variants]
        assert a.required_ops == b.required_ops
    assert len({id(p._expansions) for p in cached}) == 1  # one expansion table per file, as when parsing


def test_a_cached_file_is_not_parsed_again(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = next(p for p in BUILTIN if p.stem == "layernorm")
    first = load_pattern(path)
    assert list(cache_dir.glob("*.json"))
    pattern_module._load_cached.cache_clear()

    def no_parsing(*args: object) -> None:
        raise AssertionError("parsed although cached")

    monkeypatch.setattr(pattern_module, "parse_pattern_data", no_parsing)
    again = load_pattern(path)
    for a, b in zip(first, again, strict=True):
        _same(a, b, a.name)


def test_an_edited_file_never_meets_its_old_entry(tmp_path: Path, cache_dir: Path) -> None:
    source = next(p for p in BUILTIN if p.stem == "gelu")
    path = tmp_path / "mine.toml"
    path.write_bytes(source.read_bytes())
    before = load_pattern(path)
    text = source.read_text().replace('family = "gelu"', 'family = "my-gelu"')
    assert text != source.read_text()
    path.write_text(text)
    pattern_module._load_cached.cache_clear()
    after = load_pattern(path)
    assert {p.family for p in before} == {"gelu"} and {p.family for p in after} == {"my-gelu"}
    assert len(list(cache_dir.glob("*.json"))) == 2


def test_a_corrupt_entry_is_parsed_over(cache_dir: Path) -> None:
    path = next(p for p in BUILTIN if p.stem == "layernorm")
    expected = load_pattern(path)
    (entry,) = cache_dir.glob("*.json")
    entry.write_text('{"format": 1, "fragments": {}, "patterns": [{"name": 3}]}')
    pattern_module._load_cached.cache_clear()
    assert cache.load(path, path.read_bytes()) is None
    for a, b in zip(expected, load_pattern(path), strict=True):
        _same(a, b, a.name)
    assert cache.load(path, path.read_bytes()) is not None  # rewritten


def test_no_cache_when_disabled_or_unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = next(p for p in BUILTIN if p.stem == "gelu")
    monkeypatch.setenv(cache.CACHE_ENV, "")
    pattern_module._load_cached.cache_clear()
    assert cache.cache_folder() is None and load_pattern(path)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocker))  # <file>/patterns cannot be created
    pattern_module._load_cached.cache_clear()
    assert load_pattern(path)
    assert blocker.read_text() == "not a folder"
    pattern_module._load_cached.cache_clear()


def test_values_outside_the_encoding_are_not_cached(cache_dir: Path) -> None:
    path = next(p for p in BUILTIN if p.stem == "gelu")
    patterns = _fresh(path)
    patterns[0].match.nodes[0].attrs["odd"] = object()
    cache.store(path, path.read_bytes(), patterns)
    assert not cache_dir.exists() or not list(cache_dir.glob("*.json"))
