"""Hostile files: things that are not models, and external data that points where it must not."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from onnx import ModelProto, TensorProto

from ._base import MODEL_FILE, OUTSIDE, case, graph, init, model, node, relu_model, vi, write


def _outside(folder: Path) -> Path:
    out = folder.parent / OUTSIDE
    out.mkdir(exist_ok=True)
    return out


# --- not a model ------------------------------------------------------------------------------------
@case("zero_bytes", "the model file is empty")
def _zero(folder: Path) -> None:
    write(folder, b"")


@case("random_bytes", "4 KiB of seeded random bytes")
def _random(folder: Path) -> None:
    write(folder, np.random.default_rng(7).bytes(4096))


@case("truncated_protobuf", "a valid model with a 64-float initializer cut in half")
def _truncated(folder: Path) -> None:
    data = model_add(init("w", np.zeros(64))).SerializeToString()
    write(folder, data[: len(data) // 2])


@case("model_is_fifo", "the model path is a named pipe nobody writes to", tags=["bomb"])
def _model_fifo(folder: Path) -> None:
    os.mkfifo(folder / MODEL_FILE)


@case("model_is_dev_zero", "the model path is a symlink to /dev/zero (endless zero bytes)", tags=["bomb"])
def _model_dev_zero(folder: Path) -> None:
    os.symlink("/dev/zero", folder / MODEL_FILE)


@case("model_is_directory", "the model path is a directory")
def _model_dir(folder: Path) -> None:
    (folder / MODEL_FILE).mkdir()


# --- external data ----------------------------------------------------------------------------------
def model_add(weight: TensorProto) -> ModelProto:
    """y = x + w with ``w`` FLOAT[4] given by the caller."""
    return model(graph([node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")], [weight]))


def _external(location: str, offset: int | str | None = 0, length: int | str | None = 16,
              dims: tuple[int, ...] = (4,)) -> TensorProto:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
    return tensor


def _ext_case(folder: Path, location: str, **kwargs: object) -> None:
    write(folder, model_add(_external(location, **kwargs)))  # type: ignore[arg-type]


@case("ext_symlink_outside", "external data is a symlink to a file outside the model folder")
def _ext_link_out(folder: Path) -> None:
    secret = _outside(folder) / "secret.bin"
    secret.write_bytes(bytes(16))
    os.symlink(secret, folder / "w.bin")
    _ext_case(folder, "w.bin")


@case("ext_symlink_inside", "external data is a symlink to another file inside the model folder", None)
def _ext_link_in(folder: Path) -> None:
    (folder / "real.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    os.symlink("real.bin", folder / "w.bin")
    _ext_case(folder, "w.bin")


@case("ext_symlink_loop", "external data is a symlink pointing at itself")
def _ext_link_loop(folder: Path) -> None:
    os.symlink("w.bin", folder / "w.bin")
    _ext_case(folder, "w.bin")


@case("ext_fifo", "external data is a named pipe nobody writes to", tags=["bomb"])
def _ext_fifo(folder: Path) -> None:
    os.mkfifo(folder / "w.bin")
    _ext_case(folder, "w.bin")


@case("ext_dev_zero_absolute", "external data location is the absolute path /dev/zero", tags=["bomb"])
def _ext_dev_zero(folder: Path) -> None:
    _ext_case(folder, "/dev/zero")


@case("ext_symlink_dev_zero", "external data is a symlink in the model folder to /dev/zero", tags=["bomb"])
def _ext_link_zero(folder: Path) -> None:
    os.symlink("/dev/zero", folder / "w.bin")
    _ext_case(folder, "w.bin")


@case("ext_parent_escape", "external data location climbs out with ../")
def _ext_parent(folder: Path) -> None:
    (_outside(folder) / "parent.bin").write_bytes(bytes(16))
    _ext_case(folder, f"../{OUTSIDE}/parent.bin")


@case("ext_absolute_inside", "external data location is an absolute path to a file inside the folder")
def _ext_abs(folder: Path) -> None:
    (folder / "w.bin").write_bytes(bytes(16))
    _ext_case(folder, str((folder / "w.bin").resolve()))


@case("ext_offset_past_end", "external offset + length lie past the end of the data file")
def _ext_offset(folder: Path) -> None:
    (folder / "w.bin").write_bytes(bytes(16))
    _ext_case(folder, "w.bin", offset=4096)


@case("ext_negative_offset", "external offset is -8")
def _ext_negative(folder: Path) -> None:
    (folder / "w.bin").write_bytes(bytes(16))
    _ext_case(folder, "w.bin", offset=-8)


@case("ext_offset_not_a_number", "external offset is the text 'zero'")
def _ext_nan(folder: Path) -> None:
    (folder / "w.bin").write_bytes(bytes(16))
    _ext_case(folder, "w.bin", offset="zero")


@case("ext_length_mismatch", "external length is 8 bytes for a FLOAT[4] tensor")
def _ext_length(folder: Path) -> None:
    (folder / "w.bin").write_bytes(bytes(64))
    _ext_case(folder, "w.bin", length=8)


@case("ext_no_length_huge_dims", "external tensor FLOAT[2**40] without length, data file of 16 bytes",
      tags=["bomb"])
def _ext_huge(folder: Path) -> None:
    (folder / "w.bin").write_bytes(bytes(16))
    _ext_case(folder, "w.bin", length=None, dims=(2**40,))


@case("ext_huge_length", "external length 2**62 on a 16-byte data file", tags=["bomb"])
def _ext_huge_length(folder: Path) -> None:
    (folder / "w.bin").write_bytes(bytes(16))
    _ext_case(folder, "w.bin", length=2**62)


@case("ext_missing_location", "an EXTERNAL tensor with no location entry")
def _ext_no_location(folder: Path) -> None:
    tensor = _external("w.bin")
    del tensor.external_data[0]
    write(folder, model_add(tensor))


@case("ext_location_is_folder", "external data location names the model folder itself ('.')")
def _ext_dot(folder: Path) -> None:
    _ext_case(folder, ".")


@case("ext_in_subgraph_outside", "an If branch's Constant holds external data outside the folder")
def _ext_subgraph(folder: Path) -> None:
    (_outside(folder) / "branch.bin").write_bytes(bytes(16))
    tensor = _external(f"../{OUTSIDE}/branch.bin")
    then_g = graph([node("Constant", [], ["t"], value=tensor)], [], [vi("t")], name="then")
    else_g = graph([node("Identity", ["x"], ["e"])], [], [vi("e")], name="else")
    nodes = [node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    write(folder, model(graph(nodes, [vi("x"), vi("c", [], TensorProto.BOOL)], [vi("y")])))


@case("valid_relu", "control: a valid y = Relu(x) model", 0, tags=("weightless",))
def _valid(folder: Path) -> None:
    write(folder, relu_model())
