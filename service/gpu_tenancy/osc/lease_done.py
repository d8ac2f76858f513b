"""openstack gpu lease done: a running lease's work is done; end it now.

Unlike `lease cancel`, it refuses a lease that is not running (the API answers 409),
so a job script's last line cannot cancel a lease that has not started yet."""
from __future__ import annotations

from gpu_tenancy.osc import command

from gpu_tenancy.osc.lease import find_lease
from gpu_tenancy.osc.client import gpu_client


class DoneLease(command.ShowOne):
    _description = "A running lease's work is done: end it now and give its GPUs back (the data volume stays)"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("lease", metavar="<lease>", help="the lease (id or name)")
        parser.add_argument("--detail", metavar="<words>", help="said in the lease's events, e.g. the exit status")
        return parser

    def take_action(self, args):
        client = gpu_client(self.app)
        lease = client.lease_done(find_lease(client, args.lease)["id"], args.detail)
        return tuple(lease), tuple(lease.values())
