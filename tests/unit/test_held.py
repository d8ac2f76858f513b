"""The release allowance: the cloud's recent delete-to-release times, its own word
until there are any, never below the operator's floor."""
from gpu_tenancy.domain.held import held_until, release_allowance


def test_the_allowance_is_the_90th_percentile_of_the_measured_times():
    assert release_allowance([5] * 18 + [60, 60], nominal=None, floor=0) == 5     # two outliers in 20
    assert release_allowance([5] * 17 + [60] * 3, nominal=None, floor=0) == 60
    assert release_allowance([7], nominal=30, floor=0) == 7                      # measured beats nominal


def test_without_measurements_the_clouds_nominal_time_then_the_floor():
    assert release_allowance([], nominal=None, floor=0) == 0
    assert release_allowance([], nominal=5, floor=0) == 5
    assert release_allowance([], nominal=5, floor=20) == 20
    assert release_allowance([3, 4], nominal=None, floor=10) == 10


def test_a_hold_lasts_past_its_end_by_the_allowance_and_past_now_until_released():
    assert held_until(end=100, now=50, allowance=5) == 105
    assert held_until(end=100, now=200, allowance=5) == 201    # not released yet: held beyond now
