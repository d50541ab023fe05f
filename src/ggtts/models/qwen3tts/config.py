"""Hyper-parameters of a Qwen3-TTS talker file and its mmproj file (:class:`ggtts.gguf.keys.Qwen3TTS`), as llama.cpp
writes them: the special ids are found by their token names, the code predictor's head size from its q-norm, and
what llama.cpp hard-codes from ggtts's keys where present (else llama.cpp's values)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3TTS as K
from ggtts.models.layers import validate as V
from ggtts.models.qwen3omni_code2wav.config import RATE, ROPE_BASE, WINDOW
from ggtts.models.qwen3omni_talker.config import CODEBOOKS, PENALTY, TEMPERATURE, TOP_P, Sampling, StackConfig

TEXT_SPECIALS = {"tts_pad": "<tts_pad>", "tts_bos": "<tts_text_bos>", "tts_eos": "<tts_text_eod>"}
CODEC_SPECIALS = {
    "codec_pad": "<|codec_pad|>", "codec_bos": "<|codec_bos|>", "codec_eos": "<|codec_eos_token|>",
    "codec_think": "<|codec_think|>", "codec_nothink": "<|codec_nothink|>", "codec_think_bos": "<|codec_think_bos|>",
    "codec_think_eos": "<|codec_think_eos|>",
}  # fmt: skip
LANGUAGE_PREFIX, SPEAKER_PREFIX = "<|codec_language_", "<|spk_"
# generate()'s defaults, for llama.cpp's files (which carry none)
DEFAULT_SAMPLING = Sampling(0.9, 50, 1.0, 1.05)
DEFAULT_CP_SAMPLING = Sampling(0.9, 50, 1.0)
SUPPRESSED_TAIL = 1024
MIN_FRAMES = 2  # generate()'s min_new_tokens: EOS is suppressed for the first two draws


def _model_type(speakers: bool, mmproj: GGUFFile) -> str:
    """For llama.cpp's files (which do not say): preset speakers make a CustomVoice model, a speaker encoder a Base
    one; neither, a VoiceDesign one."""
    if speakers:
        return "custom_voice"
    # llama.cpp's converter gives every mmproj the speaker encoder's keys: its tensors tell
    return "base" if K.SPEAKER_STEM in mmproj else "voice_design"


def _either(g: GGUFFile, key: str, general: str, default: float) -> float:
    """ggtts's key, else llama.cpp's ``general.sampling.*`` one, else upstream's default."""
    if key in g.metadata:
        return g.get_float(key) if isinstance(default, float) else g.get_int(key)
    if general in g.metadata:
        return g.get_float(general) if isinstance(default, float) else g.get_int(general)
    return default


def _default_int(key: str) -> int:
    value = K.LLAMA_CPP_DEFAULTS[key]
    assert isinstance(value, int)
    return value


def _default_float(key: str) -> float:
    value = K.LLAMA_CPP_DEFAULTS[key]
    assert isinstance(value, int | float)
    return float(value)


@dataclass(frozen=True)
class Qwen3TTSConfig:
    talker: StackConfig
    code_predictor: StackConfig
    context_length: int
    text_vocab: int  # token_embd's text rows; codec id c is row text_vocab + c
    codec_vocab: int
    cp_vocab: int
    n_codebooks: int
    model_type: str  # custom_voice, base, voice_design
    tts_pad: int  # text ids
    tts_bos: int
    tts_eos: int
    codec_pad: int  # codec ids
    codec_bos: int
    codec_eos: int
    codec_think: int
    codec_nothink: int
    codec_think_bos: int
    codec_think_eos: int
    languages: dict[str, int]  # codec ids, by upstream's language name ("english", "beijing_dialect")
    speakers: dict[str, int]  # codec ids
    dialects: dict[str, str]  # speaker -> the dialect language it speaks in Chinese
    sampling: Sampling
    cp_sampling: Sampling
    suppressed_ids: list[int] = field(default_factory=list)  # codec ids generate() never draws

    @classmethod
    def from_gguf(cls, talker: GGUFFile, mmproj: GGUFFile) -> Qwen3TTSConfig:
        if talker.architecture != K.ARCH:
            raise GGUFError(f"{talker.path}: architecture is '{talker.architecture}', expected '{K.ARCH}'")
        if mmproj.architecture != K.CLIP_ARCH or mmproj.get(K.GEN_PROJECTOR_TYPE, None) != K.GEN_PROJECTOR:
            raise GGUFError(f"{mmproj.path}: not a Qwen3-TTS mmproj file ('{K.GEN_PROJECTOR_TYPE}' is not "
                            f"'{K.GEN_PROJECTOR}')")  # fmt: skip
        path, mpath = str(talker.path), str(mmproj.path)

        def size(g: GGUFFile, where: str, key: str) -> int:
            return V.SIZE.check(where, key, g.get_int(key))

        def heads(g: GGUFFile, where: str, key: str) -> int:
            return V.HEAD_COUNT.check(where, key, g.get_int(key))

        n_heads = heads(talker, path, K.HEAD_COUNT)
        dim = size(talker, path, K.EMBEDDING_LENGTH)
        head_dim = V.SIZE.check(path, K.KEY_LENGTH, talker.get_int(K.KEY_LENGTH, dim // n_heads))
        stack = StackConfig(
            dim=dim,
            n_layers=V.LAYER_COUNT.check(path, K.BLOCK_COUNT, talker.get_int(K.BLOCK_COUNT)),
            n_heads=n_heads,
            n_kv_heads=heads(talker, path, K.HEAD_COUNT_KV),
            head_dim=head_dim,
            rms_eps=V.NORM_EPSILON.check(path, K.RMS_EPS, talker.get_float(K.RMS_EPS)),
            rope_theta=ROPE_BASE.check(path, K.ROPE_FREQ_BASE, talker.get_float(K.ROPE_FREQ_BASE)),
            n_ff=size(talker, path, K.FEED_FORWARD_LENGTH),
        ).check(path)
        q_norm = f"{K.CP}.blk.0.attn_q_norm.weight"
        if q_norm not in mmproj:
            raise GGUFError(f"{mpath}: missing tensor '{q_norm}'")
        cp_theta = mmproj.get_float(K.CP_ROPE_FREQ_BASE, _default_float(K.CP_ROPE_FREQ_BASE))
        cp = StackConfig(
            dim=size(mmproj, mpath, K.GEN_EMBEDDING_LENGTH),
            n_layers=V.LAYER_COUNT.check(mpath, K.GEN_BLOCK_COUNT, mmproj.get_int(K.GEN_BLOCK_COUNT)),
            n_heads=heads(mmproj, mpath, K.GEN_HEAD_COUNT),
            n_kv_heads=heads(mmproj, mpath, K.GEN_HEAD_COUNT_KV),
            head_dim=mmproj.info(q_norm).shape[-1],
            rms_eps=V.NORM_EPSILON.check(mpath, K.GEN_RMS_EPS, mmproj.get_float(K.GEN_RMS_EPS)),
            rope_theta=ROPE_BASE.check(mpath, K.CP_ROPE_FREQ_BASE, cp_theta),
            n_ff=size(mmproj, mpath, K.GEN_FEED_FORWARD_LENGTH),
        ).check(mpath)
        if mmproj.get_int(K.GEN_PROJECTION_DIM, dim) != dim:
            raise GGUFError(f"{mpath}: made for a talker {mmproj.get_int(K.GEN_PROJECTION_DIM)} wide, not {dim} "
                            f"({path})")  # fmt: skip

        tokens = [str(t) for t in talker.get_list("tokenizer.ggml.tokens")]
        rows = talker.info(f"{K.TOKEN_EMBD}.weight").shape[0]
        codec_vocab = talker.info(f"{K.OUTPUT}.weight").shape[0]
        text_vocab = rows - codec_vocab
        if text_vocab <= 0 or len(tokens) != rows:
            raise GGUFError(f"{path}: {len(tokens)} tokens for {rows} embedding rows and {codec_vocab} codec ids")
        ids = {t: i for i, t in enumerate(tokens)}

        def text_id(name: str) -> int:
            if name not in ids or ids[name] >= text_vocab:
                raise GGUFError(f"{path}: the vocabulary has no text token '{name}'")
            return ids[name]

        def codec_id(name: str) -> int:
            if name not in ids or ids[name] < text_vocab:
                raise GGUFError(f"{path}: the vocabulary has no codec token '{name}'")
            return ids[name] - text_vocab

        def named(prefix: str) -> dict[str, int]:
            return {t[len(prefix) : -2]: i - text_vocab for t, i in ids.items() if t.startswith(prefix) and
                    t.endswith("|>") and i >= text_vocab}  # fmt: skip

        speakers = named(SPEAKER_PREFIX)
        dialects: dict[str, str] = {}
        for entry in (str(e) for e in talker.get_list(K.DIALECTS, [])):
            name, _, dialect = entry.partition("=")
            if name not in speakers or dialect not in named(LANGUAGE_PREFIX):
                raise GGUFError(f"{path}: metadata '{K.DIALECTS}' holds '{entry}', not speaker=dialect")
            dialects[name] = dialect
        n_codebooks = CODEBOOKS.check(mpath, K.CP_EMBD, mmproj.info(K.CP_EMBD).shape[0] + 1)
        cp_vocab = mmproj.info(K.CP_EMBD).shape[1]
        eos = codec_id(CODEC_SPECIALS["codec_eos"])
        start = max(0, codec_vocab - SUPPRESSED_TAIL)
        cfg = cls(
            talker=stack,
            code_predictor=cp,
            context_length=V.CONTEXT_LENGTH.check(path, K.CONTEXT_LENGTH, talker.get_int(K.CONTEXT_LENGTH)),
            text_vocab=text_vocab,
            codec_vocab=codec_vocab,
            cp_vocab=cp_vocab,
            n_codebooks=n_codebooks,
            model_type=str(talker.get(K.MODEL_TYPE, _model_type(bool(speakers), mmproj))),
            **{k: text_id(v) for k, v in TEXT_SPECIALS.items()},
            **{k: codec_id(v) for k, v in CODEC_SPECIALS.items()},
            languages=named(LANGUAGE_PREFIX),
            speakers=speakers,
            dialects=dialects,
            sampling=Sampling(
                TEMPERATURE.check(
                    path,
                    K.TEMPERATURE,
                    _either(talker, K.TEMPERATURE, K.GENERAL_TEMPERATURE, DEFAULT_SAMPLING.temperature),
                ),
                int(_either(talker, K.TOP_K, K.GENERAL_TOP_K, DEFAULT_SAMPLING.top_k)),
                TOP_P.check(path, K.TOP_P, _either(talker, K.TOP_P, K.GENERAL_TOP_P, DEFAULT_SAMPLING.top_p)),
                PENALTY.check(
                    path,
                    K.REPETITION_PENALTY,
                    _either(
                        talker, K.REPETITION_PENALTY, K.GENERAL_REPETITION_PENALTY, DEFAULT_SAMPLING.repetition_penalty
                    ),
                ),
            ),
            cp_sampling=Sampling(
                TEMPERATURE.check(
                    path, K.CP_TEMPERATURE, talker.get_float(K.CP_TEMPERATURE, DEFAULT_CP_SAMPLING.temperature)
                ),
                talker.get_int(K.CP_TOP_K, DEFAULT_CP_SAMPLING.top_k),
                TOP_P.check(path, K.CP_TOP_P, talker.get_float(K.CP_TOP_P, DEFAULT_CP_SAMPLING.top_p)),
            ),
            suppressed_ids=[i for i in range(start, codec_vocab) if i != eos],
        )
        return cfg


@dataclass(frozen=True)
class DecoderConfig:
    """The 12 Hz tokenizer's decoder: codes -> split-quantizer sum ``(codebook_dim)`` -> causal conv to
    ``latent_dim`` -> transformer at ``hidden_size`` (projected in and out) -> upsampling stages at ``latent_dim``
    -> DAC blocks from ``decoder_dim`` -> 24 kHz audio."""

    codebook_size: int
    num_quantizers: int
    codebook_dim: int
    latent_dim: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    sliding_window: int
    rope_theta: float
    rms_norm_eps: float
    upsampling_ratios: tuple[int, ...]
    upsample_rates: tuple[int, ...]
    decoder_dim: int
    sample_rate: int

    @property
    def total_upsample(self) -> int:
        """Samples per frame (1920 for the published model: 80 ms at 24 kHz); N frames decode to N times it."""
        return math.prod(self.upsampling_ratios) * math.prod(self.upsample_rates)

    def decoder_width(self, block: int) -> int:
        return self.decoder_dim >> block

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> DecoderConfig:
        path = str(g.path)
        d = K.LLAMA_CPP_DEFAULTS

        def shape(name: str) -> tuple[int, ...]:
            full = f"{K.WAV}.{name}"
            if full not in g:
                raise GGUFError(f"{path}: missing tensor '{full}'")
            return g.info(full).shape

        def rates(key: str) -> tuple[int, ...]:
            default = d[key]
            assert isinstance(default, tuple)
            values = tuple(int(r) for r in g.get_list(key, list(default)))
            if not values:
                raise GGUFError(f"{path}: metadata '{key}' is empty")
            return tuple(RATE.check(path, key, r) for r in values)

        heads = V.HEAD_COUNT.check(path, K.WAV_HEAD_COUNT, g.get_int(K.WAV_HEAD_COUNT, _default_int(K.WAV_HEAD_COUNT)))
        kv = V.HEAD_COUNT.check(
            path, K.WAV_HEAD_COUNT_KV, g.get_int(K.WAV_HEAD_COUNT_KV, _default_int(K.WAV_HEAD_COUNT_KV))
        )
        rest = shape("quant.rest.codebook.weight")
        if len(rest) not in (2, 3) or len(shape("quant.first.codebook.weight")) != 2:
            raise GGUFError(f"{path}: the decoder's codebooks have shapes {list(rest)} and "
                            f"{list(shape('quant.first.codebook.weight'))}")  # fmt: skip
        n_q_rest, codebook_size, half = (1, *rest) if len(rest) == 2 else rest
        latent, hidden = shape("tfm.in_proj.weight")[1], shape("tfm.in_proj.weight")[0]
        q_width = shape("tfm.blk.0.attn_q.weight")[0]
        if heads % kv or q_width % heads:
            raise GGUFError(f"{path}: {heads} decoder heads over {kv} KV heads, {q_width} query features")
        cfg = cls(
            codebook_size=codebook_size,
            num_quantizers=n_q_rest + 1,
            codebook_dim=shape("quant.first.out_proj.weight")[0],
            latent_dim=latent,
            hidden_size=hidden,
            num_hidden_layers=V.LAYER_COUNT.check(
                path, K.WAV_BLOCK_COUNT, g.get_int(K.WAV_BLOCK_COUNT, _default_int(K.WAV_BLOCK_COUNT))
            ),
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=q_width // heads,
            intermediate_size=shape("tfm.blk.0.ffn_gate.weight")[0],
            sliding_window=WINDOW.check(
                path, K.WAV_SLIDING_WINDOW, g.get_int(K.WAV_SLIDING_WINDOW, _default_int(K.WAV_SLIDING_WINDOW))
            ),
            rope_theta=ROPE_BASE.check(
                path, K.WAV_ROPE_FREQ_BASE, g.get_float(K.WAV_ROPE_FREQ_BASE, _default_float(K.WAV_ROPE_FREQ_BASE))
            ),
            rms_norm_eps=V.NORM_EPSILON.check(
                path, K.WAV_RMS_EPS, g.get_float(K.WAV_RMS_EPS, _default_float(K.WAV_RMS_EPS))
            ),
            upsampling_ratios=rates(K.WAV_UPSAMPLING_RATIOS),
            upsample_rates=rates(K.WAV_UPSAMPLE_RATES),
            decoder_dim=shape("dac.entry.weight")[0],
            sample_rate=V.SAMPLE_RATE.check(
                path, K.WAV_SAMPLE_RATE, g.get_int(K.WAV_SAMPLE_RATE, _default_int(K.WAV_SAMPLE_RATE))
            ),
        )
        if half != shape("quant.first.codebook.weight")[-1] or cfg.decoder_dim >> len(cfg.upsample_rates) < 1:
            raise GGUFError(f"{path}: the decoder's codebooks or widths do not fit together")
        return cfg
