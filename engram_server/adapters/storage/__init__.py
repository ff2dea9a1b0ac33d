"""Store adapters: ``edge`` (embedded qdrant-edge, the default) and ``qdrant`` (qdrant-client, for a
Qdrant server or cluster). ``payload`` holds what they share: the record codec, the payload
indexes and the StoreFilter semantics. Import the adapter you need from its module."""
