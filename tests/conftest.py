"""Test-wide settings: the parsed-pattern cache goes to a temporary folder, never the user's ~/.cache."""

from __future__ import annotations

import os
import tempfile

os.environ["GSREWRITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="gsrewrite-test-cache-")


def pytest_sessionfinish(session, exitstatus):
    import shutil

    shutil.rmtree(os.environ["GSREWRITE_CACHE_DIR"], ignore_errors=True)
