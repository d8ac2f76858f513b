"""heat-engine in a single process, for the loopback cloud.

start.sh runs ``python heat_engine.py --config-file etc/heat/heat.conf``
instead of the ``heat-engine`` console script. Everything is heat's own
``heat.cmd.engine.main()``, except how the one engine service is launched.

Why: with oslo.service's threading backend, ``service.launch()`` always goes
through a cotyledon ServiceManager, a master process that forks the worker, even
for ``num_engine_workers = 1``. The master has imported all of heat before it
forks, so the pair costs about 280 MB RSS where one process is about 140 MB, on
a stack that must stay under 3 GB. oslo.service's plain ``Launcher`` runs the
service in a thread of this process instead.

Stopping: SIGTERM ends the process at once (Python's default action; there is
no master to forward it). A stack left IN_PROGRESS by a dead engine is reset to
FAILED by the next engine's start, as after any engine crash.
"""

import sys

from heat.cmd import engine as heat_engine_cmd  # selects the threading backend
from oslo_service import service


def _launch_in_process(conf, srv, workers=1, restart_method="reload"):
    launcher = service.Launcher(conf, restart_method=restart_method)
    launcher.launch_service(srv, workers=workers)
    return launcher


if __name__ == "__main__":
    heat_engine_cmd.service.launch = _launch_in_process
    sys.exit(heat_engine_cmd.main())
