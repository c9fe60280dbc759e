"""Fragments: named sets of alternative subgraphs, called from templates as ``alt.NAME``.

A fragment lists its *forms*, each a small graph with the same formal outputs and at least the call's inputs
(further inputs of a form are wildcards local to that call, e.g. a Reshape's target shape)::

    [[fragment]]
    name = "Square"
    forms = [
      "Square (x) => (y) <float two = {2.0}> { y = Pow (x, two) }",
      "Square (x) => (y) { y = Mul (x, x) }",
    ]

A template that calls ``s = alt.Square(d)`` matches either form. A form made of one ``Identity`` node makes
the call optional (``y`` is then simply ``x``; formal inputs the form does not use stay unbound). Expansion
happens once, on first use: each combination of forms becomes one concrete *variant* of the pattern.
Commutative operand order is NOT expressed with fragments: the matcher handles it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from gsrewrite.errors import PatternError
from gsrewrite.patterns.template import TemplateGraph, TNode

#: More variants than this from one template is almost certainly a mistake in the pattern file.
MAX_VARIANTS = 512


@dataclass
class Fragment:
    """A named set of alternative forms."""

    name: str
    forms: list[TemplateGraph]


def check_calls(template: TemplateGraph, fragments: dict[str, Fragment], where: str) -> None:
    """Every fragment called (directly or by a form) exists, nesting is bounded, and the number of variants
    stays under :data:`MAX_VARIANTS` (checked without expanding)."""
    if _combinations(template, fragments, where, 0) > MAX_VARIANTS:
        raise PatternError(f"{where}: expands to more than {MAX_VARIANTS} variants")


def _combinations(template: TemplateGraph, fragments: dict[str, Fragment], where: str, depth: int) -> int:
    if depth > 8:
        raise PatternError(f"{where}: fragments call each other too deeply (recursion?)")
    count = 1
    for node in template.nodes:
        if node.is_fragment_call:
            fragment = _fragment(node, fragments, where)
            count *= sum(_combinations(form, fragments, where, depth + 1) for form in fragment.forms)
    return count


def required_ops(template: TemplateGraph, fragments: dict[str, Fragment], depth: int = 0) -> Counter:
    """(domain, op) counts that every variant of ``template`` has (for a fragment call: what all its forms
    have); optional steps (Identity forms) count for nothing."""
    counts: Counter = Counter()
    for node in template.nodes:
        if node.is_fragment_call:
            fragment = fragments.get(node.op)
            if fragment is None or depth > 8:
                continue  # reported by check_calls
            per_form = [required_ops(form, fragments, depth + 1) for form in fragment.forms]
            common = per_form[0]
            for other in per_form[1:]:
                common &= other
            counts += common
        elif not _is_identity(node):
            counts[(node.domain, node.op)] += 1
    return counts


def _is_identity(node: TNode) -> bool:
    return node.op == "Identity" and node.domain == "" and not node.attrs


def _fragment(call: TNode, fragments: dict[str, Fragment], where: str) -> Fragment:
    if call.op not in fragments:
        known = ", ".join(sorted(fragments)) or "none"
        raise PatternError(f"{where}: unknown fragment alt.{call.op} (fragments in this file: {known})")
    return fragments[call.op]


def expand(template: TemplateGraph, fragments: dict[str, Fragment], where: str) -> list[tuple[str, TemplateGraph]]:
    """All concrete templates of ``template``: (variant label, template without fragment calls)."""
    results = [("", template)]
    for _depth in range(8):  # forms may call fragments themselves
        pending = [(label, t) for label, t in results if any(n.is_fragment_call for n in t.nodes)]
        if not pending:
            return [(label.strip(","), t) for label, t in results]
        done = [(label, t) for label, t in results if not any(n.is_fragment_call for n in t.nodes)]
        for label, t in pending:
            done.extend(_expand_once(t, fragments, where, label))
        if len(done) > MAX_VARIANTS:
            raise PatternError(f"{where}: expands to more than {MAX_VARIANTS} variants")
        results = done
    raise PatternError(f"{where}: fragments call each other too deeply (recursion?)")


def _expand_once(t: TemplateGraph, fragments: dict[str, Fragment], where: str, prefix: str):
    calls = [n for n in t.nodes if n.is_fragment_call]
    choices = [list(enumerate(_fragment(c, fragments, where).forms)) for c in calls]
    for combo in itertools.product(*choices):
        label = prefix + "".join(f",{c.label}={i}" for c, (i, _) in zip(calls, combo, strict=True))
        variant = _inline_all(t, list(zip(calls, (form for _, form in combo), strict=True)), where)
        if variant is not None:
            yield label, variant


def _inline_all(t: TemplateGraph, picks: list[tuple[TNode, TemplateGraph]], where: str) -> TemplateGraph | None:
    by_call = {id(call): form for call, form in picks}
    nodes: list[TNode] = []
    constants = dict(t.constants)
    local: list[str] = []
    for node in t.nodes:
        form = by_call.get(id(node))
        if form is None:
            nodes.append(_copy(node))
            continue
        nodes.extend(_inline(node, form, constants, local, where))
    variant = TemplateGraph(t.name, [*t.inputs, *local], list(t.outputs), constants, nodes)
    return _remove_identities(variant)


def _inline(call: TNode, form: TemplateGraph, constants: dict, local: list[str], where: str) -> list[TNode]:
    """The form's nodes, renamed into the template; form inputs beyond the call's are local wildcards."""
    if len(form.inputs) < len(call.inputs) or len(form.outputs) != len(call.outputs):
        raise PatternError(
            f"{where}: alt.{call.op} is called with {len(call.inputs)} inputs/{len(call.outputs)} outputs "
            f"but a form has {len(form.inputs)}/{len(form.outputs)}"
        )
    rename = dict(zip(form.inputs, call.inputs, strict=False))
    local.extend(f"{call.label}/{name}" for name in form.inputs[len(call.inputs):])
    rename.update(zip(form.outputs, call.outputs, strict=True))
    for name, value in form.constants.items():
        rename[name] = f"{call.label}/{name}"
        constants[rename[name]] = value

    def mapped(name: str) -> str:
        return rename.get(name, f"{call.label}/{name}") if name else ""

    return [
        TNode(n.op, n.domain, [mapped(x) for x in n.inputs], [mapped(x) for x in n.outputs], dict(n.attrs),
              f"{call.label}/{n.label}")
        for n in form.nodes
    ]


def _remove_identities(t: TemplateGraph) -> TemplateGraph | None:
    """Drop Identity nodes (optional steps) by aliasing their output to their input."""
    alias: dict[str, str] = {}
    kept = []
    for node in t.nodes:
        if _is_identity(node):
            alias[node.outputs[0]] = node.inputs[0]
        else:
            kept.append(node)
    if not alias:
        return t

    def resolve(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    for node in kept:
        node.inputs = [resolve(x) for x in node.inputs]
    outputs = [resolve(o) for o in t.outputs]
    produced = {o for n in kept for o in n.outputs}
    if not kept or any(o not in produced for o in outputs):
        return None  # this combination degenerates to "output = an input": not a rewrite
    used = {x for n in kept for x in n.inputs}
    inputs = [i for i in t.inputs if i in used]
    constants = {k: v for k, v in t.constants.items() if k in used}
    return TemplateGraph(t.name, inputs, outputs, constants, kept)


def _copy(node: TNode) -> TNode:
    return TNode(node.op, node.domain, list(node.inputs), list(node.outputs), dict(node.attrs), node.label)
