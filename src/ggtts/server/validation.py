"""Checks of a request: pydantic's validation errors as one readable 422 that names the field, and the 400s for
values of Kokoro-FastAPI's fields that a model cannot honour."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ggtts.errors import InputError
from ggtts.server.errors import ApiError
from ggtts.server.schemas import SpeechRequest
from ggtts.text.normalize import NORMALIZE_ALL

if TYPE_CHECKING:
    from ggtts.api import TTSModel

UNPROCESSABLE = 422
BAD_REQUEST = 400
# request fields that carry a family option -> the options it may be, the first the family has (Kokoro's lang,
# Qwen3-TTS's language)
OPTION_FIELDS = {"lang_code": ("lang", "language"), "normalization_options": ("normalization",)}


def _field(error: dict[str, Any]) -> str | None:
    if error.get("type") == "json_invalid":  # its location is a character position, not a field
        return None
    loc = [str(part) for part in error.get("loc", ()) if part not in ("body", "query") and not _union_tag(part)]
    return ".".join(loc) or None


def _union_tag(part: object) -> bool:
    """Whether a location part names the member of a union that was tried (``voice.str``, ``voice.VoiceId``),
    not a field: the field is what the client wrote."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or part[:1].isupper())


def _fields_at(body: type[BaseModel], error: dict[str, Any]) -> list[str]:
    """The fields of the object holding ``error``'s field: a nested object's own (``normalization_options``),
    else the request's."""
    model = body
    for part in error.get("loc", ())[1:-1]:  # after "body", up to the field itself
        field = model.model_fields.get(str(part))
        if field is None:
            return list(body.model_fields)
        kinds = typing.get_args(field.annotation) or (field.annotation,)  # NormalizationOptions | None: both
        nested = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        if not nested:
            return list(body.model_fields)
        model = nested[0]
    return list(model.model_fields)


def _describe(error: dict[str, Any], body: type[BaseModel]) -> str:
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
        known = ", ".join(_fields_at(body, error))
        parent = field.rpartition(".")[0]
        where = f"'{parent}'" if parent else "this request"
        return f"'{field}' is not a field of {where}; the fields are: {known}"
    return f"'{field}': {error.get('msg', 'invalid value')}"


def validation_error(errors: Sequence[dict[str, Any]], body: type[BaseModel] = SpeechRequest) -> ApiError:
    """One 422 error for all of ``errors``, with the first one's field as ``param``; an unknown field's message
    lists the fields of the object it is in (``body``, the request, or one inside it)."""
    if not errors:
        return ApiError(UNPROCESSABLE, "the request is invalid", code="invalid_request")
    first = errors[0]
    message = "; ".join(dict.fromkeys(_describe(e, body) for e in errors))
    code = "invalid_json" if first.get("type") == "json_invalid" else "invalid_value"
    return ApiError(UNPROCESSABLE, message, code=code, param=_field(first))


def check_download_link(body: SpeechRequest) -> None:
    """A 400 for ``return_download_link``: Kokoro-FastAPI keeps the file and sends its link; ggtts keeps nothing."""
    if body.return_download_link:
        raise ApiError(
            BAD_REQUEST,
            "ggtts keeps no files, so it has no download links; leave return_download_link false: the audio is in "
            "this response",
            code="unsupported_value",
            param="return_download_link",
        )


def family_options(name: str, model: TTSModel, body: SpeechRequest) -> dict[str, Any]:
    """The family options ``body`` asks of model ``name``: ``lang_code`` as ``lang`` (or ``language``, the family
    having that instead), ``normalization_options`` as
    ``normalization`` (only when it asks for other than ggtts's full normalization, what every model does anyway).
    Checked by the model's family before any work: a 400 naming the field when it has no such option or refuses
    the value.

    On a model without normalization options, ``normalization_options`` at Kokoro-FastAPI's defaults asks nothing
    (it is not applicable there): its clients send exactly that, every flag written out, when their user chose
    nothing, so the rule goes by the values, not by which flags were sent; other values than those or all true stay
    a 400. ``lang_code`` needs no such rule: its default, null, asks nothing anywhere, and any code is a choice."""
    asked: dict[str, Any] = {}
    if body.lang_code is not None:
        asked["lang_code"] = body.lang_code
    if body.normalization_options is not None and body.normalization_options.switches() != NORMALIZE_ALL:
        asked["normalization_options"] = body.normalization_options.switches()
    family = model.family
    options: dict[str, Any] = {}
    for field, value in asked.items():
        taken = family.option_names() if family is not None else []
        option = next((o for o in OPTION_FIELDS[field] if o in taken), None)
        if family is None or option is None:
            if _sent_unasked(field, body):
                continue
            raise ApiError(BAD_REQUEST, _no_option(name, model, body, field), code="unsupported_value", param=field)
        try:
            family.check_options({option: value})
        except InputError as e:
            raise ApiError(BAD_REQUEST, f"{field}: {e}", code="invalid_value", param=field) from None
        options[option] = value
    return options


def _sent_unasked(field: str, body: SpeechRequest) -> bool:
    """Whether ``body``'s ``field`` is what Kokoro-FastAPI's clients send when their user chose nothing."""
    options = body.normalization_options
    return field == "normalization_options" and options is not None and options.are_defaults()


def _no_option(name: str, model: TTSModel, body: SpeechRequest, field: str) -> str:
    """Why model ``name``, whose family has no option for ``field``, cannot do what ``body`` asks, and what to do."""
    which = f"model '{name}' ({model.family_name})"
    if field == "normalization_options" and body.normalization_options is not None:
        off = ", ".join(f"{flag} false" for flag, on in body.normalization_options if not on)
        return (
            f"{which} has no text normalization options, so it cannot honour {off}: leave normalization_options "
            "out, at Kokoro-FastAPI's defaults or with all of its flags true, and it normalizes as it always does"
        )
    return f"{which} has no language option; it reads the text as given: leave {field} out"
