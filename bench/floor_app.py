"""The floor under a create, for bench/api_load.py --floor: a Flask app whose POST runs the SQL
statements a create of the service runs, and nothing else: no checks, no plan, no ORM, no
policy, no rendering. Each worker makes two leases through the service at its start and keeps
the statements the second ran (with their parameters, as the driver got them); each request then runs
them again on its own psycopg connection, in one transaction, with a new lease id and name
and the caller's project, the last statement sent with the COMMIT as the service sends it.
What a create would cost if all of its Python but the driver's were free.

    FLOOR_CONFIG=service.yaml gunicorn -w 4 floor_app:application
"""
from __future__ import annotations

import json
import os
import uuid
from typing import Any

import psycopg
from flask import Flask, jsonify, request
from psycopg.types.json import Json, Jsonb
from sqlalchemy import event

ASK = {"name": "floor-template", "shape": "a100.x2", "duration": 7200}
PROJECT, USER = "bench-0", "floor-template-user"   # each swapped for the caller's


def capture(config_file: str) -> tuple[list[tuple[str, Any]], str, str]:
    """The statements of one create through the service (its id and name are in them)."""
    from gpu_tenancy.app import create_app
    from gpu_tenancy.config import Config
    app = create_app(Config.load(config_file), start_engine=False)
    engine = app.extensions["gpu_tenancy"].sessions.kw["bind"]
    app.extensions["gpu_tenancy"].fits.min_waiting = 0   # fitted, as every create of the phase is
    seen: list[tuple[str, Any]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement, parameters))
    who = {"X-Project-Id": PROJECT, "X-User-Id": USER, "X-Roles": "member"}
    # a first create builds this process's copy of the plan (reading every waiting lease): only
    # the second, which fits into that copy, is what each create of the phase runs
    first = app.test_client().post("/v1/leases", json={**ASK, "name": f"floor-{uuid.uuid4().hex[:12]}"}, headers=who)
    assert first.status_code == 201, first.get_data(as_text=True)
    name = f"floor-{uuid.uuid4().hex[:12]}"
    event.listen(engine, "before_cursor_execute", record)
    try:
        made = app.test_client().post("/v1/leases", json={**ASK, "name": name}, headers=who)
    finally:
        event.remove(engine, "before_cursor_execute", record)
        engine.dispose()
    assert made.status_code == 201, made.get_data(as_text=True)
    lease = made.get_json()["lease"]
    assert lease["queue"]["position"] is not None, "the template create was not fitted"
    # the pool's ping is not the create's work
    return [(s, p) for s, p in seen if s.strip().upper() != "SELECT 1"], lease["id"], name


def swapped(value: Any, changes: dict[str, str]) -> Any:
    """`value` with each of `changes`' keys replaced by its value, in text and in JSON."""
    if isinstance(value, str):
        for old, new in changes.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, (Json, Jsonb)):
        return type(value)(json.loads(swapped(json.dumps(value.obj), changes)))
    if isinstance(value, dict):
        return {k: swapped(v, changes) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(swapped(v, changes) for v in value)
    return value


STATEMENTS: list[tuple[str, Any]] = []
TEMPLATE_ID = TEMPLATE_NAME = ""
if "FLOOR_CONFIG" in os.environ:   # in each gunicorn worker, as it starts
    STATEMENTS, TEMPLATE_ID, TEMPLATE_NAME = capture(os.environ["FLOOR_CONFIG"])
application = Flask("floor")
_conn: psycopg.Connection | None = None


def connection() -> psycopg.Connection:
    global _conn
    if _conn is None or _conn.closed:
        from gpu_tenancy.config import Config
        url = Config.load(os.environ["FLOOR_CONFIG"]).database_url
        _conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    return _conn


@application.post("/floor")
def create():
    request.get_json(force=True)   # read as the service reads it
    lease_id = str(uuid.uuid4())
    project = request.headers.get("X-Project-Id", PROJECT)
    changes = {TEMPLATE_ID: lease_id, TEMPLATE_NAME: f"floor-{lease_id[:12]}", PROJECT: project,
               USER: request.headers.get("X-User-Id", USER)}
    conn = connection()
    with conn.cursor() as cur:
        for statement, parameters in STATEMENTS[:-1]:
            cur.execute(statement, swapped(parameters, changes))
            if cur.description:
                cur.fetchall()
        statement, parameters = STATEMENTS[-1]
        with conn.pipeline():   # the last statement and the COMMIT together, as commit_fitted sends them
            cur.execute(statement, swapped(parameters, changes))
            conn.commit()
    return jsonify({"lease": {"id": lease_id}}), 201
