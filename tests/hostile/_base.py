"""The case registry of the hostile corpus and the small builders every case module shares.

A case is registered with :func:`case`: a name, a one-line description, the exit code the CLI should give (``None``
when 0, 1 and 2 are all acceptable answers; ``read_exit`` when the commands that only read the model, ``info`` and
``explain``, may answer differently from those that run it; ``exits`` for single commands) and tags (``"bomb"``
marks a memory or time bomb, which the fast tier runs through ``optimize`` too; ``"data"`` a case whose hostile
part is a data file, run in the fast tier by the commands that read it). The builder gets the case folder and
writes ``model.onnx`` (or whatever it wants) into it, and data files the commands pick up when present:
``INPUTS_FILE`` (``--inputs``, ``--input-data``) and ``CALIBRATION_DIR`` (``compress -s static-int8
--calibration``); files meant to lie *outside* the model folder go into the corpus-wide ``OUTSIDE`` folder next to
the case folders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from onnx import FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, helper, numpy_helper

MODEL_FILE = "model.onnx"
OUTSIDE = "_outside"  # corpus subfolder for files that lie outside every model folder
INPUTS_FILE = "inputs.npz"  # beside the model: the commands' --inputs / --input-data
CALIBRATION_DIR = "calibration"  # beside the model: compress -s static-int8 --calibration
#: commands that read INPUTS_FILE or CALIBRATION_DIR when a case has them
DATA_COMMANDS = frozenset({"validate", "bench", "extract", "compress"})
OPSET = 17
#: commands that read and describe a model without running it: a model that loads but cannot run is fine here
READ_ONLY_COMMANDS = frozenset({"info", "explain", "profile", "memory"})
_SAME = -1


@dataclass(frozen=True)
class HostileCase:
    """One hostile input: its folder, the model path to hand to the CLI, and what the CLI should do."""

    name: str
    description: str
    folder: Path
    path: Path
    expected_exit: int | None  # None: any of 0, 1, 2 is a correct answer
    read_exit: int | None  # the same, for READ_ONLY_COMMANDS
    tags: frozenset[str]
    exits: Mapping[str, int | None] = field(default_factory=dict)  # single commands' codes

    def expected(self, command: str) -> int | None:
        """The exit code ``gsrewrite COMMAND`` must give on this case (None: any of 0, 1, 2)."""
        if command in self.exits:
            return self.exits[command]
        if command == "compress" and self.expected_exit == 0 and "weightless" in self.tags:
            return 1  # a valid model without weights: nothing to compress, nothing written
        return self.read_exit if command in READ_ONLY_COMMANDS else self.expected_exit


Builder = Callable[[Path], None]


@dataclass(frozen=True)
class _Entry:
    name: str
    description: str
    expected_exit: int | None
    read_exit: int | None
    tags: frozenset[str]
    builder: Builder
    exits: Mapping[str, int | None]


REGISTRY: list[_Entry] = []


def case(name: str, description: str, expected_exit: int | None = 2, *, read_exit: int | None = _SAME,
         tags: Sequence[str] = (), exits: Mapping[str, int | None] | None = None) -> Callable[[Builder], Builder]:
    """Register a builder ``f(folder)`` that writes the case into ``folder`` (``read_exit`` defaults to
    ``expected_exit``; ``exits`` overrides both for single commands)."""
    assert "\n" not in description and description
    assert all(entry.name != name for entry in REGISTRY), f"duplicate hostile case {name}"

    def register(builder: Builder) -> Builder:
        read = expected_exit if read_exit == _SAME else read_exit
        REGISTRY.append(_Entry(name, description, expected_exit, read, frozenset(tags), builder, dict(exits or {})))
        return builder

    return register


# --- building blocks --------------------------------------------------------------------------------
def vi(name: str, shape: Sequence[int | str] | None = (4,), elem: int = TensorProto.FLOAT) -> ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def node(op: str, inputs: Sequence[str], outputs: Sequence[str], name: str = "", domain: str = "",
         **attrs: object) -> NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=name or f"{op}_{outputs[0]}", domain=domain,
                            **attrs)


def init(name: str, value: object, dtype: object = np.float32) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def graph(nodes: Sequence[NodeProto], inputs: Sequence[ValueInfoProto], outputs: Sequence[ValueInfoProto],
          initializers: Sequence[TensorProto] = (), name: str = "g",
          value_info: Sequence[ValueInfoProto] = ()) -> GraphProto:
    return helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers),
                             value_info=list(value_info))


def model(g: GraphProto, opset: int = OPSET, ir_version: int = 8, functions: Sequence[FunctionProto] = (),
          extra_opsets: dict[str, int] | None = None) -> ModelProto:
    imports = [helper.make_opsetid("", opset)]
    imports += [helper.make_opsetid(domain, v) for domain, v in (extra_opsets or {}).items()]
    m = helper.make_model(g, opset_imports=imports, functions=list(functions), producer_name="hostile")
    m.ir_version = ir_version
    return m


def write(folder: Path, m: ModelProto | bytes, file: str = MODEL_FILE) -> None:
    data = m if isinstance(m, bytes) else m.SerializeToString()
    assert len(data) < 1 << 20, f"hostile models stay under 1 MB ({file}: {len(data)} bytes)"
    (folder / file).write_bytes(data)


def relu_model(x_shape: Sequence[int | str] = (4,)) -> ModelProto:
    """y = Relu(x): the valid starting point many cases break."""
    return model(graph([node("Relu", ["x"], ["y"])], [vi("x", x_shape)], [vi("y", x_shape)]))


def reduce_to_scalar(big: str, out: str = "y") -> list[NodeProto]:
    """Nodes that reduce tensor ``big`` to a float scalar ``out`` (so the graph output itself stays tiny)."""
    return [node("ReduceSum", [big], [out], keepdims=0)]


def const_model(nodes: Sequence[NodeProto], initializers: Sequence[TensorProto], big: str,
                opset: int = OPSET) -> ModelProto:
    """A model with one tiny input (unused by the bomb) whose output is ``ReduceSum(big) + x``."""
    tail = [*reduce_to_scalar(big, "s"), node("Add", ["x", "s"], ["y"])]
    return model(graph([*nodes, *tail], [vi("x", [])], [vi("y", [])], initializers), opset=opset)
