"""Magpie TTS hyper-parameters, from a ``magpie`` GGUF file's metadata (and, where magpie-tts.cpp's files lack a
key, from the tensors' shapes or the values that project's loader assumes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Magpie as K
from ggtts.models.layers import validate as V

# what magpie-tts.cpp's loader assumes for keys its converter does not write
CPP_ENCODER_KERNEL = 3
CPP_DECODER_KERNEL = 1
CPP_LT_HEADS = 1
CPP_XA_D_HEAD = 128
# NeMo's ModelInferenceParameters defaults (a file from magpie-tts.cpp carries none)
DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_K = 80
DEFAULT_CFG_SCALE = 2.5
DEFAULT_MAX_DECODER_STEPS = 500
DEFAULT_MIN_GENERATED_FRAMES = 4
DEFAULT_PRIOR_EPSILON = 0.1
DEFAULT_PRIOR_LOOKAHEAD = 5
EOS_METHODS = (
    "argmax_any",
    "argmax_or_multinomial_any",
    "argmax_all",
    "argmax_or_multinomial_all",
    "argmax_zero_cb",
    "argmax_or_multinomial_zero_cb",
)


@dataclass(frozen=True)
class StackConfig:
    """One ``transformer_2501.Transformer`` stack."""

    n_layers: int
    d_model: int
    d_ffn: int
    n_heads: int
    kernel_size: int
    max_positions: int
    has_xattn: bool = False
    xa_d_memory: int = 0
    xa_n_heads: int = 0
    xa_d_head: int = 0


@dataclass(frozen=True)
class InferenceDefaults:
    """The checkpoint's inference parameters (NeMo's ``ModelInferenceParameters``)."""

    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    cfg_scale: float = DEFAULT_CFG_SCALE
    max_decoder_steps: int = DEFAULT_MAX_DECODER_STEPS
    min_generated_frames: int = DEFAULT_MIN_GENERATED_FRAMES
    apply_attention_prior: bool = True  # NeMo's default (magpie-tts.cpp's files carry no setting)
    prior_epsilon: float = DEFAULT_PRIOR_EPSILON
    prior_lookahead: int = DEFAULT_PRIOR_LOOKAHEAD
    prior_layers: tuple[int, ...] = ()  # empty: all layers
    alignment_layers: tuple[int, ...] = ()  # empty: all layers
    prior_start: int = 0  # decoder steps before the prior applies
    eos_method: str = "argmax_or_multinomial_any"


@dataclass(frozen=True)
class MagpieConfig:
    d_model: int
    text_vocab_size: int
    num_codebooks: int
    codebook_size: int
    tokens_per_codebook: int
    frame_stacking: int
    encoder: StackConfig
    decoder: StackConfig
    local_transformer: StackConfig
    n_speakers: int
    context_frames: int
    context_lengths: tuple[int, ...]
    speaker_names: tuple[str, ...]
    text_bos_id: int
    text_eos_id: int
    audio_bos_id: int
    audio_eos_id: int
    forbidden_ids: tuple[int, ...]  # special tokens never sampled (EOS apart)
    sample_rate: int
    inference: InferenceDefaults = field(default_factory=InferenceDefaults)

    @property
    def max_frames(self) -> int:
        """The most codec frames one utterance can have: the decoder's positions after the context and BOS."""
        return (self.decoder.max_positions - self.context_frames - 1) * self.frame_stacking

    @property
    def tables(self) -> int:
        """Audio embedding tables (and local-transformer heads): one per codebook per stacked frame."""
        return self.num_codebooks * self.frame_stacking

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> MagpieConfig:
        if gguf.architecture != K.ARCH:
            raise GGUFError(f"{gguf.path}: architecture is '{gguf.architecture}', expected '{K.ARCH}'")
        path = gguf.path

        def shape(name: str) -> tuple[int, ...]:
            if name not in gguf:
                raise GGUFError(f"{path}: missing tensor '{name}'")
            return gguf.info(name).shape

        def size(key: str, default: int | None = None) -> int:
            value = gguf.get_int(key) if default is None else gguf.get_int(key, default)
            return V.SIZE.check(path, key, value)

        def heads(key: str, default: int | None = None) -> int:
            value = gguf.get_int(key) if default is None else gguf.get_int(key, default)
            return V.HEAD_COUNT.check(path, key, value)

        def layers(key: str) -> int:
            return V.LAYER_COUNT.check(path, key, gguf.get_int(key))

        def stack(prefix: str, n_layers: int, n_heads: int, kernel_key: str | None, kernel: int) -> StackConfig:
            d_ffn, d_model, k = shape(f"{prefix}.layers.0.pos_ff.proj.conv.weight")
            if kernel_key is not None:
                stored = size(kernel_key, kernel)
                if stored != k:
                    raise GGUFError(f"{path}: {kernel_key} is {stored} but the {prefix} convolutions have kernel {k}")
            positions, _ = shape(f"{prefix}.position_embeddings.weight")
            if d_model % n_heads:
                raise GGUFError(f"{path}: the {prefix}'s width {d_model} is not divisible by its {n_heads} heads")
            return StackConfig(n_layers, d_model, d_ffn, n_heads, k, positions)

        d_model = size(K.D_MODEL)
        encoder = stack(
            "encoder", layers(K.ENCODER_LAYERS), heads(K.ENCODER_HEADS), K.ENCODER_KERNEL, CPP_ENCODER_KERNEL
        )
        decoder = stack(
            "decoder", layers(K.DECODER_LAYERS), heads(K.DECODER_SA_HEADS), K.DECODER_KERNEL, CPP_DECODER_KERNEL
        )
        xa_heads = heads(K.DECODER_XA_HEADS)
        xa_width, _ = shape("decoder.layers.0.cross_attention.q_net.weight")
        xa_d_head = size(K.DECODER_XA_D_HEAD, xa_width // xa_heads)
        if xa_d_head * xa_heads != xa_width:
            raise GGUFError(f"{path}: cross-attention width {xa_width} is not {xa_heads} heads x {xa_d_head}")
        _, xa_memory = shape("decoder.layers.0.cross_attention.kv_net.weight")
        decoder = StackConfig(
            **{
                **decoder.__dict__,
                "has_xattn": True,
                "xa_d_memory": xa_memory,
                "xa_n_heads": xa_heads,
                "xa_d_head": xa_d_head,
            }
        )
        if decoder.kernel_size != 1:  # a wider kernel would need the previous rows at every cached step
            raise GGUFError(f"{path}: the decoder's feed-forward kernel is {decoder.kernel_size}; ggtts runs kernel 1")
        lt = stack("local_transformer", layers(K.LT_LAYERS), heads(K.LT_HEADS, CPP_LT_HEADS), None, 1)
        if lt.kernel_size != 1:
            raise GGUFError(f"{path}: the local transformer's convolutions have kernel {lt.kernel_size}; NeMo's is 1")

        num_codebooks = size(K.NUM_CODEBOOKS)
        codebook_size = size(K.CODEBOOK_SIZE)
        tokens, _ = shape("audio_embeddings.0.weight")
        tables = sum(1 for name in gguf.names() if name.startswith("audio_embeddings."))
        if tables % num_codebooks:
            raise GGUFError(f"{path}: {tables} audio embedding tables for {num_codebooks} codebooks")
        stacking = size(K.FRAME_STACKING, tables // num_codebooks)
        if stacking * num_codebooks != tables:
            raise GGUFError(f"{path}: {tables} audio embedding tables, not {num_codebooks} x {stacking}")

        n_speakers, flat = shape(K.BAKED_CONTEXT)
        frames = size(K.CONTEXT_FRAMES, flat // d_model)
        if frames * d_model != flat:
            raise GGUFError(f"{path}: baked context rows of {flat} values are not {frames} frames x {d_model}")
        lengths = tuple(gguf.get_list(K.CONTEXT_LENGTHS, [frames] * n_speakers))
        names = tuple(gguf.get_list(K.SPEAKER_NAMES, [f"speaker{i}" for i in range(n_speakers)]))
        if len(lengths) != n_speakers or not all(1 <= n <= frames for n in lengths):
            raise GGUFError(f"{path}: {K.CONTEXT_LENGTHS} must give 1..{frames} frames for each of {n_speakers}")
        if len(names) != n_speakers or len(set(names)) != n_speakers:
            raise GGUFError(f"{path}: {K.SPEAKER_NAMES} must name each of the {n_speakers} speakers once")

        bos = gguf.get_int(K.AUDIO_BOS_ID, codebook_size)
        eos = gguf.get_int(K.AUDIO_EOS_ID, codebook_size + 1)
        if not codebook_size <= bos < tokens or not codebook_size <= eos < tokens:
            raise GGUFError(f"{path}: audio BOS/EOS ids {bos}/{eos} are not special tokens of a {tokens}-row table")
        forbidden = tuple(i for i in range(codebook_size, tokens) if i != eos)
        text_vocab, _ = shape(K.TEXT_EMBEDDING)
        eos_method = gguf.get_str(K.EOS_METHOD, "argmax_or_multinomial_any")
        if eos_method not in EOS_METHODS:
            raise GGUFError(f"{path}: unknown {K.EOS_METHOD} '{eos_method}'; known: {', '.join(EOS_METHODS)}")
        inference = InferenceDefaults(
            temperature=gguf.get_float(K.TEMPERATURE, DEFAULT_TEMPERATURE),
            top_k=gguf.get_int(K.TOP_K, DEFAULT_TOP_K),
            cfg_scale=gguf.get_float(K.CFG_SCALE, DEFAULT_CFG_SCALE),
            # a file without the key (magpie-tts.cpp's) gets NeMo's 500, or as many as the positions allow
            max_decoder_steps=gguf.get_int(
                K.MAX_DECODER_STEPS, min(DEFAULT_MAX_DECODER_STEPS, (decoder.max_positions - frames - 1) * stacking)
            ),
            min_generated_frames=gguf.get_int(K.MIN_GENERATED_FRAMES, DEFAULT_MIN_GENERATED_FRAMES),
            apply_attention_prior=bool(gguf.get(K.PRIOR, True)),
            prior_epsilon=gguf.get_float(K.PRIOR_EPSILON, DEFAULT_PRIOR_EPSILON),
            prior_lookahead=gguf.get_int(K.PRIOR_LOOKAHEAD, DEFAULT_PRIOR_LOOKAHEAD),
            prior_layers=tuple(gguf.get_list(K.PRIOR_LAYERS, [])),
            alignment_layers=tuple(gguf.get_list(K.ALIGNMENT_LAYERS, [])),
            prior_start=gguf.get_int(K.PRIOR_START, 0),
            eos_method=eos_method,
        )
        for key, layer_list in (
            (K.PRIOR_LAYERS, inference.prior_layers),
            (K.ALIGNMENT_LAYERS, inference.alignment_layers),
        ):
            if any(not 0 <= i < decoder.n_layers for i in layer_list):
                raise GGUFError(f"{path}: {key} names a layer outside 0..{decoder.n_layers - 1}")
        config = cls(
            d_model=d_model,
            text_vocab_size=text_vocab,
            num_codebooks=num_codebooks,
            codebook_size=codebook_size,
            tokens_per_codebook=tokens,
            frame_stacking=stacking,
            encoder=encoder,
            decoder=decoder,
            local_transformer=lt,
            n_speakers=n_speakers,
            context_frames=frames,
            context_lengths=lengths,
            speaker_names=names,
            text_bos_id=gguf.get_int(K.TEXT_BOS_ID, text_vocab - 2),
            text_eos_id=gguf.get_int(K.TEXT_EOS_ID, text_vocab - 1),
            audio_bos_id=bos,
            audio_eos_id=eos,
            forbidden_ids=forbidden,
            sample_rate=V.SAMPLE_RATE.check(path, K.SAMPLE_RATE, gguf.get_int(K.SAMPLE_RATE)),
            inference=inference,
        )
        if not 0 <= config.text_eos_id < text_vocab or not 0 <= config.text_bos_id < text_vocab:
            raise GGUFError(f"{path}: text BOS/EOS ids are outside the {text_vocab}-token text embedding")
        if config.max_frames < 1 or inference.max_decoder_steps > config.max_frames:
            raise GGUFError(
                f"{path}: {K.MAX_DECODER_STEPS} is {inference.max_decoder_steps} frames, but the decoder's positions "
                f"allow {config.max_frames} after the {frames}-frame context"
            )
        return config
