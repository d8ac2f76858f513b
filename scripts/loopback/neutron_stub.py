"""A stand-in for the Neutron API on :9696. It is NOT neutron.

Nova talks to the network service even for servers booted with
``networks="none"``: it lists ports and security groups when it shows, builds
or deletes a server, and without a ``network`` endpoint in the catalog those
calls end in HTTP 500. This stub gives the answers of a cloud without any
networks: every collection is empty, no single object exists, deletes succeed.

Kept on purpose for now: running the real neutron-server (plus an agent and
OVS/OVN) is out of scope for the loopback stack. gpu-tenancy leases GPUs, so
its tests boot servers without networks. Revisit if the service ever needs
ports or floating IPs.
"""

import json
import re

# /v2.0/<collection>[.json][/<id>][.json]
_PATH = re.compile(r"^/v2\.0/(?P<coll>[a-z0-9_-]+?)(?:\.json)?(?:/(?P<item>[^/]+?)(?:\.json)?)?/?$")


def _json(start_response, status, body):
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
    return [data]


def _not_found(start_response, what):
    return _json(start_response, "404 Not Found",
                 {"NeutronError": {"type": "NotFound", "message": f"{what} not found (neutron stub)",
                                   "detail": ""}})


def application(environ, start_response):
    method = environ["REQUEST_METHOD"]
    path = environ.get("PATH_INFO") or "/"

    if path in ("/", "") and method == "GET":
        return _json(start_response, "200 OK", {"versions": [
            {"id": "v2.0", "status": "CURRENT",
             "links": [{"rel": "self", "href": "http://127.0.0.1:9696/v2.0/"}]}]})
    if path.rstrip("/") == "/v2.0" and method == "GET":
        return _json(start_response, "200 OK", {"resources": []})

    m = _PATH.match(path)
    if not m:
        return _not_found(start_response, path)
    collection, item = m.group("coll"), m.group("item")
    key = collection.replace("-", "_")

    if method == "GET" and item is None:      # list: nothing of anything
        return _json(start_response, "200 OK", {key: []})
    if method == "DELETE":                    # deleting what isn't there is fine
        start_response("204 No Content", [("Content-Length", "0")])
        return [b""]
    return _not_found(start_response, f"{collection}/{item}" if item else collection)
