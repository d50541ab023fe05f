"""``ggtts decode --vocoder talker.gguf CODES -o out.wav``: Qwen3-Omni codec codes made elsewhere -> 24 kHz audio.

CODES (an argument, a file, or ``-`` for standard input) holds one frame per line, each frame the codes of every
codebook in order (16 for the published model), separated by spaces or commas; or a JSON array of such frames.
The file is any GGUF holding code2wav (the talker's file, or one written by ``write_code2wav``). Audio is
code2wav's one-shot decoding (``frames x 1920 - 555`` samples for the published model); more than
:data:`DECODE_PUSH` frames go through its stream that many at a time, the same samples to float rounding in memory
that does not grow with the square of the frames (one-shot, 60,000 frames asked for 28.8 GB).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import torch

from ggtts.audio import Audio, check_output_suffix
from ggtts.errors import GGTTSError, GGUFError, InputError
from ggtts.fsutil import missing_file_error, names_a_file
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniCode2Wav as K
from ggtts.models.qwen3omni_code2wav.model import Code2Wav

_SEPARATORS = re.compile(r"[\s,]+")
DECODE_PUSH = 300  # frames decoded at once (24 s of audio; upstream chunked_decode's chunk)


def _text(codes: str) -> str:
    if codes == "-":
        if sys.stdin.isatty():
            raise GGTTSError("no codes given: pass them as an argument, as a file, or on standard input")
        return sys.stdin.read()
    path = Path(codes)
    if names_a_file(path):
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: cannot read codes ({e})") from None
    missing_file_error(codes, "codes")
    return codes


def check_frames(frames: object, per_frame: int, codebook: int) -> list[list[int]]:
    """``frames`` as a list of frames of ``per_frame`` whole numbers in ``0..codebook - 1``, or one InputError."""
    if not isinstance(frames, list) or not frames:
        raise InputError("no audio codes given" if frames == [] else "codes: give a list of frames")
    for i, frame in enumerate(frames, 1):
        if not isinstance(frame, list) or len(frame) != per_frame:
            count = len(frame) if isinstance(frame, list) else "no list of"
            raise InputError(f"codes: frame {i} has {count} codes; this code2wav takes {per_frame} per frame")
        for code in frame:
            if type(code) is not int:  # not bool, not float
                raise InputError(f"codes: frame {i} holds {code!r}, not a whole number")
            if not 0 <= code < codebook:
                raise InputError(
                    f"codes: frame {i} holds code {code}, out of range: code2wav has codes 0..{codebook - 1}"
                )
    return frames  # type: ignore[return-value]


def parse_frames(text: str, per_frame: int, codebook: int) -> list[list[int]]:
    """Frames of ``per_frame`` codes from text (one frame per line) or JSON (a list of frames)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            frames = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise InputError(f"codes: not valid JSON ({e.msg} at character {e.pos})") from None
        if not isinstance(frames, list) or not all(isinstance(f, list) for f in frames):
            raise InputError("codes: the JSON must be a list of frames, each a list of codes")
    else:
        frames = [_SEPARATORS.split(line.strip()) for line in stripped.splitlines() if line.strip()]
        parsed: list[list[object]] = []
        for i, frame in enumerate(frames, 1):
            try:
                parsed.append([int(c) for c in frame])
            except ValueError:
                raise InputError(f"codes: frame {i} holds something that is not a whole number") from None
        frames = parsed
    return check_frames(frames, per_frame, codebook)


def decode_codes_cli(
    vocoder: str | os.PathLike[str], codes: str | list[list[int]], output: str | os.PathLike[str] | None = None,
    device: str = "cpu",
) -> Audio:  # fmt: skip
    """Decode frames of codes with the code2wav of ``vocoder``; write ``output`` when given."""
    if output is not None:
        check_output_suffix(output)  # before any work
    g = GGUFFile(vocoder)
    if g.architecture != K.ARCH or K.NUM_QUANTIZERS not in g.metadata:
        raise GGUFError(f"{vocoder}: not a GGUF holding Qwen3-Omni's code2wav (architecture '{g.architecture}')")
    model = Code2Wav.from_gguf(g, device)
    q, size = model.cfg.num_quantizers, model.cfg.codebook_size
    frames = parse_frames(_text(codes), q, size) if isinstance(codes, str) else check_frames(codes, q, size)
    tensor = torch.tensor(frames, dtype=torch.long).T.unsqueeze(0)  # (1, Q, N)
    if tensor.shape[-1] <= DECODE_PUSH:
        samples = model(tensor)
    else:
        with torch.inference_mode():
            stream = model.stream()
            pushes = [stream.push(tensor[..., i : i + DECODE_PUSH]) for i in range(0, tensor.shape[-1], DECODE_PUSH)]
            samples = torch.cat(pushes, dim=-1)
    audio = Audio(samples[0, 0].float().cpu().numpy(), model.cfg.sample_rate)
    if output is not None:
        audio.save(output)
    return audio
