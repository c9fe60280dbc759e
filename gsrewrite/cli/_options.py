"""Options several commands share, declared once: ``--input-shape`` (every command that sizes inputs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from gsrewrite.graph.input_shapes import InputShapes

#: ``--input-shape`` (repeatable), one grammar for every command (:mod:`gsrewrite.graph.input_shapes`): the command
#: receives ``input_shape``, the values as typed (so that ``-j N`` hands them to its worker processes as they
#: were), and reads them with :func:`input_shapes`
input_shape_option: Any = click.option(
    "--input-shape", "input_shape", multiple=True, metavar="NAME:2x16|NAME:2,seq|SYMBOL=INT",
    help="An input's shape (ids:2x16 or ids:2,16; a dim may be a symbol or an expression: ids:2,seq) or a "
         "symbol's size (seq=128), wherever it appears; repeatable. A name the model does not have is an error.")


def input_shapes(specs: tuple[str, ...]) -> InputShapes | None:
    """``--input-shape`` values parsed (one line and exit 2 on bad syntax), None when none was given."""
    from gsrewrite.graph.input_shapes import parse_input_shapes

    return parse_input_shapes(specs) or None
