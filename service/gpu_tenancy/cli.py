"""gpu-tenancy: demo, db upgrade, engine."""
from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
import threading

from gpu_tenancy.config import Config

DEMO_DB = "sqlite:///gpu-tenancy-demo.db"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-tenancy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="API and engine in one process on the embedded default "
                                       "(SQLite, simulated cloud, noauth2)")
    demo.add_argument("--port", type=int, default=8779)
    demo.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback unless --insecure-public)")
    demo.add_argument("--insecure-public", action="store_true",
                      help="listen on a non-loopback address although noauth2 lets anyone act as anyone")
    demo.add_argument("--db", default=DEMO_DB, help=f"database URL (default {DEMO_DB})")

    db = sub.add_parser("db", help="database schema")
    db.add_argument("action", choices=["upgrade", "current"])
    db.add_argument("--db", help="database URL (default: from the config)")
    db.add_argument("--config", help="config file (YAML)")

    engine = sub.add_parser("engine", help="run the lifecycle engine (leader or standby)")
    engine.add_argument("--config", help="config file (YAML)")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("apscheduler", "alembic.runtime.plugins", "werkzeug"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    return {"demo": run_demo, "db": run_db, "engine": run_engine}[args.command](args)


def run_db(args) -> int:
    from gpu_tenancy.db import migrate
    url = args.db or Config.load(args.config).database_url
    if args.action == "upgrade":
        migrate.upgrade(url)
        print(f"database at the latest schema: {redact(url)}")
    else:
        migrate.current(url)
    return 0


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:   # a name other than localhost may resolve to anything
        return False


def run_demo(args) -> int:
    if not loopback(args.host) and not args.insecure_public:
        print(f"gpu-tenancy demo: refusing to listen on {args.host}: the demo runs with auth noauth2, which "
              "believes any X-Project-Id, X-User-Id and X-Roles a caller sends, so anyone who can reach it "
              "could act as any user, admin included. Listen on 127.0.0.1 (the default), or pass "
              "--insecure-public if every machine that can reach this address is trusted.", file=sys.stderr)
        return 2
    from gpu_tenancy.app import create_app
    from gpu_tenancy.db import migrate
    from gpu_tenancy.db.session import session_scope
    from gpu_tenancy.demo.seed import seed

    config = Config.load(database_url=args.db, auth_strategy="noauth2", cloud_driver="simulated",
                         run_engine=True, engine_tick_seconds=2)
    migrate.upgrade(config.database_url)
    app = create_app(config)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, runtime.clock.now(), runtime.cloud.images())
    runtime.engine.lifecycle.refresh_hosts()
    base = f"http://{args.host}:{args.port}"
    print(f"""
gpu-tenancy demo: the embedded default (SQLite at {redact(config.database_url)},
a SIMULATED cloud of 4 hosts x 8 A100 and 2 hosts x 4 H100, auth noauth2).

  API          {base}/v1
  dashboard    {base}/dashboard (dev login: pick a project, user and roles)
  OpenAPI      {base}/v1/openapi.json
  projects     ml-vision, nlp-lab (send X-Project-Id, X-User-Id, X-Roles: member or admin)

Ask for two A100 GPUs for a day:

  curl -s -X POST {base}/v1/leases -H 'Content-Type: application/json' \\
       -H 'X-Project-Id: ml-vision' -H 'X-User-Id: alice' -H 'X-Roles: member' \\
       -d '{{"name": "first", "shape": "a100.x2", "duration": "PT24H", "volume": {{"size_gb": 100}}}}'

  curl -s {base}/v1/leases -H 'X-Project-Id: ml-vision' -H 'X-Roles: member'
""", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    from werkzeug.serving import make_server
    server = make_server(args.host, args.port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        runtime.engine.stop()
    return 0


def run_engine(args) -> int:
    from gpu_tenancy.cloud.registry import make_cloud
    from gpu_tenancy.clock import SystemClock
    from gpu_tenancy.db.session import make_engine, make_sessionmaker
    from gpu_tenancy.engine.lifecycle import Lifecycle
    from gpu_tenancy.engine.runner import EngineRunner

    config = Config.load(args.config)
    clock = SystemClock()
    runner = EngineRunner(Lifecycle(make_sessionmaker(make_engine(config.database_url),
                                                      bool(config.notifications_transport_url)),
                                    make_cloud(config, clock), clock, config))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runner.start()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        runner.stop()
    return 0


def redact(url: str) -> str:
    """A database URL without its password."""
    from sqlalchemy.engine import make_url
    return make_url(url).render_as_string(hide_password=True)


if __name__ == "__main__":
    sys.exit(main())
