"""delayq.db.retry_lock_conflicts: a deadlock or lock wait timeout is tried again, nothing else is."""
import pytest

from delayq.db import retry_lock_conflicts
from delayq.errors import StoreUnavailable


def _failing(codes):
    """A call that raises StoreUnavailable with each code in turn, then answers "done"."""
    left = list(codes)

    def call():
        if left:
            raise StoreUnavailable("conflict", left.pop(0))
        return "done"
    return call


def test_lock_conflicts_are_tried_again_with_growing_pauses():
    pauses = []
    assert retry_lock_conflicts(_failing([1213, 1205]), pause=pauses.append) == "done"
    assert pauses == [0.05, 0.1]


def test_the_last_conflict_is_raised():
    pauses = []
    with pytest.raises(StoreUnavailable):
        retry_lock_conflicts(_failing([1213] * 5), pause=pauses.append)
    assert len(pauses) == 4


def test_any_other_error_is_raised_at_once():
    pauses = []
    with pytest.raises(StoreUnavailable) as e:
        retry_lock_conflicts(_failing([2013, 1213]), pause=pauses.append)
    assert e.value.code == 2013 and pauses == []
