"""One report format for every rewriting command (apply, optimize, simplify, compress, ``optimize --tune``), as
data, and the text forms every command's output shares.

A :class:`Report` is a list of blocks: tables (title, columns, rows) and lines. Each result builds its own
(``RewriteResult``, ``SimplifyResult``, ``CompressResult``, ``TuneResult``: ``report_blocks()``) and renders it as
plain text (``result.report()``); the CLI renders the same blocks (gsrewrite/cli/_report.py: rich tables on a
terminal, aligned text elsewhere) or the result's ``to_dict()`` as JSON. Sizes are binary units, labelled as such
(KiB, MiB, GiB).

Text from a model (names of tensors, nodes, inputs) is shown through :func:`printable` in every table and
message (a name could otherwise hold newlines, terminal escape sequences or bidirectional controls), and written
to CSV through :func:`csv_cell` (a cell a spreadsheet would run as a formula is kept as text).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: skips named in the one-line summary up to this many (more: a count, -v lists them)
_NAMED_SKIPS = 4


class Stats(Protocol):
    """What the report reads of a model (see :class:`gsrewrite.simplifier.result.ModelStats`)."""

    @property
    def nodes_total(self) -> int: ...

    @property
    def ops(self) -> dict[str, int]: ...

    @property
    def size(self) -> int: ...

    @property
    def parameters(self) -> int: ...


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


@dataclass
class Report:
    """Blocks in order: :class:`Table` or a line of text."""

    blocks: list[Table | str] = field(default_factory=list)

    def text(self) -> str:
        """The report as plain text (aligned columns, numbers right-aligned; each line one line: see
        :func:`printable`)."""
        parts = [plain_table(b.title, b.columns, b.rows) if isinstance(b, Table) else printable(b)
                 for b in self.blocks]
        return "\n".join(parts)


#: shown as JSON writes them
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Unicode categories shown escaped: controls (C0, DEL, C1: newlines, ESC and the sequences it starts), format
#: characters (bidirectional overrides and isolates, zero-width characters), line and paragraph separators,
#: surrogates
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def printable(text: str) -> str:
    """``text`` as one line a terminal shows as it is: control and format characters (newlines, ESC, OSC and
    other escape sequences, C1 controls, bidirectional controls such as U+202E, zero-width characters) and line
    separators escaped as JSON writes them (``\\n``, ``\\u001b``, ``\\u202e``); everything else, non-ASCII
    letters included, unchanged."""
    if text.isprintable():  # (almost every name: one C-level scan)
        return text
    return "".join(map(_shown, text))


@functools.lru_cache(maxsize=1024)
def _shown(char: str) -> str:
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    if unicodedata.category(char) in _HIDDEN_CATEGORIES:
        code = ord(char)
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return char


#: first characters a spreadsheet reads as the start of a formula (OWASP's CSV injection list)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: text a spreadsheet would run as a formula (it starts with ``= + - @``, a tab or
    a carriage return) gets a leading ``'``, which spreadsheets read as "this is text" (OWASP's rule); a number
    stays a number, negative ones included (``-3``, ``-1.5e3`` cannot be a formula: left as they are, they
    still add up). Other values are unchanged (the name itself, not an escaped form: CSV is data)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def size_text(n: float) -> str:
    """``n`` bytes in binary units: ``512 B``, ``1.5 KiB``, ``255.4 MiB``, ``1.2 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns


def rewrite_report(before: Stats, after: Stats, changes: Mapping[str, Mapping[str, int]], *,
                   dropped: Mapping[str, str] = {}, skipped: Mapping[str, str] = {},
                   verdict: str | None = None, verbose: bool = False) -> Report:
    """The report of a rewrite: changed ops, nodes, parameters and size before/after; changes per pattern or
    pass (``changes``: table title -> name -> count); dropped steps; skipped ones (one line unless
    ``verbose``); the validation verdict (its summary, ``None`` when not validated)."""
    report = Report([Table("Before / after (changed ops)", ("", "before", "after", "change"),
                           _rows(before, after))])
    for title, counts in changes.items():
        if counts:
            report.blocks.append(Table(title, ("name", "changes"), sorted(counts.items())))
    if not any(changes.values()) and (before.ops, before.parameters) == (after.ops, after.parameters):
        report.blocks.append("Nothing changed: the model is as it was.")
    report.blocks += [f"Dropped {name}: its rewrites fail validation ({why})" for name, why in dropped.items()]
    report.blocks += skipped_lines(skipped, verbose)
    if verdict is not None:
        report.blocks.append(f"Validation: {verdict}")
    return report


def skipped_lines(skipped: Mapping[str, str], verbose: bool) -> list[str]:
    """Every skip with its reason when ``verbose``, else one line grouping them by reason."""
    if not skipped:
        return []
    if verbose:
        return [f"Skipped {name}: {why}" for name, why in skipped.items()]
    by_reason: dict[str, list[str]] = {}
    for name, why in skipped.items():
        by_reason.setdefault(why, []).append(name)
    names = f" ({', '.join(skipped)})" if len(skipped) <= _NAMED_SKIPS else ""
    if len(by_reason) == 1:
        return [f"Skipped {len(skipped)}{names}: {next(iter(by_reason))}"]
    return [f"Skipped {len(skipped)}{names} for {len(by_reason)} reasons (-v lists them)"]


def _rows(before: Stats, after: Stats) -> list[tuple[Any, ...]]:
    ops = sorted(set(before.ops) | set(after.ops))
    rows: list[tuple[Any, ...]] = [(op, before.ops.get(op, 0), after.ops.get(op, 0),
                                    f"{after.ops.get(op, 0) - before.ops.get(op, 0):+d}")
                                   for op in ops if before.ops.get(op, 0) != after.ops.get(op, 0)]
    totals = (("nodes (all graphs)", before.nodes_total, after.nodes_total),
              ("parameters", before.parameters, after.parameters))
    rows += [(label, f"{b:,}", f"{a:,}", f"{a - b:+,d}") for label, b, a in totals]
    rows.append(("size", size_text(before.size), size_text(after.size), _signed_size(after.size - before.size)))
    return rows


def _signed_size(delta: int) -> str:
    return ("+" if delta >= 0 else "-") + size_text(abs(delta))


def plain_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A table as aligned plain text; columns whose every cell is a number are right-aligned."""
    cells = [[cell_text(v) for v in r] + [""] * (len(columns) - len(r)) for r in rows]
    numeric = [bool(cells) and all(is_number(r[i]) for r in cells if r[i] != "") for i in range(len(columns))]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    lines = ([printable(title)] if title else []) + [line(columns), line(["-" * w for w in widths])]
    return "\n".join(lines + [line(r) for r in cells])


def cell_text(value: Any) -> str:
    """A table cell's text: floats to 3 significant digits, None empty, text through :func:`printable`."""
    if isinstance(value, float):
        return f"{value:.3g}" if value == value else "nan"
    return "" if value is None else printable(str(value))


def is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True
