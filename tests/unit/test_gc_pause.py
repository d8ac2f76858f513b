"""The collector paused over a replan: off inside, back as it was after, from any number of
threads, and after an error."""
from __future__ import annotations

import gc
import threading

import pytest

from gpu_tenancy.engine.gc_pause import collector_paused


@pytest.fixture(autouse=True)
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_off_inside_and_back_after_even_on_an_error():
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():   # a replan inside another's pause (the create's, the engine's)
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the replan failed")
    assert gc.isenabled()


def test_left_off_when_it_was_off():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_threads_inside_at_once_keep_it_off_until_the_last_leaves():
    inside, leave = threading.Barrier(5), threading.Event()
    seen: list[bool] = []

    def replan():
        with collector_paused():
            inside.wait()
            leave.wait()
            seen.append(gc.isenabled())

    threads = [threading.Thread(target=replan) for _ in range(4)]
    for t in threads:
        t.start()
    inside.wait()   # all four inside
    assert not gc.isenabled()
    leave.set()
    for t in threads:
        t.join()
    assert seen == [False] * 4   # none of them saw it back on while others were inside
    assert gc.isenabled()
