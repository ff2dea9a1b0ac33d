"""Engram: long-term memory for AI agents, served over gRPC."""

__version__ = "0.1.0a1"
