"""A flag made from an option whose default is None reads the type its annotation names (Piper's
``noise_scale: float | None``), so ``--noise-scale 0`` is the number 0, not the text '0'."""

from __future__ import annotations

import argparse
import dataclasses

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


def test_a_help_several_families_share_is_written_once() -> None:
    """``--normalize``: Kokoro, Magpie and Piper read English through the normalizer, OuteTTS and Qwen3-TTS only
    lose markup: each help is said once, after the families it is for (it was said six times, once per family)."""
    from ggtts.families import family_named
    from ggtts.flags import family_flags

    help_ = family_flags(PER_CALL)["normalization"].help
    english = next(f for f in dataclasses.fields(family_named("kokoro").options) if f.name == "normalization")
    assert help_.count(english.metadata["help"]) == 1
    assert help_.count("take Markdown, HTML and decorative emoji away before speaking") == 2  # Qwen3-Omni's differs
    assert "kokoro, magpie, piper: read numbers" in help_ and "outetts, qwen3tts: take Markdown" in help_
