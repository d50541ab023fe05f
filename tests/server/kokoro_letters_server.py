"""Runs the real server on a Kokoro GGUF file whose text frontend is replaced by letters-as-phonemes.

For use only while ``ggtts.text`` is not wired into the Kokoro pipeline: everything else (file, loader, model,
pipeline, server) is the real code. ``python kokoro_letters_server.py NAME=PATH --port N``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from ggtts.api import load
from ggtts.server import parse_model_spec, run
from ggtts.server.settings import ServerSettings


def letters(text: str, language: str) -> Iterable[str]:
    return [sentence.strip() + "." for sentence in text.lower().split(".") if sentence.strip()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    name, path = parse_model_spec(args.model)
    model = load(path)
    model.phonemizer = letters  # type: ignore[attr-defined]
    run({name: model}, ServerSettings(), "127.0.0.1", args.port)


if __name__ == "__main__":
    main()
