"""The model handle: a model and where it came from, the one class every layer passes a model around in.

A :class:`Source` is what an entry reads its model into (:meth:`Source.of`, :meth:`Source.mapped`: weights left in
their files), what validation and the benchmarks run (the file itself when there is one: onnxruntime reads it, no
re-serialized copy; the bytes already serialized when there are some), and what messages name (``role``,
``label``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from gsrewrite.request import current


@dataclass
class Source:
    """A model and the file it was read from, unchanged, if any.

    ``weights_dir``: the folder the model's external-data references are relative to (a model read weightless,
    :meth:`mapped`: its weights stay in their files, and onnxruntime maps them from there); a handle made inside a
    request without a file of its own takes the request's folder when its model holds references. ``role``: what the
    model is to the code running it (``original``, ``candidate``, ``benchmarked``, ...), ``label``: how messages name
    it (default: ``the <role> model``); ``data``: the model already serialized, when it was; ``load_seconds``: the
    time its file took to read."""

    model: onnx.ModelProto
    path: str | os.PathLike[str] | None = None
    weights_dir: str | None = None
    role: str = "original"
    load_seconds: float = 0.0
    data: bytes | None = field(default=None, repr=False)
    label: str | None = None

    def __post_init__(self) -> None:
        if self.weights_dir is None and self.path is None:
            folder = current().weights_dir  # the request's model folder, when one is bound (a model read weightless)
            if folder is not None:
                from gsrewrite.model_io.weights import has_references

                if has_references(self.model):
                    self.weights_dir = folder

    @property
    def what(self) -> str:
        """The model as messages name it."""
        return self.label or f"the {self.role} model"

    @classmethod
    def of(cls, model: ModelArg) -> Source:
        """``model`` as a handle: a handle as it is, a proto, or a path read whole (checked, its external data
        loaded)."""
        if isinstance(model, Source):
            return model
        if isinstance(model, onnx.ModelProto):
            return cls(model)
        from gsrewrite.model_io import load_model

        return cls(load_model(model), model)

    @classmethod
    def mapped(cls, path: str | os.PathLike[str]) -> Source:
        """The model at ``path`` read without its weights: every payload larger than a few kilobytes stays in the
        model's file (or its external data file) and the graph refers to it; passes read a weight when they need
        its values, onnxruntime maps the files, the save copies each payload from its file. A result's model
        keeps such references: save it with :func:`gsrewrite.save_model` and ``weights_dir=`` its result's."""
        from gsrewrite.model_io.graph_walk import tensor_protos
        from gsrewrite.model_io.weightless import load_weightless
        from gsrewrite.model_io.weights import is_reference
        from gsrewrite.stages import stage

        with stage("loading"):
            model = load_weightless(path)
        main = sum(1 for t in model.graph.initializer if is_reference(t))
        if main != sum(1 for t in tensor_protos(model) if is_reference(t)):
            return cls.of(path)  # external data outside the main graph's initializers: read whole, as before
        return cls(model, path, os.path.dirname(os.path.abspath(os.fspath(path))) if main else None)

    def weight_bytes(self) -> int:
        """The declared bytes of the model's initializers (the unit of the ``-v`` stage lines' memory ratio)."""
        from gsrewrite.model_io.tensors import initializer_bytes

        return initializer_bytes(self.model)

    def derived(self, model: onnx.ModelProto) -> Source:
        """A handle for ``model`` made from this one (no file of its own; its references read from the same
        folder)."""
        return Source(model, None, self.weights_dir)

    def reference(self) -> Any:
        """What validation compares with, as the original: a model read weightless as its graph (onnxruntime maps
        the weights from their files too), a model read whole from a file as that file (onnxruntime reads it: no
        re-serialized copy), else the model itself."""
        if self.weights_dir is not None:
            return Source(self.model, None, self.weights_dir)
        if self.path is None:
            return self.model
        return Source(self.model, Path(self.path))


#: A model argument: a ModelProto, the path of a model file, or a :class:`Source`.
ModelArg = onnx.ModelProto | str | os.PathLike | Source
