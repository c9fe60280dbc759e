"""The docs name real things: every file path (``gsrewrite/...``, ``plugins/...``, ``patterns/...``, ``tests/...``,
``benchmarks/...``) named in README.md and docs/*.md exists in the repository, and every dotted name
(``gsrewrite.x.y``, ``gsrewrite_builtins.x``, ``gsrewrite_patterns.x``) imports (a module, or an attribute of one).

Conventions the docs use and this test reads: a path under a subpackage of gsrewrite may leave out ``gsrewrite/``
(``engine/dedupe.py``); a bare file name listed right after a path is in that path's folder
(``gsrewrite/graph/core.py``, ``conversion.py``); ``<name>`` and ``*`` are placeholders (at least one file must
match). Folders that scripts generate and git ignores (``benchmarks/_work``) are not checked.

Plugin code shown in the docs (a Python block with ``@hookimpl``) imports gsrewrite only through
``gsrewrite.plugin_api``, as the import contract requires of plugins.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
ROOTS = ("gsrewrite", "plugins", "patterns", "tests", "benchmarks", "docs", "examples")
GENERATED = ("benchmarks/_work",)
SUBPACKAGES = tuple(p.name for p in (ROOT / "gsrewrite").iterdir() if (p / "__init__.py").is_file())
#: a path: a root or gsrewrite subpackage folder, then path characters (placeholders included)
PATH = re.compile(r"(?<![\w/.:-])((?:" + "|".join(ROOTS + SUBPACKAGES) + r")/[\w./*<>-]*)")
#: a bare file name in backquotes
BARE = re.compile(r"`([\w-]+\.(?:py|toml|md|json))`")
DOTTED = re.compile(r"(?<![\w./-])(gsrewrite(?:_builtins|_patterns)?(?:\.[A-Za-z_]\w*)+)")


def _lines() -> list[tuple[str, int, str]]:
    return [(doc.name, number, line) for doc in DOCS
            for number, line in enumerate(doc.read_text().splitlines(), start=1)]


def _resolve(path: str) -> Path:
    path = path.rstrip(".")
    if path.split("/")[0] in SUBPACKAGES and not (ROOT / path).exists():
        path = f"gsrewrite/{path}"
    return ROOT / path


def _exists(path: Path) -> bool:
    relative = path.relative_to(ROOT).as_posix()
    if relative.startswith(GENERATED):
        return True
    pattern = re.sub(r"<[^>]*>", "*", relative)
    return any(ROOT.glob(pattern)) if "*" in pattern else path.exists()


def _missing_paths() -> list[str]:
    missing = []
    for doc, number, line in _lines():
        folder, end = None, 0
        for match in sorted([*PATH.finditer(line), *BARE.finditer(line)], key=lambda m: m.start()):
            text, listed = match.group(1), line[end:match.start()].strip("` ") in (",", "and", ", and", "or")
            end = match.end() + 1
            if "/" in text:
                path = _resolve(text)
                folder = path.parent
            elif folder is not None and listed:
                path = folder / text
            else:
                folder = None
                if not (ROOT / text).exists():
                    continue  # a bare name not listed after a path: not a path this test can place
                path = ROOT / text
            if not _exists(path):
                missing.append(f"{doc}:{number}: {text}")
    return missing


def _unimportable() -> list[str]:
    bad = []
    for doc, number, line in _lines():
        for name in DOTTED.findall(line):
            if not _importable(name):
                bad.append(f"{doc}:{number}: {name}")
    return bad


def _plugin_imports() -> list[str]:
    """``from gsrewrite... import`` lines of plugin code blocks (``@hookimpl``) other than plugin_api's."""
    bad = []
    for doc in DOCS:
        for block in re.findall(r"```python\n(.*?)```", doc.read_text(), re.DOTALL):
            if "@hookimpl" in block:
                bad += [f"{doc.name}: {line.strip()}" for line in block.splitlines()
                        if re.match(r"\s*(from|import) gsrewrite\b(?!\.plugin_api\b)", line)]
    return bad


def _importable(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def test_every_path_named_in_the_docs_exists() -> None:
    assert not _missing_paths(), "\n".join(_missing_paths())


def test_every_dotted_name_in_the_docs_imports() -> None:
    assert not _unimportable(), "\n".join(_unimportable())


def test_plugin_examples_import_only_the_plugin_api() -> None:
    assert not _plugin_imports(), "\n".join(_plugin_imports())


def test_the_variant_count_design_md_quotes_is_the_registry_s() -> None:
    from gsrewrite.patterns import default_registry

    quoted = re.findall(r"the `(\S+)` family's (\d+) variants", (ROOT / "docs" / "design.md").read_text())
    families = default_registry().families()
    assert quoted
    for family, count in quoted:
        assert int(count) == sum(len(p.variants) for p in families[family]), family


@pytest.mark.parametrize(("line", "found"), [
    ("see `gsrewrite/graph/core.py`, `conversion.py` and `nope.py`", ["nope.py"]),
    ("`plugins/gsrewrite_builtins/profilers/`, `compression/`, `shape_handlers.py`", []),
    ("`plugins/gsrewrite-example` has its own `pyproject.toml`", []),
    ("the check (`engine/dedupe.py`) and `engine/gone.py`", ["engine/gone.py"]),
    ("`tests/patterns/test_<family>.py`, `tests/patterns/test_<none>.txt`", ["tests/patterns/test_<none>.txt"]),
    ("https://example.com/tests/x.py and benchmarks/_work/base/ (generated)", []),
])
def test_the_path_reader_on_the_docs_conventions(line: str, found: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}._lines", lambda: [("doc.md", 1, line)])
    assert [m.split(": ", 1)[1] for m in _missing_paths()] == found


def test_the_name_reader_takes_modules_and_their_attributes() -> None:
    assert _importable("gsrewrite.patterns.registry.PatternRegistry")
    assert _importable("gsrewrite.plugin_api.DimValue")
    assert not _importable("gsrewrite.patterns.no_such_module")
    assert not _importable("gsrewrite.patterns.registry.NoSuchClass")
