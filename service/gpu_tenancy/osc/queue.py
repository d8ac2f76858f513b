"""openstack gpu queue: everyone's waiting leases in planned order (Slurm's squeue)."""
from __future__ import annotations

from gpu_tenancy.osc import command
from gpu_tenancy.osc.client import gpu_client

HEADERS = ("Position", "GPU Model", "Project", "Lease", "Shape", "GPUs", "Status", "Waiting Since", "ETA",
           "Reason")


def lease_label(entry: dict) -> str:
    """The lease's name (its id when it has none); blank for another project's."""
    return "" if entry["hidden"] else entry["name"] or entry["lease_id"]


def shape_label(entry: dict) -> str:
    """GPU model x GPUs per VM x VMs, as the shape says it: 2 x a100.x8."""
    return entry["shape"] if entry["instances"] == 1 else f"{entry['instances']} x {entry['shape']}"


class ShowQueue(command.Lister):
    _description = ("Everyone's waiting leases in the order the planner will start them, per GPU model: "
                    "position, shape, ETA and the main reason (other projects' leases without their names)")

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--gpu-model", metavar="<model>", help="only leases for this GPU model, e.g. A100")
        return parser

    def take_action(self, args):
        queue = gpu_client(self.app).queue(args.gpu_model)
        return HEADERS, [
            [e["position"], e["gpu_model"], e["project"], lease_label(e), shape_label(e), e["gpus"], e["status"],
             e["waiting_since"], e["eta"], (e["reason"] or {}).get("message")]
            for e in queue["leases"]]
