"""Options several commands share, declared once: ``--input-shape`` (every command that sizes inputs)."""

from __future__ import annotations

from typing import Any

import click

#: ``--input-shape`` (repeatable): the command receives ``input_shape``, the values as given, which
#: :func:`gsrewrite.graph.input_shapes.parse_input_shapes` reads (the one grammar; a value stays text so that
#: ``-j N`` hands it to its worker processes as it was typed)
input_shape_option: Any = click.option(
    "--input-shape", "input_shape", multiple=True, metavar="NAME:2x16|NAME:2,seq|SYMBOL=INT",
    help="An input's shape (ids:2x16 or ids:2,16; a dim may be a symbol or an expression: ids:2,seq) or a "
         "symbol's size (seq=128), wherever it appears; repeatable. A name the model does not have is an error.")
