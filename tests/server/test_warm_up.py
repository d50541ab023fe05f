"""``ggtts serve`` warms each model up as it loads it; a model that cannot be warmed up is still served."""

from __future__ import annotations

import logging

import pytest

from ggtts import api
from ggtts.errors import GGTTSError
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
