"""Qwen2: transformers' Qwen2ForCausalLM vs ours, through our HF converter and a real GGUF file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "outetts"))
from _tiny_outetts import build_qwen2_checkpoint

from ggtts.convert.outetts_hf import convert_outetts_hf
from ggtts.gguf import GGUFFile
from ggtts.models.qwen2.model import Qwen2Model
from ggtts.runtime.frames import generate_tokens
from ggtts.runtime.sampling import Sampler, SamplingParams

pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    from transformers import Qwen2ForCausalLM

    d = tmp_path_factory.mktemp("qwen2")
    hf_dir = build_qwen2_checkpoint(d / "hf", tied=request.param)
    hf = Qwen2ForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    return hf, convert_outetts_hf(hf_dir, d / "m-f32.gguf", "f32")


def test_output_tensor_only_when_untied(pair: tuple[torch.nn.Module, Path]) -> None:
    hf, path = pair
    assert ("output.weight" in GGUFFile(path).names()) == (not hf.config.tie_word_embeddings)


def test_prefill_logits_match(pair: tuple[torch.nn.Module, Path]) -> None:
    hf, path = pair
    ours = Qwen2Model.from_gguf(GGUFFile(path), max_len=128)
    ids = torch.randint(0, hf.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = hf(ids).logits
        got = ours(ids, ours.new_cache(64))
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_chunked_prefill_and_single_steps_match_one_pass(pair: tuple[torch.nn.Module, Path]) -> None:
    hf, path = pair
    ours = Qwen2Model.from_gguf(GGUFFile(path), max_len=128)
    ids = torch.randint(0, hf.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids).logits
        cache = ours.new_cache(64)
        parts = [ours(ids[:, :17], cache), ours(ids[:, 17:25], cache)]
        parts += [ours(ids[:, i : i + 1], cache) for i in range(25, 30)]
    torch.testing.assert_close(torch.cat(parts, dim=1), ref, rtol=1e-4, atol=1e-4)
    assert cache.length == 30


def test_greedy_generation_is_identical(pair: tuple[torch.nn.Module, Path]) -> None:
    hf, path = pair
    ours = Qwen2Model.from_gguf(GGUFFile(path), max_len=256)
    prompt = [5, 17, 99, 3, 250, 41, 7]
    n_new = 40
    with torch.no_grad():
        ref = hf.generate(
            torch.tensor([prompt]), max_new_tokens=n_new, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(prompt) :].tolist()
    got = list(
        generate_tokens(
            ours, prompt, ours.new_cache(128), Sampler(SamplingParams(temperature=0.0)), max_new_tokens=n_new
        )
    )
    assert len(set(ref)) > 3, "the reference generation is degenerate; the test would prove little"
    assert got == ref


def test_quantized_files_load_and_stay_close(pair: tuple[torch.nn.Module, Path], tmp_path: Path) -> None:
    hf, _ = pair
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(hf_dir, safe_serialization=True)
    import shutil

    src = Path(hf.name_or_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, hf_dir / name)
    ids = torch.arange(1, 33).unsqueeze(0)
    with torch.no_grad():
        ref = hf(ids).logits
        for out_type, tol in (("f16", 2e-2), ("q8_0", 5e-2)):
            g = GGUFFile(convert_outetts_hf(hf_dir, tmp_path / f"m-{out_type}.gguf", out_type))
            model = Qwen2Model.from_gguf(g, max_len=64)
            got = model(ids, model.new_cache(40))
            assert float((got - ref).norm() / ref.norm()) < tol, out_type
