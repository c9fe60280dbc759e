"""Symbolic dimensions: integer expressions in the model's input dims (``batch``, ``seq*2``, ``(h-3)//2+1``).

A dim is an ``int`` when it is known, or an :class:`Expr`: a polynomial with integer coefficients over
*atoms*. An atom is a symbol (:class:`Sym`, an input's dim name) or an operation polynomials cannot say
(:class:`Fn`: floor division, modulo, max, min). Expressions are kept in one canonical form, so two
expressions are equal exactly when they are the same polynomial (``seq*2 == 2*seq``, ``(a+b)-b == a``),
and an expression whose value is known collapses to an ``int``.

* Arithmetic: ``+``, ``-``, ``*``, ``//``, ``%`` between dims and ints (``Expr`` implements the operators,
  so code written for ints — ``math.prod(shape)``, ``shape[-1] // heads`` — works on symbolic shapes).
  ``(2*h + 1) // 2`` simplifies to ``h`` (the symbols are integers); what does not simplify becomes an atom.
* :func:`dim_max`, :func:`dim_min`, :func:`ceil_div`.
* :func:`parse` reads the text form back (``str(expr)``), and :func:`evaluate` gives the value of a dim
  once the symbols are bound.

Everything is immutable and hashable.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Union

import numpy as np

#: A dimension: a known size, or an expression in symbols.
DimValue = Union[int, "Expr"]

#: Largest expression kept (terms; degree of a term): hostile shape arithmetic (``(a + b) * (a + b)`` thirty
#: times) would otherwise grow without bound. Beyond them an operation raises :class:`ExpressionTooLarge`,
#: which callers treat as "unknown".
MAX_TERMS = 256
MAX_DEGREE = 16


class ExpressionTooLarge(ValueError):
    """A dim expression would exceed :data:`MAX_TERMS` terms or :data:`MAX_DEGREE` degree."""

Monomial = tuple[tuple["Atom", int], ...]


class Sym:
    """A named integer (an input dim such as ``batch``); hashed once (expressions hash their atoms a lot)."""

    __slots__ = ("_hash", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._hash = hash(("sym", name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sym) and other.name == self.name

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: object) -> bool:
        return _atom_key(self) < _atom_key(other)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"Sym({self.name!r})"

    def text(self) -> str:
        return self.name

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        if self.name not in bindings:
            raise KeyError(self.name)
        return int(bindings[self.name])

    def symbols(self) -> set[str]:
        return {self.name}


@dataclass(frozen=True)
class Fn:
    """An operation on dims that is not a polynomial: ``floordiv``, ``mod``, ``max``, ``min``."""

    op: str
    args: tuple[DimValue, ...]

    def text(self) -> str:
        a = [_text(x, parenthesize=True) for x in self.args]
        if self.op == "floordiv":
            return f"{a[0]}//{a[1]}"
        if self.op == "mod":
            return f"{a[0]}%{a[1]}"
        return f"{self.op}({', '.join(_text(x) for x in self.args)})"

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        values = [evaluate(x, bindings) for x in self.args]
        if self.op == "floordiv":
            return values[0] // values[1]
        if self.op == "mod":
            return values[0] % values[1]
        if self.op == "max":
            return max(values)
        return min(values)

    def symbols(self) -> set[str]:
        return set().union(*(symbols(x) for x in self.args))

    def __lt__(self, other: object) -> bool:
        return _atom_key(self) < _atom_key(other)  # type: ignore[arg-type]


Atom = Sym | Fn


def _atom_key(atom: Atom) -> tuple[int, str]:
    return (0, atom.name) if isinstance(atom, Sym) else (1, atom.text())


def _monomial_key(monomial: Monomial) -> tuple[int, list[tuple[tuple[int, str], int]]]:
    return (-sum(p for _, p in monomial), [(_atom_key(a), -p) for a, p in monomial])


class Expr:
    """A polynomial with integer coefficients over atoms (canonical: sorted, no zero terms, not constant)."""

    __slots__ = ("_hash", "_symbols", "terms")

    terms: tuple[tuple[Monomial, int], ...]

    def __init__(self, terms: Mapping[Monomial, int]) -> None:
        kept = [(m, c) for m, c in terms.items() if c]
        kept.sort(key=lambda mc: _monomial_key(mc[0]))
        self.terms = tuple(kept)
        self._hash = hash(self.terms)
        self._symbols: frozenset[str] | None = None

    # construction ----------------------------------------------------------------------------------
    @staticmethod
    def _sorted(terms: tuple[tuple[Monomial, int], ...]) -> Expr:
        """An expression from terms already in canonical order with no zero coefficient."""
        expr = Expr.__new__(Expr)
        expr.terms = terms
        expr._hash = hash(terms)
        expr._symbols = None
        return expr

    @staticmethod
    def atom(atom: Atom) -> Expr:
        return Expr({((atom, 1),): 1})

    def _dict(self) -> dict[Monomial, int]:
        return dict(self.terms)

    # queries ---------------------------------------------------------------------------------------
    def constant_term(self) -> int:
        return dict(self.terms).get((), 0)

    def atoms(self) -> set[Atom]:
        return {a for m, _ in self.terms for a, _ in m}

    def symbols(self) -> set[str]:
        if self._symbols is None:  # asked of every dim of every tensor: computed once per expression
            self._symbols = frozenset().union(*(a.symbols() for a in self.atoms()))
        return set(self._symbols)

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        total = 0
        for monomial, coeff in self.terms:
            value = coeff
            for atom, power in monomial:
                value *= atom.evaluate(bindings) ** power
            total += value
        return total

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Expr({self})"

    def __str__(self) -> str:
        return _poly_text(self.terms)

    # arithmetic ------------------------------------------------------------------------------------
    def __add__(self, other: DimValue) -> DimValue:
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other: DimValue) -> DimValue:
        return add(self, mul(other, -1))

    def __rsub__(self, other: DimValue) -> DimValue:
        return add(other, mul(self, -1))

    def __neg__(self) -> DimValue:
        return mul(self, -1)

    def __mul__(self, other: DimValue) -> DimValue:
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: DimValue) -> DimValue:
        return floor_div(self, other)

    def __rfloordiv__(self, other: DimValue) -> DimValue:
        return floor_div(other, self)

    def __mod__(self, other: DimValue) -> DimValue:
        return mod(self, other)

    def __rmod__(self, other: DimValue) -> DimValue:
        return mod(other, self)


#: the operand types the arithmetic memo holds (see :func:`_memoizable`)
_EXACT: frozenset[type] = frozenset({int, Expr})


@functools.lru_cache(maxsize=1 << 12)
def sym(name: str) -> Expr:
    """The dim named ``name`` (one object per name while it is in use: expressions are immutable)."""
    return Expr.atom(Sym(name))


def _as_terms(value: DimValue) -> dict[Monomial, int]:
    if isinstance(value, Expr):
        return value._dict()
    return {(): int(value)} if value else {}


def _make(terms: Mapping[Monomial, int]) -> DimValue:
    nonzero = {m: c for m, c in terms.items() if c}
    if not nonzero:
        return 0
    if set(nonzero) == {()}:
        return nonzero[()]
    return Expr(nonzero)


#: results of arithmetic on expressions kept, by operands: a model repeats its shapes (every layer multiplies the
#: same dims, every node of a chain has the same size), and a look-up costs a fraction of a polynomial operation
_MEMO_SIZE = 1 << 14


def add(a: DimValue, b: DimValue) -> DimValue:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return _add(a, b) if _memoizable(a, b) else _add.__wrapped__(a, b)


def _memoizable(a: object, b: object) -> bool:
    """Operands the memo may hold: ints and expressions exactly (a float, a bool or a numpy int equals an int
    and would share its entry, but need not give the same result)."""
    return type(a) in _EXACT and type(b) in _EXACT


@functools.lru_cache(maxsize=_MEMO_SIZE)
def _add(a: DimValue, b: DimValue) -> DimValue:
    if isinstance(b, int) and isinstance(a, Expr):  # the constant term is the last one
        return _add_constant(a, b)
    if isinstance(a, int) and isinstance(b, Expr):
        return _add_constant(b, a)
    terms = _as_terms(a)
    for m, c in _as_terms(b).items():
        terms[m] = terms.get(m, 0) + c
    if len(terms) > MAX_TERMS * 16:  # sums (a model's total over many symbols) may hold more terms
        raise ExpressionTooLarge("dimension expression too large")
    return _make(terms)


def _add_constant(a: Expr, k: int) -> DimValue:
    if not k:
        return a
    terms = a.terms
    if terms[-1][0] == ():
        total = terms[-1][1] + k
        rest = terms[:-1]
        if not rest:
            return total
        return Expr._sorted((*rest, ((), total)) if total else rest)
    return Expr._sorted((*terms, ((), k)))


def _mul_monomials(x: Monomial, y: Monomial) -> Monomial:
    powers: dict[Atom, int] = dict(x)
    for atom, p in y:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items(), key=lambda ap: _atom_key(ap[0])))


def mul(a: DimValue, b: DimValue) -> DimValue:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return _mul(a, b) if _memoizable(a, b) else _mul.__wrapped__(a, b)


@functools.lru_cache(maxsize=_MEMO_SIZE)
def _mul(a: DimValue, b: DimValue) -> DimValue:
    if isinstance(a, int):
        a, b = b, a
    if isinstance(b, int):  # scaling keeps the canonical order
        assert isinstance(a, Expr)
        if b == 0:
            return 0
        return a if b == 1 else Expr._sorted(tuple((m, c * b) for m, c in a.terms))
    left, right = _as_terms(a), _as_terms(b)
    if len(left) * len(right) > MAX_TERMS * 4:
        raise ExpressionTooLarge("dimension expression too large")
    terms: dict[Monomial, int] = {}
    for m1, c1 in left.items():
        for m2, c2 in right.items():
            m = _mul_monomials(m1, m2)
            if sum(p for _, p in m) > MAX_DEGREE:
                raise ExpressionTooLarge("dimension expression of too high a degree")
            terms[m] = terms.get(m, 0) + c1 * c2
    if len(terms) > MAX_TERMS:
        raise ExpressionTooLarge("dimension expression too large")
    return _make(terms)


def _divide_monomial(m: Monomial, d: Monomial) -> Monomial | None:
    powers = dict(m)
    for atom, p in d:
        if powers.get(atom, 0) < p:
            return None
        powers[atom] -= p
    return tuple(sorted(((a, p) for a, p in powers.items() if p), key=lambda ap: _atom_key(ap[0])))


def floor_div(a: DimValue, b: DimValue) -> DimValue:
    """``a // b``; exact where the polynomial divides, else a ``floordiv`` atom."""
    if isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("dimension divided by zero")
        if isinstance(a, int):
            return a // b
        if b == 1:
            return a
        nested = _floor_plus_constant(a) if b > 0 else None
        if nested is not None:  # (x//d + c)//b == (x + d*c)//(d*b): strided layers in a row are one division
            x, d, c = nested
            return floor_div(add(x, d * c), d * b)
        # terms whose coefficient b divides leave the floor exactly (the symbols are integers)
        quotient = {m: c // b for m, c in a.terms if m and c % b == 0}
        remainder = _make({m: c for m, c in a.terms if not (m and c % b == 0)})
        rest: DimValue = remainder // b if isinstance(remainder, int) else _fn("floordiv", remainder, b)
        return add(_make(quotient), rest)
    if a == b:
        return 1
    if len(b.terms) == 1 and not isinstance(a, int):
        (dm, dc), = b.terms
        divided: dict[Monomial, int] = {}
        for m, c in a.terms:
            q = _divide_monomial(m, dm)
            if q is None or c % dc:
                break
            divided[q] = c // dc
        else:
            return _make(divided)
    return _fn("floordiv", a, b)


def _floor_plus_constant(a: Expr) -> tuple[DimValue, int, int] | None:
    """(x, d, c) when ``a`` is ``x//d + c`` (d a positive constant), else None."""
    terms = a.terms
    if not 1 <= len(terms) <= 2 or (len(terms) == 2 and terms[1][0] != ()):
        return None
    monomial, coefficient = terms[0]
    if coefficient != 1 or len(monomial) != 1 or monomial[0][1] != 1:
        return None
    atom = monomial[0][0]
    if not isinstance(atom, Fn) or atom.op != "floordiv" or not isinstance(atom.args[1], int) or atom.args[1] <= 0:
        return None
    return atom.args[0], atom.args[1], terms[1][1] if len(terms) == 2 else 0


def mod(a: DimValue, b: DimValue) -> DimValue:
    """``a % b``; exact where it simplifies, else a ``mod`` atom."""
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if isinstance(b, int):
        assert isinstance(a, Expr)
        reduced = _make({m: c % b for m, c in a.terms})
        return reduced % b if isinstance(reduced, int) else _fn("mod", reduced, b)
    quotient = floor_div(a, b)
    if not _has_fn(quotient, "floordiv"):
        return sub(a, mul(quotient, b))
    return _fn("mod", a, b)


def _has_fn(value: DimValue, op: str) -> bool:
    return isinstance(value, Expr) and any(isinstance(x, Fn) and x.op == op for x in value.atoms())


def sub(a: DimValue, b: DimValue) -> DimValue:
    return add(a, mul(b, -1))


def ceil_div(a: DimValue, b: DimValue) -> DimValue:
    if isinstance(b, int) and b > 0:
        return floor_div(add(a, b - 1), b)
    return mul(floor_div(mul(a, -1), b), -1)


def dim_max(*values: DimValue) -> DimValue:
    return _extremum("max", values)


def dim_min(*values: DimValue) -> DimValue:
    return _extremum("min", values)


def _extremum(op: str, values: Iterable[DimValue]) -> DimValue:
    unique: list[DimValue] = []
    for v in values:
        if v not in unique:
            unique.append(v)
    ints = [v for v in unique if isinstance(v, int)]
    exprs: list[DimValue] = [v for v in unique if not isinstance(v, int)]
    if not exprs:
        return (max if op == "max" else min)(ints)
    if ints:
        exprs.append((max if op == "max" else min)(ints))
    if len(exprs) == 1:
        return exprs[0]
    # two expressions whose difference has one sign (see sign(): 2048*N against 3072*N; two that differ by a
    # constant; "same" padding's 2*((h + 1)//2) - h + 1 against 0)
    if len(exprs) == 2:
        known_sign = sign(sub(exprs[0], exprs[1]))
        if known_sign is not None:
            return exprs[0] if (known_sign >= 0) == (op == "max") else exprs[1]
    return _fn(op, *sorted(exprs, key=str))


def sign(value: DimValue) -> int | None:
    """1 when ``value`` is >= 0 for every size of its symbols (symbols are sizes: >= 0), -1 when it is <= 0,
    None when that depends on the sizes. A floor division by a constant ``a // b`` counts as ``(a - r) / b``
    with a remainder r in [0, b - 1]: ``2*((h + 1)//2) - h`` is ``1 - r``, in [0, 1]. Other atoms (max, min,
    mod, division by a symbol) leave it undecided."""
    if isinstance(value, int):
        return 1 if value >= 0 else -1
    remainders: list[int] = []
    try:
        poly = _expanded(value, remainders)
    except ExpressionTooLarge:
        return None
    if poly is None:
        return None
    low: Fraction | None = Fraction(0)
    high: Fraction | None = Fraction(0)
    for monomial, coefficient in poly.items():
        # each monomial is >= 0; bounded above only when it is a product of remainders
        bound: Fraction | None = Fraction(1)
        for name, power in monomial:
            bound = bound * remainders[int(name[1:])] ** power if bound is not None and name[0] == "#" else None
        if not monomial:
            low = None if low is None else low + coefficient
            high = None if high is None else high + coefficient
        elif coefficient > 0:
            high = None if high is None or bound is None else high + coefficient * bound
        else:
            low = None if low is None or bound is None else low + coefficient * bound
    if low is not None and low >= 0:
        return 1
    if high is not None and high <= 0:
        return -1
    return None


_Poly = dict[tuple[tuple[str, int], ...], Fraction]


def _expanded(value: DimValue, remainders: list[int]) -> _Poly | None:
    """``value`` as a polynomial with rational coefficients over its symbols and one remainder ``#i`` (in
    [0, remainders[i]]) per floor division by a constant; None when another atom is in it."""
    if isinstance(value, int):
        return {(): Fraction(value)} if value else {}
    poly: _Poly = {}
    for monomial, coefficient in value.terms:
        term: _Poly = {(): Fraction(coefficient)}
        for atom, power in monomial:
            if isinstance(atom, Sym):
                factor: _Poly = {((atom.name, 1),): Fraction(1)}
            elif atom.op == "floordiv" and isinstance(atom.args[1], int) and atom.args[1] > 0:
                divisor = atom.args[1]
                inner = _expanded(atom.args[0], remainders)
                if inner is None:
                    return None
                factor = {m: c / divisor for m, c in inner.items()}
                factor[((f"#{len(remainders)}", 1),)] = Fraction(-1, divisor)
                remainders.append(divisor - 1)
            else:
                return None
            for _ in range(power):
                term = _poly_product(term, factor)
        for m, c in term.items():
            poly[m] = poly.get(m, Fraction(0)) + c
    return {m: c for m, c in poly.items() if c}


def _poly_product(a: _Poly, b: _Poly) -> _Poly:
    if len(a) * len(b) > MAX_TERMS * 4:
        raise ExpressionTooLarge("dimension expression too large")
    out: _Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            powers = dict(ma)
            for name, p in mb:
                powers[name] = powers.get(name, 0) + p
            key = tuple(sorted(powers.items()))
            out[key] = out.get(key, Fraction(0)) + ca * cb
    return out


def _fn(op: str, *args: DimValue) -> Expr:
    return Expr.atom(Fn(op, tuple(args)))


# text ----------------------------------------------------------------------------------------------
def _monomial_text(monomial: Monomial, coeff: int) -> str:
    parts = []
    alone = len(monomial) == 1 and monomial[0][1] == 1 and coeff == 1
    for atom, power in monomial:
        text = atom.text()
        if isinstance(atom, Fn) and atom.op in ("floordiv", "mod") and not alone:
            text = f"({text})"
        parts.extend([text] * power)
    return "*".join(parts)


def _poly_text(terms: tuple[tuple[Monomial, int], ...]) -> str:
    out = ""
    for i, (monomial, coeff) in enumerate(terms):
        sign = "-" if coeff < 0 else "+"
        magnitude = abs(coeff)
        body = _monomial_text(monomial, coeff)
        if not body:
            piece = str(magnitude)
        elif magnitude == 1:
            piece = body
        else:
            piece = f"{magnitude}*{body}"
        if i == 0:
            out = ("-" if sign == "-" else "") + piece
        else:
            out += f" {sign} {piece}"
    return out


def _text(value: DimValue, *, parenthesize: bool = False) -> str:
    text = str(value)
    if parenthesize and isinstance(value, Expr) and (len(value.terms) > 1 or value.terms[0][1] < 0):
        return f"({text})"
    return text


def text(value: DimValue | None) -> str:
    """The text form of a dim (``?`` for unknown)."""
    return "?" if value is None else str(value)


# evaluation and parsing ----------------------------------------------------------------------------
def evaluate(value: DimValue, bindings: Mapping[str, int]) -> int:
    """The value of ``value`` with its symbols bound; ``KeyError`` names a symbol that is not."""
    return value if isinstance(value, int) else value.evaluate(bindings)


def symbols(value: DimValue) -> set[str]:
    return set() if isinstance(value, int) else value.symbols()


def is_static(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_BINARY = {ast.Add: add, ast.Sub: sub, ast.Mult: mul, ast.FloorDiv: floor_div, ast.Div: floor_div,
           ast.Mod: mod}


def parse(source: str) -> DimValue:
    """A dim from its text (``seq*2``, ``(h - 3)//2 + 1``, ``max(a, b)``); ``ValueError`` when it is not one.

    Names may be any identifiers; ``/`` means floor division (dims are integers)."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a dimension expression: {source!r}") from exc
    return _parse_node(tree.body, source)


def _parse_node(node: ast.AST, source: str) -> DimValue:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return sym(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return mul(_parse_node(node.operand, source), -1)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_parse_node(node.left, source), _parse_node(node.right, source))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min") \
            and node.args and not node.keywords:
        args = [_parse_node(a, source) for a in node.args]
        return dim_max(*args) if node.func.id == "max" else dim_min(*args)
    raise ValueError(f"not a dimension expression: {source!r}")


def from_dim_param(name: str) -> DimValue:
    """A model's ``dim_param`` as a dim: an expression when it reads as one (``s0 + 1``; sympy's forms too, as
    onnxruntime's symbolic shape inference writes them: ``floor(height/2 - 1/2) + 1``, ``ceiling(w/32)``,
    ``Max(1, seq)``, ``Mod(n, 2)``, where ``/`` divides exactly), else a symbol."""
    try:
        return _finish(_rational(ast.parse(name.strip(), mode="eval").body, name))
    except (ValueError, ZeroDivisionError, RecursionError, SyntaxError, ExpressionTooLarge):
        return sym(name)


#: a value of a dim_param's arithmetic before it is floored: numerator / denominator (a size: > 0)
_Ratio = tuple[DimValue, DimValue]
_SYMPY_CALLS = {"floor": "floor", "ceiling": "ceil", "ceil": "ceil", "Max": "max", "max": "max", "Min": "min",
                "min": "min", "Mod": "mod"}


def _rational(node: ast.AST, source: str) -> _Ratio:
    """``node`` as numerator / denominator: ``/`` divides exactly (``height/2 - 1/2`` is ``(height - 1) / 2``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value, 1
    if isinstance(node, ast.Name):
        return sym(node.id), 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        num, den = _rational(node.operand, source)
        return (mul(num, -1) if isinstance(node.op, ast.USub) else num), den
    if isinstance(node, ast.BinOp):
        (a, b), (c, d) = _rational(node.left, source), _rational(node.right, source)
        if isinstance(node.op, (ast.Add, ast.Sub)):
            right = mul(c, b) if isinstance(node.op, ast.Add) else mul(mul(c, b), -1)
            return _reduced(add(mul(a, d), right), mul(b, d))
        if isinstance(node.op, ast.Mult):
            return _reduced(mul(a, c), mul(b, d))
        if isinstance(node.op, ast.Div):
            if isinstance(c, int) and c < 0:
                a, c = mul(a, -1), -c
            if c == 0:
                raise ZeroDivisionError("dimension divided by zero")
            return _reduced(mul(a, d), mul(b, c))
        if isinstance(node.op, ast.Pow) and isinstance(c, int) and d == 1 and 0 <= c <= MAX_DEGREE:
            num, den = 1, 1
            for _ in range(c):
                num, den = mul(num, a), mul(den, b)
            return _reduced(num, den)
        if isinstance(node.op, ast.FloorDiv):
            return floor_div(_finish((a, b)), _finish((c, d))), 1
        if isinstance(node.op, ast.Mod):
            return mod(_finish((a, b)), _finish((c, d))), 1
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SYMPY_CALLS \
            and node.args and not node.keywords:
        op = _SYMPY_CALLS[node.func.id]
        args = [_rational(a, source) for a in node.args]
        if op in ("floor", "ceil") and len(args) == 1:
            num, den = args[0]
            return (floor_div(num, den) if op == "floor" else ceil_div(num, den)), 1
        if op == "mod" and len(args) == 2:
            return mod(_finish(args[0]), _finish(args[1])), 1
        if op in ("max", "min"):
            common = 1
            for _, den in args:  # over one integer denominator, max and min compare the numerators
                if not isinstance(den, int):
                    common = 0
                    break
                common = common * den // math.gcd(common, den)
            if common:
                nums = [mul(num, common // den) for num, den in args]  # type: ignore[operator]
                return _reduced(dim_max(*nums) if op == "max" else dim_min(*nums), common)
            finished = [_finish(a) for a in args]
            return (dim_max(*finished) if op == "max" else dim_min(*finished)), 1
    raise ValueError(f"not a dimension expression: {source!r}")


def _reduced(num: DimValue, den: DimValue) -> _Ratio:
    """``num / den`` with an integer denominator reduced by the common factor of every coefficient."""
    if isinstance(den, int):
        if den < 0:
            num, den = mul(num, -1), -den
        coefficients = [num] if isinstance(num, int) else [c for _, c in num.terms]
        common = math.gcd(den, *coefficients)
        if common > 1:
            num = _make({(): num // common}) if isinstance(num, int) else \
                Expr._sorted(tuple((m, c // common) for m, c in num.terms))
            den //= common
    return num, den


def _finish(ratio: _Ratio) -> DimValue:
    """A dim from numerator / denominator: exact where it divides, else floored (a dim is an integer)."""
    num, den = ratio
    return num if den == 1 else floor_div(num, den)


def bind(value: DimValue, bindings: Mapping[str, int]) -> DimValue:
    """``value`` with the symbols of ``bindings`` replaced by their values (the others stay symbols), simplified:
    ``floor((height - 1)/2) + 1`` with ``height = 640`` is 320."""
    if isinstance(value, int) or not bindings or value.symbols().isdisjoint(bindings):
        return value
    total: DimValue = 0
    for monomial, coefficient in value.terms:
        term: DimValue = coefficient
        for atom, power in monomial:
            if isinstance(atom, Sym):
                base: DimValue = bindings[atom.name] if atom.name in bindings else Expr.atom(atom)
            else:
                args = [bind(a, bindings) for a in atom.args]
                base = {"floordiv": floor_div, "mod": mod}[atom.op](*args) if atom.op in ("floordiv", "mod") \
                    else (dim_max(*args) if atom.op == "max" else dim_min(*args))
            for _ in range(power):
                term = mul(term, base)
        total = add(total, term)
    return total


def dim_of(value: object) -> DimValue | None:
    """A dim from what a shape may hold: an int, an expression, a ``dim_param`` string; ``None`` otherwise
    (unknown, negative)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value) if value >= 0 else None
    if isinstance(value, Expr):
        return value
    if isinstance(value, str) and value:
        return from_dim_param(value)
    return None


def symbol_name(value: object) -> str | None:
    """The name of ``value`` when it is exactly one symbol (``batch``, not ``batch + 1`` or ``2*batch``)."""
    if not isinstance(value, Expr) or len(value.terms) != 1:
        return None
    monomial, coefficient = value.terms[0]
    if coefficient != 1 or len(monomial) != 1 or monomial[0][1] != 1 or not isinstance(monomial[0][0], Sym):
        return None
    return monomial[0][0].name
