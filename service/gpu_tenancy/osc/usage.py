"""openstack gpu usage: GPU-hours per project, user and GPU model over a range, rated with
the operator's prices (`-f csv` gives the same rows as GET /v1/usage?format=csv)."""
from __future__ import annotations

from gpu_tenancy.osc import command
from gpu_tenancy.osc.client import gpu_client

HEADERS = ("Project", "User", "GPU Model", "GPU-hours", "Price per GPU-hour", "Rated", "Currency")


class ShowUsage(command.Lister):
    _description = ("GPU-hours per project, user and GPU model from --start to --end (default: the 30 days up "
                    "to now), rated where the operator set a price per GPU-hour for the model")

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--start", metavar="<time>", help="RFC 3339: start of the range")
        parser.add_argument("--end", metavar="<time>", help="RFC 3339: end of the range (default: now)")
        parser.add_argument("--project", metavar="<project-id>",
                            help="one project (another than one's own: admins only); admins see all by default")
        return parser

    def take_action(self, args):
        usage = gpu_client(self.app).usage(args.start, args.end, args.project)
        return HEADERS, [
            [project["project_id"], user["user_id"], model, figures["gpu_hours"], figures["price_per_gpu_hour"],
             figures["rated"], usage["currency"]]
            for project in usage["projects"] for user in project["users"]
            for model, figures in sorted(user["gpu_models"].items())]
