"""openstack gpu lease shrink: make a lease shorter, on purpose.

`lease extend` never shortens (the API refuses a change that would, 409): a mistyped
extension must not cut a training run. Shortening is this command's alone."""
from __future__ import annotations

from osc_lib.command import command

from gpu_tenancy.osc.lease import duration, find_lease, seconds, show_lease


class ShrinkLease(command.ShowOne):
    _description = "Move a lease's end earlier (its VMs are deleted at the new end; the data volume stays)"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("lease", metavar="<lease>", help="lease (id or name)")
        end = parser.add_mutually_exclusive_group(required=True)
        end.add_argument("--end", metavar="<time>", help="the new, earlier end, RFC 3339")
        end.add_argument("--duration", metavar="<duration>", type=duration,
                         help="the new, shorter duration from the lease's start: 12h, 1d, PT12H")
        end.add_argument("--by", metavar="<duration>", type=seconds, help="shorter by this much: 2h, PT2H")
        return parser

    def take_action(self, args):
        client = self.app.client_manager.gpu
        lease = find_lease(client, args.lease)
        if args.end:
            body = {"end": args.end}
        else:
            body = {"duration": args.duration if args.by is None else lease["duration"] - args.by}
        return show_lease(client.update_lease(lease["id"], {**body, "shrink": True}))
