"""openstack gpu lease create|list|show|extend|cancel."""
from __future__ import annotations

import argparse
import logging
import time

from osc_lib import exceptions

from gpu_tenancy.domain.states import FINAL, LeaseState
from gpu_tenancy.osc import command
from gpu_tenancy.osc.client import ApiError, gpu_client
from gpu_tenancy.osc.columns import (LinesColumn, OffersColumn, QueueColumn, RecordColumn, RecordsColumn,
                                     ServersColumn)
from gpu_tenancy.osc.inert import printable
from gpu_tenancy.timeutil import parse_duration, spoken_duration

log = logging.getLogger(__name__)

# the lease's fields as the API names them, in the order `show` prints them
FIELDS = ("id", "name", "status", "project_id", "user_id", "shape", "gpu_model", "gpus_per_instance",
          "instances", "requested_start", "latest_start", "duration", "start", "end", "cancelled_at", "priority",
          "priority_class", "preemptible", "borrowing", "early_end", "park", "boot", "flavor", "vms_free", "image", "volume",
          "key_name", "network", "floating_ip", "queue", "offers", "allocations", "servers", "ssh", "failure",
          "created_at", "updated_at")
FORMATTERS = {"queue": QueueColumn, "offers": OffersColumn, "allocations": RecordsColumn, "servers": ServersColumn,
              "park": RecordColumn, "early_end": RecordColumn, "volume": RecordColumn, "failure": RecordColumn, "flavor": RecordColumn,
              "network": RecordColumn}
FINAL_STATES = {state.value for state in FINAL}
# how --wait reports a lease that did not become active
OUTCOMES = {"failed": "failed", "cancelled": "was cancelled", "expired": "expired: its latest start passed",
            "preempted": "was preempted", "ended": "ended"}
WAIT_INTERVAL = 2.0
MIN_DURATION = 60   # seconds: the API's shortest lease


def show_lease(lease: dict) -> tuple[tuple, tuple]:
    if lease.get("servers"):   # each VM's login, one line each, ready to copy
        lease = {**lease, "ssh": LinesColumn([s["ssh"] for s in lease["servers"] if s.get("ssh")])}
    fields = tuple(f for f in FIELDS if f in lease)
    return fields, tuple(FORMATTERS[f](lease[f]) if f in FORMATTERS else lease[f] for f in fields)


def list_cell(lease: dict, column: str):
    """A cancelled lease has no end (it never started): its End cell says when it was cancelled."""
    if column == "end" and lease.get("cancelled_at"):
        return f"cancelled at {lease['cancelled_at']}"
    return lease[column]


def duration(value: str) -> int | str:
    """Seconds as a number, anything else (ISO 8601, e.g. PT24H) as given for the API to judge."""
    return int(value) if value.isdigit() else value


def size_gb(value: str) -> int:
    """A new volume's size: whole gigabytes, at least 1 (as the API takes it)."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a size in GB: give a whole number, at least 1")
    return int(value)


def count(value: str) -> int:
    """A number of leases, at least 1: --limit 0 was taken as no limit, and listed every lease."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count: give a whole number, at least 1")
    return int(value)


def seconds(value: str) -> int:
    """An ISO 8601 duration or whole seconds, in seconds (for arithmetic on this side)."""
    try:
        return parse_duration(int(value) if value.isdigit() else value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def find_lease(client, name_or_id: str) -> dict:
    """A lease by id, or by name when exactly one of the caller's leases has it."""
    try:
        return client.lease(name_or_id)
    except ApiError as exc:
        if exc.status != 404:
            raise
    named = [lease for lease in client.leases() if lease["name"] == name_or_id]
    # a name is unique among the project's unfinished leases: an ended one of the same name
    # (the lease before it, re-asked) does not make it ambiguous
    unfinished = [lease for lease in named if lease["status"] not in FINAL_STATES]
    if unfinished:
        named = unfinished
    if len(named) == 1:
        return named[0]
    if named:
        raise exceptions.CommandError(f"{len(named)} leases are named {name_or_id!r}; give the id")
    raise exceptions.CommandError(f"no lease with the id or name {name_or_id!r}")


def describe_event(event: dict) -> str:
    """One line for --wait's stderr; a message may quote a guest's words (done --detail)."""
    if event.get("to"):
        change = f"{event['from']} -> {event['to']}" if event.get("from") else event["to"]
    else:
        change = event.get("kind") or "event"
    return printable(f"{event['at']}  {change}" + (f": {event['message']}" if event.get("message") else ""))


def wait_for_lease(client, lease: dict, out, interval: float = WAIT_INTERVAL,
                   sleep=time.sleep) -> tuple[dict, bool]:
    """Follow the lease until it is active or final, writing each new event and each
    change of queue place to `out`; return its last state and whether it became active."""
    shown_events, shown_queue, started = 0, None, False
    while True:
        lease = client.lease(lease["id"])
        events = client.lease_events(lease["id"], after=shown_events)   # only those not shown yet
        for event in events:
            out.write(describe_event(event) + "\n")
        shown_events += len(events)
        started = started or any(e.get("to") == LeaseState.ACTIVE.value for e in events)
        queue = lease.get("queue")
        if lease["status"] == "queued" and queue and (queue["position"], queue["eta"]) != shown_queue:
            shown_queue = (queue["position"], queue["eta"])
            by = f", start by {queue['start_by']}" if queue.get("start_by") else ""
            out.write(f"queued: position {queue['position']}, eta {queue['eta'] or 'unknown'}{by}\n")
        out.flush()
        # a failed start passes through `ending` too, so only active or final ends the wait
        if lease["status"] == LeaseState.ACTIVE.value or lease["status"] in FINAL_STATES:
            return lease, started
        sleep(interval)


class CreateLease(command.ShowOne):
    _description = "Ask for GPUs: the lease starts now or waits in the queue with a position and an ETA"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="<name>", nargs="?", help="name of the lease")
        parser.add_argument("--shape", metavar="<shape>", required=True, help="shape of each VM, e.g. a100.x2")
        parser.add_argument("--duration", metavar="<duration>", required=True, type=duration,
                            help="how long: 24h, 7d, 90m, PT24H, P2D or 1-00:00:00")
        parser.add_argument("--instances", metavar="<count>", type=int,
                            help="VMs that start together (a gang); default 1")
        parser.add_argument("--start", metavar="<time>", help="'now' (the default) or an RFC 3339 time")
        parser.add_argument("--latest-start", metavar="<time>",
                            help="RFC 3339: expire instead of starting later than this")
        parser.add_argument("--boot", metavar="<mode>", choices=("service", "tenant"),
                            help="service (default): the service boots the VMs; tenant: the project's "
                                 "members boot them with the lease's flavor while it is active")
        parser.add_argument("--image", metavar="<image>", help="image of the standard catalog")
        volume = parser.add_mutually_exclusive_group()
        volume.add_argument("--volume-size", metavar="<size-gb>", type=size_gb, help="a new data volume of this size")
        volume.add_argument("--volume", metavar="<volume-id>", help="the project's own data volume")
        parser.add_argument("--key-name", metavar="<key-name>", help="ssh key pair for the VMs")
        parser.add_argument("--network", metavar="<network>",
                            help="network of the VMs, id or name (default: the project's only network, "
                                 "else the operator's default)")
        parser.add_argument("--floating-ip", action="store_true", default=None,
                            help="give each VM a floating IP from the external network")
        parser.add_argument("--user-data", metavar="<file>", help="file of user data (cloud-init) for the VMs")
        priority = parser.add_mutually_exclusive_group()
        priority.add_argument("--priority-class", metavar="<class>",
                              help="a priority class (GET /v1/priority_classes lists them), e.g. preemptible")
        priority.add_argument("--priority", metavar="<number>", type=int,
                              help="a bare priority number, -100 to 100 (admins)")
        parser.add_argument("--dry-run", action="store_true",
                            help="show the answer (start or queue place and ETA, and the offers when it "
                                 "would wait) without asking")
        parser.add_argument("--accept-offer", metavar="<offer-id>",
                            help="take an offer a dry run or a create showed: its shape, instances, duration "
                                 "and start replace those given (a lease it was made for is cancelled)")
        parser.add_argument("--wait", action="store_true",
                            help="follow the lease's events until it is active (exit 0) or it fails, "
                                 "is cancelled or expires (exit 1)")
        return parser

    def take_action(self, args):
        client = gpu_client(self.app)
        body = {"shape": args.shape, "duration": args.duration}
        for field in ("name", "instances", "start", "latest_start", "boot", "image", "key_name", "priority",
                      "priority_class", "network", "floating_ip", "accept_offer"):
            if getattr(args, field) is not None:
                body[field] = getattr(args, field)
        if args.volume_size is not None:
            body["volume"] = {"size_gb": args.volume_size}
        elif args.volume:
            body["volume"] = {"id": args.volume}
        if args.user_data:
            try:
                with open(args.user_data, encoding="utf-8") as f:
                    body["user_data"] = f.read()
            except OSError as exc:
                raise exceptions.CommandError(f"cannot read the user data file: {exc}") from None
        lease = client.create_lease(body, dry_run=args.dry_run)
        if args.wait and not args.dry_run:
            lease, reached_active = wait_for_lease(client, lease, self.app.stderr)
            if not reached_active:
                failure = lease.get("failure")
                why = f" ({failure['class']}): {failure['message']}" if failure else ""
                outcome = OUTCOMES.get(lease["status"], lease["status"])
                raise exceptions.CommandError(printable(f"lease {lease['id']} {outcome}{why}"))
        return show_lease(lease)


class ListLease(command.Lister):
    _description = "List leases with their status and queue place"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--status", metavar="<status>", action="append",
                            help="only leases in this status (repeat for more)")
        parser.add_argument("--project", metavar="<project-id>", help="leases of this project (admins)")
        parser.add_argument("--all-projects", action="store_true", help="leases of every project (admins)")
        parser.add_argument("--limit", metavar="<count>", type=count, help="at most this many leases")
        parser.add_argument("--marker", metavar="<lease-id>", help="start after this lease")
        parser.add_argument("--long", action="store_true", help="more columns")
        return parser

    def take_action(self, args):
        leases = gpu_client(self.app).leases(
            status=args.status, project_id=args.project, all_projects="true" if args.all_projects else None,
            marker=args.marker, limit=args.limit)
        columns = ["id", "name", "status", "shape", "instances", "start", "end"]
        headers = ["ID", "Name", "Status", "Shape", "Instances", "Start", "End"]
        if args.long:
            columns += ["project_id", "gpu_model", "duration"]
            headers += ["Project", "GPU Model", "Duration"]
        headers += ["Queue Position", "ETA"]
        rows = [[list_cell(lease, c) for c in columns] + [(lease.get("queue") or {}).get("position"),
                                                          (lease.get("queue") or {}).get("eta")]
                for lease in leases]
        return headers, rows


class ShowLease(command.ShowOne):
    _description = "Show a lease: status, queue place and reasons, allocations, servers, failure"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("lease", metavar="<lease>", help="lease (id or name)")
        return parser

    def take_action(self, args):
        return show_lease(find_lease(gpu_client(self.app), args.lease))


class ExtendLease(command.ShowOne):
    _description = ("Move a lease's end later; granted only if it delays no planned lease (never shortens: "
                    "see lease shrink)")

    # what lease shrink (osc/lease_shrink.py) changes: the direction of --by, the words, and the ask
    sign = 1
    asks: dict = {}
    helps = ("the new end, RFC 3339", "the new duration from the lease's start: 24h, 7d, PT24H, 1-00:00:00",
             "longer by this much: 2h, 1d, PT2H")

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("lease", metavar="<lease>", help="lease (id or name)")
        end = parser.add_mutually_exclusive_group(required=True)
        end.add_argument("--end", metavar="<time>", help=self.helps[0])
        end.add_argument("--duration", metavar="<duration>", type=duration, help=self.helps[1])
        end.add_argument("--by", metavar="<duration>", type=seconds, help=self.helps[2])
        return parser

    def take_action(self, args):
        client = gpu_client(self.app)
        lease = find_lease(client, args.lease)
        if args.end:
            body = {"end": args.end}
        elif args.by is None:
            body = {"duration": args.duration}
        else:
            body = {"duration": lease["duration"] + self.sign * args.by}
            if body["duration"] < MIN_DURATION:   # the API would refuse a bare -9000 as a schema mismatch
                raise exceptions.CommandError(
                    f"lease {lease['name'] or lease['id']} is {spoken_duration(lease['duration'])} long: shorter "
                    f"by {spoken_duration(args.by)} would leave less than a minute; to end it now: "
                    "openstack gpu lease done (running) or cancel")
        return show_lease(client.update_lease(lease["id"], {**body, **self.asks}))


class CancelLease(command.Command):
    _description = "Cancel waiting leases, or end running ones now (the data volume stays)"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("leases", metavar="<lease>", nargs="+", help="lease(s) to cancel (id or name)")
        return parser

    def take_action(self, args):
        client = gpu_client(self.app)
        failed = 0
        for name_or_id in args.leases:
            try:
                client.cancel_lease(find_lease(client, name_or_id)["id"])
            except exceptions.CommandError as exc:
                failed += 1
                log.error("lease %s: %s", name_or_id, exc)
        if failed:
            raise exceptions.CommandError(f"{failed} of {len(args.leases)} leases could not be cancelled")
