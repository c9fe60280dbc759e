"""``validate``: run the original and the candidate model on the same inputs and compare every output."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from gsrewrite.errors import CannotValidateError, InputDataError, UsageError, ValidationError
from gsrewrite.model_io.source import Source
from gsrewrite.validation.candidate_inputs import CandidateInputs
from gsrewrite.validation.class_scores import ClassAxis, class_axes
from gsrewrite.validation.control import control_inputs
from gsrewrite.validation.criteria import AGREEMENT, ELEMENTS, NOISE_FACTOR, Criterion
from gsrewrite.validation.dims import InputDims, input_dims
from gsrewrite.validation.given_inputs import InputSource, prepare_inputs
from gsrewrite.validation.input_sets import InputSet, build_set, fit_budget
from gsrewrite.validation.inputs import with_text
from gsrewrite.validation.kept_outputs import KeptOutputs
from gsrewrite.validation.memory import MemoryBudgetError, default_budget, memory_budget, parse_size
from gsrewrite.validation.metrics import compare_output, missing_output
from gsrewrite.validation.noise import Noise, measure_noise
from gsrewrite.validation.prefill import (
    PrefillPlan,
    Visible,
    prefill_described,
    prefill_plan,
    prefilled_feed,
    queries_visible,
)
from gsrewrite.validation.report import OutputComparison, ValidationReport, grouped_shapes, merge_runs
from gsrewrite.validation.runner import ModelArg, Session, check_outputs, open_session, resolve_model
from gsrewrite.validation.shapes import GROWN_DEFAULTS, ShapeSpec
from gsrewrite.validation.signature import check_same_inputs, model_inputs
from gsrewrite.validation.sizes import (
    Shapes,
    SizeSet,
    related_size_sets,
    shorter_pasts,
    size_sets,
    symbols_consistent,
)
from gsrewrite.validation.text import text_tokens

log = logging.getLogger(__name__)

#: Generated inputs are not grown beyond this many elements in all (64 MB of float32).
MAX_GROWN_ELEMENTS = 1 << 24


def validate(
    original: ModelArg,
    candidate: ModelArg,
    *,
    inputs: InputSource | None = None,
    input_shapes: ShapeSpec | None = None,
    runs: int = 1,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    seed: int = 0,
    providers: Sequence[str] | None = None,
    max_memory: int | str | None = None,
    min_cosine: float | None = None,
    max_abs: float | None = None,
    min_agreement: float = 1.0,
    min_top1: float | None = None,
    noise_factor: float = NOISE_FACTOR,
    contracts: Sequence[str] | None = None,
) -> ValidationReport:
    """Run ``original`` and ``candidate`` in onnxruntime on the same inputs and compare their outputs.

    Both models are ``onnx.ModelProto`` objects or paths. The models run on several size sets (the sample, a
    small and a long one: see :mod:`gsrewrite.validation.sizes`), ``runs`` input sets per size. ``inputs`` is
    a dict name -> array or the path of an ``.npz`` file: the sample (the other sizes are generated); without
    it inputs are generated from ``seed`` (``input_shapes`` fixes dynamic dims: ``{"input_ids": (1, 128)}`` or
    ``{"batch": 1}``, in every set). With given inputs, ``runs`` repeats them. An element disagrees when
    ``|a - b| > atol`` and ``|a - b| / |b| > rtol`` (polygraphy's rule, ``b`` from the original), or, when
    ``min_cosine`` or ``max_abs`` is given, float outputs are judged by those instead (what compression is held
    to); integer and bool outputs must be equal in at least ``min_agreement`` of their elements (1.0: all); class
    scores keep their top-1 class in at least ``min_top1`` of their rows when it is given. A NaN or infinity that
    the original does not have in that place always disagrees (``docs/validation.md``). Where the original's own
    outputs move by more than ``atol`` under onnxruntime's optimizer, the element-wise rule takes ``noise_factor``
    times that movement as its absolute tolerance (:mod:`gsrewrite.validation.noise`; 0: never). ``max_memory`` (bytes
    or ``"2GB"``; default half the available memory) bounds the estimated peak memory of a run: larger size
    sets are dropped.

    Raises :class:`~gsrewrite.errors.InputDataError` when the inputs do not fit the models (or the
    models take different inputs; :class:`~gsrewrite.validation.memory.MemoryBudgetError` when even the
    first set is over the memory budget), :class:`~gsrewrite.errors.CannotValidateError` when onnxruntime
    cannot load the original (or it has no outputs), :class:`~gsrewrite.errors.ValidationError` when
    onnxruntime cannot run a model, :class:`~gsrewrite.errors.UsageError` for bad options. ``contracts``: input
    contracts the candidate may narrow (:mod:`gsrewrite.contracts`); None: those its ``metadata_props`` state.
    """
    criterion = Criterion(atol=atol, rtol=rtol, min_cosine=min_cosine, max_abs=max_abs, min_agreement=min_agreement,
                          min_top1=min_top1, noise_factor=noise_factor)
    if contracts is None:
        contracts = _stated_contracts(candidate, original)
    validator = Validator(original, inputs=inputs, input_shapes=input_shapes, runs=runs, atol=atol, rtol=rtol,
                          seed=seed, providers=providers, max_memory=max_memory, criterion=criterion,
                          contracts=contracts)
    return validator.check(candidate)


def _stated_contracts(candidate: ModelArg, original: ModelArg | None = None) -> tuple[str, ...]:
    """The input contracts ``candidate`` states it was rewritten under (gsrewrite's own outputs): validation then
    tries only the inputs they keep. One whose inputs or outputs differ from the original's (a shared or int8 KV
    cache the original does not state too) cannot be compared here: :class:`~gsrewrite.errors.UsageError`."""
    from gsrewrite.contracts import LAYOUT_CONTRACTS

    names = _stated_by(candidate)
    layout = [name for name in names if name in LAYOUT_CONTRACTS]
    if layout and original is not None:  # the same cache layout on both sides is fed alike
        layout = [name for name in layout if name not in _stated_by(original)]
    if layout:
        raise UsageError(f"the candidate was rewritten under {', '.join(layout)}: it takes and returns its KV cache "
                         "differently from the original, which validate cannot feed alike; optimize validated it "
                         "(see its report), or compare it with a model rewritten the same way")
    if names:
        log.info("the candidate states the input contracts %s: only the inputs they keep are tried",
                 ", ".join(names))
    return names


def _stated_by(model: ModelArg) -> tuple[str, ...]:
    """The contracts ``model`` (a proto, a path or a Source) states; () when it cannot be read here (the
    validator's own loading says what is wrong with it)."""
    from gsrewrite.contracts import stated
    from gsrewrite.model_io.weightless import load_weightless

    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (str, os.PathLike)):
        try:
            proto = load_weightless(model)  # its metadata, not its weights
        except Exception:
            return ()
    else:
        held = getattr(model, "model", None)  # a Source
        if not isinstance(held, onnx.ModelProto):
            return ()
        proto = held
    return tuple(stated(proto))


class Validator:
    """The original model, run once per input set; :meth:`check` compares any number of candidates with it.

    Use it when several candidates are compared with one original (bisecting a failed rewrite): the
    original's session and outputs are computed once. Options are those of :func:`validate`; ``criterion``, when
    given, is the whole pass/fail rule (its ``atol``/``rtol`` replace those given); ``contracts``: input contracts
    the user accepted (:mod:`gsrewrite.contracts`), whose excluded inputs are not tried; ``tokenizer``: a folder
    with ``tokenizer.json`` whose encoding of real text feeds the token-id inputs (:mod:`gsrewrite.validation.text`).
    """

    def __init__(self, original: ModelArg, *, inputs: InputSource | None = None,
                 input_shapes: ShapeSpec | None = None, runs: int = 1, atol: float = 1e-4, rtol: float = 1e-3,
                 seed: int = 0, providers: Sequence[str] | None = None, max_memory: int | str | None = None,
                 criterion: Criterion | None = None, noise_factor: float = NOISE_FACTOR,
                 contracts: Sequence[str] = (), candidate_inputs: CandidateInputs | None = None,
                 tokenizer: str | None = None) -> None:
        self.criterion = criterion if criterion is not None else Criterion(atol=atol, rtol=rtol,
                                                                           noise_factor=noise_factor)
        atol, rtol = self.criterion.atol, self.criterion.rtol
        _check_options(runs, seed)
        self.criterion.check()
        if inputs is not None and input_shapes:
            raise UsageError("input shapes apply to generated inputs; they cannot be combined with given inputs")
        self.runs, self.atol, self.rtol, self.seed, self.providers = runs, atol, rtol, seed, providers
        self.contracts = tuple(contracts)  # input contracts the user accepted: their inputs are not tried
        self.tokens = text_tokens(tokenizer) if tokenizer is not None else None  # real text for token ids
        self.candidate_inputs = candidate_inputs  # a contract's translation of the feed (None: the same feed)
        self._dims: InputDims | None = None
        self.budget = default_budget() if max_memory is None else parse_size(max_memory)
        self.original = resolve_model(original, "original")
        check_outputs(self.original)
        self.specs = model_inputs(self.original.model)
        self.class_axes = class_axes(self.original.model)
        given = prepare_inputs(inputs, self.specs, self.budget) if inputs is not None else None
        self.kept = KeptOutputs()  # large outputs wait in a scratch file, not in memory
        with open_session(self.original, providers) as session, memory_budget(self.budget):
            self.sets, self.outputs = self._reference_runs(session, given, input_shapes)
            self.output_names = list(session.output_names)
            self.timings = {"original": _timings(self.original, session)}
        self.described = self.sets[0].described
        self._noise: Noise | bool | None = False  # False: not measured yet; None: could not be

    def _reference_runs(self, session: Session, given: dict[str, np.ndarray] | None,
                        input_shapes: ShapeSpec | None) -> tuple[list[InputSet], list[list[dict[str, Any]]]]:
        """The input sets and the original's outputs on each (a list per set, one entry per run)."""
        first, sizes, first_outputs = self._first_set(session, given, input_shapes)
        sets, outputs = [first], [[self.kept.keep(run) for run in first_outputs]]
        offset = self.runs * first.mask_rows
        for index, planned in enumerate(sizes[1:], start=1):
            # a decoder's long past may run past a table the graph indexes by position (Whisper's position
            # embeddings): shorter pasts are tried before the set is left out
            for size in [planned, *shorter_pasts(self._dims, planned, sizes[0])]:
                try:
                    input_set = build_set(self.original.model, self.specs, size, index, self.seed, given,
                                          like=sets[-1])
                    input_set.mask_offset = offset
                    self._prefill(session, input_set)
                    outputs.append([self.kept.keep(_run(session, input_set.feed(run), input_set.described,
                                                        self.original.model)) for run in range(self.runs)])
                except (InputDataError, ValidationError) as exc:
                    log.info("validation skips the %s input set: %s", size.describe(), str(exc).splitlines()[0])
                    continue
                sets.append(input_set)
                offset += self.runs * input_set.mask_rows
                break
        return sets, outputs

    def _first_set(self, session: Session, given: dict[str, np.ndarray] | None, input_shapes: ShapeSpec | None
                   ) -> tuple[InputSet, list[SizeSet], list[dict[str, Any]]]:
        """The sample set, the size sets that fit the budget, and the original's outputs on the sample.

        Generated inputs follow the relations the graph ties the input dims with (:mod:`gsrewrite.validation.dims`);
        where the original still rejects them, the relations the graph only suggests, dims grown larger
        (GROWN_DEFAULTS: a convolution wider than 16 samples) and the other values an input is compared with are
        tried in turn, and when none runs the error says what was tried."""
        proto = self.original.model
        dims = self._dims = input_dims(proto, input_shapes, self.specs)
        if given is not None:
            sample = {name: tuple(array.shape) for name, array in given.items()}
            bindings = dims.bindings_of(sample)
            if bindings is not None:
                sizes = self._fit(related_size_sets(dims, bindings, self.contracts))
            else:
                sizes = self._sizes(sample, None) if symbols_consistent(self.specs, sample) \
                    else [SizeSet("sample", sample)]
            first = build_set(proto, self.specs, sizes[0], 0, self.seed, given)
            return first, sizes, [_run(session, first.feed(run), first.described, proto) for run in range(self.runs)]
        failures: list[str] = []
        seen: list[Shapes] = []
        for candidate, other in input_attempts(dims):
            try:
                sizes = self._fit(related_size_sets(candidate, candidate.sample_bindings(other), self.contracts))
            except MemoryBudgetError:
                raise  # larger inputs need more memory still
            except InputDataError as exc:
                failures.append(str(exc).splitlines()[0])
                continue
            if sizes[0].shapes in seen:
                continue  # no dim follows this change: the same inputs again cannot help
            seen.append(sizes[0].shapes)
            first = self._with_text(build_set(proto, self.specs, sizes[0], 0, self.seed))
            for choice in range(first.choices):
                attempt = first.with_choice(choice)
                try:
                    self._dims = candidate
                    self._prefill(session, attempt)
                    outputs = [_run(session, attempt.feed(run), attempt.described, proto) for run in range(self.runs)]
                    return attempt, sizes, outputs
                except CannotValidateError:
                    raise  # out of time: other inputs cannot help
                except ValidationError as exc:
                    failures.append(str(exc).splitlines()[0])
                    log.info("the original rejects generated inputs %s: %s", sizes[0].describe(), failures[-1])
            if sum(math.prod(s) for s in sizes[0].shapes.values()) * 16 > MAX_GROWN_ELEMENTS:
                break
        tied = "; ".join(dims.solution.describe())
        raise ValidationError(f"{failures[0]}" + (f" [input dims tied by the graph: {tied}]" if tied else "") +
                              (f" ({len(failures) - 1} other input set(s) tried, rejected too)"
                               if len(failures) > 1 else ""))

    def _with_text(self, input_set: InputSet) -> InputSet:
        """``input_set`` with its token ids drawn from real text, when a tokenizer was given."""
        if self.tokens is None or not input_set.plans:
            return input_set
        input_set.plans = with_text(input_set.plans, self.tokens)
        input_set.described = {**input_set.described, **{p.name: p.describe() for p in input_set.plans}}
        return input_set

    def _prefill(self, session: Session, input_set: InputSet) -> None:
        """A decoder's generated set: each run's past made by the original's own prefill, its mask and positions
        following it (:mod:`gsrewrite.validation.prefill`); other sets are left as drawn."""
        if input_set.given is not None or not input_set.plans or input_set.size.bindings is None:
            return
        plan = self._prefill_plan()
        if plan is None or self._dims is None:
            return
        dims, made = self._dims, {}
        # the mask values the accepted contracts keep: no padding at all, or no query row padded
        visible: Visible = "all" if "unpadded" in self.contracts else "new" if "unpadded-queries" in self.contracts \
            else None
        try:
            for run in range(self.runs):
                feed = prefilled_feed(plan, dims, input_set.plans, input_set.size.bindings, input_set.feed(run),
                                      input_set.seeds(run), input_set.mask_offset + run * input_set.mask_rows,
                                      lambda prefill: _run(session, prefill, input_set.described, self.original.model),
                                      visible)
                made[run] = self.kept.keep(feed)
        except CannotValidateError:
            raise
        except (ValidationError, InputDataError, ValueError) as exc:
            log.info("the %s set keeps its drawn past: its prefill failed (%s)", input_set.size.name,
                     str(exc).splitlines()[0])
            if visible:  # still only the inputs the contract keeps
                past = sum(input_set.size.bindings.get(n, 0) for n in plan.past)
                input_set.prefilled = {run: self.kept.keep(queries_visible(plan, input_set.feed(run), past, visible))
                                       for run in range(self.runs)}
            return
        input_set.prefilled = made
        input_set.described = {**input_set.described, **prefill_described(plan, input_set.size.bindings,
                                                                          input_set.described, visible)}

    def _prefill_plan(self) -> PrefillPlan | None:
        if self._dims is None:
            return None
        if getattr(self, "_plan_for", None) is not self._dims:
            self._plan, self._plan_for = prefill_plan(self.original.model, self._dims), self._dims
        return self._plan

    def _fit(self, sets: list[SizeSet]) -> list[SizeSet]:
        if not sets:
            raise InputDataError("no input sizes fit the dims the graph ties together")
        return fit_budget(self.original.model, self.specs, sets, self.budget)

    def _sizes(self, sample: Shapes, input_shapes: ShapeSpec | None) -> list[SizeSet]:
        return fit_budget(self.original.model, self.specs, size_sets(self.specs, sample, input_shapes), self.budget)

    def check(self, candidate: ModelArg) -> ValidationReport:
        """Run ``candidate`` on the same inputs and compare its outputs with the original's."""
        model = resolve_model(candidate, "candidate")
        adapted = self.candidate_inputs
        check_same_inputs(self.specs if adapted is None else adapted.specs(self.specs), model_inputs(model.model))
        per_run: list[OutputComparison] = []
        with open_session(model, self.providers) as session:
            for input_set, expected in zip(self.sets, self.outputs, strict=True):
                for run in range(self.runs):
                    feed = input_set.feed(run)
                    outputs = _run(session, feed if adapted is None else adapted.feed(feed), input_set.described)
                    if adapted is not None:
                        outputs = adapted.outputs(outputs, expected[run])
                    compared = compare_run(run, expected[run], outputs, self.atol, self.rtol,
                                           criterion=self.criterion, class_axes=self.class_axes)
                    self.kept.release(expected[run])
                    per_run += [dataclasses.replace(c, size_set=input_set.size.name) for c in compared]
            extra = [name for name in session.output_names if name not in self.output_names]
            timings = {**self.timings, "candidate": _timings(model, session)}
        per_run = self._within_noise(per_run)
        noise = self._noise if isinstance(self._noise, Noise) else None
        report = ValidationReport(
            outputs=_fold_runs(per_run, self.criterion), per_run=per_run, runs=self.runs, atol=self.atol,
            rtol=self.rtol, seed=self.seed, inputs=self.described, extra_outputs=extra, timings=timings,
            sizes=[_size_entry(s) for s in self.sets], criterion=self.criterion,
            noise_source=noise.source if noise is not None and any(c.noise_max_abs or c.noise_mismatches
                                                                   for c in per_run) else None,
        )
        log.info("%s", report.summary())
        return report


    def _within_noise(self, per_run: list[OutputComparison]) -> list[OutputComparison]:
        """``per_run`` judged against the model's own noise when some comparison misses the element-wise rule (or
        an integer output differs) and the criterion lets noise widen it; measured once, on first need."""
        rule = self.criterion
        if not (rule.elementwise and rule.noise_factor > 0 and
                any({ELEMENTS, AGREEMENT} & set(c.failed) for c in per_run)):
            return per_run
        if self._noise is False:
            self._noise = self._measure_noise()
        if not isinstance(self._noise, Noise):
            return per_run
        judged = [self._noise.judged(c) for c in per_run]
        return [dataclasses.replace(c, failed=rule.failures(c)) for c in judged]

    def _measure_noise(self) -> Noise | None:
        runs, expected = [], []
        for input_set, outputs in zip(self.sets, self.outputs, strict=True):
            for run in range(self.runs):
                runs.append((input_set.size.name, run, lambda s=input_set, r=run: s.feed(r)))
                expected.append(outputs[run])
        return measure_noise(self.original, runs, expected, self.providers)


def input_attempts(dims: InputDims) -> list[tuple[InputDims, int]]:
    """The dims to generate inputs with, in the order tried: with each relation the graph suggests (a
    decoder's mask over its past and new tokens), then as they are; each at the default size of the other
    dims, then grown (GROWN_DEFAULTS)."""
    return [(variant, other) for other in GROWN_DEFAULTS for variant in dims.variants()]


def _size_entry(input_set: InputSet) -> dict[str, Any]:
    shapes = {name: list(shape) for name, shape in input_set.size.shapes.items()}
    return {"name": input_set.size.name, "shapes": shapes, "inputs": input_set.described}


def compare_run(
    run: int, original: Mapping[str, Any], candidate: Mapping[str, Any], atol: float, rtol: float, *,
    criterion: Criterion | None = None, class_axes: Mapping[str, ClassAxis] | None = None,
) -> list[OutputComparison]:
    """Compare the outputs of one run by name, in the original's output order, judged by ``criterion``
    (default: atol/rtol); ``class_axes``: the outputs holding class scores.

    A sequence output ``s`` (a list of arrays) is compared item by item as ``s[0]``, ``s[1]``, ...
    """
    original, candidate = _flatten(original), _flatten(candidate)
    rule = criterion if criterion is not None else Criterion(atol=atol, rtol=rtol)
    axes = class_axes or {}
    results = []
    for name, value in original.items():
        if name in candidate:
            results.append(compare_output(name, run, value, candidate[name], criterion=rule,
                                          class_axis=axes.get(name)))
        else:
            results.append(missing_output(name, run, value))
    return results


def _flatten(outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    flat: dict[str, np.ndarray] = {}
    for name, value in outputs.items():
        if isinstance(value, list):
            flat.update({f"{name}[{i}]": np.asarray(item) for i, item in enumerate(value)})
        else:
            flat[name] = np.asarray(value)
    return flat


def _run(session: Session, feed: dict[str, np.ndarray], described: dict[str, dict[str, Any]],
         proto: Any = None) -> dict[str, Any]:
    """Run one model; when generated inputs make it fail, say what they were and how to change them (an input
    that decides control flow needs a real value: named, with --inputs)."""
    try:
        return session.run(feed)
    except ValidationError as exc:
        if isinstance(exc, CannotValidateError) or not described or any(
                d["source"] != "generated" for d in described.values()):
            raise
        deciding = [name for name in control_inputs(proto) if name in described] if proto is not None else []
        if deciding:
            names = ", ".join(f"'{n}' ({described[n]['dtype']}{described[n]['shape']})" for n in deciding)
            raise ValidationError(f"{exc}: input {names} decides control flow (an If or Loop) and was generated at "
                                  "random; give real values with --inputs FILE.npz (keys = input names)") from None
        shapes = grouped_shapes({name: f"{d['dtype']}{d['shape']}" for name, d in described.items()})
        raise ValidationError(f"{exc} (generated inputs: {shapes}; set shapes with --input-shape)") from None


def _fold_runs(per_run: list[OutputComparison], criterion: Criterion) -> list[OutputComparison]:
    by_name: dict[str, list[OutputComparison]] = {}
    for comparison in per_run:
        by_name.setdefault(comparison.name, []).append(comparison)
    return [merge_runs(group, criterion) for group in by_name.values()]


def _timings(model: Source, session: Session) -> dict[str, float]:
    return {"load": model.load_seconds, "session": session.create_seconds, "run": session.run_seconds}


def _check_options(runs: int, seed: int) -> None:
    if not isinstance(runs, int) or runs < 1:
        raise UsageError(f"runs must be a positive integer, got {runs!r}")
    if not isinstance(seed, int) or seed < 0:  # numpy's default_rng takes non-negative integers only
        raise UsageError(f"the seed must be a non-negative integer, got {seed!r}")
