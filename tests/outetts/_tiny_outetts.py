"""Tiny random OuteTTS stand-ins built with upstream libraries: a byte-level BPE tokenizer with the Qwen2
pre-tokenizer (``tokenizers``), a Qwen2 checkpoint (``transformers``) and a WavTokenizer .ckpt.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ggtts.models.qwen2.tokenizer import PRE_TOKENIZERS

N_CODES = 96  # tiny WavTokenizer codebook
N_CODE_TOKENS = 100  # the LM vocabulary has <|0|>..<|99|>: codes 96..99 are out of range for the decoder
DURATION_TOKENS = [f"<|t_{i / 100:.2f}|>" for i in range(0, 101)]
SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|text_start|>",
    "<|text_end|>",
    "<|text_sep|>",
    "<|space|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|code_start|>",
    "<|code_end|>",
    *[f"<|{i}|>" for i in range(N_CODE_TOKENS)],
    *DURATION_TOKENS,
]
CORPUS = [
    "the overall package from just two people is pretty remarkable",
    "sure i have some critiques about some of the gameplay aspects but its still really enjoyable",
    "and it looks lovely. Hello world! What is LoRA? It's 3.14, isn't it?",
    "Numbers 1234567 and 42; newlines\nand\ttabs, café, naïve, 東京, emoji 🙂 ... done",
    "one two three four five six seven eight nine ten eleven twelve hundred thousand million billion",
]


def build_tokenizer_json(path: Path, vocab_size: int = 400) -> Path:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRE_TOKENIZERS["qwen2"]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.add_special_tokens(SPECIAL)
    tok.save(str(path))
    return path


def build_qwen2_checkpoint(
    directory: Path, *, tied: bool = True, chat_template: str | None = None, seed: int = 0, hidden: int = 64,
    intermediate: int = 96,
) -> Path:  # fmt: skip
    from transformers import Qwen2Config, Qwen2ForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    tok_path = build_tokenizer_json(directory / "tokenizer.json")
    n_vocab = Tokenizer_len(tok_path)
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=n_vocab + 5,  # padded like Qwen's: holes become [PAD] tokens
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        initializer_range=0.2,  # sharp distributions, so greedy decoding is a real test
        bos_token_id=0,
        eos_token_id=None,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # Qwen2 has q/k/v biases: make them non-zero
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.2)
    model.save_pretrained(directory, safe_serialization=True)
    tok_cfg = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
    if chat_template is not None:
        tok_cfg["chat_template"] = chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(tok_cfg), encoding="utf-8")
    return directory


def Tokenizer_len(path: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)


def build_wavtokenizer_ckpt(path: Path, seed: int = 0) -> Path:
    """A WavTokenizer-format .ckpt with random weights (original key names)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "parity"))
    from test_wavtokenizer_parity import _upstream

    _, state = _upstream(seed)
    torch.save({"state_dict": state}, path)
    return path
