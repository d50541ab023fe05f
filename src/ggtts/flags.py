"""Command-line flags built from the family records, so no command line names a family: per-call options
(``ggtts speak``, ``batch``) and load options (``speak``, ``serve``, ``batch``, ``eval``); the help of each flag
names the families that take it, its default is the dataclass field's.

A flag left out is not passed (the model's own default holds); a load option given at its default is not passed
either, so ``--precision float32`` asks nothing of a family without the option.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

PROG = "ggtts"  # the command's name in its messages
Kind = Literal["options", "load_options"]
PER_CALL: Kind = "options"
LOAD: Kind = "load_options"


@dataclass(frozen=True)
class Flag:
    name: str  # the option's name (the argparse dest)
    flag: str  # --name
    default: Any
    help: str
    choices: Sequence[str] | None
    owners: tuple[str, ...]  # the families that take it
    value_type: type = str  # what argparse makes of its text


def family_flags(kind: Kind) -> dict[str, Flag]:
    """Option name -> its flag, for every field of the families' ``kind`` dataclasses that has one; the first
    family's declaration gives the default; the help names every family that takes it (all of them: 'every
    family'), or where their declarations say different things, gives each help once, after the families whose it
    is."""
    from ggtts.families import families

    first: dict[str, dataclasses.Field[Any]] = {}
    helps: dict[str, dict[str, str]] = {}  # option -> family -> its help
    for family in families():
        for f in dataclasses.fields(getattr(family, kind)):
            if f.metadata.get("flag"):
                first.setdefault(f.name, f)
                helps.setdefault(f.name, {})[family.name] = f.metadata["help"]
    everyone = len(families())
    out = {}
    for name, f in first.items():
        by_family = helps[name]
        who = list(by_family)
        if len(set(by_family.values())) == 1:
            where = "every family" if len(who) == everyone else ", ".join(who)
            text = f"{f.metadata['help']} ({where})"
        else:  # each help once, after the families that share it
            sharing: dict[str, list[str]] = {}
            for owner, help_ in by_family.items():
                sharing.setdefault(help_, []).append(owner)
            text = "; ".join(f"{', '.join(names)}: {help_}" for help_, names in sharing.items())
        out[name] = Flag(
            name, f.metadata["flag"], f.default, text, f.metadata.get("choices"), tuple(who), _value_type(f)
        )
    return out


def _value_type(f: dataclasses.Field[Any]) -> type:
    """What a flag's text becomes: the type of the field's default, or for a default of None the type its
    annotation names (``float | None`` -> float)."""
    if f.default is not None:
        return type(f.default)
    names = [part.strip() for part in str(f.type).split("|")]
    return next((t for t in (int, float) if t.__name__ in names), str)


def add_flags(parser: argparse.ArgumentParser, kind: Kind, skip: Sequence[str] = ()) -> None:
    for flag in family_flags(kind).values():
        if flag.name in skip:
            continue
        if isinstance(flag.default, bool):
            parser.add_argument(
                flag.flag, dest=flag.name, action=argparse.BooleanOptionalAction, default=None, help=flag.help
            )
        else:
            parser.add_argument(
                flag.flag, dest=flag.name, type=flag.value_type, default=None, choices=flag.choices, help=flag.help
            )


def given(args: argparse.Namespace, kind: Kind) -> dict[str, Any]:
    """The ``kind`` options given on the command line, each value checked before any model loads: refused where
    every family that declares the option refuses it (that is, no model could take it), with the first family's
    message. A value one family takes and another refuses (``--lang fr``: Magpie's, not Kokoro's) passes here; the
    model's own family checks it before its load where the command knows the model (``speak``), else at synthesis.
    Load options at their default are left out."""
    flags = family_flags(kind)
    options = {name: getattr(args, name, None) for name in flags}
    options = {name: value for name, value in options.items() if value is not None}
    if kind == LOAD:
        options = {name: value for name, value in options.items() if value != flags[name].default}
    for name, value in options.items():
        check_for_some_family(kind, name, value)
    return options


def check_for_some_family(kind: Kind, name: str, value: Any) -> None:
    """The first family's InputError for ``value`` of option ``name`` where every family declaring it refuses
    the value; nothing where any takes it (or declares it without a check)."""
    from ggtts.errors import InputError
    from ggtts.families import families

    refusals: list[InputError] = []
    for family in families():
        field = next((f for f in dataclasses.fields(getattr(family, kind)) if f.name == name), None)
        if field is None:
            continue
        check = field.metadata.get("check")
        if check is None:
            return
        try:
            check(value)
        except InputError as e:
            refusals.append(e)
        else:
            return
    if refusals:
        raise refusals[0]


def load_options(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    """The load options given (:func:`given`), and the device resolved (``auto``: CUDA where torch has it), with
    what there is to say about it said once (:func:`ggtts.runtime.device.device_note`)."""
    from ggtts.runtime.device import choose_device

    return {**given(args, LOAD), "device": choose_device(getattr(args, "device", None), say)}
