"""The report in a real browser (opt-in: GSREWRITE_BROWSER=1 or -m slow; needs Debian's ``chromium``): headless
Chromium opens the file offline, its screenshot is not blank and it logs no error (no script error, no refused
load: the page loads nothing)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from report_models import save_cnn

ROOT = Path(__file__).resolve().parent.parent
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0"]
#: console lines that mean the page misbehaved
TROUBLE = ("Uncaught", "Refused to", "Content Security Policy", "ERR_", "Failed to load")

pytestmark = [pytest.mark.slow, pytest.mark.opt_in("GSREWRITE_BROWSER"),
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profile"
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)


def _pixels(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and the unfiltered 8-bit RGB(A) rows of a PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            data += body
        pos += 12 + length
    raw, stride, rows, previous = zlib.decompress(data), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            line[i] = (line[i] + (0, left, up, (left + up) // 2, _paeth(left, up, corner))[kind]) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, b"".join(rows)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


@pytest.mark.parametrize("which", ["bert", "cnn"])
def test_the_report_renders_in_chromium(tmp_path, which):
    model = ROOT / "examples" / "bert-tiny.onnx" if which == "bert" else save_cnn(tmp_path)
    report = tmp_path / "report.html"
    done = subprocess.run([str(GSREWRITE), "optimize", str(model), str(tmp_path / "out.onnx"), "--report",
                           str(report), "-q"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shot = _chromium(tmp_path, "--window-size=1280,1600", f"--screenshot={tmp_path / 'shot.png'}", report.as_uri())
    width, height, pixels = _pixels((tmp_path / "shot.png").read_bytes())
    assert (width, height) == (1280, 1600)
    sample = pixels[::97]
    mean = sum(sample) / len(sample)
    assert sum((v - mean) ** 2 for v in sample) / len(sample) > 200  # not a blank page
    assert not [line for line in shot.stderr.splitlines() if "CONSOLE" in line or any(t in line for t in TROUBLE)]
    dom = _chromium(tmp_path, "--dump-dom", report.as_uri())
    assert "What changed" in dom.stdout and "region-1" in dom.stdout
    assert not [line for line in dom.stderr.splitlines() if "CONSOLE" in line or any(t in line for t in TROUBLE)]
