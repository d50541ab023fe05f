"""Voice blend weights and seeds, as every family checks them: weights are finite positive numbers and blend
however large or small they are; a seed is a whole number the random generator takes."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from ggtts.errors import InputError
from ggtts.families.base import (
    MAX_SEED,
    Family,
    UnknownVoiceError,
    VoiceBlendError,
    VoiceWeightError,
    check_seed,
    parse_voice,
)
from ggtts.families.kokoro import FAMILY as KOKORO
from ggtts.families.outetts import FAMILY as OUTETTS

VOICES = ["a", "b", "c"]


@pytest.mark.parametrize("weight", ["inf", "-inf", "Infinity", "nan", "-nan", "1e309", "-1", "0", "-0", "0.0"])
@pytest.mark.parametrize("where", ["first", "second"])
def test_weights_that_are_not_finite_and_positive_are_refused(weight: str, where: str) -> None:
    spec = f"a:{weight},b:1" if where == "first" else f"a:1,b:{weight}"
    bad = "a" if where == "first" else "b"
    with pytest.raises(VoiceWeightError, match=f"voice weight '{weight}' of '{bad}' must be a finite positive number"):
        parse_voice(spec, VOICES)


@pytest.mark.parametrize("weight", ["x", "", "0x10", "1 2"])
def test_weights_that_are_not_numbers_are_refused(weight: str) -> None:
    with pytest.raises(VoiceWeightError, match="is not a number"):
        parse_voice(f"a:{weight}", VOICES)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("a:1e308,b:1e308", [0.5, 0.5]),  # their sum overflows to inf: a zero voice, were it summed first
        ("a:1.7e308,b:1.7e308,c:1.7e308", [1 / 3, 1 / 3, 1 / 3]),
        ("a:1e308,b:1e307", [10 / 11, 1 / 11]),
        ("a:5e-324,b:5e-324", [0.5, 0.5]),  # the smallest subnormals
        ("a:0.6,b:0.4", [0.6, 0.4]),
        ("a,b", [0.5, 0.5]),
        ("a:3,b", [0.75, 0.25]),
    ],
)
def test_any_finite_positive_weights_blend_to_a_sum_of_one(spec: str, want: list[float]) -> None:
    mix = parse_voice(spec, VOICES)
    weights = [w for _, w in mix.parts]
    assert all(math.isfinite(w) and w > 0 for w in weights), weights
    assert weights == pytest.approx(want, rel=1e-12)
    assert math.fsum(weights) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("a+b", {"a": 0.5, "b": 0.5}),
        ("a(2)+b(1)", {"a": 2 / 3, "b": 1 / 3}),
        (" a ( 3 ) + b ", {"a": 0.75, "b": 0.25}),
        ("a(2)", {"a": 1.0}),
        ("a+b+c(2)", {"a": 0.25, "b": 0.25, "c": 0.5}),
    ],
)
def test_kokoro_fastapis_plus_form_blends_as_the_comma_form(spec: str, want: dict[str, float]) -> None:
    mix = parse_voice(spec, VOICES)
    assert dict(mix.parts) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("a(0)+b", VoiceWeightError, r"weight '0' of 'a' must be a finite positive number, as in 'a\(2\)\+b\(1\)'"),
        ("a(x)+b", VoiceWeightError, "weight 'x' of 'a' is not a number"),
        ("a+", UnknownVoiceError, "unknown voice ''"),
        ("a(2", UnknownVoiceError, r"unknown voice 'a\(2'"),
        ("a+nobody", UnknownVoiceError, "unknown voice 'nobody'"),
        ("a-b", VoiceBlendError, "voice 'a-b' subtracts voices"),
        ("a(2)+b-c", VoiceBlendError, "voice 'b-c' subtracts voices"),
    ],
)
def test_the_plus_forms_mistakes_are_named(spec: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        parse_voice(spec, VOICES)


def test_a_voice_named_like_a_blend_is_that_voice() -> None:
    """A name with "+", "(" or "-" in it is the voice of that name where the model has one."""
    voices = ["en_US-lessac-medium", "x(2)", "p+q", "a"]
    for name in voices:
        assert parse_voice(name, voices).single == name


def test_a_huge_weight_against_a_tiny_one_keeps_both_voices() -> None:
    mix = parse_voice("a:1e308,b:1e-300", VOICES)
    (_, wa), (_, wb) = mix.parts
    assert wa == 1.0 and wb >= 0.0  # b's share underflows at most; never a NaN or an infinity


# ---- seeds -----------------------------------------------------------------------------------------------------
def test_the_seed_limit_is_what_torch_takes() -> None:
    """The bound is torch's own, not a guess: it seeds a generator at MAX_SEED and refuses one more."""
    torch.Generator().manual_seed(MAX_SEED)
    with pytest.raises((RuntimeError, ValueError)):
        torch.Generator().manual_seed(MAX_SEED + 1)


@pytest.mark.parametrize("seed", [0, 1, 2**63, MAX_SEED])
def test_seeds_in_range_pass(seed: int) -> None:
    assert check_seed(seed) == seed


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (-1, f"seed must be between 0 and {MAX_SEED}, got -1"),
        (MAX_SEED + 1, f"seed must be between 0 and {MAX_SEED}, got {MAX_SEED + 1}"),
        (2**70, f"seed must be between 0 and {MAX_SEED}, got {2**70}"),
        (1.5, "seed must be a whole number, got 1.5"),
        ("3", "seed must be a whole number, got '3'"),
        (True, "seed must be a whole number, got True"),
    ],
)
def test_seeds_out_of_range_or_not_whole_are_refused(seed: Any, message: str) -> None:
    with pytest.raises(InputError, match="^" + message.replace("+", r"\+") + "$"):
        check_seed(seed)


@pytest.mark.parametrize("family", [KOKORO, OUTETTS], ids=lambda f: f.name)
def test_each_family_checks_its_seed_option(family: Family) -> None:
    family.check_options({"seed": 5})
    family.check_options({"seed": None})  # not asked for
    with pytest.raises(InputError, match=f"seed must be between 0 and {MAX_SEED}"):
        family.check_options({"seed": 2**70})
