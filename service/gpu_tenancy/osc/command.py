"""The base classes of every `openstack gpu` command: osc_lib's, with the epilog named
here. cliff's own epilog ("This command is provided by the ... plugin") finds the
plugin's distribution with importlib.metadata.packages_distributions(), which reads
the file list of every installed distribution: a tenth of a second or more on each
command, the largest part of what `openstack gpu ...` took beyond OSC's own start.
What they print goes through inert.py: a tenant's words reach no terminal as controls."""
from __future__ import annotations

from typing import Any

from osc_lib.command import command

from gpu_tenancy.osc.inert import InertOutput

EPILOG = "This command is provided by the gpu-tenancy plugin."


class _Epilog:
    _epilog: Any   # cliff's Command has them (a str or None; hooks)
    _hooks: Any

    def get_epilog(self) -> str:
        parts = [self._epilog or ""]
        parts += [text for hook in self._hooks if hook.obj is not None and (text := hook.obj.get_epilog())]
        return "\n\n".join([*parts, EPILOG])


class Command(_Epilog, command.Command):
    pass


class Lister(InertOutput, _Epilog, command.Lister):
    pass


class ShowOne(InertOutput, _Epilog, command.ShowOne):
    pass
