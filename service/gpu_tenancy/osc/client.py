"""GpuClient: the REST calls of the `openstack gpu` commands, made through
OSC's keystoneauth session, with the API's errors turned into CLI errors."""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from keystoneauth1 import adapter
from keystoneauth1 import exceptions as ks_exceptions
from osc_lib import exceptions

from gpu_tenancy.osc.plugin import SERVICE_TYPE

# leases asked for per page: the API's default page (its largest, max_page_size, is the
# operator's to set, 1000 by default), the next links followed for more
PAGE_SIZE = 100


def error_message(response) -> str:
    """The API-WG error body in one line: the detail, then status, code and request id."""
    try:
        error = response.json()["errors"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        text = (response.text or "").strip()[:500]
        return f"HTTP {response.status_code} from gpu-tenancy" + (f": {text}" if text else "")
    detail = error.get("detail") or error.get("title") or "error"
    facts = [f"HTTP {error.get('status', response.status_code)}"]
    facts += [error[k] for k in ("code",) if error.get(k)]
    if error.get("request_id"):
        facts.append(f"request {error['request_id']}")
    return f"{detail} ({', '.join(facts)})"


def gpu_client(app: Any) -> GpuClient:
    """The GpuClient OSC's plugin (plugin.make_client) hangs on its client manager as `gpu`
    (set at run time, so the manager's type does not name it)."""
    client: GpuClient = app.client_manager.gpu
    return client


class ApiError(exceptions.CommandError):
    """An error answer of the API; OSC prints the message and exits non-zero."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def service_root(endpoint: str) -> str:
    """The service's root URL: every path asked carries the API's version (/v1/...), so an
    endpoint given with it (as the demo prints the API's URL, or a catalog that versions its
    endpoints) loses it here, rather than every command answering 404 for /v1/v1/..."""
    root = endpoint.rstrip("/")
    return root[:-len("/v1")] if root.endswith("/v1") else root


class GpuClient:
    def __init__(self, http: adapter.Adapter, project_id: str | None):
        self.http = http
        self.project_id = project_id   # the caller's project: the default for `quota show`

    @classmethod
    def from_client_manager(cls, instance) -> "GpuClient":
        config = instance._cli_options.config
        headers, project_id = {}, None
        if config.get("auth_type") == "none":
            project_id = config.get("gpu_noauth_project")
            if not project_id:
                raise exceptions.CommandError(
                    "with --os-auth-type none, name the project to act as: --os-gpu-noauth-project "
                    "or OS_GPU_NOAUTH_PROJECT (the service must run with auth_strategy noauth2)")
            headers = {"X-Project-Id": project_id, "X-User-Id": config.get("gpu_noauth_user") or "noauth-user",
                       "X-Roles": config.get("gpu_noauth_roles") or "member"}
        try:
            endpoint = instance.get_endpoint_for_service_type(
                SERVICE_TYPE, region_name=instance.region_name, interface=instance.interface)
        except ks_exceptions.EndpointNotFound:
            endpoint = None
        if not endpoint:
            raise exceptions.CommandError(
                f"the catalog has no '{SERVICE_TYPE}' service (interface {instance.interface or 'public'}, "
                f"region {instance.region_name or 'any'}); give its URL with --os-gpu-endpoint-override")
        if project_id is None and instance.auth_ref is not None:
            project_id = instance.auth_ref.project_id
        http = adapter.Adapter(session=instance.session, service_type=SERVICE_TYPE,
                               endpoint_override=service_root(endpoint), additional_headers=headers,
                               client_name="gpu-tenancy-osc")
        return cls(http, project_id)

    def request(self, method: str, path: str, body: Any = None, params: dict | None = None):
        try:
            response = self.http.request(path, method, json=body, params=params, raise_exc=False,
                                         headers={"Accept": "application/json"})
        except ks_exceptions.ConnectionError as exc:
            raise exceptions.CommandError(f"cannot reach gpu-tenancy: {exc}") from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, error_message(response))
        return response.json() if response.content else None

    # leases
    def leases(self, *, limit: int | None = None, **filters) -> list[dict]:
        """Every lease that matches (following the next links), or the first `limit`."""
        first = {k: v for k, v in filters.items() if v not in (None, [], False)}
        if limit:   # a page of at most the API's default size: --limit counts leases, not one page's
            first["limit"] = min(limit, PAGE_SIZE)
        params: dict[str, Any] | None = first
        out: list[dict] = []
        path: str | None = "/v1/leases"
        while path:
            page = self.request("GET", path, params=params)
            out += page["leases"]
            path = next((link["href"] for link in page.get("leases_links", []) if link["rel"] == "next"), None)
            params = None        # the next link carries the query
            if limit and len(out) >= limit:
                return out[:limit]
        return out

    def lease(self, lease_id: str) -> dict:
        return self.request("GET", f"/v1/leases/{quote(lease_id, safe='')}")["lease"]

    def lease_events(self, lease_id: str) -> list[dict]:
        return self.request("GET", f"/v1/leases/{quote(lease_id, safe='')}/events")["events"]

    def create_lease(self, body: dict, dry_run: bool = False) -> dict:
        """The lease (or its preview), with the offers the answer lists when it would wait."""
        params = {"dry_run": "true"} if dry_run else None
        answer = self.request("POST", "/v1/leases", body, params=params)
        return {**answer["lease"], "offers": answer.get("offers", [])}

    def update_lease(self, lease_id: str, body: dict) -> dict:
        return self.request("PATCH", f"/v1/leases/{quote(lease_id, safe='')}", body)["lease"]

    def cancel_lease(self, lease_id: str) -> None:
        self.request("DELETE", f"/v1/leases/{quote(lease_id, safe='')}")

    def lease_done(self, lease_id: str, detail: str | None = None) -> dict:
        body = {"detail": detail} if detail else {}
        return self.request("POST", f"/v1/leases/{quote(lease_id, safe='')}/done", body)["lease"]

    def resume_lease(self, lease_id: str) -> dict:
        return self.request("POST", f"/v1/leases/{quote(lease_id, safe='')}/resume")["lease"]

    # quotas
    def quota(self, project_id: str) -> dict:
        return self.request("GET", f"/v1/quotas/{quote(project_id, safe='')}")["quota"]

    def set_quota(self, project_id: str, gpu_models: dict) -> dict:
        body = {"quota": {"gpu_models": gpu_models}}
        return self.request("PUT", f"/v1/quotas/{quote(project_id, safe='')}", body)["quota"]

    # capacity
    def capacity(self, start: str | None = None, end: str | None = None) -> dict:
        params = {"start": start, "end": end} if start or end else None
        return self.request("GET", "/v1/capacity", params=params)["capacity"]

    # everyone's queue and fair share
    def queue(self, gpu_model: str | None = None) -> dict:
        return self.request("GET", "/v1/queue", params={"gpu_model": gpu_model} if gpu_model else None)["queue"]

    def share(self, gpu_model: str | None = None) -> dict:
        return self.request("GET", "/v1/share", params={"gpu_model": gpu_model} if gpu_model else None)["share"]

    # usage for billing
    def usage(self, start: str | None = None, end: str | None = None, project_id: str | None = None) -> dict:
        params = {k: v for k, v in (("start", start), ("end", end), ("project_id", project_id)) if v}
        return self.request("GET", "/v1/usage", params=params or None)["usage"]
