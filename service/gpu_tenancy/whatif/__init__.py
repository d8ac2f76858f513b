"""Policy what-if: the replay of lease history on virtual time, with the service's own
planner and the engine's semantics (event_loop + planner_sched; bench/engine_replay.py
checks it against the real engine), so an operator sees what a change of settings
would have done before making it."""
