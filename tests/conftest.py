"""Test-wide settings: opt-in tiers, bytecode for the tests' subprocesses, and the session-end meta-checks
(every pattern fires, every hook is called)."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

# checks and computations may read only the template names they declare (gsrewrite.patterns.contract)
os.environ.setdefault("GSREWRITE_STRICT_READS", "1")


# --- opt-in tiers: not collected unless asked for ------------------------------------------------------------
# A test marked `@pytest.mark.opt_in("ENV_VAR")` (and `slow`) is a tier too long for the default suite: the full
# hostile cross product, the slow fuzz tier, the 200k-node scale tier. It is collected only when ENV_VAR=1 is in
# the environment or when a -m expression is given (pytest's -m then selects or deselects it as usual, so
# `-m slow` runs it and `-m "not slow"` leaves it out). A plain `pytest` run does not collect it at all: no
# cross product collected, then skipped.
def _opt_in_env(obj: object) -> str | None:
    """The environment variable of ``obj``'s opt_in mark, None when it has none."""
    marks = getattr(obj, "pytestmark", [])
    return next((mark.args[0] for mark in marks if mark.name == "opt_in"), None)


def _opt_in_requested(config: pytest.Config, env: str) -> bool:
    """Whether the tier switched on by ``env`` is collected in this run."""
    return os.environ.get(env) == "1" or bool(config.getoption("markexpr", None))


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> list | None:
    env = _opt_in_env(obj)
    if env is not None and not _opt_in_requested(collector.config, env):
        return []  # no items: the tier is not collected
    return None


# --- bytecode for the tests' subprocesses --------------------------------------------------------------------
# The suite starts a few hundred Python processes (the installed `gsrewrite` script, `python -c`). With
# PYTHONDONTWRITEBYTECODE=1 in the environment (common in containers) none of them caches bytecode, so each
# compiles gsrewrite's modules from source again (docs/design.md, "Test suite"). In that case the subprocesses
# get a bytecode cache of their own in pytest's cache folder (PYTHONPYCACHEPREFIX: nothing is written beside
# the sources), kept between runs.
def _cache_bytecode_of_subprocesses(config: pytest.Config) -> None:
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider: then nothing changes
    if cache is None or not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache.mkdir("subprocess-pycache"))
    del os.environ["PYTHONDONTWRITEBYTECODE"]  # the xdist workers, started later, inherit both


# --- numpy's BLAS threads in the tests' subprocesses -------------------------------------------------------
# numpy's OpenBLAS starts one thread per core at import, and they spin before they sleep: ~0.09 s of CPU per
# launch of the installed script on this 2-core machine (`gsrewrite info` on a tiny model: 0.415 -> 0.327 s CPU,
# the same wall time; farm-bench, 10 runs), i.e. ~35 s over the suite's few hundred launches. No test measures
# BLAS speed, so the subprocesses run it single-threaded unless the environment already says otherwise.
def _single_threaded_blas_in_subprocesses() -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


# --- meta-checks: every pattern fires, every hook is called -------------------------------------------------
# Self-contained: the plugin below is one object, registered in pytest_configure.
#
# While the tests run, each test process (the main one, or every pytest-xdist worker) records
#   * every pattern that rewrote something: the counts returned by gsrewrite.engine.rewrite.RewritePass.run
#     (the engine's one rewrite pass: apply, optimize and explain all go through it);
#   * every hook called through the plugin manager, and from where: library code (gsrewrite/ or the built-in
#     plugins), a test calling the facade directly, or other code (e.g. the example plugin's own command).
#     Two routes: the typed facade gsrewrite.plugin_hooks calls implementations one at a time
#     (plugin_hooks._call), which pluggy's hook-call monitoring never sees; `pm.hook.<name>(...)` calls are
#     seen by `pm.add_hookcall_monitoring`, installed on every gsrewrite plugin manager.
# xdist workers hand their records to the controller through `config.workeroutput`. At session end the
# controller (or the lone process) fails the run, listing the patterns of default_registry() that never fired
# and the hooks never called from library code (tests/test_hooks_documented.py: NO_LIBRARY_CALLER lists the
# hooks that have no library caller yet, with the reason; it may only shrink).
#
# The checks run only when the whole suite ran: no path or node id narrower than tests/, no -k, -m,
# --deselect, --lf or --sw, nothing deselected, no -x/--maxfail stop, no interruption, every worker reported.
# GSREWRITE_META_CHECKS=0 turns them off.
_TESTS = Path(__file__).resolve().parent
_META_ENV = "GSREWRITE_META_CHECKS"
_NARROWING_OPTIONS = ("keyword", "markexpr", "deselect", "lf", "stepwise", "stepwise_skip")


class _Recorder:
    """What one test process saw: patterns that fired, hooks called (hook -> origins)."""

    def __init__(self) -> None:
        self.fired: set[str] = set()
        self.hooks: dict[str, set[str]] = {}
        self._undo: list = []
        self._skip_files: set[str] = set()
        self._pluggy_dir = ""
        self._library_dirs: tuple[str, ...] = ()

    def install(self) -> None:
        import gsrewrite_builtins
        import pluggy

        import gsrewrite
        from gsrewrite import plugin_hooks, plugin_manager
        from gsrewrite.engine import rewrite

        self._skip_files = {str(Path(m.__file__).resolve()) for m in (plugin_hooks, plugin_manager)}
        self._skip_files.add(str(Path(__file__).resolve()))
        self._pluggy_dir = str(Path(pluggy.__file__).resolve().parent)
        self._library_dirs = tuple(str(Path(m.__file__).resolve().parent) for m in (gsrewrite, gsrewrite_builtins))
        self._wrap(rewrite.RewritePass, "run", self._run_wrapper)
        self._wrap(plugin_hooks, "_call", self._call_wrapper)
        self._wrap(pluggy.PluginManager, "__init__", self._pm_init_wrapper)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()

    def _wrap(self, owner: object, name: str, make_wrapper) -> None:
        original = getattr(owner, name)
        self._undo.append((owner, name, original))
        setattr(owner, name, make_wrapper(original))

    def _run_wrapper(self, original):
        def run(pass_, graph):
            result = original(pass_, graph)
            self.fired.update(name for name, count in result.counts.items() if count)
            return result

        return run

    def _call_wrapper(self, original):
        def _call(impl, hook_name, kwargs):
            self.record_hook(hook_name)
            return original(impl, hook_name, kwargs)

        return _call

    def _pm_init_wrapper(self, original):
        recorder = self

        def __init__(pm, project_name, *args, **kwargs):
            original(pm, project_name, *args, **kwargs)
            if project_name == "gsrewrite":
                pm.add_hookcall_monitoring(lambda name, impls, kwargs: recorder.record_hook(name), lambda *a: None)

        return __init__

    def record_hook(self, hook_name: str) -> None:
        self.hooks.setdefault(hook_name, set()).add(self._origin(sys._getframe(1)))

    def _origin(self, frame) -> str:
        """Who called the hook: the first frame outside the facade, the plugin manager, pluggy and this file."""
        while frame is not None:
            path = frame.f_code.co_filename
            if path not in self._skip_files and not path.startswith(self._pluggy_dir):
                break
            frame = frame.f_back
        if frame is None:
            return "other"
        path = frame.f_code.co_filename
        if path.startswith(self._library_dirs):
            return "library"
        return "test" if path.startswith(str(_TESTS)) else "other"

    def to_output(self) -> dict:
        return {"fired": sorted(self.fired), "hooks": {k: sorted(v) for k, v in self.hooks.items()}}

    def merge(self, output: dict) -> None:
        self.fired.update(output["fired"])
        for hook, origins in output["hooks"].items():
            self.hooks.setdefault(hook, set()).update(origins)


class _MetaChecks:
    """The pytest plugin: records in test processes, checks in the controller (or the lone process)."""

    @staticmethod
    def silent_patterns(registered: list[str], fired: set[str]) -> list[str]:
        """The registered patterns that never rewrote anything."""
        return [name for name in registered if name not in fired]

    @staticmethod
    def hook_problems(hooks: list[str], called: dict[str, set[str]], allowed: dict[str, str]) -> list[str]:
        """Hooks never called from library code (and not allow-listed), and allow-listed hooks that now are."""
        problems = []
        for hook in hooks:
            from_library = "library" in called.get(hook, set())
            if hook in allowed and from_library:
                problems.append(f"{hook} is now called from library code: remove it from NO_LIBRARY_CALLER")
            elif hook not in allowed and not from_library:
                seen = ", ".join(sorted(called.get(hook, ()))) or "never called"
                problems.append(f"{hook} is never called through the plugin manager from library code ({seen})")
        return problems

    @staticmethod
    def no_library_caller_allowlist(path: Path = _TESTS / "test_hooks_documented.py") -> dict[str, str]:
        """NO_LIBRARY_CALLER of tests/test_hooks_documented.py, read as data (the module is not imported)."""
        for node in ast.parse(path.read_text()).body:
            target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
            if getattr(target, "id", None) == "NO_LIBRARY_CALLER":
                return ast.literal_eval(node.value)
        raise LookupError(f"{path} defines no NO_LIBRARY_CALLER")

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.recorder = _Recorder()
        self.deselected = 0
        self.incomplete: list[str] = []
        self.problems: list[str] = []
        self.controller = config.pluginmanager.has_plugin("dsession")
        self.worker = hasattr(config, "workerinput")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.controller:
            self.recorder.install()

    def pytest_deselected(self, items: list) -> None:
        self.deselected += len(items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", {}).get("gsrewrite_meta")
        if output is None:
            self.incomplete.append(f"worker {node.gateway.id} did not report ({error or 'no output'})")
            return
        self.recorder.merge(output)
        self.incomplete.extend(output["incomplete"])

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.recorder.uninstall()
        if not self.controller:
            self.incomplete.extend(self._run_narrowed(session, exitstatus))
        if self.worker:
            self.config.workeroutput["gsrewrite_meta"] = {**self.recorder.to_output(),
                                                          "incomplete": self.incomplete}
            return
        self.incomplete.extend(self._selection_narrowed())
        if self.incomplete:
            return
        self.problems = self._check()
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.worker:
            return
        if self.problems:
            terminalreporter.write_sep("=", "gsrewrite meta-checks failed", red=True)
            for line in self.problems:
                terminalreporter.write_line(line)
        elif self.incomplete and self.config.get_verbosity() >= 0:
            terminalreporter.write_line(f"gsrewrite meta-checks skipped: {'; '.join(self.incomplete)}")

    def _check(self) -> list[str]:
        from gsrewrite import hookspecs
        from gsrewrite.patterns import default_registry

        registered = [p.name for p in default_registry().patterns]
        problems = [f"pattern {name} never rewrote anything in the suite"
                    for name in self.silent_patterns(registered, self.recorder.fired)]
        hooks = sorted(name for name, fn in vars(hookspecs).items()
                       if callable(fn) and hasattr(fn, f"{hookspecs.PROJECT_NAME}_spec"))
        return problems + self.hook_problems(hooks, self.recorder.hooks, self.no_library_caller_allowlist())

    def _selection_narrowed(self) -> list[str]:
        """Why the selected tests are not the whole suite (empty when they are)."""
        if os.environ.get(_META_ENV, "").strip().lower() in {"0", "false", "no", "off"}:
            return [f"{_META_ENV} is off"]
        options = [f"--{name}" for name in (*_NARROWING_OPTIONS, "ignore", "ignore_glob", "collectonly")
                   if self.config.getoption(name, None)]
        root = Path(self.config.invocation_params.dir)
        narrow = [arg for arg in self.config.args
                  if "::" in arg or not _TESTS.is_relative_to((root / arg).resolve())]
        return [f"{', '.join(options + narrow)} given"] if options or narrow else []

    def _run_narrowed(self, session: pytest.Session, exitstatus: int) -> list[str]:
        """Why the tests of this process did not all run (empty when they did)."""
        reasons = [f"{self.deselected} tests deselected"] if self.deselected else []
        if session.shouldfail or session.shouldstop:
            reasons.append(f"stopped early ({session.shouldfail or session.shouldstop})")
        if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            reasons.append(f"exit status {int(exitstatus)}")
        return reasons


def pytest_configure(config: pytest.Config) -> None:
    _cache_bytecode_of_subprocesses(config)
    _single_threaded_blas_in_subprocesses()
    config.pluginmanager.register(_MetaChecks(config), "gsrewrite-meta-checks")
