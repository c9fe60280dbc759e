"""Hostile data files beside a valid model: what ``--inputs`` / ``--input-data`` (``INPUTS_FILE``) and
``compress -s static-int8 --calibration`` (``CALIBRATION_DIR``) read.

Named pipes (np.load blocked forever on one in a calibration folder), devices, archives whose ``.npy`` headers
declare arrays of terabytes (exit 3 "internal error: MemoryError" before), archives whose members declare more
than the memory budget (a 23 MB archive inflating to 5 GiB filled the memory), pickles, and a calibration set on
which the model loops forever (onnxruntime's calibration runs had no time limit). The commands that read the
files must refuse them with one line, exit 2; the others run the valid model as usual (exit 0).
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
from onnx import TensorProto

from ._base import CALIBRATION_DIR, DATA_COMMANDS, INPUTS_FILE, case, graph, init, model, node, vi, write

#: the data-reading commands refuse (2), every other command runs the valid model (0)
_REFUSED = dict.fromkeys(DATA_COMMANDS, 2)
_CALIBRATION_REFUSED = {"compress": 2}


def _data_case(name: str, description: str, exits: dict[str, int | None], fast: tuple[str, ...] = ()) -> object:
    """A data case: 0 from every command but those of ``exits``; the fast tier runs it through ``fast`` (default:
    every command of ``exits``)."""
    return case(name, description, 0, tags=["data", *(f"fast:{command}" for command in fast)], exits=exits)


def _matmul_model() -> object:
    """y = x @ w, x FLOAT[1, 4]: something static-int8 quantizes."""
    w = init("w", np.arange(16, dtype=np.float32).reshape(4, 4) / 16)
    return model(graph([node("MatMul", ["x", "w"], ["y"])], [vi("x", [1, 4])], [vi("y", [1, 4])], [w]))


def npy_stream(shape: tuple[int, ...], payload: bytes = b"", descr: str = "<f4") -> bytes:
    """An .npy stream: the header declaring ``shape`` and ``descr``, then ``payload`` (possibly short)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + payload


def npz_bytes(members: dict[str, bytes], declared: dict[str, int] | None = None) -> bytes:
    """A deflated zip of ``members``; ``declared``: member -> the uncompressed size its zip headers claim
    (patched in the local header and the central directory: the inflated size a reader would expect)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    raw = bytearray(buffer.getvalue())
    for name, size in (declared or {}).items():
        offset = zipfile.ZipFile(io.BytesIO(bytes(raw))).getinfo(name).header_offset
        struct.pack_into("<I", raw, offset + 22, size)  # local file header: uncompressed size
        central = raw.index(b"PK\x01\x02")
        while raw[central + 46:central + 46 + len(name)] != name.encode():
            central = raw.index(b"PK\x01\x02", central + 4)
        struct.pack_into("<I", raw, central + 24, size)  # central directory: uncompressed size
    return bytes(raw)


def _bomb_member(elements: int) -> tuple[bytes, int]:
    """An .npy member declaring ``elements`` float32 (header and zip directory agree), 1 MiB of it stored."""
    data = npy_stream((elements,), bytes(1 << 20))
    return data, len(data) - (1 << 20) + 4 * elements


def inflating_npz(elements: int, name: str = "x") -> bytes:
    """An .npz whose one member, ``name``.npy, really inflates to ``elements`` float32 zeros (not truncated: a
    reader inflates all of it; only its CRC, checked after that, is left at 0): about 1 KB per MiB, made in
    milliseconds by repeating one deflate block (the compressor is flushed to a fresh state after each MiB)."""
    header, mib = npy_stream((elements,)), 1 << 20
    assert (4 * elements) % mib == 0
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(header + bytes(mib)) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(bytes(mib)) + deflate.flush(zlib.Z_FULL_FLUSH)
    data = first + block * (4 * elements // mib - 1) + deflate.flush(zlib.Z_FINISH)
    member, size = f"{name}.npy".encode(), len(header) + 4 * elements
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, zipfile.ZIP_DEFLATED, 0, 0x21, 0, len(data), size,
                        len(member), 0) + member
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, zipfile.ZIP_DEFLATED, 0, 0x21, 0, len(data),
                          size, len(member), 0, 0, 0, 0, 0, 0) + member
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(data), 0)
    return local + data + central + end


def _write_bytes(path: Path, data: bytes) -> None:
    assert len(data) < 1 << 20, f"hostile data files stay under 1 MB ({path.name}: {len(data)} bytes)"
    path.write_bytes(data)


def _with_model(folder: Path) -> None:
    write(folder, _matmul_model())  # type: ignore[arg-type]


def _calibration(folder: Path) -> Path:
    path = folder / CALIBRATION_DIR
    path.mkdir()
    return path


def _good_inputs(path: Path) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, x=np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4))
    _write_bytes(path, buffer.getvalue())


# --- --inputs / --input-data ------------------------------------------------------------------------
@_data_case("data_valid", "control: a valid model with valid inputs.npz and two calibration files",
            {"validate": 0, "bench": 0, "extract": 0, "compress": None})
def _valid(folder: Path) -> None:
    _with_model(folder)
    _good_inputs(folder / INPUTS_FILE)
    calibration = _calibration(folder)
    for name in ("a.npz", "b.npz"):
        _good_inputs(calibration / name)


@_data_case("data_inputs_fifo", "inputs.npz is a named pipe nobody writes to", _REFUSED)
def _inputs_fifo(folder: Path) -> None:
    _with_model(folder)
    os.mkfifo(folder / INPUTS_FILE)


@_data_case("data_inputs_dev_zero", "inputs.npz is a symlink to /dev/zero", _REFUSED, ("validate",))
def _inputs_dev_zero(folder: Path) -> None:
    _with_model(folder)
    os.symlink("/dev/zero", folder / INPUTS_FILE)


@_data_case("data_inputs_directory", "inputs.npz is a directory", _REFUSED, ("extract",))
def _inputs_directory(folder: Path) -> None:
    _with_model(folder)
    (folder / INPUTS_FILE).mkdir()


@_data_case("data_inputs_huge_header", "inputs.npz: x.npy's header declares a (2**40, 64) float32 array, 64 bytes "
            "follow", _REFUSED)
def _inputs_huge_header(folder: Path) -> None:
    _with_model(folder)
    _write_bytes(folder / INPUTS_FILE, npz_bytes({"x.npy": npy_stream((2**40, 64), bytes(64))}))


@_data_case("data_inputs_inflation_bomb", "inputs.npz: x.npy declares 3.5 GiB in its header and zip directory "
            "(1 KB deflated); over the memory budget under the 4 GiB cap", _REFUSED)
def _inputs_bomb(folder: Path) -> None:
    _with_model(folder)
    data, size = _bomb_member(7 << 27)
    _write_bytes(folder / INPUTS_FILE, npz_bytes({"x.npy": data}, {"x.npy": size}))


@_data_case("data_inputs_pickle", "inputs.npz: x.npy holds an object array (a pickle)", _REFUSED, ("bench",))
def _inputs_pickle(folder: Path) -> None:
    _with_model(folder)
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"boom": 1}], dtype=object), allow_pickle=True)
    _write_bytes(folder / INPUTS_FILE, npz_bytes({"x.npy": buffer.getvalue()}))


@_data_case("data_inputs_not_npy", "inputs.npz: the member x.npy is not an .npy stream", _REFUSED, ("compress",))
def _inputs_not_npy(folder: Path) -> None:
    _with_model(folder)
    _write_bytes(folder / INPUTS_FILE, npz_bytes({"x.npy": b"just text, no magic"}))


# --- --calibration ----------------------------------------------------------------------------------
@_data_case("data_calibration_fifo", "calibration/ holds a valid a.npz and b.npz, a named pipe",
            _CALIBRATION_REFUSED)
def _calibration_fifo(folder: Path) -> None:
    _with_model(folder)
    calibration = _calibration(folder)
    _good_inputs(calibration / "a.npz")
    os.mkfifo(calibration / "b.npz")


@_data_case("data_calibration_huge_header", "calibration/a.npz: x.npy's header declares (2**40, 64) float32",
            _CALIBRATION_REFUSED)
def _calibration_huge(folder: Path) -> None:
    _with_model(folder)
    _write_bytes(_calibration(folder) / "a.npz", npz_bytes({"x.npy": npy_stream((2**40, 64), bytes(64))}))


@_data_case("data_calibration_over_budget", "calibration/: four files of 0.5 GiB each as declared (headers and "
            "zip directories agree): together over the memory budget under the 4 GiB cap", _CALIBRATION_REFUSED)
def _calibration_budget(folder: Path) -> None:
    _with_model(folder)
    calibration = _calibration(folder)
    data, size = _bomb_member(1 << 27)
    for index in range(4):
        _write_bytes(calibration / f"{index}.npz", npz_bytes({"x.npy": data}, {"x.npy": size}))


@_data_case("data_calibration_dev_zero", "calibration/a.npz is a symlink to /dev/zero", _CALIBRATION_REFUSED)
def _calibration_dev_zero(folder: Path) -> None:
    _with_model(folder)
    os.symlink("/dev/zero", _calibration(folder) / "a.npz")


@case("data_calibration_loops", "a Loop whose trip count is the input n: calibration/a.npz has n = 1, b.npz "
      "n = 2**40 (calibration ran it with no time limit)", None, tags=["data"], exits=_CALIBRATION_REFUSED)
def _calibration_loops(folder: Path) -> None:
    body = graph([node("Identity", ["cond_in"], ["cond_out"]), node("Add", ["acc_in", "one"], ["acc_out"])],
                 [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [1, 4])],
                 [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [1, 4])], name="body")
    inits = [init("true", True, bool), init("one", 1.0), init("w", np.eye(4))]
    nodes = [node("Loop", ["n", "true", "x"], ["acc"], body=body), node("MatMul", ["acc", "w"], ["y"])]
    write(folder, model(graph(nodes, [vi("x", [1, 4]), vi("n", [], TensorProto.INT64)], [vi("y", [1, 4])], inits)))
    calibration = _calibration(folder)
    for name, trips in (("a.npz", 1), ("b.npz", 2**40)):
        buffer = io.BytesIO()
        np.savez(buffer, x=np.ones((1, 4), np.float32), n=np.array(trips, np.int64))
        _write_bytes(calibration / name, buffer.getvalue())
