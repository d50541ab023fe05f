"""A family recognises its own files from metadata alone: a llama.cpp ``qwen2`` chat model is not OuteTTS, and
says so in one line before any weight is read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ggtts.cli import main
from ggtts.errors import UnsupportedArchitectureError
from ggtts.families import family_for
from ggtts.gguf import GGUFFile, ModelWriter
from ggtts.gguf.keys import Tokenizer as TK

CHAT_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "h", "i", "hi"]
OUTETTS_TOKENS = [*CHAT_TOKENS, "<|audio_start|>", *(f"<|{i}|>" for i in range(8))]


def _qwen2(path: Path, tokens: list[str]) -> Path:
    writer = ModelWriter(path, "qwen2")
    writer.add(TK.MODEL, "gpt2")
    writer.add(TK.TOKENS, tokens)
    writer.add_tensor("token_embd.weight", torch.zeros(len(tokens), 32))
    writer.write()
    return path


@pytest.fixture
def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: GGUFFile, name: str) -> torch.Tensor:
        raise AssertionError(f"weight '{name}' was read")

    monkeypatch.setattr(GGUFFile, "tensor", refuse)


def test_a_qwen2_chat_model_is_not_outetts(tmp_path: Path, no_weights: None, capsys: pytest.CaptureFixture[str]):
    chat = _qwen2(tmp_path / "chat.gguf", CHAT_TOKENS)
    with pytest.raises(UnsupportedArchitectureError, match="without OuteTTS's audio-code tokens"):
        family_for(GGUFFile(chat))
    out = tmp_path / "x.wav"
    assert main(["speak", "-m", str(chat), "hi", "-o", str(out)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ggtts: error: {chat}: a 'qwen2' language model without OuteTTS's audio-code tokens")
    assert "not an OuteTTS model" in lines[0]
    assert not out.exists()
    assert main(["info", str(chat)]) == 0
    assert "architecture: qwen2  (not supported by this ggtts: a 'qwen2' language model" in capsys.readouterr().out


def test_a_qwen2_file_with_audio_codes_is_outetts(tmp_path: Path, no_weights: None) -> None:
    assert family_for(GGUFFile(_qwen2(tmp_path / "tts.gguf", OUTETTS_TOKENS))).name == "outetts"
