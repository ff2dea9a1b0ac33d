"""Polyglot contract tests: the shared scenarios from Python, Go and TypeScript."""
