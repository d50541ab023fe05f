"""A flag made from an option whose default is None reads the type its annotation names (Piper's
``noise_scale: float | None``), so ``--noise-scale 0`` is the number 0, not the text '0'."""

from __future__ import annotations

import argparse

import pytest

from ggtts.flags import PER_CALL, add_flags, given


def test_an_option_defaulting_to_none_reads_its_annotated_number() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, PER_CALL)
    args = parser.parse_args(["--noise-scale", "0", "--noise-w", "0.5", "--seed", "3", "--lang", "a"])
    assert given(args, PER_CALL) == {"noise_scale": 0.0, "noise_w": 0.5, "seed": 3, "lang": "a"}
    assert isinstance(args.noise_scale, float) and isinstance(args.lang, str)
    with pytest.raises(SystemExit):
        parser.parse_args(["--noise-scale", "loud"])


def test_a_value_is_refused_only_where_no_family_takes_it() -> None:
    """``--lang fr`` is Magpie's (its tokenizers decide) though Kokoro refuses it: the command line lets it through
    to the model's own family; a seed no family takes is refused at once, with the family's message."""
    from ggtts.errors import InputError

    parser = argparse.ArgumentParser()
    add_flags(parser, PER_CALL)
    assert given(parser.parse_args(["--lang", "fr"]), PER_CALL) == {"lang": "fr"}
    with pytest.raises(InputError, match="seed must be between 0 and"):
        given(parser.parse_args(["--seed", "-5"]), PER_CALL)
