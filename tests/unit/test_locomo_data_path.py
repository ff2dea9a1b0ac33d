"""eval.locomo finds the LoCoMo data beside the checkout or beside a folder above it (a git
worktree under wt/<name>), as `make bench-locomo` runs from either."""

from __future__ import annotations

from pathlib import Path

from eval.locomo import default_data


def test_the_data_is_found_from_the_main_checkout_and_from_a_worktree(tmp_path: Path) -> None:
    data = tmp_path / "shared" / "data" / "locomo"
    data.mkdir(parents=True)
    assert default_data(tmp_path / "main") == data
    assert default_data(tmp_path / "wt" / "loco27") == data


def test_without_the_data_the_place_beside_the_checkout_is_named(tmp_path: Path) -> None:
    assert default_data(tmp_path / "wt" / "x") == tmp_path / "wt" / "shared" / "data" / "locomo"
