"""python-blazarclient's `openstack reservation lease ...` as the tests drive it: what
it prints around its JSON, and times in the form it takes."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from tests.openstack_cli import OpenStackCLI

API_FORM = "%Y-%m-%d %H:%M"          # what the client and Blazar's API take
SHOWN_FORM = "%Y-%m-%dT%H:%M:%S.%f"  # what Blazar's answers give


def in_api_form(delta: timedelta) -> str:
    return (datetime.now(timezone.utc) + delta).strftime(API_FORM)


def created(cli: OpenStackCLI, *args: str) -> dict:
    """`lease create -f json`: the client prints "Created a new lease:" before the JSON."""
    result = cli.run("reservation", "lease", "create", *args, "-f", "json")
    assert result.returncode == 0, result.stderr
    first, _, rest = result.stdout.partition("\n")
    assert first == "Created a new lease:", result.stdout
    return json.loads(rest)


def updated(cli: OpenStackCLI, lease_id: str, *args: str) -> dict:
    """`lease set` (the client's update) prints "Updated lease: <id>" only: the lease as shown after."""
    result = cli.run("reservation", "lease", "set", *args, lease_id)
    assert result.returncode == 0 and result.stdout.strip() == f"Updated lease: {lease_id}", result.stderr
    return cli.json("reservation", "lease", "show", lease_id)
