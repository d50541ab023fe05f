"""Tiny random Qwen3-Omni checkpoints built with transformers (``Qwen3OmniMoeForConditionalGeneration``) and a
byte-level BPE tokenizer trained by ``tokenizers`` with Qwen's pre-tokenizer, for parity checks and tests.

Sizes are small but every feature is there: the thinker's MoE (head size unequal to width / heads), the talker's
MoE with a shared expert, a code predictor of several codebooks, code2wav with a sliding window shorter than the
frames. The talker's codec vocabulary is 1024 ids past the codebook (transformers' ``generate`` suppresses the
vocabulary's last 1024 ids but EOS, so real codes must lie below them, as in the published model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ggtts.models.qwen2.tokenizer import PRE_TOKENIZERS

SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_text_bos|>", "<|tts_text_eod|>",
    "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>",
]  # fmt: skip
ROLES = ("system", "user", "assistant")
CORPUS = [
    "system\nuser\nassistant\n",
    "The quick brown fox jumps over the lazy dog. Hello, world! How are you today?\n",
    "Speech synthesis turns text into audio; a talker writes codes and a vocoder decodes them.\n",
    "Numbers 1234567 and 42, café, naïve, 東京, emoji 🙂 ... done. One two three four five six seven.\n",
]
CODEBOOK = 64  # codes per codebook (code2wav) = the code predictor's vocabulary
CODEBOOKS = 4
SUPPRESSED = 1024  # generate() never samples the codec vocabulary's last 1024 ids but EOS
CODEC_VOCAB = CODEBOOK + SUPPRESSED
SPEAKERS = ("ethan", "chelsie")


def build_tokenizer(path: Path, vocab_size: int = 360, special: list[str] = SPECIAL) -> dict[str, int]:
    """Train and save ``tokenizer.json`` (with the ``special`` tokens added); returns the ids of the special tokens
    and of the chat roles (each role must be one token, as in Qwen's vocabulary)."""
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
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(
        [CORPUS[0]] * 64 + CORPUS * 8,
        trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False),
    )
    tok.add_special_tokens(special)
    tok.save(str(path))
    ids: dict[str, int] = {}
    for t in special:
        found = tok.token_to_id(t)
        if found is None:
            raise RuntimeError(f"the tiny tokenizer lost its special token {t!r}")
        ids[t] = found
    for role in ROLES:
        encoded = tok.encode(role + "\n").ids
        if len(encoded) != 2:
            raise RuntimeError(f"the tiny tokenizer splits '{role}' into {len(encoded) - 1} tokens")
        ids[role] = encoded[0]
    ids["vocab"] = tok.get_vocab_size(with_added_tokens=True)
    return ids


def tiny_config(ids: dict[str, int]) -> Any:
    from transformers import Qwen3OmniMoeConfig

    vocab = ids["vocab"] + 4  # padded like Qwen's vocabulary
    extra = {"audio_token_id": ids["<|audio_pad|>"], "image_token_id": vocab - 3, "video_token_id": vocab - 2}
    rope = {"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3]}
    text = dict(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, moe_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
        rope_parameters=rope, max_position_embeddings=4096, norm_topk_prob=True,
    )  # fmt: skip
    thinker = dict(
        text_config=text,
        audio_config=dict(encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=16, d_model=8, output_dim=32,
                          downsample_hidden_size=8, num_mel_bins=16),
        vision_config=dict(depth=1, hidden_size=8, intermediate_size=16, num_heads=2, out_hidden_size=32,
                           deepstack_visual_indexes=[0]),
        audio_start_token_id=ids["<|audio_start|>"], vision_start_token_id=vocab - 1, user_token_id=ids["user"],
        **extra,
    )  # fmt: skip
    talker_text = dict(
        vocab_size=CODEC_VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, moe_intermediate_size=24, shared_expert_intermediate_size=40,
        num_experts=4, num_experts_per_tok=2, rope_parameters=rope, max_position_embeddings=4096,
    )  # fmt: skip
    predictor = dict(
        vocab_size=CODEBOOK, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_code_groups=CODEBOOKS,
    )  # fmt: skip
    special = {f"codec_{n}": CODEC_VOCAB - 8 + i for i, n in enumerate(("nothink_id", "think_bos_id",
               "think_eos_id", "pad_id", "bos_id"))}  # fmt: skip
    talker = dict(
        text_config=talker_text, code_predictor_config=predictor, num_code_groups=CODEBOOKS, thinker_hidden_size=32,
        accept_hidden_layer=2, codec_eos_token_id=CODEC_VOCAB - 3,
        speaker_id={name: CODEC_VOCAB - 2 + i for i, name in enumerate(SPEAKERS)}, spatial_merge_size=2,
        vision_start_token_id=vocab - 1, **special, **extra,
    )  # fmt: skip
    code2wav = dict(
        codebook_size=CODEBOOK, hidden_size=32, num_attention_heads=4, num_key_value_heads=4, intermediate_size=48,
        num_hidden_layers=2, num_quantizers=CODEBOOKS, upsample_rates=[4, 3], upsampling_ratios=[2],
        decoder_dim=32, sliding_window=5,
    )  # fmt: skip
    return Qwen3OmniMoeConfig(
        thinker_config=thinker,
        talker_config=talker,
        code2wav_config=code2wav,
        im_start_token_id=ids["<|im_start|>"],
        im_end_token_id=ids["<|im_end|>"],
        tts_pad_token_id=ids["<|tts_pad|>"],
        tts_bos_token_id=ids["<|tts_text_bos|>"],
        tts_eos_token_id=ids["<|tts_text_eod|>"],
        system_token_id=ids["system"],
        user_token_id=ids["user"],
        assistant_token_id=ids["assistant"],
    )


def build_tiny_checkpoint(directory: Path, seed: int = 0) -> Any:
    """A saved tiny checkpoint (config.json, model.safetensors, tokenizer files) in ``directory``; returns the
    transformers model (eval mode)."""
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration

    directory.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(directory / "tokenizer.json")
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}), encoding="utf-8"
    )
    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(tiny_config(ids)).eval()
    with torch.no_grad():  # sharper than the default init, so greedy choices are real tests
        for name, p in model.named_parameters():
            if name.startswith(("thinker.model", "thinker.lm_head", "talker.")) and p.dim() >= 2:
                p.normal_(0, 0.2)
    model.save_pretrained(directory)
    return model
