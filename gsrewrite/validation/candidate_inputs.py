"""What a candidate takes when a contract changes its inputs: the original's feed made into the candidate's, and
the candidate's outputs made comparable with the original's.

Most rewrites keep the inputs, and both models run on the same feed. A KV-cache contract does not: under
``shared-kv-buffer`` the candidate takes the past as a buffer of the longest length (the original: the exact
past) and returns the buffer as its present; under ``int8-kv-cache`` it takes and returns the cache as int8 with
its scales. :class:`PaddedCache` and :class:`QuantizedCache` translate one feed (and the outputs back), so the
validator compares the two models on equivalent inputs; :class:`Chained` applies several in order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from onnx import helper

from gsrewrite.validation.signature import InputSpec

#: positions a padded buffer has beyond the past and new tokens when no longest length is given
BUFFER_SLACK = 13


class CandidateInputs(Protocol):
    """How a contract's candidate is fed (:mod:`gsrewrite.validation.candidate_inputs`)."""

    def specs(self, specs: Sequence[InputSpec]) -> list[InputSpec]:
        """The inputs the candidate takes, given the original's."""

    def feed(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The candidate's feed equivalent to the original's ``feed``."""

    def outputs(self, outputs: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
        """The candidate's ``outputs`` as the original's (``expected``) are, to compare them."""

    def describe(self) -> str:
        """What the candidate is fed, for the report."""


@dataclass(frozen=True)
class PaddedCache:
    """``shared-kv-buffer``: each past input padded to ``length`` positions (when the past and new tokens fit,
    else to them plus :data:`BUFFER_SLACK`) with NaN, which a model must never read; each present cut back to the
    original's length. ``pairs``: past input -> present output; ``new_tokens``: the input whose last dim counts
    the new tokens."""

    pairs: Mapping[str, str]
    new_tokens: str
    length: int | None = None

    def specs(self, specs: Sequence[InputSpec]) -> list[InputSpec]:
        return list(specs)

    def feed(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = dict(feed)
        new = feed[self.new_tokens].shape[-1]
        for past in self.pairs:
            value = feed[past]
            total = value.shape[2] + new
            length = self.length if self.length is not None and self.length >= total else total + BUFFER_SLACK
            pad = np.full((*value.shape[:2], length - value.shape[2], *value.shape[3:]), np.nan, dtype=value.dtype)
            out[past] = np.concatenate([value, pad], axis=2)
        return out

    def outputs(self, outputs: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
        presents = set(self.pairs.values())
        return {name: np.asarray(value)[:, :, :np.shape(expected[name])[2]]
                if name in presents and name in expected else value for name, value in outputs.items()}

    def describe(self) -> str:
        size = f"{self.length} positions" if self.length else f"past + new + {BUFFER_SLACK} positions"
        return f"the past in a shared buffer of {size} (NaN beyond the past), the present cut to past + new"


@dataclass(frozen=True)
class QuantizedCache:
    """``int8-kv-cache``: each past input quantized with its scale (``scales``: past input -> the scale, broadcast
    over [batch, heads, length, head size]), each present dequantized with its past's."""

    pairs: Mapping[str, str]
    scales: Mapping[str, np.ndarray] = field(repr=False)
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.int8))

    def specs(self, specs: Sequence[InputSpec]) -> list[InputSpec]:
        elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        return [dataclasses.replace(s, elem_type=elem) if s.name in self.pairs else s for s in specs]

    def feed(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        info = np.iinfo(self.dtype)
        out = dict(feed)
        for past, scale in self.scales.items():
            value = np.asarray(feed[past], dtype=np.float32)
            quantized = np.clip(np.rint(np.where(np.isfinite(value), value, 0) / scale), -info.max, info.max)
            out[past] = quantized.astype(self.dtype)
        return out

    def outputs(self, outputs: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
        scale_of = {self.pairs[past]: scale for past, scale in self.scales.items()}
        return {name: np.asarray(value).astype(np.float32) * scale_of[name] if name in scale_of else value
                for name, value in outputs.items()}

    def describe(self) -> str:
        return f"the past quantized to {self.dtype.name} with the model's scales, the present dequantized"


@dataclass(frozen=True)
class Chained:
    """Several translations, the first applied to the feed first (and to the outputs last)."""

    steps: Sequence[CandidateInputs]

    def specs(self, specs: Sequence[InputSpec]) -> list[InputSpec]:
        out = list(specs)
        for step in self.steps:
            out = step.specs(out)
        return out

    def feed(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = dict(feed)
        for step in self.steps:
            out = step.feed(out)
        return out

    def outputs(self, outputs: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(outputs)
        for step in reversed(self.steps):
            out = step.outputs(out, expected)
        return out

    def describe(self) -> str:
        return "; ".join(step.describe() for step in self.steps)
