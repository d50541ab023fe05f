"""Hyper-parameters of a ``qwen3omni-talker`` file: the talker, its code predictor, the prompt's special ids, the
speakers and the sampling defaults (:class:`ggtts.gguf.keys.Qwen3OmniTalker`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniTalker as K
from ggtts.models.layers import validate as V

ROPE_THETA = V.Bounds(1.0, 1e12, "a RoPE base frequency")
TEMPERATURE = V.Bounds(1e-6, 100.0, "a sampling temperature")
TOP_P = V.Bounds(1e-6, 1.0, "a top-p")
PENALTY = V.Bounds(1e-6, 100.0, "a repetition penalty")
TOKEN_ID = V.Bounds(0, (1 << 31) - 1, "a token id")
CODEBOOKS = V.Bounds(2, 1024, "a codebook count")


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float = 1.0


@dataclass(frozen=True)
class StackConfig:
    """One transformer stack (the talker's MoE one or the code predictor's dense one)."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    n_ff: int = 0  # dense feed-forward width (code predictor)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0
    norm_topk_prob: bool = False

    def check(self, path: str) -> StackConfig:
        if self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise GGUFError(f"{path}: {self.n_heads} heads over {self.n_kv_heads} KV heads of size {self.head_dim}")
        if self.n_expert and not 0 < self.n_expert_used <= self.n_expert:
            raise GGUFError(f"{path}: {self.n_expert_used} experts used of {self.n_expert}")
        return self


class PredictorShape(Protocol):
    """What a code predictor is built from (Qwen3-Omni's and Qwen3-TTS's configs both have it)."""

    @property
    def code_predictor(self) -> StackConfig: ...
    @property
    def n_codebooks(self) -> int: ...
    @property
    def cp_vocab(self) -> int: ...


class TalkerShape(PredictorShape, Protocol):
    """What a talker and its generation loop are built from."""

    @property
    def talker(self) -> StackConfig: ...
    @property
    def codec_vocab(self) -> int: ...
    @property
    def codec_eos(self) -> int: ...
    @property
    def suppressed_ids(self) -> list[int]: ...


@dataclass(frozen=True)
class TalkerConfig:
    talker: StackConfig
    code_predictor: StackConfig
    context_length: int
    codec_vocab: int
    cp_vocab: int  # codes per residual codebook
    n_codebooks: int
    thinker_dim: int
    proj_dim: int  # the hidden width of text_proj / hidden_proj (the talker's intermediate_size)
    accept_hidden_layer: int
    # prompt ids (the thinker's vocabulary)
    im_start: int
    im_end: int
    system: int
    user: int
    assistant: int
    tts_bos: int
    tts_eos: int
    tts_pad: int
    # codec ids (the talker's vocabulary)
    codec_eos: int
    codec_pad: int
    codec_bos: int
    codec_nothink: int
    codec_think_bos: int
    codec_think_eos: int
    suppressed_tail: int
    speakers: dict[str, int]
    sampling: Sampling
    cp_sampling: Sampling

    @property
    def suppressed_ids(self) -> list[int]:
        """Codec ids ``generate`` never samples: the vocabulary's last ``suppressed_tail``, but EOS."""
        start = max(0, self.codec_vocab - self.suppressed_tail)
        return [i for i in range(start, self.codec_vocab) if i != self.codec_eos]

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> TalkerConfig:
        if gguf.architecture != K.ARCH:
            raise GGUFError(f"{gguf.path}: architecture is '{gguf.architecture}', expected '{K.ARCH}'")
        path = str(gguf.path)

        def size(key: str) -> int:
            return V.SIZE.check(path, key, gguf.get_int(key))

        def heads(key: str) -> int:
            return V.HEAD_COUNT.check(path, key, gguf.get_int(key))

        def token(key: str) -> int:
            return TOKEN_ID.check(path, key, gguf.get_int(key))

        talker = StackConfig(
            dim=size(K.EMBEDDING_LENGTH),
            n_layers=V.LAYER_COUNT.check(path, K.BLOCK_COUNT, gguf.get_int(K.BLOCK_COUNT)),
            n_heads=heads(K.HEAD_COUNT),
            n_kv_heads=heads(K.HEAD_COUNT_KV),
            head_dim=size(K.KEY_LENGTH),
            rms_eps=V.NORM_EPSILON.check(path, K.RMS_EPS, gguf.get_float(K.RMS_EPS)),
            rope_theta=ROPE_THETA.check(path, K.ROPE_FREQ_BASE, gguf.get_float(K.ROPE_FREQ_BASE)),
            n_expert=size(K.EXPERT_COUNT),
            n_expert_used=size(K.EXPERT_USED_COUNT),
            n_ff_exp=size(K.EXPERT_FEED_FORWARD_LENGTH),
            n_ff_shexp=size(K.EXPERT_SHARED_FEED_FORWARD_LENGTH),
            norm_topk_prob=bool(gguf.get(K.EXPERT_WEIGHTS_NORM, False)),
        ).check(path)
        cp = StackConfig(
            dim=size(K.CP_EMBEDDING_LENGTH),
            n_layers=V.LAYER_COUNT.check(path, K.CP_BLOCK_COUNT, gguf.get_int(K.CP_BLOCK_COUNT)),
            n_heads=heads(K.CP_HEAD_COUNT),
            n_kv_heads=heads(K.CP_HEAD_COUNT_KV),
            head_dim=size(K.CP_KEY_LENGTH),
            rms_eps=V.NORM_EPSILON.check(path, K.CP_RMS_EPS, gguf.get_float(K.CP_RMS_EPS)),
            rope_theta=ROPE_THETA.check(path, K.CP_ROPE_FREQ_BASE, gguf.get_float(K.CP_ROPE_FREQ_BASE)),
            n_ff=size(K.CP_FEED_FORWARD_LENGTH),
        ).check(path)
        if cp.dim != talker.dim:
            raise GGUFError(f"{path}: the code predictor's width {cp.dim} differs from the talker's {talker.dim}")
        names = [str(n) for n in gguf.get_list(K.SPEAKER_NAMES)]
        ids = [int(i) for i in gguf.get_list(K.SPEAKER_IDS)]
        if not names or len(names) != len(ids):
            raise GGUFError(f"{path}: metadata '{K.SPEAKER_NAMES}' and '{K.SPEAKER_IDS}' do not pair up")
        codec_vocab = size(K.CODEC_VOCAB_SIZE)
        cfg = cls(
            talker=talker,
            code_predictor=cp,
            context_length=V.CONTEXT_LENGTH.check(path, K.CONTEXT_LENGTH, gguf.get_int(K.CONTEXT_LENGTH)),
            codec_vocab=codec_vocab,
            cp_vocab=size(K.CP_VOCAB_SIZE),
            n_codebooks=CODEBOOKS.check(path, K.NUM_CODEBOOKS, gguf.get_int(K.NUM_CODEBOOKS)),
            thinker_dim=size(K.TEXT_PROJ_DIM),
            proj_dim=size(K.FEED_FORWARD_LENGTH),
            accept_hidden_layer=gguf.get_int(K.ACCEPT_HIDDEN_LAYER),
            im_start=token(K.IM_START_ID),
            im_end=token(K.IM_END_ID),
            system=token(K.SYSTEM_ID),
            user=token(K.USER_ID),
            assistant=token(K.ASSISTANT_ID),
            tts_bos=token(K.TTS_BOS_ID),
            tts_eos=token(K.TTS_EOS_ID),
            tts_pad=token(K.TTS_PAD_ID),
            codec_eos=token(K.CODEC_EOS_ID),
            codec_pad=token(K.CODEC_PAD_ID),
            codec_bos=token(K.CODEC_BOS_ID),
            codec_nothink=token(K.CODEC_NOTHINK_ID),
            codec_think_bos=token(K.CODEC_THINK_BOS_ID),
            codec_think_eos=token(K.CODEC_THINK_EOS_ID),
            suppressed_tail=V.SIZE.check(path, K.SUPPRESSED_TAIL, gguf.get_int(K.SUPPRESSED_TAIL)),
            speakers=dict(zip(names, ids, strict=True)),
            sampling=Sampling(
                TEMPERATURE.check(path, K.TEMPERATURE, gguf.get_float(K.TEMPERATURE)),
                gguf.get_int(K.TOP_K),
                TOP_P.check(path, K.TOP_P, gguf.get_float(K.TOP_P)),
                PENALTY.check(path, K.REPETITION_PENALTY, gguf.get_float(K.REPETITION_PENALTY)),
            ),
            cp_sampling=Sampling(
                TEMPERATURE.check(path, K.CP_TEMPERATURE, gguf.get_float(K.CP_TEMPERATURE)),
                gguf.get_int(K.CP_TOP_K),
                TOP_P.check(path, K.CP_TOP_P, gguf.get_float(K.CP_TOP_P)),
            ),
        )
        codec_ids = [cfg.codec_eos, cfg.codec_pad, cfg.codec_bos, cfg.codec_nothink, cfg.codec_think_bos]
        for key, value in (("codec ids", max([cfg.codec_think_eos, *codec_ids])), ("speaker ids", max(ids))):
            if value >= codec_vocab:
                raise GGUFError(f"{path}: {key} reach {value}, beyond the codec vocabulary of {codec_vocab}")
        return cfg
