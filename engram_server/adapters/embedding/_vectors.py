"""Small vector helpers shared by the embedding adapters."""

from __future__ import annotations

import numpy as np

from engram_server.domain.model import Vector


def l2_normalise(matrix: Vector) -> Vector:
    """Rows scaled to unit L2 norm, as a new C-contiguous float32 array. All-zero rows stay zero
    (callers that cannot accept them check :func:`zero_rows` first)."""
    out = np.array(matrix, dtype=np.float32, copy=True, order="C")
    if out.size == 0:
        return out
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def zero_rows(matrix: Vector) -> list[int]:
    """Indices of rows whose norm is zero."""
    if matrix.size == 0:
        return []
    return [int(i) for i in np.flatnonzero(~np.any(matrix != 0, axis=1))]
