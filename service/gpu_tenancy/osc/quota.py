"""openstack gpu quota show|set: per project and GPU model."""
from __future__ import annotations

from osc_lib import exceptions

from gpu_tenancy.osc import command
from gpu_tenancy.osc.lease import duration
from gpu_tenancy.timeutil import spoken_duration
from gpu_tenancy.osc.client import ApiError, gpu_client

LIMITS = ("gpus", "borrow_gpus", "max_duration", "weight")
HEADERS = ("GPU Model", "GPUs", "Borrow GPUs", "Max Duration", "Weight")


NO_LIMIT = "none"


def max_duration(value: str) -> int | str:
    return NO_LIMIT if value.lower() == NO_LIMIT else duration(value)


def shown(limit: str, value):
    """A limit as a person reads it: the longest lease in days and hours, not seconds."""
    return spoken_duration(value) if limit == "max_duration" and value is not None else value


class ShowQuota(command.Lister):
    _description = "Show a project's quota per GPU model (your own project by default)"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("project", metavar="<project-id>", nargs="?",
                            help="project (default: the current one; others need admin)")
        return parser

    def take_action(self, args):
        client = gpu_client(self.app)
        project = args.project or client.project_id
        if not project:
            raise exceptions.CommandError("name the project: no current project is known")
        quota = client.quota(project)
        return HEADERS, [[model] + [shown(k, limits.get(k)) for k in LIMITS]
                         for model, limits in sorted(quota["gpu_models"].items())]


class SetQuota(command.Command):
    _description = ("Set a project's quota for one GPU model (admins); limits not given keep their "
                    "current values")

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("project", metavar="<project-id>", help="project")
        parser.add_argument("--gpu-model", metavar="<model>", required=True, help="GPU model, e.g. A100")
        parser.add_argument("--gpus", metavar="<count>", type=int, help="GPUs it may hold at any instant")
        parser.add_argument("--borrow-gpus", metavar="<count>", type=int,
                            help="more it may hold while capacity is idle")
        parser.add_argument("--max-duration", metavar="<duration>", type=max_duration,
                            help="longest lease: 7d, 36h, P7D, 1-12:00:00, or 'none' for no limit")
        parser.add_argument("--weight", metavar="<weight>", type=float, help="fair-share weight")
        return parser

    def take_action(self, args):
        client = gpu_client(self.app)
        given = {k: getattr(args, k) for k in LIMITS if getattr(args, k) is not None}
        if given.get("max_duration") == NO_LIMIT:
            given["max_duration"] = None
        if not given:
            raise exceptions.CommandError("give at least one of --gpus, --borrow-gpus, --max-duration, --weight")
        # PATCH: the API merges the limits given onto those it holds when it writes. Reading them
        # here and sending them back (PUT replaces a model's limits whole) lost another admin's
        # change made in between; that stays only for a service older than PATCH (405).
        try:
            client.change_quota(args.project, {args.gpu_model: given})
        except ApiError as exc:
            if exc.status != 405:
                raise
            current = client.quota(args.project)["gpu_models"].get(args.gpu_model)
            if current is None and "gpus" not in given:
                raise exceptions.CommandError(f"project {args.project} has no {args.gpu_model} quota yet: "
                                              "give --gpus") from None
            client.set_quota(args.project, {args.gpu_model: {**(current or {}), **given}})
