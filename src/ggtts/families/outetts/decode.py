"""``ggtts decode --vocoder W.gguf CODES -o out.wav``: WavTokenizer codes (integers or ``<|N|>`` tokens) ->
audio."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ggtts.audio import Audio, check_output_suffix
from ggtts.errors import GGTTSError, GGUFError, InputError
from ggtts.families.outetts.pipeline import decode_codes
from ggtts.families.outetts.prompt import parse_code_text
from ggtts.fsutil import missing_file_error, names_a_file
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import WavTokenizerDec
from ggtts.models.wavtokenizer.model import WavTokenizerDecoder


def read_codes(codes: str) -> list[int]:
    """Codes from ``codes``: ``-`` (standard input), a file's path, or the codes themselves."""
    if codes == "-":
        if sys.stdin.isatty():
            raise GGTTSError("no codes given: pass them as an argument, as a file, or on standard input")
        try:
            return parse_code_text(sys.stdin.read())
        except UnicodeDecodeError:
            raise InputError("standard input: not UTF-8 text") from None
    path = Path(codes)
    if names_a_file(path):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"{path}: cannot read codes ({e.strerror or e})") from None
        except UnicodeDecodeError:
            raise InputError(f"{path}: not UTF-8 text (expected integers or <|N|> tokens)") from None
        return parse_code_text(text)
    missing_file_error(codes, "codes")
    return parse_code_text(codes)


def decode_codes_cli(
    vocoder: str | os.PathLike[str],
    codes: str | list[int],
    output: str | os.PathLike[str] | None = None,
    device: str = "cpu",
) -> Audio:
    """Decode codes with a vocoder GGUF; write ``output`` when given. Errors are one sentence (GGTTSError)."""
    if output is not None:
        check_output_suffix(output)  # before any work
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
