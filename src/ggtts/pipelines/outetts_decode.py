"""``ggtts decode --vocoder W.gguf CODES -o out.wav``: WavTokenizer codes (integers or ``<|N|>`` tokens) ->
audio.

The lead wires this into the CLI: ``add_decode_arguments(subparser)`` then ``decode_codes_cli(**vars(args))``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ggtts.audio import Audio
from ggtts.errors import GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import WavTokenizerDec
from ggtts.models.wavtokenizer.model import WavTokenizerDecoder
from ggtts.pipelines.outetts import decode_codes
from ggtts.text.outetts_prompt import parse_code_text


def add_decode_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocoder", required=True, metavar="W.gguf", help="a wavtokenizer-dec GGUF file")
    parser.add_argument(
        "codes",
        metavar="CODES",
        help="a file of codes, '-' for stdin, or the codes themselves: integers ('12 7 968') "
        "or tokens ('<|12|><|7|>')",
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="audio file to write (.wav, .flac ...)"
    )
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")


def read_codes(codes: str) -> list[int]:
    if codes == "-":
        import sys

        return parse_code_text(sys.stdin.read())
    path = Path(codes)
    if path.is_file():
        return parse_code_text(path.read_text(encoding="utf-8"))
    return parse_code_text(codes)


def decode_codes_cli(
    vocoder: str | os.PathLike[str],
    codes: str | list[int],
    output: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    **_: object,
) -> Audio:
    """Decode codes with a vocoder GGUF; write ``output`` when given. Errors are one sentence (GGTTSError)."""
    g = GGUFFile(vocoder)
    if g.architecture != WavTokenizerDec.ARCH:
        raise GGUFError(f"{vocoder}: --vocoder needs a '{WavTokenizerDec.ARCH}' GGUF, not '{g.architecture}'")
    values = read_codes(codes) if isinstance(codes, str) else list(codes)
    if not values:
        raise InputError("no audio codes given")
    model = WavTokenizerDecoder.from_gguf(g, device)
    audio = Audio(decode_codes(model, values), model.cfg.sample_rate)
    if output is not None:
        audio.save(output)
    return audio
