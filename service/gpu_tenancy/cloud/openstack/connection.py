"""Connections to the cloud: the service's own (from clouds.yaml), and one
per tenant project, so that what a lease makes belongs to the tenant.

To act in a tenant's project the service user needs a role there. When it
has none, it grants itself the configured role once (it is an admin), as an
operator would with `openstack role add --user gpu-tenancy --project ...`.
"""
from __future__ import annotations

import logging
import threading

import openstack
from openstack import config as os_config
from urllib3.exceptions import ReadTimeoutError
from urllib3.util.retry import Retry

from gpu_tenancy.cloud.openstack.errors import is_unauthorized

log = logging.getLogger(__name__)

class DroppedReadRetry(Retry):
    """A read sent again when its connection dropped with no answer, never when the answer was
    only slow (a read timeout): the server got it and is busy, so sending it again would only
    add to its load and multiply the wait (the error stays the timeout it was)."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
        if isinstance(error, ReadTimeoutError):
            raise error.with_traceback(_stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)


# An API server may close an idle keep-alive connection just as the next call
# goes out on it: that call fails with no response ("Remote end closed
# connection"). A read is safe to send again; a boot (POST) is not, since the
# server may have acted on it, so keystoneauth's connect_retries (every method)
# is not used. A failure to connect at all was never sent, so it is retried
# whatever the method. (A cloud's `connect_retries` in clouds.yaml, keystoneauth's
# own, would multiply with these.)
READ_RETRIES = DroppedReadRetry(total=3, connect=3, read=3, status=0, other=0, redirect=0,
                                allowed_methods=frozenset({"GET", "HEAD"}), backoff_factor=0.2,
                                raise_on_status=False)


def retry_reads(conn: openstack.connection.Connection) -> openstack.connection.Connection:
    """Have the connection's HTTP adapters send a dropped read again (READ_RETRIES)."""
    for adapter in conn.session.session.adapters.values():
        adapter.max_retries = READ_RETRIES   # type: ignore[attr-defined]  # HTTPAdapter's
    return conn


# How long one API call may wait for its answer when the cloud's clouds.yaml sets no
# `api_timeout`: openstacksdk's default is none, and an API server that took the request and
# never answers (a half-open connection, a stuck worker) would hold the engine's pass, and with
# it every lease's start and end, for good. A project connection (connect_as) inherits it.
API_TIMEOUT = 120.0


def connect(cloud: str, clouds_yaml: str | None = None) -> openstack.connection.Connection:
    files = [clouds_yaml] if clouds_yaml else None
    region = os_config.OpenStackConfig(config_files=files).get_one(cloud=cloud)
    if region.config.get("api_timeout") is None:
        region.config["api_timeout"] = API_TIMEOUT
    return retry_reads(openstack.connection.Connection(config=region))


class Connections:
    def __init__(self, service: openstack.connection.Connection, project_role: str | None):
        self.service = service
        self.project_role = project_role
        self._projects: dict[str, openstack.connection.Connection] = {}
        self._lock = threading.Lock()

    def project(self, project_id: str) -> openstack.connection.Connection:
        with self._lock:
            conn = self._projects.get(project_id)
            if conn is None:
                conn = self._scoped(project_id)
                self._projects[project_id] = conn
            return conn

    def _scoped(self, project_id: str):
        conn = self._connect_as(project_id)
        try:
            conn.authorize()
        except Exception as exc:
            if not self.project_role or not is_unauthorized(exc):
                raise
            self._grant(project_id)
            conn = self._connect_as(project_id)
            conn.authorize()
        return conn

    def _connect_as(self, project_id: str) -> openstack.connection.Connection:
        # connect_as builds a new HTTP session, without the service connection's retries
        return retry_reads(self.service.connect_as(project_id=project_id, project_name=None,
                                                   project_domain_id=None, project_domain_name=None))

    def _grant(self, project_id: str) -> None:
        assert self.project_role is not None   # granted only when one is configured
        identity = self.service.identity
        role = identity.find_role(self.project_role, ignore_missing=False)
        user_id = self.service.current_user_id
        log.info("granting role %s on project %s to the service user %s", self.project_role, project_id, user_id)
        # Keystone v3 (v2 has no project roles); openstacksdk types the proxy and the role as either
        identity.assign_project_role_to_user(project_id, user_id, role)  # type: ignore[union-attr, arg-type]
