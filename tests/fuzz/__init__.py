"""Property-based fuzzing of the fusion patterns (see tests/test_fuzz_patterns.py).

``cases`` holds the :class:`~fuzz.cases.Case` type and its inputs; ``runner`` runs a case through
``gsrewrite.apply`` / ``optimize`` and compares the original and the result in onnxruntime at sizes validation
does not use; ``masks``, ``attention``, ``norms`` and ``elementwise`` build the models (``spellings`` imports
the exporter spellings of tests/patterns); ``strategies`` draws them with hypothesis; ``pinned`` lists the
cases of bugs found so far, tried first on every run.
"""
