"""Every `code` an error of the API carries, in one list (clients and tests match on
them, so a code is never renamed; a new one is added here).

The codes grew in two spellings, and both stay:
- `invalid_*`: the request's form is wrong before its meaning is read: a body that fails
  its JSON schema (`invalid_input`), a query parameter (`invalid_query`), an id in the
  URL (`invalid_identifier`), a page marker (`invalid_marker`);
- `bad_*`: a well-formed field whose value means nothing usable (`bad_time`: not an
  RFC 3339 time, `bad_duration`, an end before the start, ...);
- the rest say what is wrong in words (`unknown_shape`, `over_quota`, ...).
`tests/unit/test_error_codes.py` checks that every code the service raises is here.
"""
from __future__ import annotations

PREFIX = "gpu_tenancy."

# --- a request's form (400) -------------------------------------------------------------
MALFORMED_JSON = "gpu_tenancy.malformed_json"
INVALID_INPUT = "gpu_tenancy.invalid_input"
INVALID_QUERY = "gpu_tenancy.invalid_query"
INVALID_IDENTIFIER = "gpu_tenancy.invalid_identifier"
INVALID_MARKER = "gpu_tenancy.invalid_marker"
REQUEST_TOO_LARGE = "gpu_tenancy.request_too_large"   # 413

# --- a field's value (400) --------------------------------------------------------------
BAD_TIME = "gpu_tenancy.bad_time"
BAD_DURATION = "gpu_tenancy.bad_duration"
BAD_END = "gpu_tenancy.bad_end"
BAD_LATEST_START = "gpu_tenancy.bad_latest_start"
BAD_OFFER = "gpu_tenancy.bad_offer"            # accept_offer: not an offer this service made for the project
BAD_PERIOD = "gpu_tenancy.bad_period"
BAD_PRIORITY = "gpu_tenancy.bad_priority"
START_IN_PAST = "gpu_tenancy.start_in_past"
START_TOO_FAR = "gpu_tenancy.start_too_far"
END_PASSED = "gpu_tenancy.end_passed"
NEVER_FITS = "gpu_tenancy.never_fits"
NOT_FOR_TENANT_BOOT = "gpu_tenancy.not_for_tenant_boot"
OVER_MAX_DURATION = "gpu_tenancy.over_max_duration"
OVER_SERVICE_MAX_DURATION = "gpu_tenancy.over_service_max_duration"
PROJECT_MISMATCH = "gpu_tenancy.project_mismatch"
READINESS_UNAVAILABLE = "gpu_tenancy.readiness_unavailable"
UNKNOWN_SHAPE = "gpu_tenancy.unknown_shape"
UNKNOWN_IMAGE = "gpu_tenancy.unknown_image"
UNKNOWN_GPU_MODEL = "gpu_tenancy.unknown_gpu_model"
UNKNOWN_PRIORITY_CLASS = "gpu_tenancy.unknown_priority_class"
UNKNOWN_VOLUME = "gpu_tenancy.unknown_volume"
UNKNOWN_INSTANCE = "gpu_tenancy.unknown_instance"
TOO_MANY_GPUS = "gpu_tenancy.too_many_gpus"          # a report of more GPUs than the VM has
UNKNOWN_NETWORK = "gpu_tenancy.unknown_network"
AMBIGUOUS_NETWORK = "gpu_tenancy.ambiguous_network"
NETWORK_REQUIRED = "gpu_tenancy.network_required"
NO_NETWORKS = "gpu_tenancy.no_networks"
NO_EXTERNAL_NETWORK = "gpu_tenancy.no_external_network"
WEBHOOK_TARGET_REFUSED = "gpu_tenancy.webhook_target_refused"
BAD_WHATIF_CHANGE = "gpu_tenancy.bad_whatif_change"
WHATIF_TOO_LARGE = "gpu_tenancy.whatif_too_large"

# --- who may (401, 403) -----------------------------------------------------------------
UNAUTHORIZED = "gpu_tenancy.unauthorized"
UNAUTHENTICATED = "gpu_tenancy.unauthenticated"
FORBIDDEN = "gpu_tenancy.forbidden"
POLICY = "gpu_tenancy.policy"
PRIORITY = "gpu_tenancy.priority"               # a priority above 0 by a non-admin
PRIORITY_CLASS_NOT_ALLOWED = "gpu_tenancy.priority_class_not_allowed"
NO_QUOTA = "gpu_tenancy.no_quota"
OVER_QUOTA = "gpu_tenancy.over_quota"
OVER_BUDGET = "gpu_tenancy.over_budget"
NO_LEASE_TOKEN = "gpu_tenancy.no_lease_token"
TOO_MANY_REQUESTS = "gpu_tenancy.too_many_requests"      # 429: sent again too soon
TOO_MANY_DRY_RUNS = "gpu_tenancy.too_many_dry_runs"      # 429: a project's dry runs past max_dry_runs_per_minute
REFUSED_BY_DECISION_SERVICE = "gpu_tenancy.refused_by_decision_service"
# the Blazar-compatible API (api/blazar/): what Blazar's lease asks say that gpu-tenancy cannot do
BLAZAR_MISSING_PARAMETER = "gpu_tenancy.blazar_missing_parameter"
BLAZAR_BAD_RESERVATION = "gpu_tenancy.blazar_bad_reservation"
BLAZAR_UNSUPPORTED = "gpu_tenancy.blazar_unsupported"

# --- not found (404) --------------------------------------------------------------------
NOT_FOUND = "gpu_tenancy.not_found"
LEASE_NOT_FOUND = "gpu_tenancy.lease_not_found"
HOST_NOT_FOUND = "gpu_tenancy.host_not_found"
BUDGET_NOT_FOUND = "gpu_tenancy.budget_not_found"
WEBHOOK_NOT_FOUND = "gpu_tenancy.webhook_not_found"
PRIORITY_CLASS_NOT_FOUND = "gpu_tenancy.priority_class_not_found"
WHATIF_NOT_FOUND = "gpu_tenancy.whatif_not_found"

# --- the state of things (409) ----------------------------------------------------------
CONFLICT = "gpu_tenancy.conflict"
LEASE_FINISHED = "gpu_tenancy.lease_finished"
LEASE_NOT_RUNNING = "gpu_tenancy.lease_not_running"
LEASE_NOT_PARKED = "gpu_tenancy.lease_not_parked"   # POST resume of a lease no idle rule parked
LEASE_NAME_TAKEN = "gpu_tenancy.lease_name_taken"
VOLUME_IN_USE = "gpu_tenancy.volume_in_use"
WHATIF_RUNNING = "gpu_tenancy.whatif_running"
OFFER_EXPIRED = "gpu_tenancy.offer_expired"
OFFER_GONE = "gpu_tenancy.offer_gone"          # the plan no longer gives the offer's start
WOULD_SHORTEN = "gpu_tenancy.would_shorten"
EXTENSION_REFUSED = "gpu_tenancy.extension_refused"
TOO_MANY_WAITING = "gpu_tenancy.too_many_waiting"
NO_IMAGES = "gpu_tenancy.no_images"
NO_READINESS_PROBE = "gpu_tenancy.no_readiness_probe"
CHANGED_DURING_DECISION = "gpu_tenancy.changed_during_decision"
NOT_ENOUGH_CAPACITY = "gpu_tenancy.not_enough_capacity"   # Blazar API, refuse mode: it would have queued
BLAZAR_CANT_UPDATE = "gpu_tenancy.blazar_cant_update"

# --- the service (500, 503) -------------------------------------------------------------
BAD_REQUEST = "gpu_tenancy.bad_request"          # BadRequest's default; every raise names its own
INTERNAL = "gpu_tenancy.internal"
CLOUD_UNAVAILABLE = "gpu_tenancy.cloud_unavailable"
DECISION_SERVICE_UNAVAILABLE = "gpu_tenancy.decision_service_unavailable"

# The catalog's codes are made from the kind of entry (engine/catalog.py):
# gpu_tenancy.{shape,image}_{not_found,exists,retired}.
CATALOG_KINDS = ("shape", "image")
CATALOG_OUTCOMES = ("not_found", "exists", "retired")


def catalog(kind: str, outcome: str) -> str:
    if kind not in CATALOG_KINDS or outcome not in CATALOG_OUTCOMES:
        raise ValueError(f"no catalog error code for {kind!r}, {outcome!r}")
    return f"{PREFIX}{kind}_{outcome}"


# Werkzeug's own HTTP errors (an unknown URL, a wrong method) are rendered as
# gpu_tenancy.<its name, lower case, underscores>: gpu_tenancy.method_not_allowed, ...
# (api/errors.py); they are not listed here.

ALL: frozenset[str] = frozenset(
    value for name, value in list(globals().items())
    if name.isupper() and isinstance(value, str) and value.startswith(PREFIX) and value != PREFIX
) | {catalog(k, o) for k in CATALOG_KINDS for o in CATALOG_OUTCOMES}
