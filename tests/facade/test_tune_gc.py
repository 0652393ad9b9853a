"""stowage.tune_gc: the GC thresholds a process serving many sessions runs with."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from stowage import tune_gc
from stowage.facade import GC_YOUNG_THRESHOLD


@pytest.fixture(autouse=True)
def restored_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_it_sets_the_young_threshold_and_collects_the_middle_generation_less_often() -> None:
    gc.set_threshold(700, 10, 10)  # Python's defaults
    assert tune_gc(123_456) == (700, 10, 10)  # what it replaced, to put back
    assert gc.get_threshold() == (123_456, 100, 10)
    assert tune_gc() == (123_456, 100, 10)
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 100, 10)


def test_a_middle_threshold_already_higher_and_the_oldest_are_kept() -> None:
    gc.set_threshold(700, 500, 7)
    tune_gc(1_000)
    assert gc.get_threshold() == (1_000, 500, 7)


def test_a_young_threshold_below_one_is_refused_and_nothing_changes() -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(ValueError, match="young generation's GC threshold must be >= 1, got 0"):
        tune_gc(0)
    assert gc.get_threshold() == (700, 10, 10)
