"""Pure scheduling logic: lease states, the planner, quotas and fair share.

Nothing here imports Flask, SQLAlchemy or openstacksdk; everything is fed
plain data and is deterministic, so it runs the same in the service, the
tests, the benchmarks and the trace replay. Times are integer seconds since
the epoch (UTC).
"""
