"""Tests of the engram-client package."""
