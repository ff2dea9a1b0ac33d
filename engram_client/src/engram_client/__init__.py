"""Python client for the Engram memory service."""

__version__ = "0.1.0a1"
