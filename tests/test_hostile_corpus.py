"""Every hostile model (tests/hostile) through every model-taking CLI command, as the installed console script
in a subprocess capped at 4 GiB of address space, with a timeout.

The promise checked: exit code 0, 1 or 2 (the case's expected one when it names one); on failure exactly one
non-empty line on stderr, no traceback, no "internal error"; the corpus (every model, data file, link and FIFO)
is byte-for-byte unchanged; nothing stray in the model folder, the output folder (only the output, on
success), the working folder or TMPDIR.

Fast tier: each case through one command (round-robin), and the data-file cases (hostile ``--inputs`` /
``--calibration`` files beside a valid model) through the commands that read them. A bomb goes through
``optimize`` or ``simplify`` in the fast tier only when the round-robin gives it that command (11 of the 38 bombs go
through ``optimize``, ``simplify`` or ``apply``, which fold; the two pipelines' cleanup is the same
``run_passes``), and tests/simplify/test_fold_budget.py runs the folding budget through the CLI in a memory cap on
the main kinds of bomb (ConstantOfShape, Expand, Tile, Range, Pad, OneHot, Resize, a 16 GB Mul, dims of 2**40 and
negative ones, concat doubling). Every bomb also went through ``optimize`` here until issue 26 (item 5): 34 more
launches (4 bombs get ``optimize`` from the round-robin), 22 s of CPU measured one by one, which the full tier
keeps. The full cross product (every case x
every command, fast pairs included) is the slow tier: marked ``slow`` and, as it takes several minutes, collected
only when asked for, with ``-m slow`` or ``GSREWRITE_HOSTILE_FULL=1`` (an ``opt_in`` tier, tests/conftest.py, as the
fuzz tier in test_fuzz_patterns.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hostile import CASE_NAMES, DATA_COMMANDS, HostileCase, build_hostile_corpus, case_exits, case_tags
from hostile.runner import (
    ADDRESS_SPACE,
    COMMANDS,
    EXTRA_OUTPUTS,
    GSREWRITE,
    MODEL_FREE_COMMANDS,
    OUTPUT_FILE,
    Run,
    limit_address_space,
    run_jailed,
    snapshot,
)

COMMAND_NAMES = list(COMMANDS)


def _fast_pairs() -> list[tuple[str, str]]:
    pairs = []
    for i, name in enumerate(CASE_NAMES):
        commands = {COMMAND_NAMES[i % len(COMMAND_NAMES)]}
        if "data" in case_tags(name):
            chosen = {tag.removeprefix("fast:") for tag in case_tags(name) if tag.startswith("fast:")}
            commands |= chosen or set(case_exits(name)) & DATA_COMMANDS
        pairs += [(name, command) for command in COMMAND_NAMES if command in commands]
    return pairs


FAST = _fast_pairs()
SLOW = [(name, command) for name in CASE_NAMES for command in COMMAND_NAMES]  # the whole cross product


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, HostileCase]]:
    root = tmp_path_factory.mktemp("hostile")
    return root, {case.name: case for case in build_hostile_corpus(root)}


def test_corpus_is_large_tiny_and_described(corpus: tuple[Path, dict[str, HostileCase]]) -> None:
    root, cases = corpus
    assert len(cases) >= 50
    assert list(cases) == CASE_NAMES
    assert all(c.description and "\n" not in c.description for c in cases.values())
    assert all({c.expected_exit, c.read_exit} <= {None, 0, 1, 2} for c in cases.values())
    sizes = [p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert max(sizes) < 1 << 20


def test_commands_cover_every_model_command() -> None:
    """COMMANDS lists every command of `gsrewrite --help` except those that take no model."""
    listed = subprocess.run([str(GSREWRITE), "--help"], capture_output=True, text=True, check=True).stdout
    names = {line.split()[0] for line in listed.split("Commands:")[1].splitlines() if line.startswith("  ")}
    assert names - MODEL_FREE_COMMANDS == set(COMMANDS)


def test_available_memory_honours_the_address_space_limit() -> None:
    """Under `ulimit -v` the memory checks (external data) count the limit, not only the machine's RAM."""
    code = "from gsrewrite.model_io.external_data import available_memory as a; print(a())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          preexec_fn=limit_address_space)
    assert 0 < int(done.stdout) < ADDRESS_SPACE


def _check(case: HostileCase, command: str, root: Path, scratch: Path) -> None:
    before = snapshot(root)
    run = run_jailed(command, case.path, scratch)
    where = f"{case.name} ({case.description}) | gsrewrite {command}"
    assert run.exit_code is not None, f"{where}: timed out; stderr: {run.stderr[-500:]}"
    assert run.exit_code in (0, 1, 2), f"{where}: exit {run.exit_code}; stderr: {run.stderr[-2000:]}"
    assert "Traceback" not in run.stderr, f"{where}: {run.stderr[-2000:]}"
    if run.exit_code != 0:
        _check_one_line(run, where)
    if case.expected(command) is not None:
        assert run.exit_code == case.expected(command), f"{where}: exit {run.exit_code}; stderr: {run.stderr}"
    assert snapshot(root) == before, f"{where}: the corpus changed"
    writes = COMMANDS[command][1]
    written = [OUTPUT_FILE, *EXTRA_OUTPUTS.get(command, ())]
    assert run.left_in_output == (sorted(written) if writes and run.exit_code == 0 else []), where
    assert run.left_in_tmp == [], f"{where}: temp files left: {run.left_in_tmp}"
    assert run.left_in_cwd == [], f"{where}: files left in the working folder: {run.left_in_cwd}"


def _check_one_line(run: Run, where: str) -> None:
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"{where}: stderr is not one line:\n{run.stderr[-2000:]}"
    assert "internal error" not in lines[0], f"{where}: {lines[0]}"


@pytest.mark.parametrize(("name", "command"), FAST)
def test_hostile_model_fails_cleanly(corpus: tuple[Path, dict[str, HostileCase]], name: str, command: str,
                                     tmp_path: Path) -> None:
    root, cases = corpus
    _check(cases[name], command, root, tmp_path)


@pytest.mark.slow
@pytest.mark.opt_in("GSREWRITE_HOSTILE_FULL")  # collected only with -m slow or GSREWRITE_HOSTILE_FULL=1 (conftest)
@pytest.mark.parametrize(("name", "command"), SLOW)
def test_hostile_model_fails_cleanly_every_command(corpus: tuple[Path, dict[str, HostileCase]], name: str,
                                                   command: str, tmp_path: Path) -> None:
    root, cases = corpus
    _check(cases[name], command, root, tmp_path)
