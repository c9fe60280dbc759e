"""How one ``gsrewrite optimize MODEL`` request walks the layers: modules entered, folders, climbs, returns.

Runs the CLI in this process under ``sys.setprofile`` (every thread) and records each function call from one
project module (``gsrewrite``, ``gsrewrite_builtins``, ``gsrewrite_patterns``) into another; what modules do while
they are imported (module bodies and what they call) is not the request and is left out. The layers are those of
the ``gsrewrite layers`` contract in ``pyproject.toml`` ([tool.importlinter]); the modules outside it are placed as
they are called: ``gsrewrite`` itself, ``gsrewrite.plugin_api`` and ``gsrewrite._lazy`` (the facades and their
mechanism) have no layer, and the plugins (the built-in ones, the pattern families, the CLI's own commands
``gsrewrite.cli.commands``) are transparent: a call a plugin makes is a call from the layered module that called
the plugin (a hook's dispatch, a named check). Counted:

- **modules**: project modules with at least one call, and the **folders** holding them;
- **climbs**: distinct caller -> callee module pairs where the callee sits in a higher layer than its caller (a
  callback, a hook's implementation reaching back up, a lower layer handing work to a higher one);
- **returns**: distinct caller -> callee pairs entering a module execution had left (entered before, not on
  the stack any more): how often the request comes back to a place it was done with.

Run with the interpreter (and ``PYTHONPATH``) of the tree to measure::

    .venv/bin/python benchmarks/request_path.py examples/bert-tiny.onnx
    PYTHONPATH=/tree:/tree/plugins:/tree_pp .venv/bin/python benchmarks/request_path.py MODEL --json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import tomllib

HERE = Path(__file__).resolve().parent
PROJECT = ("gsrewrite", "gsrewrite_builtins", "gsrewrite_patterns")
PLUGINS = ("gsrewrite_builtins", "gsrewrite_patterns", "gsrewrite.cli.commands")
FACADES = ("gsrewrite", "gsrewrite.plugin_api", "gsrewrite._lazy")  # _lazy: the facades' __getattr__


def contract_layers(pyproject: Path) -> list[list[str]]:
    """The ``gsrewrite layers`` contract, top first: each layer's module prefixes."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["name"] == "gsrewrite layers")
    return [[name.strip().strip("()") for name in layer.split("|")] for layer in contract["layers"]]


@dataclass
class Trace:
    layers: list[list[str]]
    modules: dict[str, str] = field(default_factory=dict)  # module -> its file (first call order)
    edges: dict[tuple[str, str], int] = field(default_factory=dict)  # caller -> callee: calls
    returns: set[tuple[str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def height(self, module: str) -> int | None:
        """The layer's height (0: the bottom); None for the plugins and facades."""
        if module in FACADES or module.startswith(PLUGINS):
            return None
        for index, layer in enumerate(self.layers):
            if any(module == p or module.startswith(p + ".") for p in layer):
                return len(self.layers) - 1 - index
        return None

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or frame.f_code.co_name == "<module>":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(PROJECT) or not _project(module):
            return
        stack = _project_stack(frame.f_back)
        if stack is None:  # a module being imported: its initialization, not the request
            return
        caller = next((m for m in stack if self.height(m) is not None), None) if self.height(module) is not None \
            else (stack[0] if stack else None)
        with self.lock:
            entered_before = module in self.modules
            self.modules.setdefault(module, frame.f_globals.get("__file__") or frame.f_code.co_filename)
            if caller is None or caller == module:
                return
            edge = (caller, module)
            if edge not in self.edges and entered_before and module not in stack:
                self.returns.add(edge)  # execution had left ``module`` and comes back to it
            self.edges[edge] = self.edges.get(edge, 0) + 1

    def climbs(self) -> list[tuple[str, str]]:
        out = []
        for caller, callee in self.edges:
            a, b = self.height(caller), self.height(callee)
            if a is not None and b is not None and b > a:
                out.append((caller, callee))
        return out

    def folders(self, root: Path) -> list[str]:
        found = []
        for path in self.modules.values():
            try:
                folder = str(Path(path).resolve().parent.relative_to(root))
            except ValueError:
                folder = str(Path(path).resolve().parent)
            if folder not in found:
                found.append(folder)
        return found


def _project(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in PROJECT)


def _project_stack(frame: FrameType | None) -> list[str] | None:
    """The project modules on the stack from ``frame`` outwards (nearest first, each once); None when a project
    module's body is on it (the call is part of an import)."""
    seen: list[str] = []
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if _project(name):
            if frame.f_code.co_name == "<module>":
                return None
            if name not in seen:
                seen.append(name)
        frame = frame.f_back
    return seen


def trace_request(model: str, extra: list[str]) -> Trace:
    import gsrewrite

    root = Path(gsrewrite.__file__).resolve().parent.parent
    trace = Trace(contract_layers(root / "pyproject.toml" if (root / "pyproject.toml").exists()
                                  else HERE.parent / "pyproject.toml"))
    from gsrewrite.cli import main

    with tempfile.TemporaryDirectory(prefix="gsrewrite-request-path-") as out:
        argv = ["optimize", model, "-o", os.path.join(out, "out.onnx"), *extra]
        threading.setprofile(trace.profile)
        sys.setprofile(trace.profile)
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the command's report: not this script's output
                main(argv, prog_name="gsrewrite", standalone_mode=False)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    return trace


def summary(trace: Trace, root: Path) -> dict[str, Any]:
    climbs = trace.climbs()
    return {"modules": len(trace.modules), "folders": len(trace.folders(root)), "climbs": len(climbs),
            "returns": len(trace.returns), "module_list": list(trace.modules), "folder_list": trace.folders(root),
            "climb_list": [f"{a} -> {b}" for a, b in climbs],
            "return_list": [f"{a} -> {b}" for a, b in sorted(trace.returns)],
            "edges": {f"{a} -> {b}": n for (a, b), n in trace.edges.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--json", action="store_true", help="everything, as JSON")
    parser.add_argument("args", nargs="*", help="more arguments for gsrewrite optimize (after --)")
    parser.add_argument("--lists", action="store_true", help="also list the modules, climbs and returns")
    args = parser.parse_args()
    import gsrewrite

    root = Path(gsrewrite.__file__).resolve().parent.parent
    data = summary(trace_request(args.model, args.args), root)
    if args.json:
        print(json.dumps(data, indent=1))
        return
    print(f"{data['modules']} modules in {data['folders']} folders, {data['climbs']} climbs, "
          f"{data['returns']} returns to a module already left")
    for line in data["climb_list"]:
        print("  climb:", line)
    if args.lists:
        for key in ("module_list", "folder_list", "return_list"):
            print(f"{key}:", *data[key], sep="\n  ")


if __name__ == "__main__":
    main()
