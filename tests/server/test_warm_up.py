"""``ggtts serve`` warms each model up as it loads it; a model that cannot be warmed up is still served."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from ggtts import api
from ggtts.errors import GGTTSError
from ggtts.runtime.device import resolve_device
from ggtts.server import load_models
from skeleton_gguf import skeleton_gguf


class Model:
    def __init__(self, fail: bool) -> None:
        self.fail, self.warmed = fail, False

    def warm_up(self) -> None:
        if self.fail:
            raise GGTTSError("no such language")
        self.warmed = True


def test_each_model_is_warmed_up_and_a_failure_is_only_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    made = {"good.gguf": Model(fail=False), "bad.gguf": Model(fail=True)}
    monkeypatch.setattr(api, "load", lambda source: made[str(source).rsplit("/", 1)[-1]])
    with caplog.at_level(logging.WARNING, logger="ggtts.server"):
        models = load_models(["good=good.gguf", "bad=bad.gguf"])
    assert list(models) == ["good", "bad"]
    assert made["good.gguf"].warmed
    assert "could not warm up model 'bad' (bad.gguf): no such language" in caplog.text


def _loads_asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, object]]]:
    """What each load is asked for (source, options), with the loader replaced by one making a ``Model``."""
    asked: list[tuple[str, dict[str, object]]] = []

    def load(source: str, **options: object) -> Model:
        asked.append((source, options))
        return Model(fail=False)

    monkeypatch.setattr(api, "load", load)
    return asked


def _serve_parser() -> argparse.ArgumentParser:
    from ggtts.server import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def test_precision_and_compile_reach_every_models_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    from ggtts.server import load_options

    asked = _loads_asked(monkeypatch)
    parser = _serve_parser()
    args = parser.parse_args(["-m", "a=a.gguf", "-m", "b=b.gguf", "--precision", "bfloat16", "--compile"])
    models = load_models(args.model, load_options(args))
    device = resolve_device("auto")  # cpu here
    asked_of_each = {"precision": "bfloat16", "compile": True, "device": device}
    assert asked == [(s, asked_of_each) for s in ("a.gguf", "b.gguf")]
    assert all(m.warmed for copies in models.values() for m in copies)  # where a compiled model compiles
    nothing = {"device": device}
    assert load_options(parser.parse_args([])) == load_options(parser.parse_args(["--precision", "float32"])) == nothing
    assert load_options(parser.parse_args(["--device", "cpu"])) == {"device": "cpu"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "float16"])


def test_several_models_each_get_the_load_options_their_family_takes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`ggtts serve -m kokoro -m piper --compile` (Kokoro's option): Kokoro gets it, Piper does not; an option no
    served model takes, or a value a model's family refuses, is refused before any model loads."""
    from ggtts.errors import InputError
    from ggtts.server import load_options

    kokoro, piper = skeleton_gguf(tmp_path / "kokoro.gguf"), skeleton_gguf(tmp_path / "piper.gguf")
    asked = _loads_asked(monkeypatch)
    parser = _serve_parser()
    served = ["-m", f"k={kokoro}", "-m", f"p={piper}"]
    load_models([f"k={kokoro}", f"p={piper}"], load_options(parser.parse_args([*served, "--compile"])))
    device = resolve_device("auto")
    assert asked == [(str(kokoro), {"compile": True, "device": device}), (str(piper), {"device": device})]
    asked.clear()
    with pytest.raises(
        InputError, match=r"no model served takes the load option 'parallel' \(families: kokoro, piper\)"
    ):
        load_models([f"k={kokoro}", f"p={piper}"], {"parallel": 2})
    with pytest.raises(InputError, match=r"^model 'k': unknown precision 'float8'"):
        load_models([f"k={kokoro}", f"p={piper}"], {"precision": "float8"})
    assert asked == []  # nothing loaded
