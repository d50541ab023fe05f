"""The OuteTTS converter names tensors with gguf-py's own TensorNameMap for ``qwen2``: every Hugging Face tensor
gets llama.cpp's name, and a tensor with no place in a Qwen2 of this many layers is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _tiny_outetts import build_qwen2_checkpoint
from safetensors.torch import save_file

from ggtts.convert.outetts_hf import convert_outetts_hf
from ggtts.errors import ConversionError
from ggtts.gguf import GGUFFile

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen2_checkpoint(tmp_path_factory.mktemp("hf") / "tiny", tied=False)


def test_every_tensor_gets_llama_cpp_s_name(checkpoint: Path, tmp_path: Path) -> None:
    names = set(GGUFFile(convert_outetts_hf(checkpoint, tmp_path / "m.gguf", "f32")).names())
    per_block = {"attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias", "attn_v.weight",
                 "attn_v.bias", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
                 "ffn_down.weight"}  # fmt: skip
    assert names == {"token_embd.weight", "output_norm.weight", "output.weight"} | {
        f"blk.{b}.{n}" for b in range(2) for n in per_block
    }


@pytest.mark.parametrize("extra", ["model.layers.2.mlp.up_proj.weight", "model.vision_tower.weight"])
def test_a_tensor_without_a_place_is_named(checkpoint: Path, tmp_path: Path, extra: str) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for item in checkpoint.iterdir():
        (bad / item.name).write_bytes(item.read_bytes())
    save_file({extra: torch.zeros(2, 2)}, str(bad / "extra.safetensors"))
    with pytest.raises(ConversionError, match=rf"extra\.safetensors: unexpected tensor '{extra}' for a Qwen2 model"):
        convert_outetts_hf(bad, tmp_path / "bad.gguf", "f32")
    assert not (tmp_path / "bad.gguf").exists()


def test_a_tokenizer_without_merges_is_converted_with_a_warning(checkpoint: Path, tmp_path: Path) -> None:
    import json

    bare = tmp_path / "bare"
    bare.mkdir()
    for item in checkpoint.iterdir():
        (bare / item.name).write_bytes(item.read_bytes())
    tokenizer = json.loads((bare / "tokenizer.json").read_text())
    tokenizer["model"]["merges"] = []
    (bare / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.warns(UserWarning, match="no BPE merges.*llama.cpp will refuse it"):
        out = convert_outetts_hf(bare, tmp_path / "m.gguf", "f32")
    assert "tokenizer.ggml.merges" not in GGUFFile(out).metadata
    assert GGUFFile(convert_outetts_hf(checkpoint, tmp_path / "n.gguf", "f32")).get("tokenizer.ggml.merges")
