"""The bare reference for bench/api_load.py: a Flask app whose POST does one
INSERT and whose GET reads one page, on the same PostgreSQL database as the
service, served by the same gunicorn (api_load.py makes its table). No auth, no validation, no planner:
what a request costs when it does nothing but touch the database once.

    BENCH_BARE_DB=postgresql+psycopg://... gunicorn -w 4 bare_app:application
"""
from __future__ import annotations

import os

from flask import Flask, jsonify, request
from sqlalchemy import create_engine, text

engine = create_engine(os.environ["BENCH_BARE_DB"], pool_pre_ping=True)
application = Flask("bare")

@application.post("/bare")
def insert():
    body = request.get_json(force=True)
    with engine.begin() as conn:
        new_id = conn.execute(text("INSERT INTO bench_bare (project, body) VALUES (:p, :b) RETURNING id"),
                              {"p": request.headers.get("X-Project-Id", ""), "b": str(body)}).scalar_one()
    return jsonify({"id": new_id}), 201


@application.get("/bare")
def page():
    limit = int(request.args.get("limit", 50))
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, project, body FROM bench_bare ORDER BY id DESC LIMIT :n"),
                            {"n": limit}).all()
    return jsonify({"rows": [{"id": r.id, "project": r.project, "body": r.body} for r in rows]})
