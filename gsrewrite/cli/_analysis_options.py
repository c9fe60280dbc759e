"""Options shared by the analysis commands (shapes, profile, memory, compute-graph)."""

from __future__ import annotations

import click

input_shape_option = click.option(
    "--input-shape", "input_shape", multiple=True, metavar="NAME:D1,D2|SYMBOL=N",
    help="An input's dims (ints or expressions: ids:2,seq) or a symbol's size (seq=128); repeatable.")
