"""The Blazar-compatible API: /reservation/v1/leases, for python-blazarclient
(`openstack reservation lease ...`), Heat's OS::Blazar::Lease, python-chi and the
other tools that speak Blazar (README "Blazar clients").

A blueprint of the same app rather than a second WSGI app: it shares the app's
identity middleware (keystonemiddleware or noauth2), policy, database sessions,
engine wake-up and audit record, and a lease made here is the same row the native
API shows. Only its bodies and errors differ: errors are Blazar's
{"error_code", "error_message", "error_name"} (blazarclient prints error_message),
answered by this blueprint's handlers for every error raised in its routes,
the app's 401 included."""
from __future__ import annotations

from gpu_tenancy.api.blazar.leases import bp

__all__ = ["bp"]
