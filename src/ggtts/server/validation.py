"""Pydantic's validation errors as one readable 422 error that names the field."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ggtts.server.errors import ApiError
from ggtts.server.schemas import SpeechRequest

UNPROCESSABLE = 422


def _field(error: dict[str, Any]) -> str | None:
    if error.get("type") == "json_invalid":  # its location is a character position, not a field
        return None
    loc = [str(part) for part in error.get("loc", ()) if part not in ("body", "query")]
    return ".".join(loc) or None


def _describe(error: dict[str, Any], fields: Iterable[str]) -> str:
    kind = error.get("type", "")
    field = _field(error)
    if kind == "json_invalid":
        detail = error.get("ctx", {}).get("error", "invalid syntax")
        position = error.get("loc", ("body", None))[-1]
        where = f" at character {position}" if isinstance(position, int) else ""
        return f"the request body is not valid JSON: {detail}{where}"
    if field is None:
        if kind == "missing":
            return "the request has no body; send a JSON object with at least 'input'"
        return 'the request body must be a JSON object such as {"input": "Hello"}'
    if kind == "missing":
        return f"'{field}' is required"
    if kind == "extra_forbidden":
        known = ", ".join(fields)
        return f"'{field}' is not a field of this request; the fields are: {known}"
    return f"'{field}': {error.get('msg', 'invalid value')}"


def validation_error(errors: Sequence[dict[str, Any]], fields: Iterable[str] = SpeechRequest.model_fields) -> ApiError:
    """One 422 error for all of ``errors``, with the first one's field as ``param``; an unknown field's message
    lists ``fields``, the request's own."""
    if not errors:
        return ApiError(UNPROCESSABLE, "the request is invalid", code="invalid_request")
    first = errors[0]
    fields = list(fields)
    message = "; ".join(dict.fromkeys(_describe(e, fields) for e in errors))
    code = "invalid_json" if first.get("type") == "json_invalid" else "invalid_value"
    return ApiError(UNPROCESSABLE, message, code=code, param=_field(first))
