"""Names that are not valid UTF-8 (protobuf ``string`` fields holding arbitrary bytes) are a clean error.

Python protobuf parses such a field as ``bytes``; it cannot be written back into a model, and used to end in
an internal error (exit 3, UnicodeDecodeError) when simplify exported the graph. Loading now names the field:
exit code 2 and one line, e.g. ``node 1 has a name that is not valid UTF-8``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.errors import InvalidModelError
from gsrewrite.model_io import load_model, load_model_bytes

GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _serialized() -> bytes:
    """x -> Relu (NODE0name) -> TENSORmid -> Add(WEIGHTinit) (NODE1name) -> y, with markers to corrupt."""
    nodes = [helper.make_node("Relu", ["x"], ["TENSORmid"], name="NODE0name"),
             helper.make_node("Add", ["TENSORmid", "WEIGHTinit"], ["y"], name="NODE1name")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              initializer=[numpy_helper.from_array(np.ones(2, np.float32), "WEIGHTinit")],
                              doc_string="GRAPHdocs")
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _corrupt(marker: bytes) -> bytes:
    """The model with every ``marker`` made invalid UTF-8 (same length: the protobuf framing stays valid)."""
    data = _serialized()
    assert marker in data
    return data.replace(marker, marker[:2] + b"\xff\xfe" + marker[4:])


CASES = [
    (b"NODE1name", "node 1 has a name that is not valid UTF-8"),
    (b"NODE0name", "node 0 has a name that is not valid UTF-8"),
    (b"TENSORmid", "node 0 has an output name that is not valid UTF-8"),
    (b"WEIGHTinit", "node 1 has an input name that is not valid UTF-8"),
    (b"GRAPHdocs", "model field graph.doc_string is not valid UTF-8"),
]


@pytest.mark.parametrize(("marker", "message"), CASES, ids=[c[0].decode() for c in CASES])
def test_load_names_the_field(marker, message):
    with pytest.raises(InvalidModelError, match=message):
        load_model_bytes(_corrupt(marker))


def test_valid_names_load():
    model = load_model_bytes(_serialized())
    assert [n.name for n in model.graph.node] == ["NODE0name", "NODE1name"]


def test_file_name_prefixes_the_message(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(_corrupt(b"NODE1name"))
    with pytest.raises(InvalidModelError) as info:
        load_model(path)
    assert str(info.value).startswith(f"{path}: node 1 has a name")


CLI_CASES = [(command, *CASES[0]) for command in (["simplify"], ["apply", "--pattern", "all"], ["optimize"], ["info"])]
CLI_CASES += [(["simplify"], *case) for case in CASES[2:4]]


@pytest.mark.parametrize(("command", "marker", "message"), CLI_CASES,
                         ids=[f"{c[0][0]}-{c[1].decode()}" for c in CLI_CASES])
def test_cli_exits_2_with_one_line(tmp_path, command, marker, message):
    model = tmp_path / "bad.onnx"
    model.write_bytes(_corrupt(marker))
    args = [str(GSREWRITE), *command, str(model)]
    if command[0] != "info":
        args += ["-o", str(tmp_path / "out.onnx")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "internal error" not in proc.stderr and not (tmp_path / "out.onnx").exists()


def test_binary_string_attribute_survives_import():
    """A string attribute holding bytes (an EPContext engine cache) is imported and exported unchanged."""
    from gsrewrite.graph.core import import_onnx, to_model

    node = helper.make_node("Relu", ["x"], ["y"], blob=b"\x00\xff\xfe binary")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = to_model(import_onnx(model), model)
    assert onnx.helper.get_attribute_value(out.graph.node[0].attribute[0]) == b"\x00\xff\xfe binary"


def _deep_model() -> bytes:
    """Strings in the places the fast checks read: a value info's dim_param, node metadata, a function body's
    node, an attribute's ref_attr_name, an external-data entry."""
    vi = helper.make_tensor_value_info("TENSORmid", TensorProto.FLOAT, ["DIMparam"])
    node = helper.make_node("Relu", ["x"], ["TENSORmid"], name="n0")
    helper.set_metadata_props(node, {"METAkey": "METAvalue"})
    call = helper.make_node("F", ["TENSORmid"], ["y"], domain="local")
    body = helper.make_node("Relu", ["a"], ["b"], name="FUNCnode")
    body.attribute.append(onnx.AttributeProto(name="alpha", ref_attr_name="REFattr", type=onnx.AttributeProto.FLOAT))
    function = helper.make_function("local", "F", ["a"], ["b"], [body],
                                    [helper.make_opsetid("", 17)])
    graph = helper.make_graph([node, call], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], value_info=[vi])
    weight = numpy_helper.from_array(np.ones(2, np.float32), "w")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="EXTERNALfile")
    graph.initializer.append(weight)
    model = helper.make_model(graph, functions=[function],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    return model.SerializeToString()


DEEP = {b"DIMparam": "graph.value_info[0].type.tensor_type.shape.dim[0].dim_param",
        b"METAkey": "graph.node[0].metadata_props[0].key", b"METAvalue": "graph.node[0].metadata_props[0].value",
        b"FUNCnode": "functions[0].node[0].name", b"REFattr": "functions[0].node[0].attribute[0].ref_attr_name",
        b"EXTERNALfile": "graph.initializer[0].external_data[0].value"}


@pytest.mark.parametrize(("marker", "field"), DEEP.items(), ids=[m.decode() for m in DEEP])
def test_strings_deep_in_the_model_are_checked_with_their_field_named(marker, field):
    from gsrewrite.model_io.structure import _proto3_model, check_text

    data = _deep_model()
    assert marker in data
    bad = data.replace(marker, marker[:2] + b"\xff\xfe" + marker[4:])
    model = onnx.ModelProto.FromString(bad)
    assert _proto3_model() is not None  # the one-parse check is there (it is what a load uses)
    for serialized in (bad, None):  # the proto3 parse, then the field walk alone: the same message
        with pytest.raises(InvalidModelError, match="not valid UTF-8") as caught:
            check_text(model, serialized)
        assert f"model field {field} is not valid UTF-8" in str(caught.value)
    check_text(onnx.ModelProto.FromString(data), data)  # the clean model passes both ways
    check_text(onnx.ModelProto.FromString(data))
