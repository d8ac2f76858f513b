"""gpu-tenancy: demo, db upgrade, engine, whatif, reservation-endpoint."""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import math
import os
import sys
import threading
from collections.abc import Iterator

from gpu_tenancy.config import Config
from gpu_tenancy.stopping import leave_now, on_sigterm, wait_for

DEMO_DB = "sqlite:///gpu-tenancy-demo.db"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-tenancy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="API and engine in one process on the embedded default "
                                       "(SQLite, simulated cloud, noauth2)")
    demo.add_argument("--port", type=tcp_port, default=8779)
    demo.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback unless --insecure-public)")
    demo.add_argument("--insecure-public", action="store_true",
                      help="listen on a non-loopback address although noauth2 lets anyone act as anyone")
    demo.add_argument("--db", default=DEMO_DB, help=f"database URL (default {DEMO_DB})")
    demo.add_argument("--history-days", type=days, default=0,
                      help="first give the demo this many days of past leases (for whatif and the figures)")

    db = sub.add_parser("db", help="database schema, and purging old rows",
                        description="upgrade: bring the schema to the latest; current: show its revision; "
                                    "purge: delete, in batches, webhook deliveries delivered or given up, bus "
                                    "notices sent, audit records and expired dashboard logins from before a "
                                    "cutoff at least a day old (leases, their events and usage stay)")
    db.add_argument("action", choices=["upgrade", "current", "purge"])
    cutoff = db.add_mutually_exclusive_group()
    cutoff.add_argument("--before", metavar="DATE", help="purge: rows older than this (YYYY-MM-DD, UTC, or RFC 3339)")
    cutoff.add_argument("--older-than-days", type=int, metavar="N", help="purge: rows older than N days")
    db.add_argument("--vacuum", action="store_true",
                    help="purge: then give the space back: SQLite, VACUUM the file (it holds the write lock "
                         "meanwhile: the API and the engine wait); PostgreSQL, VACUUM (ANALYZE) the purged tables")
    db.add_argument("--db", help="database URL (default: from the config)")
    db.add_argument("--config", help="config file (YAML; default: $GPU_TENANCY_CONFIG)")

    engine = sub.add_parser("engine", help="run the lifecycle engine (leader or standby)")
    engine.add_argument("--config", help="config file (YAML; default: $GPU_TENANCY_CONFIG)")

    whatif = sub.add_parser("whatif", help="replay the lease history under the current and proposed settings",
                            description="Replay the cloud's own lease history (the last DAYS days from the "
                                        "database, or a file --export wrote) under the current settings and "
                                        "with the --set changes, and print both side by side. Changes nothing.")
    whatif.add_argument("--config", help="config file (YAML; default: $GPU_TENANCY_CONFIG): the database and the planner's settings")
    whatif.add_argument("--db", help="database URL (default: from the config)")
    whatif.add_argument("--days", type=days, default=30, help="the history: leases asked for in the last DAYS days")
    whatif.add_argument("--until", help="the history's end (RFC 3339; default now)")
    whatif.add_argument("--set", dest="changes", action="append", default=[], metavar="KEY=VALUE",
                        help="a proposed change (repeatable): quota.<project>.<model>.{gpus,borrow_gpus,weight,"
                             "max_duration}, weight.<project>, priority_class.<name>.priority, planner.{wait_bound,"
                             "wait_bound_gpu_hours,wait_bound_leases,fairshare_half_life,age_size_gpu_hours,"
                             "queued_charge,queued_charge_spares_gpus,empty_together}")
    whatif.add_argument("--history", help="replay this file (written by --export) instead of the database")
    whatif.add_argument("--export", metavar="FILE", help="write the history to FILE (JSON) and replay nothing")
    whatif.add_argument("--json", action="store_true", help="print the figures as JSON")

    endpoint = sub.add_parser("reservation-endpoint",
                              help="put the Blazar-compatible API (/reservation/v1) in the Keystone catalog as "
                                   "type reservation, or take it out")
    endpoint.add_argument("action", choices=["register", "unregister"])
    endpoint.add_argument("--url", help="the API's public URL ending in /reservation/v1 (register)")
    endpoint.add_argument("--region", default="RegionOne")
    endpoint.add_argument("--interface", action="append", choices=["public", "internal", "admin"],
                          help="repeatable (default: all three)")
    endpoint.add_argument("--os-cloud", required=True, help="an admin's cloud in clouds.yaml")
    endpoint.add_argument("--clouds-yaml", help="the clouds.yaml file (default: the usual places)")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("apscheduler", "alembic.runtime.plugins", "werkzeug"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    command = {"demo": run_demo, "db": run_db, "engine": run_engine, "whatif": run_whatif,
               "reservation-endpoint": run_reservation_endpoint}[args.command]
    try:
        return command(args)
    except (BadConfig, Unusable) as exc:
        print(f"gpu-tenancy {args.command}: {exc}", file=sys.stderr)
        return 2


def tcp_port(value: str) -> int:
    """1 to 65535: the socket took 99999 as 34463 (modulo 65536) while the banner showed :99999."""
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TCP port: give 1 to 65535")
    return int(value)


def days(value: str) -> float:
    """A number of days, finite and more than 0: `whatif --days inf` (and `demo --history-days
    inf`) ended in a traceback, nan in "cannot convert float NaN to integer", and -1 or 0 replayed
    a window holding nothing, as if the cloud had had no leases."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of days: give one more than 0, such as 30")
    return number


class BadConfig(Exception):
    """The config file cannot be read or is not valid: main() says why (exit 2)."""


class Unusable(Exception):
    """The database or the cloud the command was given cannot be used (not a URL, a driver not
    installed, a server down, a cloud not in clouds.yaml, refused credentials): main() says why
    in a line (exit 2), where the operator saw the library's traceback."""


@contextlib.contextmanager
def database(url: str) -> Iterator[None]:
    """Turns SQLAlchemy's errors about `url` into Unusable, the URL shown without its password."""
    from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
    try:
        yield
    except SQLAlchemyError as exc:
        reason: object = exc.orig if isinstance(exc, DBAPIError) else exc
        if isinstance(exc, ArgumentError) and not isinstance(exc, NoSuchModuleError):   # it quotes the URL whole
            reason = "not a database URL such as postgresql+psycopg://user:password@host/gpu_tenancy"
        raise Unusable(f"cannot use the database at {redact(url)}: {reason}") from None
    except ImportError as exc:   # a dialect SQLAlchemy has (postgresql+psycopg2), its driver not installed
        raise Unusable(f"cannot use the database at {redact(url)}: its driver is not installed ({exc}); "
                       "the service's is postgresql+psycopg://") from None


def load_config(path: str | None) -> Config:
    import yaml
    # without --config, the file the API's workers read (wsgi.py): an operator who exported it for
    # gunicorn ran `db upgrade` or `engine` on ./gpu-tenancy.db and the simulated cloud, unwarned
    path = path or os.environ.get("GPU_TENANCY_CONFIG") or None
    try:
        return Config.load(path)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise BadConfig(f"the config {path or '(none)'}: {exc}") from None


def run_db(args) -> int:
    from gpu_tenancy.db import migrate
    from gpu_tenancy.db.migration_run import NewerSchema
    url = args.db or load_config(args.config).database_url
    if args.action == "purge":
        return run_purge(args, url)
    if args.before or args.older_than_days is not None or args.vacuum:
        print(f"gpu-tenancy db: --before, --older-than-days and --vacuum go with purge, not {args.action}",
              file=sys.stderr)
        return 2
    try:
        with database(url):
            if args.action == "upgrade":
                migrate.upgrade(url)
                print(f"database at the latest schema: {redact(url)}")
            else:
                migrate.current(url)
    except NewerSchema as exc:
        print(f"gpu-tenancy db {args.action}: {exc}", file=sys.stderr)
        return 2
    return 0


def run_purge(args, url: str) -> int:
    import re

    from sqlalchemy.exc import DBAPIError

    from gpu_tenancy.clock import SystemClock
    from gpu_tenancy.db import purge
    from gpu_tenancy.db.session import make_engine, make_sessionmaker
    from gpu_tenancy.timeutil import parse_time, rfc3339

    now = SystemClock().now()
    try:
        if args.before:   # a bare date is its midnight UTC, as nova-manage's --before reads one
            before = parse_time(args.before + "T00:00:00Z" if re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.before)
                                else args.before)
        elif args.older_than_days is not None:
            before = max(0, now - args.older_than_days * purge.DAY)   # no time before 1970 to go to
        else:
            raise ValueError("give the cutoff: --before DATE or --older-than-days N")
        purge.check_cutoff(before, now)
    except ValueError as exc:
        print(f"gpu-tenancy db purge: {exc}", file=sys.stderr)
        return 2
    with database(url):   # not a URL, or its driver not installed
        engine = make_engine(url)
    try:
        try:
            removed = purge.purge(make_sessionmaker(engine), before)
        except DBAPIError as exc:   # not the service's database, or one at an older schema, or unreachable
            print(f"gpu-tenancy db purge: cannot purge the database at {redact(url)}: {exc.orig}; is it the "
                  "service's, upgraded (gpu-tenancy db upgrade)?", file=sys.stderr)
            return 2
        print(f"purged from {redact(url)} the rows older than {rfc3339(before)}:")
        for kind, count in removed.items():
            print(f"  {kind:<20} {count}")
        if args.vacuum:
            try:
                print(purge.vacuum(engine))
            except DBAPIError as exc:   # SQLite: no disk for the copy; PostgreSQL: not the tables' owner
                print(f"gpu-tenancy db purge: purged, but cannot vacuum: {exc.orig}", file=sys.stderr)
                return 2
    finally:
        engine.dispose()
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

    from gpu_tenancy.demo.seed import GPU_MEMORY_GB
    config = Config.load(database_url=args.db, auth_strategy="noauth2", cloud_driver="simulated",
                         run_engine=True, engine_tick_seconds=2, gpu_memory_gb=GPU_MEMORY_GB)
    with database(config.database_url):
        migrate.upgrade(config.database_url)
    app = create_app(config)
    runtime = app.extensions["gpu_tenancy"]
    with session_scope(runtime.sessions) as session:
        seed(session, runtime.clock.now(), runtime.cloud.images())
    runtime.engine.lifecycle.refresh_hosts()
    if args.history_days:
        from gpu_tenancy.demo.history import seed_history
        with session_scope(runtime.sessions) as session:
            n = seed_history(session, runtime.clock.now(), args.history_days, settings=runtime.planner_settings)
        print(f"gave the demo {n} past leases over {args.history_days:g} days")
    from werkzeug.serving import make_server
    try:   # before the banner: a port another program holds (an older demo) must not be shown as this demo's
        server = make_server(args.host, args.port, app, threaded=True)
    except (OSError, SystemExit):   # werkzeug has said why (the port in use) and exits
        if not runtime.engine.stop(within=config.engine_stop_seconds):
            leave_now("demo", "the engine's pass under way", code=1)
        return 1
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
    stop = on_sigterm()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        wait_for(stop)
    finally:
        server.shutdown()
        ended = runtime.engine.stop(within=config.engine_stop_seconds)
    if not ended:
        leave_now("demo", "the engine's pass under way")
    return 0


def run_reservation_endpoint(args) -> int:
    from keystoneauth1.exceptions import ClientException
    from openstack.exceptions import SDKException

    from gpu_tenancy.cloud.openstack import reservation_catalog as catalog
    from gpu_tenancy.cloud.openstack.connection import connect
    # before connecting: a forgotten --url is said as such, whatever the cloud's state
    if args.action == "register" and (not args.url or not args.url.rstrip("/").endswith("/reservation/v1")):
        print("--url must be the service's URL ending in /reservation/v1", file=sys.stderr)
        return 2
    try:   # the cloud unknown to clouds.yaml, Keystone down, credentials refused, not an admin
        conn = connect(args.os_cloud, args.clouds_yaml)
        if args.action == "unregister":
            removed = catalog.unregister(conn, args.region)
            print(f"removed {removed} endpoint(s) of {catalog.SERVICE_NAME} in {args.region}")
            return 0
        made = catalog.register(conn, args.url.rstrip("/"), args.region, tuple(args.interface or catalog.INTERFACES))
    except catalog.CatalogConflict as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except (SDKException, ClientException) as exc:
        raise Unusable(f"cloud {args.os_cloud}: {exc}") from None
    print(f"{catalog.SERVICE_NAME} ({made.service_id}), type {catalog.SERVICE_TYPE}, in {made.region}: "
          + ", ".join(f"{i} {u}" for i, u in made.endpoints.items()))
    return 0


def run_engine(args) -> int:
    from sqlalchemy.exc import DBAPIError

    from gpu_tenancy.cloud.registry import make_cloud
    from gpu_tenancy.clock import SystemClock
    from gpu_tenancy.db import migrate
    from gpu_tenancy.db.session import make_engine, make_sessionmaker
    from gpu_tenancy.engine.lifecycle import Lifecycle
    from gpu_tenancy.engine.runner import EngineRunner

    config = load_config(args.config)
    clock = SystemClock()
    with database(config.database_url):   # a URL that is not one; a server down is retried each tick
        engine = make_engine(config.database_url)
    try:   # before `db upgrade`, every tick logged "no such table" or "no such column", for ever
        lagging = migrate.behind(engine)
    except DBAPIError:   # a server down: the ticks try it again
        lagging = None
    if lagging:
        engine.dispose()
        raise Unusable(f"the database at {redact(config.database_url)} {lagging}: run gpu-tenancy db upgrade first")
    runner = EngineRunner(Lifecycle(make_sessionmaker(engine, bool(config.notifications_transport_url)),
                                    make_cloud(config, clock), clock, config))
    stop = on_sigterm()
    runner.start()
    try:
        wait_for(stop)
    finally:
        ended = runner.stop(within=config.engine_stop_seconds)
    if not ended:
        leave_now("engine", "the engine's pass under way")
    return 0


def run_whatif(args) -> int:
    import json

    from sqlalchemy.exc import DBAPIError

    from gpu_tenancy.db.session import make_engine, make_sessionmaker, session_scope
    from gpu_tenancy.engine import early_ends, whatif_history
    from gpu_tenancy.engine.planner_settings import from_config
    from gpu_tenancy.whatif import changes, report
    from gpu_tenancy.whatif.compare import what_if
    from gpu_tenancy.whatif.history import from_json, to_json

    config = load_config(args.config)
    settings = from_config(config)
    try:
        proposed = changes.parse(args.changes)
        if args.history:
            with open(args.history) as f:
                history = from_json(json.load(f))
        else:
            from gpu_tenancy.clock import SystemClock
            from gpu_tenancy.timeutil import parse_time
            until = parse_time(args.until) if args.until else SystemClock().now()
            url = args.db or config.database_url
            with database(url):   # not a URL, or its driver not installed
                engine = make_engine(url)
            try:
                with session_scope(make_sessionmaker(engine)) as session:
                    history = whatif_history.load(session, until, args.days)
            except DBAPIError as exc:   # not the service's database (no leases table), or unreachable
                print(f"gpu-tenancy whatif: cannot read the lease history at {redact(url)}: {exc.orig}; give "
                      f"the service's database with --db or --config (the demo's is {DEMO_DB})", file=sys.stderr)
                return 2
            finally:
                engine.dispose()
        if args.export:
            with open(args.export, "w") as f:
                json.dump(to_json(history), f)
            print(f"wrote {len(history.leases)} leases to {args.export}")
            return 0
        if not proposed:
            print("gpu-tenancy whatif: give at least one --set KEY=VALUE", file=sys.stderr)
            return 2
        result = what_if(history, settings, proposed, reclaim=early_ends.settings(config))
    except (ValueError, OSError) as exc:   # a bad change, too long a window, an unreadable file
        print(f"gpu-tenancy whatif: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else report.text(result))
    return 0


def redact(url: str) -> str:
    """A database URL without its password; one SQLAlchemy cannot read, as everything before
    its last '@' hidden (where a password would be)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return f"***@{url.rpartition('@')[2]}" if "@" in url else url


if __name__ == "__main__":
    sys.exit(main())
