"""bench/replay_speed.py hands the over-ask model to each child replay as replay.py names it
(it once handed True, which replay.over_asked refuses: every --overask run failed)."""
from __future__ import annotations

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

import replay  # noqa: E402
import replay_speed  # noqa: E402


@pytest.mark.parametrize("argv, model, asked", [([], None, None), (["--overask"], "hour", 7200),
                                                (["--overask", "2x"], "2x", 3 * 3600)])
def test_the_child_replay_gets_the_over_ask_model_it_was_asked_for(argv, model, asked):
    a = replay_speed.parser().parse_args(argv + ["--traces", "traces"])
    cmd = replay_speed.child_cmd("bench", a, 0.8)
    assert cmd[2] == "--child"
    child = replay_speed.parser().parse_args(cmd[2:])
    assert child.overask == model
    if model is not None:   # 1.5 h of run time: asked to the next hour, or twice it to the hour
        assert replay.over_asked(5400, child.overask) == asked


def test_an_unknown_over_ask_model_is_refused():
    with pytest.raises(SystemExit):
        replay_speed.parser().parse_args(["--overask", "3x", "--traces", "traces"])


def test_the_child_runs_the_service_beside_the_bench_it_was_given(tmp_path):
    """A ref's child imports that ref's service, not this tree's (the script's own `traces`
    imported this tree's first, and --against compared this tree with itself)."""
    import subprocess
    (tmp_path / "bench").mkdir()
    fake = tmp_path / "service" / "gpu_tenancy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise SystemExit("the exported service was imported")\n')
    r = subprocess.run([sys.executable, os.path.join(BENCH, "replay_speed.py"), "--child", str(tmp_path / "bench"),
                        "--traces", str(tmp_path), "--loads", "0.8"], capture_output=True, text=True, timeout=60)
    assert "the exported service was imported" in r.stderr, r.stderr
