"""openstack gpu capacity: GPUs per model now, or each host's free GPUs over a window."""
from __future__ import annotations

from gpu_tenancy.osc import command
from gpu_tenancy.osc.client import gpu_client

NOW = (("gpu_model", "GPU Model"), ("hosts", "Hosts"), ("hosts_in_service", "Hosts In Service"),
       ("gpus", "GPUs"), ("in_use", "In Use"), ("free", "Free"), ("largest_free_block", "Largest Free Block"),
       ("waiting_leases", "Waiting Leases"))
CALENDAR_HEADERS = ("Host", "GPU Model", "GPUs", "In Service", "From", "To", "Free", "Planned")


class ShowCapacity(command.Lister):
    _description = ("GPUs per model now: in use, free, the largest free block, waiting leases; with "
                    "--start and --end, each host's GPUs over that window: free (neither held nor planned) "
                    "and planned for waiting leases")

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--start", metavar="<time>", help="RFC 3339 or 'now': start of the calendar window")
        parser.add_argument("--end", metavar="<time>", help="RFC 3339: end of the calendar window")
        return parser

    def take_action(self, args):
        capacity = gpu_client(self.app).capacity(args.start, args.end)
        if args.start or args.end:
            return CALENDAR_HEADERS, [
                [host["host"], host["gpu_model"], host["gpus"], host["in_service"],
                 span["from"], span["to"], span["free"], span.get("planned", 0)]
                for host in capacity.get("calendar", []) for span in host["free"]]
        return [h for _, h in NOW], [
            [model] + [figures.get(k) for k, _ in NOW[1:]]
            for model, figures in sorted(capacity["gpu_models"].items())]
