"""The real prompts every real-weight model here is run on (chat turns for SmolLM2, sentences for MiniLM)."""

from __future__ import annotations

QUESTION = "What is the capital of France?"  # SmolLM2-135M-Instruct answers "Paris" (checked)
EXPECTED = "Paris"

QUESTIONS = (
    QUESTION,
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
)

# A long user turn (about 300 tokens with the chat template) for prefills of 256 tokens and more.
LONG = (
    "Summarize the following notes in two sentences. "
    "The river town grew up around a stone bridge that was built more than six hundred years ago. Merchants "
    "crossed it every morning with carts of grain, wool and salt, and the tolls paid for the town walls, the "
    "market hall and a small school. In winter the river froze, and children skated from one bank to the other "
    "while the mills stood still. In spring the floods came, and more than once the water rose over the lower "
    "streets, carrying away fences, boats and the occasional goat. The town council kept careful records of "
    "every flood: the date, the height of the water on the bridge pillars, and the cost of the repairs. Those "
    "records show that the worst floods came every twenty or thirty years, usually after a winter with heavy "
    "snow in the mountains. When the railway arrived, the bridge lost its importance, the tolls were abolished "
    "and the merchants moved to the new station on the other side of the hill. The old market hall became a "
    "library, the school became a museum, and the mills were turned into houses. Today the bridge is closed to "
    "cars, and people walk across it to watch the sunset, to fish, or to read the marks that the old floods left "
    "on the pillars. Every summer the town holds a festival on the bridge, with music, food and a boat race that "
    "starts at the first pillar and ends at the mill."
)

SENTENCES = (  # MiniLM
    "The capital of France is Paris.",
    "A spider has eight legs and spins a web to catch insects.",
    "The river froze in winter, and children skated from one bank to the other.",
    "Paris is the capital city of France.",  # a paraphrase of the first: cosine > 0.8 with real weights
)
