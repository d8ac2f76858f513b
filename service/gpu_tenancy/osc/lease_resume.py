"""openstack gpu lease resume: a lease an idle rule parked comes back sooner than its held
slot, if that delays nobody; otherwise it keeps the held slot (the lease's events say why)."""
from __future__ import annotations

from gpu_tenancy.osc import command
from gpu_tenancy.osc.client import gpu_client
from gpu_tenancy.osc.lease import find_lease, show_lease


class ResumeLease(command.ShowOne):
    _description = ("Resume a parked lease: now, or at the earliest free slot, if that delays no planned "
                    "lease; else it keeps its held resume slot")

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("lease", metavar="<lease>", help="the lease (id or name)")
        return parser

    def take_action(self, args):
        client = gpu_client(self.app)
        return show_lease(client.resume_lease(find_lease(client, args.lease)["id"]))
