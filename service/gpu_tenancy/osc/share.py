"""openstack gpu share: fair-share standing per project and GPU model (Slurm's sshare)."""
from __future__ import annotations

from gpu_tenancy.osc import command
from gpu_tenancy.osc.client import gpu_client

COLUMNS = (("rank", "Rank"), ("gpu_model", "GPU Model"), ("project", "Project"), ("nominal_gpus", "Quota GPUs"),
           ("in_use_gpus", "In Use"), ("borrowed_gpus", "Borrowed"), ("decayed_gpu_hours", "Decayed GPU-hours"),
           ("weight", "Weight"), ("score", "Score"), ("queued_charge", "Queued Charge"),
           ("waiting_leases", "Waiting Leases"))


class ShowShare(command.Lister):
    _description = ("Fair-share standing per project and GPU model: quota, GPUs in use and borrowed, recent "
                    "use decayed with the planner's half-life, weight, and the rank the planner gives "
                    "equal-priority leases (1 goes first; other projects without their names)")

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--gpu-model", metavar="<model>", help="only this GPU model, e.g. A100")
        return parser

    def take_action(self, args):
        rows = gpu_client(self.app).share(args.gpu_model)["projects"]
        # the queued charge's column only where the rule is on (null in every row when off)
        columns = [(k, h) for k, h in COLUMNS if k != "queued_charge" or any(r.get(k) is not None for r in rows)]
        return [h for _, h in columns], [[row.get(k) for k, _ in columns] for row in rows]
