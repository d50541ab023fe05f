"""Our GGUF byte-level BPE tokenizer vs the ``tokenizers`` library on the same vocabulary (Qwen2
pre-tokenizer)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "outetts"))
from _tiny_outetts import SPECIAL, build_qwen2_checkpoint

from ggtts.convert.outetts_hf import convert_outetts_hf
from ggtts.gguf import GGUFFile
from ggtts.models.qwen2.tokenizer import BPETokenizer

tokenizers = pytest.importorskip("tokenizers")

TEXTS = [
    "hello world",
    "the overall package from just two people is pretty remarkable",
    "What is LoRA? It's 3.14, isn't it? I'LL say THEY'RE 'quoted'",
    "  leading and   multiple spaces   ",
    "newlines\n\nand\r\nwindows\tand tabs\n",
    "numbers 1234567890 and 3.14159 and 1,000,000",
    "café naïve façade — “quotes” 東京 🙂👍🏽 e\u0301 (decomposed é)",
    "<|im_start|>\n<|text_start|>the<|text_sep|>overall<|text_end|>\n<|audio_start|>\n",
    "the<|t_0.08|><|code_start|><|57|><|74|><|6|><|code_end|>\nwhat<|t_0.80|><|99|><|space|>",
    "<|im_start|><|im_start|>x<|im_end|>",
    "<|not a token|> <|0 |> <|t_9.99|>",
    "",
    "a",
    "!!!???...,,,;;;",
]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, BPETokenizer]:
    d = tmp_path_factory.mktemp("bpe")
    hf_dir = build_qwen2_checkpoint(d / "hf")
    ref = tokenizers.Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    ours = BPETokenizer.from_gguf(GGUFFile(convert_outetts_hf(hf_dir, d / "m.gguf", "f32")))
    return ref, ours


@pytest.mark.parametrize("text", TEXTS)
def test_same_ids_as_tokenizers(both: tuple[object, BPETokenizer], text: str) -> None:
    ref, ours = both
    assert ours.encode(text) == ref.encode(text, add_special_tokens=False).ids  # type: ignore[attr-defined]


def test_special_tokens_are_single_ids(both: tuple[object, BPETokenizer]) -> None:
    _, ours = both
    for tok in SPECIAL:
        assert len(ours.encode(tok)) == 1, tok
    assert len(ours.encode("<|968|>")) > 1  # not in this vocabulary: spelled out, not invented


def test_decode_round_trips(both: tuple[object, BPETokenizer]) -> None:
    ref, ours = both
    for text in TEXTS:
        ids = ours.encode(text)
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=False)  # type: ignore[attr-defined]
