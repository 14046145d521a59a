"""The rules the API enforces outside its pydantic schemas, stated in its OpenAPI document.

Some checks run in the views and the middleware rather than in a field's type: the run id's rule
(runs.run_ids), the names a view passes through ``clean_name`` (api.schemas), the opaque cursors of
the lists (runs.paging), and the NUL character, which Reckon refuses in every text it is sent
(reckon.middleware for paths, query strings and forms; the strict body parser for JSON, in keys and
values alike). ``openapi_rules`` writes each rule into the document from the same definition the
check uses, so a client or a fuzzer reads what the server will accept:

- every ``run_id`` path parameter: ``RUN_ID_PATTERN``;
- the names (the ``tool`` path parameter, the ``tenant`` filter of the calls, a lease's ``holder``
  and ``tenant``): ``NAME_PATTERN``;
- the cursors (``cursor`` of /api/runs, ``after`` of /api/uncertain-calls): base64url, as
  ``runs.paging.cursor_encode`` writes them, and only a value the list returned;
- the ``Idempotency-Key`` header: ``IDEMPOTENCY_KEY_PATTERN`` (api.schemas, checked by api.idempotency);
- every other string, and every key of an object: no NUL (``NO_NUL_PATTERN``); every whole number
  within 64 bits; a free-form object's values, and the keys a body carries beside its declared
  ones, any JSON the strict parser accepts (``JsonValue``).
"""

from __future__ import annotations

from typing import Any

from api.schemas import IDEMPOTENCY_KEY_PATTERN, NAME_PATTERN
from runs.paging import MAX_CURSOR
from runs.run_ids import RUN_ID_MAX, RUN_ID_PATTERN, RUN_ID_RULE

NO_NUL_PATTERN = r"^[^\x00]*$"
CURSOR_PATTERN = r"^[A-Za-z0-9_-]*$"  # empty: the first page
CURSOR_RULE = "opaque: pass back the value the previous page returned, unchanged; any other value is refused with 422"
INT64 = {"minimum": -(2**63), "maximum": 2**63 - 1}
# Any JSON the strict body parser accepts (runs.json_strict): no NUL in a string or a key, whole
# numbers within 64 bits. Free-form objects (a payload, a policy's fields) and the keys a body may
# carry beside its declared ones are stated as this.
JSON_VALUE = {
    "description": "any JSON value without NUL in a string or key, whole numbers within signed 64 bits",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL_PATTERN},
        {"type": "integer", **INT64},
        {"type": "number", **INT64},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
        {"type": "object", "propertyNames": {"pattern": NO_NUL_PATTERN}, "additionalProperties": {"$ref": "#/components/schemas/JsonValue"}},
    ],
}
_ANY = {"$ref": "#/components/schemas/JsonValue"}

# (where, name) -> (pattern, description added)
_PARAMETERS: dict[tuple[str, str], tuple[str, str]] = {
    ("path", "run_id"): (RUN_ID_PATTERN, f"a run id: {RUN_ID_RULE}"),
    ("path", "tool"): (NAME_PATTERN, "a tool's name: 1 to 200 characters, no control character"),
}
_CURSORS = {("/api/runs", "cursor"), ("/api/uncertain-calls", "after")}
_NAMED_QUERY = {("/api/uncertain-calls", "tenant")}
_NAMED_PROPERTIES = {("LeaseAcquireIn", "holder"), ("LeaseAcquireIn", "tenant")}


def _strings(schema: Any, pattern: str, *, overwrite: bool = False) -> None:
    """Give every plain string in ``schema`` (and the keys of its free-form objects) ``pattern``."""
    if isinstance(schema, list):
        for item in schema:
            _strings(item, pattern, overwrite=overwrite)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "integer":
        schema.setdefault("minimum", INT64["minimum"])
        schema.setdefault("maximum", INT64["maximum"])
    if schema.get("type") == "string" and "enum" not in schema and "format" not in schema and (overwrite or "pattern" not in schema):
        schema["pattern"] = pattern
    if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
        schema.setdefault("propertyNames", {"pattern": NO_NUL_PATTERN})
        if schema.get("additionalProperties") in (None, True, {}):
            schema["additionalProperties"] = _ANY
    for key, value in schema.items():
        if key in ("anyOf", "oneOf", "allOf", "items", "additionalProperties") or (key == "properties" and isinstance(value, dict)):
            for sub in value.values() if key == "properties" else [value]:
                _strings(sub, pattern, overwrite=overwrite)


def openapi_rules(doc: dict) -> dict:
    """``doc`` (ninja's OpenAPI document) with the rules above written in; returns it."""
    for path, ops in doc.get("paths", {}).items():
        for op in ops.values():
            for param in op.get("parameters", []):
                where, name, schema = param["in"], param["name"], param["schema"]
                if (where, name) in _PARAMETERS:
                    pattern, description = _PARAMETERS[(where, name)]
                    _strings(schema, pattern, overwrite=True)
                    if name == "run_id":
                        schema["maxLength"] = RUN_ID_MAX
                    param["description"] = description
                elif where == "query" and (path, name) in _CURSORS:
                    _strings(schema, CURSOR_PATTERN, overwrite=True)
                    for sub in schema.get("anyOf", [schema]):
                        if sub.get("type") == "string":
                            sub["maxLength"] = min(sub.get("maxLength", MAX_CURSOR), MAX_CURSOR)
                    param["description"] = CURSOR_RULE
                elif where == "query" and (path, name) in _NAMED_QUERY:
                    _strings(schema, NAME_PATTERN, overwrite=True)
                elif where == "header" and name == "Idempotency-Key":
                    _strings(schema, IDEMPOTENCY_KEY_PATTERN, overwrite=True)
                else:
                    _strings(schema, NO_NUL_PATTERN)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in schemas.items():
        for prop, sub in schema.get("properties", {}).items():
            if (name, prop) in _NAMED_PROPERTIES:
                _strings(sub, NAME_PATTERN, overwrite=True)
        _strings(schema, NO_NUL_PATTERN)
    schemas["JsonValue"] = JSON_VALUE
    return doc
