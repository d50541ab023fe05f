"""Kokoro's ``lang`` option is checked before any work: every code the frontends take passes, others are refused
with the list of codes (the API, the CLI and the server's ``lang_code`` all go through the family's check)."""

from __future__ import annotations

import pytest

from ggtts.errors import InputError
from ggtts.families.kokoro import FAMILY, check_language


@pytest.mark.parametrize("code", ["a", "b", "en", "EN-US", "en_gb", "j", "ja", " ja-JP ", "z"])
def test_the_codes_the_frontends_take_pass(code: str) -> None:
    assert check_language(code) == code
    FAMILY.check_options({"lang": code})


@pytest.mark.parametrize("code", ["xx", "fr", "", "jp"])
def test_other_codes_are_refused_with_the_list(code: str) -> None:
    with pytest.raises(InputError, match=r"unknown language code .* use one of: a, b, en, .*ja-jp.*z"):
        FAMILY.check_options({"lang": code})


def test_a_stream_with_an_unknown_language_fails_before_any_work() -> None:
    from ggtts.families.kokoro.pipeline import KokoroTTS

    model = KokoroTTS.__new__(KokoroTTS)  # no weights: the check must come before anything touches them
    with pytest.raises(InputError, match="unknown language code 'xx'"):
        next(iter(model.stream("Hello.", lang="xx")))
