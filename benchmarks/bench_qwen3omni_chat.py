"""Qwen3-Omni answering a spoken question at the published widths (random weights): the time from the end of the
question's audio to the first audio of the answer, ggtts, with the thinker at reduced depth.

    python benchmarks/bench_qwen3omni_chat.py [--thinker-layers 2] [--seconds 5] [--reply-tokens 16] [--threads 2]
                                              [--dir DIR] [--repeats 3]

Shapes are ``bench_qwen3omni.py``'s (the talker, code predictor and code2wav at Qwen3-Omni-30B-A3B's config; the
thinker 2048 wide with 128 experts, ``--thinker-layers`` of its 48) and ``bench_qwen3omni_audio.py``'s encoder;
transformers builds each (seeded, random), ggtts converts them (thinker and talker q8_0, the encoder's mmproj f16)
beside a small trained tokenizer whose special ids the talker's config names (the published vocabulary's 151,936
rows, the rest padding). Files are kept in ``--dir`` and reused. Measured, best of ``--repeats``: the encoder on the
question (``listen``), the thinker's greedy answer of ``--reply-tokens`` tokens over the chat with the audio in it,
and the talker's first frame through code2wav (the pipeline's first push is that one frame); their sum is the wait
from the question's end to the first audio. There is no transformers figure to set beside it: its ``generate``
returns the whole answer's audio at once.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_qwen3omni import TALKER, THINKER_TEXT, _code2wav_model, _randomized
from bench_qwen3omni_audio import AUDIO

from ggtts.measure.bench import cpu_model
from ggtts.measure.qwen3omni.parity import question_audio


def build(directory: Path, layers: int) -> Path:
    """The thinker, talker and mmproj files in ``directory`` (built once); returns the thinker's path."""
    from transformers import (
        Qwen3OmniMoeTalkerConfig,
        Qwen3OmniMoeTalkerForConditionalGeneration,
        Qwen3OmniMoeThinkerConfig,
        Qwen3OmniMoeThinkerForConditionalGeneration,
    )

    from ggtts.convert.qwen3omni_audio import write_audio_encoder
    from ggtts.convert.qwen3omni_talker import write_talker
    from ggtts.convert.qwen3omni_thinker import write_thinker
    from ggtts.measure.qwen3omni.upstream import build_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    thinker_path = directory / f"thinker-{layers}l-q8_0.gguf"
    if thinker_path.exists():
        return thinker_path
    tok = directory / "tokenizer"
    tok.mkdir(exist_ok=True)
    ids = build_tokenizer(tok / "tokenizer.json")
    (tok / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}), encoding="utf-8"
    )
    top = dict(
        im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"], tts_pad_token_id=ids["<|tts_pad|>"],
        tts_bos_token_id=ids["<|tts_text_bos|>"], tts_eos_token_id=ids["<|tts_text_eod|>"],
        system_token_id=ids["system"], user_token_id=ids["user"], assistant_token_id=ids["assistant"],
    )  # fmt: skip
    start = time.perf_counter()
    torch.manual_seed(0)
    talker_config = Qwen3OmniMoeTalkerConfig(**{**TALKER, "accept_hidden_layer": layers})
    talker = _randomized(Qwen3OmniMoeTalkerForConditionalGeneration(talker_config).eval())
    code2wav = _code2wav_model()
    config = {**top, "model_type": "qwen3_omni_moe", "talker_config": talker.config.to_dict(),
              "code2wav_config": code2wav.config.to_dict()}  # fmt: skip
    tensors = {f"talker.{k}": v for k, v in talker.state_dict().items()}
    tensors.update({f"code2wav.{k}": v for k, v in code2wav.state_dict().items()})
    write_talker(directory / "talker-q8_0.gguf", config, tensors, "q8_0")
    del talker, code2wav, tensors
    gc.collect()
    thinker_config = Qwen3OmniMoeThinkerConfig(
        text_config={**THINKER_TEXT, "num_hidden_layers": layers}, audio_config=AUDIO, vision_config={"depth": 1},
        audio_token_id=ids["<|audio_pad|>"], audio_start_token_id=ids["<|audio_start|>"], vision_start_token_id=1,
    )  # fmt: skip
    torch.manual_seed(5)
    thinker = _randomized(Qwen3OmniMoeThinkerForConditionalGeneration(thinker_config).eval())
    state = dict(thinker.state_dict())
    write_audio_encoder(directory / "mmproj-f16.gguf", thinker_config.to_dict(), state, "f16")
    write_thinker(thinker_path, thinker_config.to_dict(), state, tok, "q8_0")
    print(f"built and converted in {time.perf_counter() - start:.0f} s")
    return thinker_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--thinker-layers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0, help="the question's length")
    ap.add_argument("--reply-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ggtts-bench-qwen3omni-chat"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import ggtts

    print(f"CPU: {cpu_model()}; {args.threads} threads; torch {torch.__version__}")
    thinker = build(args.dir, args.thinker_layers)
    model: Any = ggtts.load(
        thinker, talker=str(args.dir / "talker-q8_0.gguf"), mmproj=str(args.dir / "mmproj-f16.gguf")
    )
    question = question_audio(args.seconds)
    asked = dict(max_reply_tokens=args.reply_tokens, max_frames=4, temperature=0)
    for _ in model.chat("Hello.", audio=question[:16000], **asked).audio:  # loads and warms every part
        pass
    listened: list[tuple[float, int]] = []
    listen = model.listen

    def timed_listen(audio: Any) -> Any:  # chat() calls it: its share of chat()'s time
        start = time.perf_counter()
        rows = listen(audio)
        listened.append((time.perf_counter() - start, int(rows.shape[0])))
        return rows

    model.listen = timed_listen
    best: dict[str, float] = {}
    tokens = 0
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        reply = model.chat(audio=question, **asked)
        t1 = time.perf_counter()
        first = next(iter(reply.audio))
        t2 = time.perf_counter()
        tokens = len(reply.tokens)
        heard = listened[-1][0]
        for key, value in (("listen", heard), ("answer", t1 - t0 - heard), ("first audio", t2 - t1)):
            best[key] = min(best.get(key, np.inf), value)
    rows_n = listened[-1][1]
    total = sum(best.values())
    print(
        f"question {args.seconds:g} s ({rows_n} audio rows), answer {tokens} tokens, "
        f"thinker {args.thinker_layers} of 48 layers; first chunk {first.duration * 1000:.0f} ms of audio"
    )
    for key, value in best.items():
        print(f"  {key:>12}: {value:.3f} s")
    print(f"  {'to 1st audio':>12}: {total:.3f} s")


if __name__ == "__main__":
    main()
