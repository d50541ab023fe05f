"""``ggtts serve`` warms each model up as it loads it; a model that cannot be warmed up is still served."""

from __future__ import annotations

import logging

import pytest

from ggtts import api
from ggtts.errors import GGTTSError
from ggtts.runtime.device import resolve_device
from ggtts.server import load_models


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


def test_precision_and_compile_reach_every_models_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from ggtts.server import add_arguments, load_options

    asked: list[tuple[str, dict[str, object]]] = []

    def load(source: str, **options: object) -> Model:
        asked.append((source, options))
        return Model(fail=False)

    monkeypatch.setattr(api, "load", load)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
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
