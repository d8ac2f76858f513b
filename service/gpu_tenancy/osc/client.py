"""GpuClient: the REST calls of the `openstack gpu` commands, made through
OSC's keystoneauth session, with the API's errors turned into CLI errors."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from keystoneauth1 import adapter
from keystoneauth1 import exceptions as ks_exceptions
from osc_lib import exceptions

from gpu_tenancy.osc.inert import printable
from gpu_tenancy.osc.plugin import SERVICE_TYPE

# leases asked for per page: the API's default page (its largest, max_page_size, is the
# operator's to set, 1000 by default), the next links followed for more
PAGE_SIZE = 100


def error_message(response) -> str:
    """The API-WG error body in one line: the detail, then status, code and request id. OSC
    prints it raw on stderr, so nothing in it (a tenant's words quoted, a proxy's page) may
    reach the terminal as a control (inert.py)."""
    try:
        error = response.json()["errors"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        text = (response.text or "").strip()[:500]
        return printable(f"HTTP {response.status_code} from gpu-tenancy" + (f": {text}" if text else ""))
    detail = error.get("detail") or error.get("title") or "error"
    facts = [f"HTTP {error.get('status', response.status_code)}"]
    facts += [error[k] for k in ("code",) if error.get(k)]
    if error.get("request_id"):
        facts.append(f"request {error['request_id']}")
    return printable(f"{detail} ({', '.join(facts)})")


def not_the_api(response, why: str) -> exceptions.CommandError:
    """A 2xx answer that is not the API's (a proxy's login page, the dashboard, another
    service at the endpoint): said so, with what came, not as a JSON parser's complaint."""
    kind = response.headers.get("Content-Type") or "no content type"
    text = (response.text or "").strip()[:200]
    return exceptions.CommandError(printable(
        f"HTTP {response.status_code} from the gpu endpoint is {why} ({kind}): {text!r}; is the endpoint "
        "gpu-tenancy's API? (--os-gpu-endpoint-override, or the catalog's 'gpu' service)"))


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


def segment(value: str) -> str:
    """`value` as one segment of a path, its reserved characters ('/', '?', '#', '%') escaped.
    An empty one, '.' and '..' name no lease or project: requests and any proxy resolve them as
    the path's own dot-segments (GET /v1/leases/.. asks /v1/), so they are not asked at all, and
    answered as the API answers an id it does not know (404: a lease is then looked up by name)."""
    if not value.strip("."):
        raise ApiError(404, f"{value!r} is not an id: HTTP clients read it as part of the path, not a name in it")
    return quote(value, safe="")


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

    def request(self, method: str, path: str, body: Any = None, params: dict | None = None,
                key: str | None = None):
        """The answer's JSON object, or its `key` (the resource the path names)."""
        try:
            response = self.http.request(path, method, json=body, params=params, raise_exc=False,
                                         headers={"Accept": "application/json"})
        except ks_exceptions.ConnectionError as exc:
            raise exceptions.CommandError(f"cannot reach gpu-tenancy: {exc}") from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, error_message(response))
        if not response.content:
            return None
        try:
            answer = response.json()
        except ValueError:
            raise not_the_api(response, "not JSON") from None
        if not isinstance(answer, dict) or (key is not None and key not in answer):
            raise not_the_api(response, f"not a JSON object with '{key}'" if key else "not a JSON object")
        return answer if key is None else answer[key]

    # leases
    def leases(self, *, limit: int | None = None, **filters) -> list[dict]:
        """Every lease that matches (following the next links), or the first `limit`."""
        first = {k: v for k, v in filters.items() if v not in (None, [], False)}
        if limit:   # a page of at most the API's default size: --limit counts leases, not one page's
            first["limit"] = min(limit, PAGE_SIZE)
        out: list[dict] = []
        for page in self.pages("/v1/leases", first, "leases"):
            out += page["leases"]
            if limit and len(out) >= limit:
                return out[:limit]
        return out

    def pages(self, path: str, params: dict[str, Any] | None, listed: str, key: str | None = None
              ) -> Iterator[dict]:
        """Each page of a paged listing (its body, or `key` of it), its `listed` list checked,
        following the `<listed>_links` next links, which carry the query."""
        at: str | None = path
        while at:
            page = self.request("GET", at, params=params, key=key)
            if not isinstance(page, dict) or not isinstance(page.get(listed), list):
                raise exceptions.CommandError(f"the answer to GET {at} has no list of {listed}")
            at = next((link["href"] for link in page.pop(f"{listed}_links", []) if link["rel"] == "next"), None)
            params = None
            yield page

    def lease(self, lease_id: str) -> dict:
        return self.request("GET", f"/v1/leases/{segment(lease_id)}", key="lease")

    def lease_events(self, lease_id: str, after: int = 0) -> list[dict]:
        """The lease's events after its first `after` (every one: 0), oldest first, following
        the next links (the API lists a page at a time; a count of events is a marker too)."""
        params = {"marker": str(after)} if after else None
        return [event for page in self.pages(f"/v1/leases/{segment(lease_id)}/events", params, "events")
                for event in page["events"]]

    def create_lease(self, body: dict, dry_run: bool = False) -> dict:
        """The lease (or its preview), with the offers the answer lists when it would wait."""
        params = {"dry_run": "true"} if dry_run else None
        answer = self.request("POST", "/v1/leases", body, params=params)
        return {**answer["lease"], "offers": answer.get("offers", [])}

    def update_lease(self, lease_id: str, body: dict) -> dict:
        return self.request("PATCH", f"/v1/leases/{segment(lease_id)}", body, key="lease")

    def cancel_lease(self, lease_id: str) -> None:
        self.request("DELETE", f"/v1/leases/{segment(lease_id)}")

    def lease_done(self, lease_id: str, detail: str | None = None) -> dict:
        body = {"detail": detail} if detail else {}
        return self.request("POST", f"/v1/leases/{segment(lease_id)}/done", body, key="lease")

    def resume_lease(self, lease_id: str) -> dict:
        return self.request("POST", f"/v1/leases/{segment(lease_id)}/resume", key="lease")

    # quotas
    def quota(self, project_id: str) -> dict:
        return self.request("GET", f"/v1/quotas/{segment(project_id)}", key="quota")

    def set_quota(self, project_id: str, gpu_models: dict) -> dict:
        """Each model's limits replaced whole (the limits not given take their defaults)."""
        body = {"quota": {"gpu_models": gpu_models}}
        return self.request("PUT", f"/v1/quotas/{segment(project_id)}", body, key="quota")

    def change_quota(self, project_id: str, gpu_models: dict) -> dict:
        """Only the limits given change, merged by the API onto those stored when it writes."""
        body = {"quota": {"gpu_models": gpu_models}}
        return self.request("PATCH", f"/v1/quotas/{segment(project_id)}", body, key="quota")

    # capacity
    def capacity(self, start: str | None = None, end: str | None = None) -> dict:
        params = {"start": start, "end": end} if start or end else None
        return self.request("GET", "/v1/capacity", params=params, key="capacity")

    # everyone's queue and fair share
    def queue(self, gpu_model: str | None = None) -> dict:
        """The whole queue: its first page, with the leases of every next page followed."""
        queue: dict | None = None
        for page in self.pages("/v1/queue", {"gpu_model": gpu_model} if gpu_model else None, "leases", "queue"):
            if queue is None:
                queue = page
            else:
                queue["leases"] += page["leases"]
        assert queue is not None
        return queue

    def share(self, gpu_model: str | None = None) -> dict:
        return self.request("GET", "/v1/share", params={"gpu_model": gpu_model} if gpu_model else None, key="share")

    # usage for billing
    def usage(self, start: str | None = None, end: str | None = None, project_id: str | None = None) -> dict:
        params = {k: v for k, v in (("start", start), ("end", end), ("project_id", project_id)) if v}
        return self.request("GET", "/v1/usage", params=params or None, key="usage")
