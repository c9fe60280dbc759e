"""The root click group: commands from the ``gsrewrite_cli_commands`` hook, global options, and the error boundary.

Every command comes through the hook: the built-in ones from :mod:`gsrewrite.cli.commands` (registered as the
built-in plugin ``builtin:cli``), then the plugins'. A command module imports what its work needs when it runs,
so that ``gsrewrite --help`` and ``gsrewrite info`` do not pay for onnxruntime.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click

from gsrewrite._version import __version__
from gsrewrite.errors import GsrewriteError
from gsrewrite.reporting import printable

log = logging.getLogger("gsrewrite")


class GsrewriteGroup(click.Group):
    """A group whose commands come from the plugins (the built-in ones first) and that turns library errors into
    one line + exit 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_commands(ctx)))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or _commands(ctx).get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if args and self.get_command(ctx, name) is None and not name.startswith("-"):
            from gsrewrite.errors import did_you_mean

            ctx.fail(f"No such command {name!r}.{did_you_mean(name, self.list_commands(ctx))}")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        with _interrupts_cancel_saves(), _file_size_limit_as_error():
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GsrewriteError as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            click.echo(f"error: {one_line(exc)}", err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated): temp files are gone by now
            terminated = isinstance(exc, Terminated)
            click.echo("terminated" if terminated else "interrupted", err=True)
            ctx.exit(128 + (signal.SIGTERM if terminated else signal.SIGINT))
        except MemoryError as exc:  # the model or the data asked for more memory than there is: not a bug
            if (ctx.obj or {}).get("debug"):
                raise
            detail = f": {one_line(exc)}" if str(exc).strip() else ""
            click.echo(f"error: out of memory{detail} (the model or its inputs need more memory than this process "
                       "may use)", err=True)
            ctx.exit(2)
        except Exception as exc:  # a bug in gsrewrite or a plugin: still one line unless --debug
            if (ctx.obj or {}).get("debug"):
                raise
            full = _out_of_room(exc)
            if full is not None:  # a full disk no write site named (a library's own temp file): not a bug
                click.echo(f"error: {one_line(full)}", err=True)
                ctx.exit(2)
            click.echo(f"internal error: {type(exc).__name__}: {one_line(exc)} (rerun with --debug)", err=True)
            ctx.exit(3)


def _out_of_room(exc: Exception) -> BaseException | None:
    """A :class:`~gsrewrite.errors.NoSpaceError` for an OSError of a full disk, quota or file size limit, naming the
    file's folder when the error has a file name (else the temp folder); None for anything else."""
    from gsrewrite.model_io.disk_space import is_full, no_space

    if not is_full(exc):
        return None
    assert isinstance(exc, OSError)
    name = exc.filename if isinstance(exc.filename, str) else None
    return no_space(exc, f"'{os.path.basename(name)}'" if name else "a file", os.path.dirname(name) if name else None)


@contextmanager
def _file_size_limit_as_error() -> Iterator[None]:
    """During a CLI run, SIGXFSZ is ignored: a write past the file size limit (``ulimit -f``) then fails with EFBIG,
    which is one line (exit 2, :mod:`gsrewrite.model_io.disk_space`) and removes its temp files, instead of the
    signal ending the process and leaving them behind."""
    number = getattr(signal, "SIGXFSZ", None)
    if number is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(number, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(number, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread the way Ctrl-C raises KeyboardInterrupt, so that every cleanup runs."""


@contextmanager
def _interrupts_cancel_saves() -> Iterator[None]:
    """During a CLI run, SIGINT and SIGTERM cancel the saves in progress (each removes its temp files, in any
    thread) and raise KeyboardInterrupt / :class:`Terminated` in the main thread; the error boundary then prints
    one line and exits 130 / 143. A second signal gets the handling from before (SIGTERM: the process ends).
    Signals that were ignored stay ignored; the previous handlers are back afterwards (saves stay cancelled
    after a signal: a save thread that outlived the cleanup must not put its file in place)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        for number, action in previous.items():
            signal.signal(number, action)
        saving = sys.modules.get("gsrewrite.model_io.saving")  # not loaded: nothing is being saved
        if saving is not None:
            saving.cancel_saves()
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    for number in (int(signal.SIGINT), int(signal.SIGTERM)):
        action = signal.getsignal(number)
        if action not in (signal.SIG_IGN, None):
            previous[number] = action
            signal.signal(number, handler)
    try:
        yield
    finally:
        for number, action in previous.items():
            signal.signal(number, action)


def one_line(exc: BaseException) -> str:
    """The first non-empty line of an exception message (never a traceback), control characters escaped
    (:func:`~gsrewrite.reporting.printable`: names in messages come from models)."""
    text = str(exc).strip() or type(exc).__name__
    return printable(text.splitlines()[0])


class _PrintableFormatter(logging.Formatter):
    """Log messages with their control characters escaped (they name tensors and nodes of the model)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))


def _commands(ctx: click.Context) -> dict[str, click.Command]:
    """The commands of the ``gsrewrite_cli_commands`` hook (collected once per run)."""
    obj = ctx.ensure_object(dict)
    if "commands" not in obj:
        obj["commands"] = {}
        # subcommands are resolved before the group callback runs: apply the group's options here first
        params = ctx.params
        _configure_logging(params.get("verbose", 0), params.get("quiet", 0))
        disabled = tuple(params.get("disabled_plugins", ()))
        from gsrewrite.cli import commands
        from gsrewrite.plugin_hooks import collect_cli_commands
        from gsrewrite.plugin_manager import register_builtin, set_disabled

        register_builtin("cli", commands)
        if disabled:
            set_disabled(disabled)
        try:
            obj["commands"] = collect_cli_commands(disabled)
        except GsrewriteError as exc:  # the plugin manager itself failed (a plugin's failure leaves it out)
            log.warning("commands unavailable: %s", one_line(exc))
    return obj["commands"]


def _configure_logging(verbose: int, quiet: int) -> None:
    level = logging.WARNING - 10 * verbose + 10 * quiet
    level = max(logging.DEBUG, min(logging.CRITICAL, level))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_PrintableFormatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("gsrewrite")
    root.handlers[:] = [handler]
    root.setLevel(level)


@click.group(cls=GsrewriteGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gsrewrite")
@click.option("-v", "--verbose", count=True, help="More log output (repeat for debug).")
@click.option("-q", "--quiet", count=True, help="Less log output.")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.option(
    "--disable-plugin",
    "disabled_plugins",
    multiple=True,
    metavar="NAME",
    help="Do not load this plugin (repeatable). GSREWRITE_DISABLE_PLUGIN_AUTOLOAD=1 disables all.",
)
@click.pass_context
def main(ctx: click.Context, verbose: int, quiet: int, debug: bool, disabled_plugins: tuple[str, ...]) -> None:
    """gsrewrite: declarative, validated rewrites of ONNX models."""
    _configure_logging(verbose, quiet)
    from gsrewrite.stages import set_memory_release

    set_memory_release(True)  # the process is ours: freed memory goes back to the system at the measured steps
    obj = ctx.ensure_object(dict)
    obj["debug"] = debug or os.environ.get("GSREWRITE_DEBUG") == "1"
    obj["disabled_plugins"] = tuple(disabled_plugins)
    if disabled_plugins:
        from gsrewrite import plugin_manager

        plugin_manager.set_disabled(disabled_plugins)
