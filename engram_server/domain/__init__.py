"""Engram's domain: pure policy (gate, TTL, decay, fusion, calibration) and use-cases.

Nothing here imports grpc, a storage engine or a model library; adapters implement the
ports in :mod:`engram_server.ports`.
"""
