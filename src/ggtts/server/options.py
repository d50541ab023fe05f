"""The served models' per-call options in the request schema, generated from their families' records.

A speech request's ``options`` object takes each per-call option of the served models' families by its name
(``{"options": {"temperature": 0.5, "seed": 3}}``), typed, described and defaulted as the family's options
dataclass declares it (:func:`ggtts.families.base.option`), so a family's options reach the server, its OpenAPI
schema and ``GET /v1/models`` with no edit here. Left out: options marked ``server=False`` (a progress bar, a file
chosen at load) and those the request already carries as Kokoro-FastAPI's fields (``lang_code``,
``normalization_options``). An option that one served family takes and another does not is a 400 for a model of
the other, naming the options it takes.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, Field, create_model

from ggtts.errors import InputError
from ggtts.families.base import Family
from ggtts.server.errors import ApiError
from ggtts.server.schemas import CaptionedSpeechRequest, OptionCard, SpeechRequest
from ggtts.server.validation import BAD_REQUEST, OPTION_FIELDS, family_options

if typing.TYPE_CHECKING:
    from ggtts.api import TTSModel

OPTIONS_FIELD = "options"


def served_options(family: Family | None) -> list[dataclasses.Field[Any]]:
    """The per-call options of ``family`` that a request's ``options`` object takes."""
    if family is None:
        return []
    aliased = {options[0] for options in OPTION_FIELDS.values()}  # (Qwen3-TTS's language is in options too)
    return [
        f
        for f in dataclasses.fields(family.options)
        if f.metadata.get("server", True) and f.name not in aliased and "help" in f.metadata
    ]


def _type(family: Family, f: dataclasses.Field[Any]) -> Any:
    """The field's type: its annotation evaluated in its module, as typing does (one field at a time: another
    field's annotation may name a type imported for type checking only)."""
    kind = f.type
    if isinstance(kind, str):
        kind = eval(kind, vars(sys.modules[family.options.__module__]))  # the family's own annotation
    return kind


def option_cards(family: Family | None) -> list[OptionCard]:
    """``GET /v1/models``'s description of what a model of ``family`` takes in ``options``."""
    cards = []
    for f in served_options(family):
        assert family is not None
        kind = _type(family, f)
        shown = getattr(kind, "__name__", None) or str(kind).replace("typing.", "")
        cards.append(OptionCard(name=f.name, type=shown, default=f.default, description=f.metadata["help"]))
    return cards


@dataclass(frozen=True)
class RequestBodies:
    """The request bodies of one server: its served families' options inside."""

    speech: type[SpeechRequest]
    captioned: type[CaptionedSpeechRequest]


def request_bodies(families: Iterable[Family | None]) -> RequestBodies:
    """``SpeechRequest`` and ``CaptionedSpeechRequest`` with an ``options`` object holding every per-call option of
    ``families`` (one field per name, ``null`` by default: the model's own default)."""
    kinds: dict[str, list[Any]] = {}
    helps: dict[str, dict[str, str]] = {}
    unique = {f.name: f for f in families if f is not None}  # each family once, in order
    for family in unique.values():
        for f in served_options(family):
            kind = _type(family, f)
            if kind not in kinds.setdefault(f.name, []):
                kinds[f.name].append(kind)
            helps.setdefault(f.name, {})[family.name] = f.metadata["help"]
    fields: dict[str, Any] = {}
    for name, types in kinds.items():
        kind = typing.Union[(*types, None)]
        fields[name] = (kind, Field(default=None, description=_description(helps[name])))
    config = ConfigDict(extra="forbid", strict=True)
    options = create_model("ModelOptions", __config__=config, **fields)
    options.__doc__ = "The model's own per-call options (GET /v1/models lists each model's); null: its default."
    described = Field(default=None, description=options.__doc__)
    speech = create_model("SpeechRequest", __base__=SpeechRequest, options=(options | None, described))
    captioned = create_model(
        "CaptionedSpeechRequest", __base__=CaptionedSpeechRequest, options=(options | None, described)
    )
    return RequestBodies(speech, captioned)


def _description(helps: dict[str, str]) -> str:
    if len(set(helps.values())) == 1:
        return next(iter(helps.values()))
    return "; ".join(f"{family}: {text}" for family, text in helps.items())


def asked_options(body: SpeechRequest) -> dict[str, Any]:
    """The options ``body``'s ``options`` object sets (not null)."""
    options = getattr(body, OPTIONS_FIELD, None)
    if options is None:
        return {}
    return {k: v for k, v in options if v is not None}


def request_options(name: str, model: TTSModel, body: SpeechRequest) -> dict[str, Any]:
    """Every family option ``body`` asks of model ``name``: Kokoro-FastAPI's fields
    (:func:`~ggtts.server.validation.family_options`) and the ``options`` object, each checked by the model's
    family before any work: a 400 naming ``options.NAME`` for one it does not take or a value it refuses."""
    return {**family_options(name, model, body), **checked_options(name, model, asked_options(body))}


def checked_options(
    name: str, model: TTSModel, asked: Mapping[str, Any], excluded: Collection[str] = ()
) -> dict[str, Any]:
    """The ``options`` object's settings (``asked``, none of them null) for model ``name``, each checked by its
    family: a 400 naming ``options.NAME`` for one it does not take (or one of ``excluded``, which the route
    sets itself) or a value it refuses."""
    options: dict[str, Any] = {}
    known = [f.name for f in served_options(model.family) if f.name not in excluded]
    for key, value in asked.items():
        param = f"{OPTIONS_FIELD}.{key}"
        if model.family is None or key not in known:
            takes = f"its options are: {', '.join(known)}" if known else "it takes none"
            message = f"model '{name}' ({model.family_name}) has no option '{key}'; {takes}"
            raise ApiError(BAD_REQUEST, message, code="unsupported_value", param=param)
        try:
            model.family.check_options({key: value})
        except InputError as e:
            raise ApiError(BAD_REQUEST, f"{param}: {e}", code="invalid_value", param=param) from None
        options[key] = value
    return options
