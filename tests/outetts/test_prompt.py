"""OuteTTS text cleaning, number words and prompt layout (v0.2 / v0.3) against llama.cpp's llama-tts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ggtts.errors import InputError
from ggtts.families.outetts.prompt import (
    OuteTTSVersion,
    Speaker,
    audio_data,
    audio_text,
    build_prompt,
    default_speaker,
    parse_code_text,
    process_text,
    version_from_chat_template,
)
from ggtts.text.number_words import number_to_words

V2, V3 = OuteTTSVersion.V0_2, OuteTTSVersion.V0_3


@pytest.mark.parametrize(
    ("number", "words"),
    [
        ("0", "zero"),
        ("13", "thirteen"),
        ("40", "forty"),
        ("99", "ninety-nine"),
        ("100", "one hundred"),
        ("1005", "one thousand five"),
        ("3.14", "three point one four"),
        ("1,000,000", "one million"),
        # llama.cpp's std::stoi drops these (2^31 and above)
        (
            "2147483648",
            "two billion one hundred forty-seven million four hundred eighty-three thousand six hundred forty-eight",
        ),
        ("5000000000000", "five trillion"),
        ("1" + "0" * 35, "one hundred decillion"),  # 36 digits: the largest read as a cardinal
        ("1" + "0" * 36, "one " + " ".join(["zero"] * 36)),  # 37 digits: digit by digit
        ("1" + "0" * 40, "one " + " ".join(["zero"] * 40)),
    ],
)
def test_number_words(number: str, words: str) -> None:
    assert number_to_words(number) == words


@pytest.mark.parametrize(
    ("text", "v2"),
    [
        ("Hello world", "hello<|text_sep|>world"),
        ("What is LoRA?", "what<|text_sep|>is<|text_sep|>lora"),
        ("I have 21 cats.", "i<|text_sep|>have<|text_sep|>twenty<|text_sep|>one<|text_sep|>cats"),
        ("a-b_c/d,e.f\\g", "a<|text_sep|>b<|text_sep|>c<|text_sep|>d<|text_sep|>e<|text_sep|>f<|text_sep|>g"),
        ("  It's   (quite) fine!  ", "its<|text_sep|>quite<|text_sep|>fine"),
        ("Café naïve", "cafe<|text_sep|>naive"),
        ("pi is 3.14", "pi<|text_sep|>is<|text_sep|>three<|text_sep|>point<|text_sep|>one<|text_sep|>four"),
    ],
)
def test_process_text(text: str, v2: str) -> None:
    assert process_text(text, V2) == v2
    assert process_text(text, V3) == v2.replace("<|text_sep|>", "<|space|>")


def test_text_with_nothing_to_say_is_an_error() -> None:
    from ggtts.families.base import NothingToSay

    with pytest.raises(NothingToSay, match="nothing to say: no word in '!!! \\?\\?\\?' can be read aloud"):
        build_prompt("!!! ???", default_speaker(), V2)


def test_version_from_chat_template() -> None:
    assert version_from_chat_template("outetts-0.3") is V3
    assert version_from_chat_template(None) is V2
    assert version_from_chat_template("{% for m in messages %}...") is V2


def test_v02_default_prompt_is_llama_tts_layout() -> None:
    p = build_prompt("Hello world", default_speaker(), V2).text
    # from the notes: the speaker words, then the cleaned text, then the speaker's audio
    assert p.startswith(
        "<|im_start|>\n<|text_start|>the<|text_sep|>overall<|text_sep|>package<|text_sep|>from<|text_sep|>just"
    )
    assert "looks<|text_sep|>lovely<|text_sep|>hello<|text_sep|>world<|text_end|>\n<|audio_start|>\n" in p
    assert "\nthe<|t_0.08|><|code_start|><|257|><|740|><|636|><|913|><|788|><|1703|><|code_end|>\n" in p
    assert "\nfrom<|t_0.19|><|code_start|><|604|><|782|><|1682|>" in p
    assert p.endswith("<|595|><|1087|><|1646|><|1493|><|1677|><|code_end|>")  # llama.cpp's default: no final newline
    assert p.count("<|code_start|>") == p.count("<|code_end|>") == 30


def test_v03_is_llama_cpps_rewrite_of_v02() -> None:
    """llama-tts builds v0.3 from the v0.2 strings with three regex replacements; so do we, independently."""
    sp = default_speaker()
    assert audio_text(sp, V3) == re.sub(r"<\|text_sep\|>", "<|space|>", audio_text(sp, V2))
    v2_data = audio_data(sp, V2)
    expected = re.sub(r"<\|code_end\|>", "<|space|>", re.sub(r"<\|code_start\|>", "", v2_data))
    assert audio_data(sp, V3) == expected


def test_speaker_file_gets_newline_after_every_word(tmp_path: Path) -> None:
    f = tmp_path / "me.json"
    f.write_text(json.dumps({"words": [{"word": "hi", "duration": 0.1, "codes": [1, 2]}], "version": "0.3"}))
    sp = Speaker.from_json(f)
    assert sp.name == "me" and sp.version is V3
    assert audio_data(sp, V2) == "<|audio_start|>\nhi<|t_0.10|><|code_start|><|1|><|2|><|code_end|>\n"


@pytest.mark.parametrize(
    "bad",
    [
        {"words": []},
        {"words": [{"word": "x"}]},
        {"words": [{"word": "x", "duration": 1, "codes": [1]}], "version": "9"},
    ],
)
def test_bad_speaker_profiles_are_clear_errors(bad: dict[str, object]) -> None:
    with pytest.raises(InputError, match="speaker"):
        Speaker.from_dict(bad)


def test_parse_code_text() -> None:
    assert parse_code_text("12 7, 968\n4") == [12, 7, 968, 4]
    assert parse_code_text("<|code_start|><|12|><|7|><|code_end|>") == [12, 7]
    with pytest.raises(InputError, match="not an audio code"):
        parse_code_text("12 seven")
