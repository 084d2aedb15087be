"""The collective monitor's bookkeeping (no torch: completion is faked by the objects it polls)."""

from __future__ import annotations

import time

from mcore_images.smoke.kit import collectives


class Work:
    def __init__(self, done: bool) -> None:
        self.done = done

    def is_completed(self) -> bool:
        return self.done


def test_an_entry_is_done_when_its_call_returned_and_its_work_completed() -> None:
    entry = collectives.Pending(1, "all_reduce", "world (2 ranks)", time.monotonic())
    assert not entry.done()  # still inside the call
    entry.returned = True
    assert entry.done()  # a blocking call that returned
    entry.works = [Work(True), Work(False)]
    assert not entry.done()
    entry.works[1].done = True
    assert entry.done()


def test_the_oldest_collective_past_the_timeout_is_the_expired_one() -> None:
    tracer = collectives.Tracer(5.0, rank=3, on_expiry=None, publish=None)
    old = tracer.begin("reduce_scatter_tensor", "ranks [0, 1]")
    old.issued -= 6.0
    fresh = tracer.begin("all_gather_into_tensor", "ranks [0, 1]")
    finished = tracer.begin("broadcast", "world (4 ranks)")
    finished.returned = True
    assert tracer.expired() is old
    assert tracer.pending == [old, fresh]  # what completed is dropped
    state = tracer.state()
    assert state["issued"] == 3 and state["last"] == "broadcast"
    assert state["outstanding"].startswith("reduce_scatter_tensor #1 on ranks [0, 1], issued 6.")


def test_a_collective_that_raised_is_named_as_the_culprit() -> None:
    tracer = collectives.Tracer(5.0, rank=0, on_expiry=None, publish=None)
    entry = tracer.begin("all_reduce", "ranks [0, 2]")
    named = tracer.failed_with(entry, RuntimeError("Timed out waiting 5000ms"))
    assert str(named) == "rank 0: all_reduce #1 on ranks [0, 2] failed: Timed out waiting 5000ms"
    assert tracer.pending == [] and tracer.failed.startswith("all_reduce #1")
