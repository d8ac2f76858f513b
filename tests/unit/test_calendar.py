"""The capacity calendar's step function and the overlap arithmetic of usage."""
from gpu_tenancy.domain.calendar import free_steps, overlap


def test_a_host_without_holds_is_free_all_window():
    assert free_steps(8, [], 100, 200) == [(100, 200, 8)]


def test_holds_make_steps_that_cover_the_window_exactly():
    holds = [(120, 150, 2), (140, 180, 4)]
    assert free_steps(8, holds, 100, 200) == [(100, 120, 8), (120, 140, 6), (140, 150, 2), (150, 180, 4),
                                             (180, 200, 8)]


def test_holds_are_clipped_to_the_window():
    assert free_steps(8, [(0, 150, 8), (190, 10_000, 1)], 100, 200) == [(100, 150, 0), (150, 190, 8),
                                                                       (190, 200, 7)]


def test_equal_neighbours_merge():
    # one lease ends exactly when another of the same size starts: no visible seam
    assert free_steps(8, [(100, 150, 4), (150, 200, 4)], 100, 200) == [(100, 200, 4)]


def test_holds_outside_the_window_and_empty_windows():
    assert free_steps(4, [(0, 100, 4), (200, 300, 4)], 100, 200) == [(100, 200, 4)]
    assert free_steps(4, [(0, 100, 4)], 200, 200) == []


def test_overlap():
    assert overlap(0, 100, 50, 200) == 50
    assert overlap(0, 100, 100, 200) == 0
    assert overlap(60, 70, 0, 200) == 10
    assert overlap(300, 400, 0, 200) == 0
