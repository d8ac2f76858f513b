"""Request bodies and query strings checked against JSON schemas, with messages a user can act on."""
from __future__ import annotations

import json
import re
from typing import Any, NoReturn, overload

from flask import request
from jsonschema import Draft202012Validator

from gpu_tenancy.errors import BadRequest
from gpu_tenancy import error_codes as codes
from gpu_tenancy.timeutil import time_field


# Text a tenant writes that others read (a lease's name, what its VMs say into its events) is
# shown on operators' terminals, the dashboard, exports and webhook receivers' logs: no C0 or C1
# control, DEL, zero-width or direction-turning character, nor line or paragraph separator.
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]*$"

# No request body of the API nests deeper than a few levels; a deeper one is refused
# before anything walks it (the parser and the checks below recurse).
MAX_DEPTH = 32

DEFAULT_PAGE = 100   # a listing's page when no limit is asked


def json_body(schema: dict) -> dict:
    body = parse_json()
    check(schema, body)
    refuse_nul(body, "the request body")
    return whole_numbers(body)


def parse_json() -> Any:
    """The request's JSON body. NaN and Infinity are not JSON (RFC 8259), though
    Python's parser reads them: no database column should ever see one."""
    malformed = BadRequest("the request body must be a JSON object (Content-Type: application/json)",
                           codes.MALFORMED_JSON)
    if not request.is_json:
        raise malformed
    try:
        body = json.loads(request.get_data(cache=True), parse_constant=refuse_constant)
    except RecursionError:   # nested deeper than the parser goes
        raise too_deep_error() from None
    except (ValueError, TypeError):   # UnicodeDecodeError is a ValueError
        raise malformed from None
    if body is None:
        raise malformed
    if too_deep(body, MAX_DEPTH):
        raise too_deep_error()
    return body


def refuse_constant(name: str) -> NoReturn:
    raise BadRequest(f"the request body holds {name}, which is not a JSON number; give a finite number",
                     codes.INVALID_INPUT)


def too_deep_error() -> BadRequest:
    return BadRequest(f"the request body nests arrays and objects more than {MAX_DEPTH} levels deep",
                      codes.INVALID_INPUT)


def too_deep(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels: walked a level at a time, without
    recursion, keeping only the arrays and objects (a walk that took every value in turn spent
    ten times the parse on a flat array of numbers: a third of a second for one of 1 MiB)."""
    level = [value] if isinstance(value, (dict, list)) else []
    for _ in range(limit):
        level = [child for item in level for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, (dict, list))]
        if not level:
            return False
    return bool(level)


def whole_numbers(value: Any) -> Any:
    """JSON Schema counts 2.0 as an integer, so the schemas let it through; the code
    below them expects int, so such floats become ints here."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def refuse_nul(value: Any, where: str) -> None:
    """No text may carry a NUL character (PostgreSQL cannot store one) or a lone UTF-16
    surrogate such as JSON's "\\ud83d" (no database can store it as UTF-8)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise BadRequest(f"{where} contains a NUL character", codes.INVALID_INPUT)
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadRequest(f"{where} contains a lone UTF-16 surrogate, which is not text",
                                 codes.INVALID_INPUT) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            refuse_nul(key, where)
            refuse_nul(item, where)
    elif isinstance(value, list):
        for item in value:
            refuse_nul(item, where)


def refuse_nul_in_query() -> None:
    for name, values in request.args.lists():
        refuse_nul([name, *values], "the query string")


# The longest key a URL names (a host's name); each handler may allow less.
MAX_PATH_VALUE = 255


def check_path_values() -> None:
    """The ids and names in the URL: a handler looks them up as they are, and PostgreSQL
    refuses a NUL in a query (a 500), so an unprintable one is refused for every route."""
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str):
            check_identifier(f"the URL's {name}", value, MAX_PATH_VALUE)


def check(schema: dict, value: Any) -> None:
    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.absolute_path)
        message = error.message
        described = error.schema.get("description") if isinstance(error.schema, dict) else None
        if error.validator in ("oneOf", "anyOf") and described:
            # jsonschema says only "... is not valid under any of the given schemas": say what is
            message = f"{json.dumps(error.instance, default=str)[:100]} is not valid; expected {described}"
        if len(message) > 300:  # jsonschema quotes the whole value; keep replies short
            message = message[:300] + "…"
        raise BadRequest(f"invalid input for '{where}': {message}" if where else f"invalid input: {message}",
                         codes.INVALID_INPUT)


def query_int(name: str, default: int, minimum: int, maximum: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    # ASCII digits only: int() also takes "1_0", " 1" and other scripts' digits
    if not re.fullmatch(r"-?[0-9]{1,18}", raw):
        raise BadRequest(f"query parameter {name} must be a whole number", codes.INVALID_QUERY)
    value = int(raw)
    if not minimum <= value <= maximum:
        raise BadRequest(f"query parameter {name} must be between {minimum} and {maximum}",
                         codes.INVALID_QUERY)
    return value


def query_limit(largest: int) -> int:
    """?limit=, a listing's page size: 100 by default, at most `largest` (config max_page_size),
    the default too (an operator's max_page_size below 100 bounded only the pages asked for)."""
    return query_int("limit", min(DEFAULT_PAGE, largest), 1, largest)


def query_bool(name: str, default: bool = False) -> bool:
    raw = request.args.get(name)
    if raw is None:
        return default
    value = raw.lower()
    if value not in ("true", "false", "1", "0"):
        raise BadRequest(f"query parameter {name} must be true or false", codes.INVALID_QUERY)
    return value in ("true", "1")


def query_time(name: str, now: int | None = None) -> int | None:
    """An RFC 3339 time from the query string, as epoch seconds; None when absent; 'now'
    where the caller knows the time (as a lease's start takes it)."""
    raw = request.args.get(name)
    if raw is None:
        return None
    if raw == "now" and now is not None:
        return now
    return time_field(f"query parameter {name}", raw, codes.INVALID_QUERY)


@overload
def query_window(*, max_span: int | None = None, default_span: int, now: int) -> tuple[int, int]: ...
@overload
def query_window(*, max_span: int | None = None, default_span: None = None,
                 now: int | None = None) -> tuple[int, int] | None: ...


def query_window(*, max_span: int | None = None, default_span: int | None = None,
                 now: int | None = None) -> tuple[int, int] | None:
    """The ?start=&end= pair as epoch seconds, end after start and at most max_span apart.
    With default_span, a missing end is `now` and a missing start is default_span before
    the end; without it, both or neither must be given (neither: None)."""
    start, end = query_time("start", now), query_time("end", now)
    if default_span is not None:
        assert now is not None   # the default end
        end = now if end is None else end
        start = end - default_span if start is None else start
    elif start is None and end is None:
        return None
    elif start is None or end is None:
        raise BadRequest("give both start and end, or neither", codes.INVALID_QUERY)
    if end <= start:
        raise BadRequest("end must be after start", codes.INVALID_QUERY)
    if max_span is not None and end - start > max_span:
        raise BadRequest(f"end may be at most {max_span // 86400} days after start",
                         codes.INVALID_QUERY)
    return start, end


def check_identifier(what: str, value: str, max_length: int = 64) -> str:
    """An id from the URL: printable, without '/', and no longer than its column."""
    if not 0 < len(value) <= max_length or any(ord(c) < 0x20 or c in "\x7f/" for c in value):
        raise BadRequest(f"{what} must be 1 to {max_length} printable characters without '/'",
                         codes.INVALID_IDENTIFIER)
    return value
