"""Metadata keys and tensor names, per architecture, in one place.

Where llama.cpp defines an architecture (``qwen2``, ``wavtokenizer-dec``) its own names from the ``gguf`` package
are used, so files made by llama.cpp load here and files made here load there.
"""

from __future__ import annotations

from gguf import Keys

MAX_TENSOR_NAME_BYTES = 64  # GGML_MAX_NAME, including the terminating NUL

# ---- general ---------------------------------------------------------------------------------------------------
ARCHITECTURE = Keys.General.ARCHITECTURE
NAME = Keys.General.NAME
FILE_TYPE = Keys.General.FILE_TYPE
ALIGNMENT = Keys.General.ALIGNMENT
LICENSE = Keys.General.LICENSE
SOURCE_URL = Keys.General.SOURCE_URL

_NORM_OR_BIAS_SUFFIXES = (".bias", "_norm.weight", ".norm.weight", "norm.weight", ".gamma", ".beta")


def is_norm_or_bias(name: str) -> bool:
    """Tensors that stay F32 whatever ``--type`` says (norm scales and biases)."""
    return name.endswith(_NORM_OR_BIAS_SUFFIXES) or ".norm" in name and name.endswith(".weight")


# ---- kokoro (ggtts architecture) -------------------------------------------------------------------------------
class Kokoro:
    ARCH = "kokoro"

    N_TOKEN = "kokoro.n_token"
    HIDDEN_DIM = "kokoro.hidden_dim"
    STYLE_DIM = "kokoro.style_dim"
    DIM_IN = "kokoro.dim_in"
    N_MELS = "kokoro.n_mels"
    N_LAYER = "kokoro.n_layer"
    MAX_DUR = "kokoro.max_dur"
    TEXT_ENCODER_KERNEL_SIZE = "kokoro.text_encoder_kernel_size"
    SAMPLE_RATE = "kokoro.sample_rate"
    CONTEXT_LENGTH = "kokoro.context_length"

    PLBERT_HIDDEN_SIZE = "kokoro.plbert.hidden_size"
    PLBERT_EMBEDDING_SIZE = "kokoro.plbert.embedding_size"
    PLBERT_HEADS = "kokoro.plbert.num_attention_heads"
    PLBERT_INTERMEDIATE_SIZE = "kokoro.plbert.intermediate_size"
    PLBERT_MAX_POSITIONS = "kokoro.plbert.max_position_embeddings"
    PLBERT_LAYERS = "kokoro.plbert.num_hidden_layers"
    PLBERT_TYPE_VOCAB_SIZE = "kokoro.plbert.type_vocab_size"
    PLBERT_LAYER_NORM_EPS = "kokoro.plbert.layer_norm_eps"

    DECODER_HIDDEN_DIM = "kokoro.decoder.hidden_dim"  # width of the decoder's AdaIN residual stack (1024)

    UPSAMPLE_RATES = "kokoro.istftnet.upsample_rates"
    UPSAMPLE_KERNEL_SIZES = "kokoro.istftnet.upsample_kernel_sizes"
    UPSAMPLE_INITIAL_CHANNEL = "kokoro.istftnet.upsample_initial_channel"
    RESBLOCK_KERNEL_SIZES = "kokoro.istftnet.resblock_kernel_sizes"
    RESBLOCK_DILATION_SIZES = "kokoro.istftnet.resblock_dilation_sizes"  # flattened, len(kernels) x 3
    ISTFT_N_FFT = "kokoro.istftnet.gen_istft_n_fft"
    ISTFT_HOP = "kokoro.istftnet.gen_istft_hop_size"
    HARMONIC_NUM = "kokoro.istftnet.harmonic_num"  # overtones above F0 in the harmonic source
    VOICED_THRESHOLD = "kokoro.istftnet.voiced_threshold"  # Hz; F0 above it counts as voiced

    VOCAB_SYMBOLS = "kokoro.vocab.symbols"  # phoneme strings ...
    VOCAB_IDS = "kokoro.vocab.ids"  # ... and their token ids, index for index
    VOICE_NAMES = "kokoro.voices"
    LANGUAGE = "kokoro.language"  # default G2P language code ("a" American, "b" British, "j" Japanese ...)

    VOICE_TENSOR = "voice.{name}"  # (max_phonemes, 1, 2 * style_dim)

    # Upstream module paths are long (ALBERT's is 60+ characters); GGUF names must fit in 63 bytes.
    # Each pair maps an upstream prefix to its short form. The map is applied in order, both ways.
    NAME_PREFIXES: tuple[tuple[str, str], ...] = (
        ("bert.encoder.albert_layer_groups.0.albert_layers.0.", "bert.layer."),
        ("bert.encoder.embedding_hidden_mapping_in.", "bert.emb_in."),
        ("bert.embeddings.", "bert.emb."),
        ("decoder.generator.", "dec.gen."),
        ("decoder.", "dec."),
        ("predictor.text_encoder.", "pred.dur_enc."),
        ("predictor.", "pred."),
        ("text_encoder.", "tenc."),
    )

    @classmethod
    def to_gguf_name(cls, upstream: str) -> str:
        for long, short in cls.NAME_PREFIXES:
            if upstream.startswith(long):
                return short + upstream[len(long) :]
        return upstream

    @classmethod
    def from_gguf_name(cls, name: str) -> str:
        # longest short form first so that "dec.gen." wins over "dec."
        for long, short in sorted(cls.NAME_PREFIXES, key=lambda p: -len(p[1])):
            if name.startswith(short):
                return long + name[len(short) :]
        return name
