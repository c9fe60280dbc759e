"""Tool adapters for compare.py: gsrewrite and each peer optimizer, as ``load -> optimize -> save`` calls.

Every adapter is a function ``(src, out, hints) -> note`` that reads the model at ``src``, writes the
optimized model to ``out`` and returns a one-line note (what it was told, what it reported). ``prepare``
imports what the tool needs, so that the timed call measures the tool and not Python's imports. Adapters
run inside a worker subprocess (_worker.py), one per tool run, so a peer that aborts cannot end the run.

``hints`` carries what some peers must be told: ``model_type`` (the transformers optimizer's), and
``num_heads`` / ``hidden_size`` read from the model (_hints.py).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Adapter = Callable[[Path, Path, dict[str, Any]], str]


@dataclass(frozen=True)
class Tool:
    """A tool column of the report."""

    name: str
    label: str
    modules: tuple[str, ...]
    run: Adapter
    setup: Callable[[], object] | None = None


# --- gsrewrite -------------------------------------------------------------------------------------------
def _gsrewrite_command(name: str) -> Any:
    import click

    from gsrewrite.cli import main

    with click.Context(main) as ctx:
        return main.get_command(ctx, name)


def _gsrewrite_args(src: Path, out: Path, validate: bool) -> tuple[list[str], str]:
    """``optimize`` when this gsrewrite has it (detected at run time), else ``apply --pattern all``."""
    command = _gsrewrite_command("optimize")
    args = ["optimize", str(src), "-o", str(out), "--target", "ort"]
    if command is None:
        command = _gsrewrite_command("apply")
        args = ["apply", "--pattern", "all", str(src), "-o", str(out), "--target", "ort"]
    if not validate:
        if not any("--no-validate" in p.secondary_opts for p in command.params):
            raise RuntimeError(f"gsrewrite {args[0]} has no --no-validate")
        args.append("--no-validate")
    return args, " ".join(args[: 3 if args[0] == "apply" else 1])


def _run_gsrewrite(src: Path, out: Path, validate: bool) -> str:
    from gsrewrite.cli import main

    args, shown = _gsrewrite_args(src, out, validate)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main.main(args, prog_name="gsrewrite", standalone_mode=False)
    if code:
        raise RuntimeError(f"gsrewrite exited {code}: {err.getvalue().strip()[:300]}")
    return f"`gsrewrite {shown}`"


def gsrewrite(src: Path, out: Path, hints: dict[str, Any]) -> str:
    return _run_gsrewrite(src, out, validate=True)


def gsrewrite_novalidate(src: Path, out: Path, hints: dict[str, Any]) -> str:
    return _run_gsrewrite(src, out, validate=False)


def _run_simplify(src: Path, out: Path, extra: list[str]) -> str:
    from gsrewrite.cli import main

    if _gsrewrite_command("simplify") is None:
        raise NotImplementedError("this gsrewrite has no `simplify` command yet")
    args = ["simplify", str(src), "-o", str(out), *extra]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main.main(args, prog_name="gsrewrite", standalone_mode=False)
    if code:
        raise RuntimeError(f"gsrewrite exited {code}: {err.getvalue().strip()[:300]}")
    return "`gsrewrite " + " ".join(["simplify", *extra]) + "`"


def gsrewrite_simplify(src: Path, out: Path, hints: dict[str, Any]) -> str:
    return _run_simplify(src, out, [])


def gsrewrite_simplify_novalidate(src: Path, out: Path, hints: dict[str, Any]) -> str:
    """Like onnxsim's default (check_n=0): no output comparison."""
    return _run_simplify(src, out, ["--no-validate"])


# --- peers -----------------------------------------------------------------------------------------------
def torch_stub() -> str:
    """Make ``import torch`` work without PyTorch, if it is not installed; returns a note ("" if installed).

    The transformers optimizer's default path (opt_level 1: onnxruntime's basic optimizations first)
    imports torch only to read ``torch.version.hip`` (ROCm or not). Installing PyTorch for that alone
    would pull gigabytes into the bench extra, so the worker provides a module with ``version.hip = None``.
    """
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        torch = types.ModuleType("torch")
        torch.version = types.SimpleNamespace(hip=None, cuda=None)  # type: ignore[attr-defined]
        torch.is_bench_stub = True  # type: ignore[attr-defined]
        sys.modules["torch"] = torch
    return " (torch stub)" if getattr(torch, "is_bench_stub", False) else ""


def _transformers(src: Path, out: Path, model_type: str, num_heads: int, hidden_size: int) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(str(src), model_type=model_type, num_heads=num_heads, hidden_size=hidden_size)
    optimized.save_model_to_file(str(out))


def ort_transformers(src: Path, out: Path, hints: dict[str, Any]) -> str:
    stub = torch_stub()
    _transformers(src, out, hints["model_type"], 0, 0)
    return f"model_type={hints['model_type']}{stub}"


def ort_transformers_hinted(src: Path, out: Path, hints: dict[str, Any]) -> str:
    stub = torch_stub()
    heads, hidden = hints.get("num_heads") or 0, hints.get("hidden_size") or 0
    _transformers(src, out, hints["model_type"], heads, hidden)
    told = f", num_heads={heads}, hidden_size={hidden}" if heads else " (no attention found: nothing to tell)"
    return f"model_type={hints['model_type']}{told}{stub}"


def onnxscript_ort(src: Path, out: Path, hints: dict[str, Any]) -> str:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(str(src))
    model, counts = optimize_for_ort(model)
    ir.save(model, str(out))
    fused = {k: v for k, v in counts.items() if v}
    return "fusions: " + (", ".join(f"{k} {v}" for k, v in fused.items()) or "none")


def onnxsim(src: Path, out: Path, hints: dict[str, Any]) -> str:
    import onnx
    import onnxsim as sim

    model, ok = sim.simplify(onnx.load(str(src)))
    onnx.save(model, str(out))
    return "" if ok else "onnxsim's own check failed"


def onnxslim(src: Path, out: Path, hints: dict[str, Any]) -> str:
    import onnx
    import onnxslim as slim

    onnx.save(slim.slim(onnx.load(str(src))), str(out))
    return ""


def onnxoptimizer(src: Path, out: Path, hints: dict[str, Any]) -> str:
    import onnx
    import onnxoptimizer as opt

    onnx.save(opt.optimize(onnx.load(str(src))), str(out))
    return "default passes (fuse and eliminate)"


def scs4onnx(src: Path, out: Path, hints: dict[str, Any]) -> str:
    from scs4onnx import shrinking

    with contextlib.redirect_stdout(io.StringIO()):
        shrinking(input_onnx_file_path=str(src), output_onnx_file_path=str(out), mode="shrink", non_verbose=True)
    return "mode=shrink"


#: imported before the timed call, as each peer's own modules are
_SIMPLIFY_MODULES = ("gsrewrite.cli", "gsrewrite.engine", "gsrewrite.simplifier", "gsrewrite.cli.simplify_cmd",
                     "gsrewrite.validation", "onnxruntime")

TOOLS: dict[str, Tool] = {t.name: t for t in [
    Tool("gsrewrite", "gsrewrite", ("gsrewrite.cli", "gsrewrite.engine", "gsrewrite.validation",
                                     "gsrewrite.cli.apply_cmd", "onnxruntime"), gsrewrite),
    Tool("gsrewrite-noval", "gsrewrite --no-validate", ("gsrewrite.cli", "gsrewrite.engine",
                                                        "gsrewrite.cli.apply_cmd", "onnxruntime"),
         gsrewrite_novalidate),
    Tool("gsrewrite-simplify", "gsrewrite simplify", _SIMPLIFY_MODULES, gsrewrite_simplify),
    Tool("gsrewrite-simplify-noval", "gsrewrite simplify --no-validate", _SIMPLIFY_MODULES,
         gsrewrite_simplify_novalidate),
    Tool("ort-transformers", "ORT transformers", ("onnxruntime.transformers.optimizer",), ort_transformers,
         torch_stub),
    Tool("ort-transformers-hinted", "ORT transformers + heads/hidden", ("onnxruntime.transformers.optimizer",),
         ort_transformers_hinted, torch_stub),
    Tool("onnxscript", "onnxscript optimize_for_ort", ("onnx_ir", "onnxscript.rewriter.ort_fusions"),
         onnxscript_ort),
    Tool("onnxsim", "onnxsim", ("onnx", "onnxsim"), onnxsim),
    Tool("onnxslim", "onnxslim", ("onnx", "onnxslim"), onnxslim),
    Tool("onnxoptimizer", "onnxoptimizer", ("onnx", "onnxoptimizer"), onnxoptimizer),
    Tool("scs4onnx", "scs4onnx shrink", ("scs4onnx",), scs4onnx),
]}


def prepare(tool: Tool) -> None:
    """Import everything the tool needs (outside the timed call)."""
    for module in tool.modules:
        importlib.import_module(module)
    if tool.setup is not None:
        tool.setup()
    if tool.name.startswith("gsrewrite"):  # modules gsrewrite imports lazily: imports are not timed
        for command in ("optimize", "apply", "simplify"):
            _gsrewrite_command(command)
        _import_all("gsrewrite")
        _import_all("gsrewrite_builtins")


def _import_all(package: str) -> None:
    """Import a package and every module in it (a peer's top-level import does as much)."""
    import pkgutil

    try:
        root = importlib.import_module(package)
    except ImportError:
        return
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.name.endswith("__main__"):
            continue
        with contextlib.suppress(Exception):  # an optional module whose extra is missing
            importlib.import_module(info.name)
