"""Real text for a language model's validation: token ids from the user's tokenizer instead of uniform draws.

Uniform random token ids are no text: a real model's attention and logits behave differently on them (flatter
distributions, no repeated context), and a compressed model that keeps its greedy tokens on text can lose them on
noise. With ``--tokenizer DIR`` (a folder holding ``tokenizer.json``, as transformers saves it, read with the
``tokenizers`` package), the token-id inputs of every generated set are windows of :data:`PASSAGES` encoded by
that tokenizer, at a random offset per row (ids outside the model's table are left out of the stream).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gsrewrite.errors import UsageError

#: English passages of several kinds (narrative, dialogue, instructions, code, lists): the validation's text
PASSAGES = (
    "The river town grew up around a stone bridge built more than six hundred years ago. Merchants crossed it "
    "every morning with carts of grain, wool and salt, and the tolls paid for the town walls, the market hall and "
    "a small school. In winter the river froze, and children skated from one bank to the other.",
    "User: What is the capital of France?\nAssistant: The capital of France is Paris. It is also the largest city "
    "in the country, known for the Eiffel Tower, the Louvre and its cafes.\nUser: And of Italy?\nAssistant: Rome.",
    "To make bread, mix 500 g of flour with 10 g of salt and 7 g of dry yeast. Add 320 ml of warm water and knead "
    "for ten minutes until the dough is smooth. Let it rise for an hour, shape it, and bake at 220 degrees.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "print([fibonacci(i) for i in range(10)])",
    "Shopping list: apples, two litres of milk, eggs, rice, olive oil, tomatoes, basil, parmesan, coffee beans, "
    "a loaf of rye bread, and batteries for the kitchen clock.",
    "Spiders have eight legs and most of them have eight eyes. They are not insects but arachnids, like scorpions "
    "and ticks. Many spiders spin silk webs to catch their prey, while others hunt by jumping on it.",
)


def text_tokens(folder: str | Path) -> np.ndarray:
    """:data:`PASSAGES` encoded by the tokenizer in ``folder`` (one int64 stream; :class:`UsageError` when the
    folder holds no readable ``tokenizer.json`` or the ``tokenizers`` package is missing)."""
    path = Path(folder) / "tokenizer.json" if Path(folder).is_dir() else Path(folder)
    if not path.is_file():
        raise UsageError(f"no tokenizer.json in {folder}")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageError("--tokenizer needs the 'tokenizers' package (pip install tokenizers)") from None
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers package raises its own exception types
        raise UsageError(f"cannot read the tokenizer {path}: {str(exc).splitlines()[0]}") from None
    ids = [i for text in PASSAGES for i in tokenizer.encode(text).ids]
    if not ids:
        raise UsageError(f"the tokenizer {path} encodes the validation text to no tokens")
    return np.asarray(ids, dtype=np.int64)


def draw_text(rng: np.random.Generator, stream: np.ndarray, shape: tuple[int, ...], high: int,
              dtype: np.dtype) -> np.ndarray:
    """Rows of consecutive tokens of ``stream`` (ids below ``high``), each from a random offset, wrapping."""
    usable = stream[stream < high]
    if not usable.size or not shape:
        return np.asarray(rng.integers(0, high, size=shape), dtype=dtype)
    length = shape[-1]
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    starts = rng.integers(0, usable.size, size=rows)
    index = (starts[:, None] + np.arange(length)[None, :]) % usable.size
    return usable[index].reshape(shape).astype(dtype)
