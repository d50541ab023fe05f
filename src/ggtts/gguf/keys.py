"""Metadata keys and tensor names, per architecture, in one place.

Where llama.cpp defines an architecture (``qwen2``, ``wavtokenizer-dec``) its own names from the ``gguf`` package
are used, so files made by llama.cpp load here and files made here load there.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gguf import Keys, TensorNameMap, get_tensor_name_map
from gguf.constants import MODEL_ARCH, MODEL_ARCH_NAMES, MODEL_TENSOR, TENSOR_NAMES, TokenType

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
    return name.endswith(_NORM_OR_BIAS_SUFFIXES) or (".norm" in name and name.endswith(".weight"))


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
    BOS_EOS_ID = "kokoro.bos_eos_id"  # the id every utterance is wrapped in (upstream: 0)

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


# ---- qwen2 (llama.cpp architecture: OuteTTS's text-to-codes language model) --------
def _llm_key(template: str, arch: str) -> str:
    return template.format(arch=arch)


def _tensor_name(tensor: MODEL_TENSOR) -> str:
    return TENSOR_NAMES[tensor]


class Qwen2:
    """llama.cpp's ``qwen2`` names, taken from the ``gguf`` package (``MODEL_ARCH.QWEN2``)."""

    ARCH = MODEL_ARCH_NAMES[MODEL_ARCH.QWEN2]

    @staticmethod
    def tensor_name_map(n_blocks: int) -> TensorNameMap:
        """gguf-py's map from Hugging Face (and other upstream) tensor names to llama.cpp's, for ``n_blocks``."""
        return get_tensor_name_map(MODEL_ARCH.QWEN2, n_blocks)

    CONTEXT_LENGTH = _llm_key(Keys.LLM.CONTEXT_LENGTH, ARCH)
    EMBEDDING_LENGTH = _llm_key(Keys.LLM.EMBEDDING_LENGTH, ARCH)
    FEED_FORWARD_LENGTH = _llm_key(Keys.LLM.FEED_FORWARD_LENGTH, ARCH)
    BLOCK_COUNT = _llm_key(Keys.LLM.BLOCK_COUNT, ARCH)
    VOCAB_SIZE = _llm_key(Keys.LLM.VOCAB_SIZE, ARCH)  # optional; the embedding's shape is authoritative
    HEAD_COUNT = _llm_key(Keys.Attention.HEAD_COUNT, ARCH)
    HEAD_COUNT_KV = _llm_key(Keys.Attention.HEAD_COUNT_KV, ARCH)
    RMS_EPS = _llm_key(Keys.Attention.LAYERNORM_RMS_EPS, ARCH)
    ROPE_FREQ_BASE = _llm_key(Keys.Rope.FREQ_BASE, ARCH)
    ROPE_SCALING_TYPE = _llm_key(Keys.Rope.SCALING_TYPE, ARCH)

    TOKEN_EMBD = _tensor_name(MODEL_TENSOR.TOKEN_EMBD)
    OUTPUT_NORM = _tensor_name(MODEL_TENSOR.OUTPUT_NORM)
    OUTPUT = _tensor_name(MODEL_TENSOR.OUTPUT)  # absent when tied to token_embd
    ATTN_NORM = _tensor_name(MODEL_TENSOR.ATTN_NORM)  # "blk.{bid}.attn_norm"
    ATTN_Q = _tensor_name(MODEL_TENSOR.ATTN_Q)
    ATTN_K = _tensor_name(MODEL_TENSOR.ATTN_K)
    ATTN_V = _tensor_name(MODEL_TENSOR.ATTN_V)
    ATTN_OUT = _tensor_name(MODEL_TENSOR.ATTN_OUT)
    FFN_NORM = _tensor_name(MODEL_TENSOR.FFN_NORM)
    FFN_GATE = _tensor_name(MODEL_TENSOR.FFN_GATE)
    FFN_UP = _tensor_name(MODEL_TENSOR.FFN_UP)
    FFN_DOWN = _tensor_name(MODEL_TENSOR.FFN_DOWN)


class Tokenizer:
    """``tokenizer.*`` keys (llama.cpp's vocabulary storage), shared by every LLM architecture."""

    MODEL = Keys.Tokenizer.MODEL  # "gpt2" for byte-level BPE
    PRE = Keys.Tokenizer.PRE  # pre-tokenizer name ("qwen2")
    TOKENS = Keys.Tokenizer.LIST
    TOKEN_TYPE = Keys.Tokenizer.TOKEN_TYPE
    MERGES = Keys.Tokenizer.MERGES
    BOS_ID = Keys.Tokenizer.BOS_ID
    EOS_ID = Keys.Tokenizer.EOS_ID
    PAD_ID = Keys.Tokenizer.PAD_ID
    ADD_BOS = Keys.Tokenizer.ADD_BOS
    CHAT_TEMPLATE = Keys.Tokenizer.CHAT_TEMPLATE

    # llama.cpp's token types (gguf.TokenType)
    TYPE_NORMAL = int(TokenType.NORMAL)
    TYPE_UNKNOWN = int(TokenType.UNKNOWN)
    TYPE_CONTROL = int(TokenType.CONTROL)
    TYPE_USER_DEFINED = int(TokenType.USER_DEFINED)
    TYPE_UNUSED = int(TokenType.UNUSED)
    TYPE_BYTE = int(TokenType.BYTE)


# ---- wavtokenizer-dec (llama.cpp architecture: WavTokenizer's decoder, codes -> STFT frames) --------
class WavTokenizerDec:
    """llama.cpp's ``wavtokenizer-dec`` names (``MODEL_ARCH.WAVTOKENIZER_DEC``).

    llama.cpp stores no hop length or sample rate; ggtts's converter adds ``HOP_LENGTH`` and ``SAMPLE_RATE``
    (which llama.cpp ignores); the reader falls back to WavTokenizer's 75-token/s values without them.
    """

    ARCH = MODEL_ARCH_NAMES[MODEL_ARCH.WAVTOKENIZER_DEC]

    CONTEXT_LENGTH = _llm_key(Keys.LLM.CONTEXT_LENGTH, ARCH)
    EMBEDDING_LENGTH = _llm_key(Keys.LLM.EMBEDDING_LENGTH, ARCH)  # head output: n_fft + 2
    BLOCK_COUNT = _llm_key(Keys.LLM.BLOCK_COUNT, ARCH)
    VOCAB_SIZE = _llm_key(Keys.LLM.VOCAB_SIZE, ARCH)  # codebook size
    FEATURES_LENGTH = _llm_key(Keys.LLM.FEATURES_LENGTH, ARCH)  # codebook dimension
    FEED_FORWARD_LENGTH = _llm_key(Keys.LLM.FEED_FORWARD_LENGTH, ARCH)
    HEAD_COUNT = _llm_key(Keys.Attention.HEAD_COUNT, ARCH)
    LAYER_NORM_EPS = _llm_key(Keys.Attention.LAYERNORM_EPS, ARCH)
    GROUP_NORM_EPS = _llm_key(Keys.Attention.GROUPNORM_EPS, ARCH)
    GROUP_NORM_GROUPS = _llm_key(Keys.Attention.GROUPNORM_GROUPS, ARCH)
    CAUSAL = _llm_key(Keys.Attention.CAUSAL, ARCH)
    POSNET_EMBEDDING_LENGTH = _llm_key(Keys.PosNet.EMBEDDING_LENGTH, ARCH)
    POSNET_BLOCK_COUNT = _llm_key(Keys.PosNet.BLOCK_COUNT, ARCH)
    CONVNEXT_EMBEDDING_LENGTH = _llm_key(Keys.ConvNext.EMBEDDING_LENGTH, ARCH)
    CONVNEXT_BLOCK_COUNT = _llm_key(Keys.ConvNext.BLOCK_COUNT, ARCH)
    HOP_LENGTH = f"{ARCH}.hop_length"  # ggtts addition
    SAMPLE_RATE = f"{ARCH}.sample_rate"  # ggtts addition

    TOKEN_EMBD = _tensor_name(MODEL_TENSOR.TOKEN_EMBD)
    TOKEN_EMBD_NORM = _tensor_name(MODEL_TENSOR.TOKEN_EMBD_NORM)
    CONV1D = _tensor_name(MODEL_TENSOR.CONV1D)
    POSNET_CONV1 = _tensor_name(MODEL_TENSOR.POSNET_CONV1)  # "posnet.{bid}.conv1"
    POSNET_CONV2 = _tensor_name(MODEL_TENSOR.POSNET_CONV2)
    POSNET_NORM1 = _tensor_name(MODEL_TENSOR.POSNET_NORM1)
    POSNET_NORM2 = _tensor_name(MODEL_TENSOR.POSNET_NORM2)
    # llama.cpp stores both the attention block's norm and the final posnet norm under "attn_norm"
    POSNET_ATTN_NORM = _tensor_name(MODEL_TENSOR.POSNET_ATTN_NORM)
    POSNET_ATTN_Q = _tensor_name(MODEL_TENSOR.POSNET_ATTN_Q)
    POSNET_ATTN_K = _tensor_name(MODEL_TENSOR.POSNET_ATTN_K)
    POSNET_ATTN_V = _tensor_name(MODEL_TENSOR.POSNET_ATTN_V)
    POSNET_ATTN_OUT = _tensor_name(MODEL_TENSOR.POSNET_ATTN_OUT)
    CONVNEXT_DW = _tensor_name(MODEL_TENSOR.CONVNEXT_DW)  # "convnext.{bid}.dw"
    CONVNEXT_NORM = _tensor_name(MODEL_TENSOR.CONVNEXT_NORM)
    CONVNEXT_PW1 = _tensor_name(MODEL_TENSOR.CONVNEXT_PW1)
    CONVNEXT_PW2 = _tensor_name(MODEL_TENSOR.CONVNEXT_PW2)
    CONVNEXT_GAMMA = _tensor_name(MODEL_TENSOR.CONVNEXT_GAMMA)
    OUTPUT_NORM = _tensor_name(MODEL_TENSOR.OUTPUT_NORM)
    OUTPUT = _tensor_name(MODEL_TENSOR.OUTPUT)


# ---- magpie (m1el/magpie-tts.cpp's architecture: NVIDIA Magpie TTS, text -> nano-codec codes) --------------------
class Magpie:
    """magpie-tts.cpp's ``magpie`` keys, so files its converter wrote load here (and ours load there).

    Its tensors keep NeMo's state-dict names (``decoder.layers.0.cross_attention.q_net.weight``); the module
    attributes of :mod:`ggtts.models.magpie.model` are those names. Its converter writes the keys in the first
    block (every integer UINT32); the rest are ggtts additions for what it hard-codes (its files lack them, and
    the reader then takes the value that project's loader assumes, or reads it off a tensor's shape).
    """

    ARCH = "magpie"

    # written by magpie-tts.cpp's converter
    SAMPLE_RATE = "magpie.sample_rate"
    NUM_CODEBOOKS = "magpie.num_codebooks"
    CODEBOOK_SIZE = "magpie.codebook_size"  # codec codes per codebook (the special tokens follow)
    TOKENS_PER_CODEBOOK = "magpie.vocab_size_per_codebook"  # codes + special tokens (NeMo: 2016 + 8)
    TEXT_VOCAB_SIZE = "magpie.text_vocab_size"
    D_MODEL = "magpie.d_model"
    D_FFN = "magpie.d_ffn"
    ENCODER_LAYERS = "magpie.encoder_layers"
    DECODER_LAYERS = "magpie.decoder_layers"
    ENCODER_HEADS = "magpie.encoder_heads"
    DECODER_SA_HEADS = "magpie.decoder_sa_heads"
    DECODER_XA_HEADS = "magpie.decoder_xa_heads"
    LT_DIM = "magpie.local_transformer_dim"
    LT_LAYERS = "magpie.local_transformer_layers"
    N_SPEAKERS = "magpie.num_baked_speakers"
    CONTEXT_FRAMES = "magpie.baked_context_frames"
    TEXT_BOS_ID = "magpie.text_bos_id"
    TEXT_EOS_ID = "magpie.text_eos_id"
    AUDIO_BOS_ID = "magpie.audio_bos_id"
    AUDIO_EOS_ID = "magpie.audio_eos_id"
    CONTEXT_AUDIO_BOS_ID = "magpie.context_audio_bos_id"
    CONTEXT_AUDIO_EOS_ID = "magpie.context_audio_eos_id"
    MASK_TOKEN_ID = "magpie.mask_token_id"
    TOKENIZER_VOCAB = "magpie.tokenizer.vocab"  # the English IPA tokenizer's tokens, one per line (id = line)
    TOKENIZER_DICT = "magpie.tokenizer.dict"  # "WORD\tIPA" lines
    TOKENIZER_PAD = "magpie.tokenizer.pad"
    TOKENIZER_OOV = "magpie.tokenizer.oov"
    TOKENIZER_SPACE = "magpie.tokenizer.space"
    # every tokenizer of the checkpoint (ggtts): names in NeMo's order, then per name ``{TOKENIZERS}.<name>.kind``
    # ("ipa" or "sized"), ``.offset``, ``.size``, ``.config`` (JSON), and for IPA ones ``.tokens``, ``.dict``,
    # ``.heteronyms`` (:class:`MagpieTokenizer`)
    TOKENIZERS = "magpie.tokenizers"
    NEMO_VERSION = "magpie.nemo_version"  # the config's stamp: it dates tokenizer defaults NeMo changed (2.8.0)
    LANGUAGES = "magpie.tokenizers.languages"  # "lang=tokenizer" items from the checkpoint's own mapping

    # ggtts additions (magpie-tts.cpp's loader assumes: heads 1 for the local transformer, kernels 3 / 1,
    # cross-attention head width 128, no frame stacking, eps 1e-5; shapes give the widths)
    DECODER_XA_D_HEAD = "magpie.decoder_xa_d_head"
    ENCODER_KERNEL = "magpie.encoder_kernel_size"
    DECODER_KERNEL = "magpie.decoder_kernel_size"
    LT_HEADS = "magpie.local_transformer_heads"
    FRAME_STACKING = "magpie.frame_stacking_factor"  # codec frames per decoder step
    SPEAKER_NAMES = "magpie.speaker_names"  # array of strings, one per baked speaker (the .nemo's speaker map)
    CONTEXT_LENGTHS = "magpie.baked_context_lengths"  # array: each speaker's context length (<= frames)
    # inference defaults from the checkpoint's ``inference_parameters`` (NeMo's ModelInferenceParameters)
    TEMPERATURE = "magpie.inference.temperature"
    TOP_K = "magpie.inference.top_k"
    CFG_SCALE = "magpie.inference.cfg_scale"
    MAX_DECODER_STEPS = "magpie.inference.max_decoder_steps"  # codec frames
    MIN_GENERATED_FRAMES = "magpie.inference.min_generated_frames"
    PRIOR = "magpie.inference.apply_attention_prior"
    PRIOR_EPSILON = "magpie.inference.attention_prior_epsilon"
    PRIOR_LOOKAHEAD = "magpie.inference.attention_prior_lookahead_window"
    PRIOR_LAYERS = "magpie.inference.apply_prior_to_layers"  # empty: every decoder layer
    ALIGNMENT_LAYERS = "magpie.inference.estimate_alignment_from_layers"  # empty: every decoder layer
    PRIOR_START = "magpie.inference.start_prior_after_n_audio_steps"
    EOS_METHOD = "magpie.inference.eos_detection_method"

    BAKED_CONTEXT = "baked_context_embedding.weight"
    TEXT_EMBEDDING = "text_embedding.weight"
    AUDIO_EMBEDDING = "audio_embeddings.{i}.weight"


# ---- nano-codec (magpie-tts.cpp's architecture: NeMo's nano codec decoder, codes -> audio) -----------------------
class NanoCodec:
    """Metadata keys and tensor names of the NeMo nano codec's decoder (GGUF architecture ``nano-codec``).

    They follow m1el/magpie-tts.cpp's ``scripts/convert_codec_to_gguf.py``, so that files made by that converter load
    here and files made here load there. That converter writes five ``codec.*`` keys and hard-codes the rest of the
    decoder's layout (the nemo-nano-codec-22khz-1.89kbps-21.5fps values, ``CPP_DEFAULTS`` in
    ``models/nanocodec/config.py``); the keys marked "added" are ggtts's, so that a file describes its own decoder.
    Tensor names are the upstream NeMo state-dict names (weight norm folded into ``.weight``) shortened by that
    converter's fixed list of replacements.
    """

    ARCH = "nano-codec"
    CPP_NAME = "nemo-nano-codec-22khz"  # general.name as magpie-tts.cpp writes it

    # magpie-tts.cpp's keys (uint32)
    SAMPLE_RATE = "codec.sample_rate"  # Hz of the decoded audio
    NUM_CODEBOOKS = "codec.num_codebooks"  # FSQ groups: one code per group per frame
    CODEBOOK_SIZE = "codec.codebook_size"  # codes per codebook: the product of the FSQ levels
    HOP_LENGTH = "codec.hop_length"  # samples per frame (NeMo's samples_per_frame)
    LATENT_DIM = "codec.latent_dim"  # decoder input width: num_codebooks * len(FSQ levels)

    # added by ggtts (magpie-tts.cpp hard-codes these)
    FSQ_LEVELS = "codec.fsq_levels"  # int32[]: levels per dimension of one group, e.g. [8, 7, 6, 6]
    UP_SAMPLE_RATES = "codec.up_sample_rates"  # int32[]: stride of each transposed convolution
    BASE_CHANNELS = "codec.base_channels"  # pre-convolution output width, halved by each upsampling stage
    IN_KERNEL_SIZE = "codec.in_kernel_size"  # pre-convolution kernel
    OUT_KERNEL_SIZE = "codec.out_kernel_size"  # post-convolution kernel
    RESBLOCK_KERNEL_SIZES = "codec.resblock_kernel_sizes"  # int32[]: one residual branch per kernel size
    RESBLOCK_DILATIONS = "codec.resblock_dilation_sizes"  # int32[]: one residual block per dilation, per branch
    ACTIVATION = "codec.activation"  # NeMo CodecActivation name: half_snake, snake, lrelu or elu
    OUTPUT_ACTIVATION = "codec.output_activation"  # tanh or clamp

    # magpie-tts.cpp's shortening of NeMo names (applied in this order, each as a plain substring replacement)
    NAME_REPLACEMENTS: tuple[tuple[str, str], ...] = (
        ("audio_decoder.", "dec."),
        ("vector_quantizer.", "vq."),
        (".res_layers.", ".rl."),
        (".res_blocks.", ".rb."),
        (".up_sample_conv_layers.", ".up."),
        (".activations.", ".act."),
        (".input_activation.activation.snake_act.", ".in_act."),
        (".skip_activation.activation.snake_act.", ".sk_act."),
        (".input_conv.conv.", ".in_conv."),
        (".skip_conv.conv.", ".sk_conv."),
        (".post_activation.activation.snake_act.", ".post_act."),
        (".pre_conv.conv.", ".pre."),
        (".post_conv.conv.", ".post."),
        (".conv.", ".c."),
    )
    # the upstream prefixes a decoder file keeps: the decoder and the FSQ buffers (no encoder, no discriminator)
    UPSTREAM_PREFIXES = ("audio_decoder.", "vector_quantizer.")

    @classmethod
    def tensor_name(cls, upstream: str) -> str:
        """The GGUF name of an upstream tensor: ``audio_decoder.res_layers.0.res_blocks.1.res_blocks.2.input_conv.
        conv.weight`` -> ``dec.rl.0.rb.1.rb.2.in_conv.weight``."""
        for old, new in cls.NAME_REPLACEMENTS:
            upstream = upstream.replace(old, new)
        return upstream


# ---- qwen3-omni ------------------------------------------------------------------------------------------------
# Three owners fill these classes (each edits only its own class): the thinker (llama.cpp's ``qwen3omnimoe``), the
# talker with its code predictor (``qwen3omni-talker``), and code2wav (stored in the talker's file).


class MagpieTokenizer:
    """How ggtts stores each of a Magpie checkpoint's tokenizers (:data:`Magpie.TOKENIZERS`): the keys of one
    tokenizer, and the kinds it is stored as. The converter (:mod:`ggtts.convert.magpie_tokenizers`) writes them;
    the pipeline (:mod:`ggtts.families.magpie.text`) reads them."""

    IPA = "ipa"  # NeMo's IPATokenizer over IpaG2p (ggtts.text.nemo_ipa)
    SIZED = "sized"  # known size only: not runnable here
    CPP = "cpp"  # magpie-tts.cpp's English keys only
    BYT5 = "byt5"  # google/byt5-small: UTF-8 bytes
    CHARS = "chars"  # NeMo's Arabic and Hindi character tokenizers (ggtts.text.nemo_chars)
    JAPANESE = "japanese"  # NeMo's JapanesePhonemeTokenizer over pyopenjtalk (ggtts.text.nemo_japanese)
    MANDARIN = "mandarin"  # NeMo's ChinesePhonemesTokenizer: jieba, pypinyin, a pinyin dictionary (the zh extra)
    ENGLISH = "english_phoneme"  # the tokenizer magpie-tts.cpp's keys describe

    @staticmethod
    def key(name: str, field: str) -> str:
        """``magpie.tokenizers.<name>.<field>``: ``kind``, ``offset``, ``size``, ``config``, ``tokens``, ..."""
        return f"{Magpie.TOKENIZERS}.{name}.{field}"


class Qwen3OmniThinker:
    """The thinker's text model: llama.cpp's ``qwen3omnimoe`` names and keys (the Qwen3-Omni llama.cpp port's
    architecture, whose tensors and keys are ``qwen3moe``'s plus ``rope.dimension_sections``).

    The same file written as ``qwen3moe`` (``MAINLINE_ARCH``) loads in mainline llama.cpp, which has no
    ``qwen3omnimoe``: with text-only positions M-RoPE is plain NEOX RoPE. The metadata keys below are therefore
    templates over the architecture name: ``key(BLOCK_COUNT, arch)``. ggtts additions (llama.cpp ignores them):
    ``MLP_ONLY_LAYERS`` (layers with a dense SwiGLU feed-forward instead of experts: transformers'
    ``mlp_only_layers`` and the layers ``decoder_sparse_step`` leaves dense; absent when every layer is MoE, as in
    the published thinker). ``EXPERT_WEIGHTS_NORM`` is llama.cpp's key (``norm_topk_prob``); llama.cpp's qwen3moe
    graph renormalises always, ggtts follows the key (absent: true).
    """

    ARCH = "qwen3omnimoe"
    MAINLINE_ARCH = MODEL_ARCH_NAMES[MODEL_ARCH.QWEN3MOE]
    ARCHS = (ARCH, MAINLINE_ARCH)

    @staticmethod
    def key(template: str, arch: str) -> str:
        return _llm_key(template, arch)

    CONTEXT_LENGTH = Keys.LLM.CONTEXT_LENGTH
    EMBEDDING_LENGTH = Keys.LLM.EMBEDDING_LENGTH
    BLOCK_COUNT = Keys.LLM.BLOCK_COUNT
    FEED_FORWARD_LENGTH = Keys.LLM.FEED_FORWARD_LENGTH  # intermediate_size: the dense layers' width
    EXPERT_FEED_FORWARD_LENGTH = Keys.LLM.EXPERT_FEED_FORWARD_LENGTH  # moe_intermediate_size
    EXPERT_COUNT = Keys.LLM.EXPERT_COUNT
    EXPERT_USED_COUNT = Keys.LLM.EXPERT_USED_COUNT
    EXPERT_WEIGHTS_NORM = Keys.LLM.EXPERT_WEIGHTS_NORM  # norm_topk_prob
    HEAD_COUNT = Keys.Attention.HEAD_COUNT
    HEAD_COUNT_KV = Keys.Attention.HEAD_COUNT_KV
    KEY_LENGTH = Keys.Attention.KEY_LENGTH  # head_dim (not embedding_length / head_count in Qwen3)
    VALUE_LENGTH = Keys.Attention.VALUE_LENGTH
    RMS_EPS = Keys.Attention.LAYERNORM_RMS_EPS
    ROPE_FREQ_BASE = Keys.Rope.FREQ_BASE
    ROPE_SECTIONS = Keys.Rope.DIMENSION_SECTIONS  # M-RoPE [t, h, w, 0]; text-only positions make it plain RoPE
    ROPE_SCALING_TYPE = Keys.Rope.SCALING_TYPE
    MLP_ONLY_LAYERS = "{arch}.mlp_only_layers"  # ggtts addition: int32[] of dense layers, absent when none

    TOKEN_EMBD = _tensor_name(MODEL_TENSOR.TOKEN_EMBD)
    OUTPUT_NORM = _tensor_name(MODEL_TENSOR.OUTPUT_NORM)
    OUTPUT = _tensor_name(MODEL_TENSOR.OUTPUT)  # absent when tied to token_embd
    ATTN_NORM = _tensor_name(MODEL_TENSOR.ATTN_NORM)  # "blk.{bid}.attn_norm"
    ATTN_Q = _tensor_name(MODEL_TENSOR.ATTN_Q)
    ATTN_K = _tensor_name(MODEL_TENSOR.ATTN_K)
    ATTN_V = _tensor_name(MODEL_TENSOR.ATTN_V)
    ATTN_OUT = _tensor_name(MODEL_TENSOR.ATTN_OUT)
    ATTN_Q_NORM = _tensor_name(MODEL_TENSOR.ATTN_Q_NORM)
    ATTN_K_NORM = _tensor_name(MODEL_TENSOR.ATTN_K_NORM)
    FFN_NORM = _tensor_name(MODEL_TENSOR.FFN_NORM)
    FFN_GATE_INP = _tensor_name(MODEL_TENSOR.FFN_GATE_INP)  # router (E, D)
    FFN_GATE_EXPS = _tensor_name(MODEL_TENSOR.FFN_GATE_EXP)  # (E, F, D)
    FFN_UP_EXPS = _tensor_name(MODEL_TENSOR.FFN_UP_EXP)  # (E, F, D)
    FFN_DOWN_EXPS = _tensor_name(MODEL_TENSOR.FFN_DOWN_EXP)  # (E, D, F)
    FFN_GATE = _tensor_name(MODEL_TENSOR.FFN_GATE)  # dense layers
    FFN_UP = _tensor_name(MODEL_TENSOR.FFN_UP)
    FFN_DOWN = _tensor_name(MODEL_TENSOR.FFN_DOWN)


class Qwen3OmniTalker:
    """The talker and its code predictor, ``qwen3omni-talker`` (ggtts names, after the llama.cpp port's plan).

    The talker's transformer uses llama.cpp's qwen2moe/qwen3moe names (``blk.N.attn_q``, ``ffn_gate_exps``,
    ``ffn_gate_shexp``, ``ffn_gate_inp_shexp``...), its codec embedding is ``token_embd`` and its first-codebook
    head ``output``. The code predictor's dense layers live under ``cp.`` with the same names (``cp.blk.N.attn_q``),
    its per-codebook tables and heads are ``cp.codec_embd.{i}`` and ``cp.output.{i}``; the projections of thinker
    embeddings and hidden states are ``text_proj.*`` and ``hidden_proj.*``. The prompt's special token ids (of the
    thinker's vocabulary and of the codec's), the speakers, and the sampling defaults transformers' ``generate``
    uses are metadata, so the runtime hard-codes none of them. Code2wav's tensors sit in the same file
    (:class:`Qwen3OmniCode2Wav`).
    """

    ARCH = "qwen3omni-talker"

    # the talker's transformer (llama.cpp key names under this architecture)
    BLOCK_COUNT = _llm_key(Keys.LLM.BLOCK_COUNT, ARCH)
    CONTEXT_LENGTH = _llm_key(Keys.LLM.CONTEXT_LENGTH, ARCH)
    EMBEDDING_LENGTH = _llm_key(Keys.LLM.EMBEDDING_LENGTH, ARCH)
    FEED_FORWARD_LENGTH = _llm_key(Keys.LLM.FEED_FORWARD_LENGTH, ARCH)  # intermediate_size: text_proj's width
    EXPERT_FEED_FORWARD_LENGTH = _llm_key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, ARCH)
    EXPERT_SHARED_FEED_FORWARD_LENGTH = _llm_key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, ARCH)
    EXPERT_COUNT = _llm_key(Keys.LLM.EXPERT_COUNT, ARCH)
    EXPERT_USED_COUNT = _llm_key(Keys.LLM.EXPERT_USED_COUNT, ARCH)
    EXPERT_WEIGHTS_NORM = _llm_key(Keys.LLM.EXPERT_WEIGHTS_NORM, ARCH)  # norm_topk_prob
    HEAD_COUNT = _llm_key(Keys.Attention.HEAD_COUNT, ARCH)
    HEAD_COUNT_KV = _llm_key(Keys.Attention.HEAD_COUNT_KV, ARCH)
    KEY_LENGTH = _llm_key(Keys.Attention.KEY_LENGTH, ARCH)
    RMS_EPS = _llm_key(Keys.Attention.LAYERNORM_RMS_EPS, ARCH)
    ROPE_FREQ_BASE = _llm_key(Keys.Rope.FREQ_BASE, ARCH)
    ROPE_SECTIONS = _llm_key(Keys.Rope.DIMENSION_SECTIONS, ARCH)  # M-RoPE; text-only positions make it plain

    # the llama.cpp port's Keys.Talker
    ACCEPT_HIDDEN_LAYER = f"{ARCH}.accept_hidden_layer"  # thinker layer whose states multimodal inputs project
    TEXT_PROJ_DIM = f"{ARCH}.text_proj_dim"  # the thinker's hidden size (the projections' input)
    CODEC_VOCAB_SIZE = f"{ARCH}.codec_vocab_size"
    NUM_CODEBOOKS = f"{ARCH}.num_codebooks"  # num_code_groups: 1 from the talker + the code predictor's

    # ggtts additions: the code predictor
    CP_BLOCK_COUNT = f"{ARCH}.code_predictor.block_count"
    CP_EMBEDDING_LENGTH = f"{ARCH}.code_predictor.embedding_length"
    CP_FEED_FORWARD_LENGTH = f"{ARCH}.code_predictor.feed_forward_length"
    CP_HEAD_COUNT = f"{ARCH}.code_predictor.attention.head_count"
    CP_HEAD_COUNT_KV = f"{ARCH}.code_predictor.attention.head_count_kv"
    CP_KEY_LENGTH = f"{ARCH}.code_predictor.attention.key_length"
    CP_RMS_EPS = f"{ARCH}.code_predictor.attention.layer_norm_rms_epsilon"
    CP_ROPE_FREQ_BASE = f"{ARCH}.code_predictor.rope.freq_base"
    CP_VOCAB_SIZE = f"{ARCH}.code_predictor.vocab_size"

    # ggtts additions: the prompt (ids in the thinker's vocabulary)
    IM_START_ID = f"{ARCH}.prompt.im_start_token_id"
    IM_END_ID = f"{ARCH}.prompt.im_end_token_id"
    SYSTEM_ID = f"{ARCH}.prompt.system_token_id"
    USER_ID = f"{ARCH}.prompt.user_token_id"
    ASSISTANT_ID = f"{ARCH}.prompt.assistant_token_id"
    TTS_BOS_ID = f"{ARCH}.prompt.tts_bos_token_id"
    TTS_EOS_ID = f"{ARCH}.prompt.tts_eos_token_id"
    TTS_PAD_ID = f"{ARCH}.prompt.tts_pad_token_id"
    # ... and in the codec's vocabulary
    CODEC_EOS_ID = f"{ARCH}.codec.eos_token_id"
    CODEC_PAD_ID = f"{ARCH}.codec.pad_token_id"
    CODEC_BOS_ID = f"{ARCH}.codec.bos_token_id"
    CODEC_NOTHINK_ID = f"{ARCH}.codec.nothink_id"
    CODEC_THINK_BOS_ID = f"{ARCH}.codec.think_bos_id"
    CODEC_THINK_EOS_ID = f"{ARCH}.codec.think_eos_id"
    SUPPRESSED_TAIL = f"{ARCH}.codec.suppressed_tail"  # the last N codec ids (but EOS) are never sampled
    SPEAKER_NAMES = f"{ARCH}.speaker_names"  # speaker_id's keys (lower case, as transformers looks them up)
    SPEAKER_IDS = f"{ARCH}.speaker_ids"  # their codec ids

    # ggtts additions: sampling as Qwen3OmniMoeForConditionalGeneration.generate does it
    TEMPERATURE = f"{ARCH}.sampling.temperature"
    TOP_K = f"{ARCH}.sampling.top_k"
    TOP_P = f"{ARCH}.sampling.top_p"
    REPETITION_PENALTY = f"{ARCH}.sampling.repetition_penalty"
    CP_TEMPERATURE = f"{ARCH}.sampling.code_predictor.temperature"
    CP_TOP_K = f"{ARCH}.sampling.code_predictor.top_k"
    CP_TOP_P = f"{ARCH}.sampling.code_predictor.top_p"

    TOKEN_EMBD = _tensor_name(MODEL_TENSOR.TOKEN_EMBD)  # the codec embedding (talker.model.codec_embedding)
    OUTPUT_NORM = _tensor_name(MODEL_TENSOR.OUTPUT_NORM)
    OUTPUT = _tensor_name(MODEL_TENSOR.OUTPUT)  # codec_head: logits of the first codebook
    # a layer's tensors: checkpoint name after ``layers.N.`` -> llama.cpp's (qwen2moe / qwen3moe) after ``blk.N.``
    LAYER: Mapping[str, str] = MappingProxyType({
        f"{hf}.weight": _tensor_name(t).removeprefix("blk.{bid}.") + ".weight"
        for hf, t in (
            ("input_layernorm", MODEL_TENSOR.ATTN_NORM),
            ("self_attn.q_proj", MODEL_TENSOR.ATTN_Q),
            ("self_attn.k_proj", MODEL_TENSOR.ATTN_K),
            ("self_attn.v_proj", MODEL_TENSOR.ATTN_V),
            ("self_attn.o_proj", MODEL_TENSOR.ATTN_OUT),
            ("self_attn.q_norm", MODEL_TENSOR.ATTN_Q_NORM),
            ("self_attn.k_norm", MODEL_TENSOR.ATTN_K_NORM),
            ("post_attention_layernorm", MODEL_TENSOR.FFN_NORM),
            ("mlp.gate_proj", MODEL_TENSOR.FFN_GATE),  # dense layers (the code predictor)
            ("mlp.up_proj", MODEL_TENSOR.FFN_UP),
            ("mlp.down_proj", MODEL_TENSOR.FFN_DOWN),
            ("mlp.gate", MODEL_TENSOR.FFN_GATE_INP),  # the MoE router
            ("mlp.shared_expert.gate_proj", MODEL_TENSOR.FFN_GATE_SHEXP),
            ("mlp.shared_expert.up_proj", MODEL_TENSOR.FFN_UP_SHEXP),
            ("mlp.shared_expert.down_proj", MODEL_TENSOR.FFN_DOWN_SHEXP),
            ("mlp.shared_expert_gate", MODEL_TENSOR.FFN_GATE_INP_SHEXP),
        )
    })  # fmt: skip
    EXPERTS: Mapping[str, str] = MappingProxyType({  # merged expert stacks, by projection
        "gate": _tensor_name(MODEL_TENSOR.FFN_GATE_EXP),
        "up": _tensor_name(MODEL_TENSOR.FFN_UP_EXP),
        "down": _tensor_name(MODEL_TENSOR.FFN_DOWN_EXP),
    })  # fmt: skip
    TEXT_PROJ = "text_proj"  # .fc1 / .fc2 (weight and bias): thinker embeddings -> talker
    HIDDEN_PROJ = "hidden_proj"  # the same for thinker hidden states (multimodal inputs)
    CP_PREFIX = "cp"  # cp.blk.N.*, cp.output_norm, cp.codec_embd.{i}, cp.output.{i}


class Qwen3OmniCode2Wav:
    """Code2wav, the codec decoder, stored in the talker's file (ggtts names).

    Keys follow the llama.cpp port's proposed ``Keys.Code2Wav`` (codebook size, quantizers, hidden size, decoder
    dim, upsample rates, sliding window) under ``qwen3omni-talker.code2wav.*``, plus what the module needs besides.
    (The checkpoint's ``codebook_dim`` is not the embedding width, which is ``hidden_size``: it is not stored.)
    Tensor names are ``c2w.`` + the upstream name after ``code2wav.`` (``Qwen3OmniMoeCode2Wav.state_dict()``),
    e.g. ``c2w.pre_transformer.layers.7.post_attention_layernorm.weight`` (60 bytes, the longest at 8 layers).
    """

    ARCH = "qwen3omni-talker"  # code2wav has no file of its own: it rides in the talker's (or alone, same arch)
    _P = f"{ARCH}.code2wav"

    CODEBOOK_SIZE = f"{_P}.codebook_size"  # codes per codebook
    NUM_QUANTIZERS = f"{_P}.num_quantizers"  # codebooks per frame (16)
    HIDDEN_SIZE = f"{_P}.hidden_size"  # transformer / ConvNeXt width (and the code embedding's)
    DECODER_DIM = f"{_P}.decoder_dim"  # width after the input convolution, halved by each decoder block
    UPSAMPLE_RATES = f"{_P}.upsample_rates"  # int32[]: one decoder block (SnakeBeta + transposed conv) per rate
    UPSAMPLING_RATIOS = f"{_P}.upsampling_ratios"  # int32[]: one transposed conv + ConvNeXt block per ratio
    SLIDING_WINDOW = f"{_P}.attention.sliding_window"  # positions each query sees, itself included
    BLOCK_COUNT = f"{_P}.block_count"  # transformer layers
    HEAD_COUNT = f"{_P}.attention.head_count"
    HEAD_COUNT_KV = f"{_P}.attention.head_count_kv"
    KEY_LENGTH = f"{_P}.attention.key_length"  # head dim
    FEED_FORWARD_LENGTH = f"{_P}.feed_forward_length"  # SwiGLU intermediate size
    RMS_EPS = f"{_P}.attention.layer_norm_rms_epsilon"
    ROPE_FREQ_BASE = f"{_P}.rope.freq_base"
    SAMPLE_RATE = f"{_P}.sample_rate"  # Hz of the decoded audio

    PREFIX = "c2w."

    @classmethod
    def tensor_name(cls, upstream: str) -> str:
        """``pre_transformer.norm.weight`` (or ``code2wav.pre_transformer.norm.weight``) ->
        ``c2w.pre_transformer.norm.weight``."""
        return cls.PREFIX + upstream.removeprefix("code2wav.")


class Qwen3OmniAudio:
    """Qwen3-Omni's audio encoder (``thinker.audio_tower``) as llama.cpp's mmproj file stores it: architecture
    ``clip``, ``general.type`` ``mmproj``, audio projector ``qwen3a`` (the names and keys llama.cpp's converter
    writes for ``Qwen3OmniMoeForConditionalGeneration --mmproj``, audio half; its C++ reads them in
    ``tools/mtmd/clip.cpp``). Tensor names are gguf-py's ``A_*`` templates: ``a.conv2d.{1,2,3}``, ``a.conv_out``
    (no bias), ``a.position_embd`` (the sinusoids, 1500 rows, written by the converter as llama.cpp's does),
    ``a.blk.N.{ln1,attn_q,attn_k,attn_v,attn_out,ln2,ffn_up,ffn_down}``, ``a.post_ln``, the projector
    ``mm.a.mlp.{1,2}``. Conv biases are stored as ggml ``{1, 1, C}`` (torch ``(C, 1, 1)``).

    ggtts additions (llama.cpp hard-codes them; absent means Qwen3-Omni's): ``N_WINDOW`` (half the frames of one
    convolution chunk, 50) and ``N_WINDOW_INFER`` (mel frames one attention window spans, 800).
    """

    ARCH = MODEL_ARCH_NAMES[MODEL_ARCH.MMPROJ]  # "clip"
    FILE_KIND = "mmproj"  # general.type
    PROJECTOR = "qwen3a"

    GENERAL_TYPE = Keys.General.TYPE
    HAS_AUDIO_ENCODER = Keys.Clip.HAS_AUDIO_ENCODER
    HAS_VISION_ENCODER = Keys.Clip.HAS_VISION_ENCODER
    PROJECTOR_TYPE = Keys.ClipAudio.PROJECTOR_TYPE
    LEGACY_PROJECTOR_TYPE = Keys.Clip.PROJECTOR_TYPE  # single-modality files may carry the type here instead
    NUM_MEL_BINS = Keys.ClipAudio.NUM_MEL_BINS
    EMBEDDING_LENGTH = Keys.ClipAudio.EMBEDDING_LENGTH  # d_model
    FEED_FORWARD_LENGTH = Keys.ClipAudio.FEED_FORWARD_LENGTH  # encoder_ffn_dim
    PROJECTION_DIM = Keys.ClipAudio.PROJECTION_DIM  # the thinker's hidden size (the projector's output)
    BLOCK_COUNT = Keys.ClipAudio.BLOCK_COUNT
    HEAD_COUNT = Keys.ClipAudio.Attention.HEAD_COUNT
    LAYERNORM_EPS = Keys.ClipAudio.Attention.LAYERNORM_EPS
    N_WINDOW = "clip.audio.qwen3a.n_window"  # ggtts addition
    N_WINDOW_INFER = "clip.audio.qwen3a.n_window_infer"  # ggtts addition

    CONV2D = _tensor_name(MODEL_TENSOR.A_ENC_CONV2D)  # "a.conv2d.{bid}", bid 1..3
    CONV_OUT = _tensor_name(MODEL_TENSOR.A_ENC_CONV_OUT)
    POSITION_EMBD = _tensor_name(MODEL_TENSOR.A_ENC_EMBD_POS)
    ATTN_NORM = _tensor_name(MODEL_TENSOR.A_ENC_INPUT_NORM)  # "a.blk.{bid}.ln1": self_attn_layer_norm
    ATTN_Q = _tensor_name(MODEL_TENSOR.A_ENC_ATTN_Q)
    ATTN_K = _tensor_name(MODEL_TENSOR.A_ENC_ATTN_K)
    ATTN_V = _tensor_name(MODEL_TENSOR.A_ENC_ATTN_V)
    ATTN_OUT = _tensor_name(MODEL_TENSOR.A_ENC_OUTPUT)  # "a.blk.{bid}.attn_out"
    FFN_NORM = _tensor_name(MODEL_TENSOR.A_ENC_OUTPUT_NORM)  # "a.blk.{bid}.ln2": final_layer_norm
    FFN_UP = _tensor_name(MODEL_TENSOR.A_ENC_FFN_UP)  # fc1
    FFN_DOWN = _tensor_name(MODEL_TENSOR.A_ENC_FFN_DOWN)  # fc2
    POST_NORM = _tensor_name(MODEL_TENSOR.A_POST_NORM)  # "a.post_ln": ln_post
    MMPROJ = _tensor_name(MODEL_TENSOR.A_MMPROJ)  # "mm.a.mlp.{bid}", bid 1..2: proj1, proj2
    POSITIONS = 1500  # rows of a.position_embd llama.cpp's converter writes


# ---- piper (ggtts architecture) --------------------------------------------------------------------------------
class Piper:
    """A Piper voice (VITS: text encoder with relative-position attention, stochastic or plain duration predictor,
    coupling flow, HiFi-GAN decoder) as ggtts stores it. Tensor names are the voice's own (the VITS module paths
    of piper's training code, e.g. ``enc_p.encoder.attn_layers.0.conv_q.weight``), weight norm folded; the
    duration predictor's flow that inference never runs (``dp.flows.1``) is left out. The keys hold what the
    shapes do not tell (heads, window, strides, dilations) and the voice's ``.onnx.json``: its phoneme map,
    espeak voice, speakers and inference defaults."""

    ARCH = "piper"

    SAMPLE_RATE = "piper.sample_rate"
    # text encoder
    N_HEADS = "piper.n_heads"
    N_LAYERS = "piper.n_layers"
    WINDOW_SIZE = "piper.window_size"  # relative attention looks this many positions each way
    # duration predictor: stochastic (flows over noise, like every Piper voice) or plain (a convolution stack)
    STOCHASTIC_DURATIONS = "piper.stochastic_durations"  # bool
    DP_FLOWS = "piper.dp.n_flows"  # spline flows (ConvFlow), each followed by a channel flip
    DP_LAYERS = "piper.dp.n_layers"  # dilated depth-separable convolutions in each block
    DP_BINS = "piper.dp.num_bins"  # rational-quadratic spline bins
    DP_TAIL_BOUND = "piper.dp.tail_bound"  # the spline's range; linear (identity) outside it
    # coupling flow
    FLOW_COUPLINGS = "piper.flow.n_flows"
    FLOW_LAYERS = "piper.flow.n_layers"  # WaveNet layers per coupling
    FLOW_DILATION_RATE = "piper.flow.dilation_rate"
    # HiFi-GAN decoder
    RESBLOCK = "piper.dec.resblock"  # "1" (two convolutions per dilation) or "2" (one)
    RESBLOCK_KERNEL_SIZES = "piper.dec.resblock_kernel_sizes"
    RESBLOCK_DILATIONS = "piper.dec.resblock_dilation_sizes"  # flattened: len(kernel sizes) runs of equal length
    UPSAMPLE_RATES = "piper.dec.upsample_rates"
    # the voice (.onnx.json)
    PHONEME_TYPE = "piper.phoneme_type"  # "espeak" (espeak-ng IPA) or "text" (the characters themselves)
    ESPEAK_VOICE = "piper.espeak_voice"  # e.g. "en-us"
    PHONEMES = "piper.phonemes"  # string[]: phoneme_id_map's keys, one entry per id (a key repeats for more ids)
    PHONEME_IDS = "piper.phoneme_ids"  # int32[]: the ids, in step with PHONEMES
    SPEAKER_NAMES = "piper.speaker_names"  # string[], by speaker id (multi-speaker voices)
    NOISE_SCALE = "piper.inference.noise_scale"
    LENGTH_SCALE = "piper.inference.length_scale"
    NOISE_W = "piper.inference.noise_w"
    LANGUAGE = "piper.language"  # e.g. "en_US"
    QUALITY = "piper.quality"  # x_low, low, medium, high

    # piper's phoneme_ids.py conventions
    PAD, BOS, EOS = "_", "^", "$"


# ---- qwen3tts (llama.cpp's architecture: a talker file and an mmproj file) -------------------------------------
class Qwen3TTS:
    """Qwen3-TTS as llama.cpp's converter splits it (``conversion/qwen3tts.py``, build 11434), so files made for
    ``llama-tts`` load here and files made here load there.

    The **talker file** is an LLM of architecture ``qwen3tts`` (llama.cpp builds it as Qwen3-VL: Qwen3 blocks with
    q/k norms, interleaved M-RoPE, which is plain NEOX RoPE for a text-only stream). Its ``token_embd`` is the text
    embedding table already passed through the text projection, followed by the codec embedding table (so a codec
    id ``c`` is token ``n_text + c``); ``output`` is the codec head (codec vocabulary rows only). The token list
    names the codec ids (``<|codec_0|>``..., ``<|codec_pad|>``, ``<|codec_language_english|>``, ``<|spk_vivian|>``:
    each ``*_id`` of the talker config), and the text specials are the tokenizer's (``<tts_pad>``,
    ``<tts_text_bos>``, ``<tts_text_eod>``). EOS is the codec EOS token; the suppressed ids are the vocabulary's
    last 1024 but EOS.

    The **mmproj file** (architecture ``clip``) holds the code predictor (``a.gen.code.*``: its per-codebook tables
    and heads stacked in 3-D tensors), the 12 Hz tokenizer's decoder (``a.gen.wav.*``: the quantizer's codebooks
    already divided by their usage counts, SnakeBeta's alpha and beta stored as ``exp(alpha)`` and
    ``1 / (exp(beta) + 1e-9)``) and, for Base checkpoints, the speaker encoder (``a.*``). llama.cpp hard-codes the
    decoder's hyper-parameters and the code predictor's RoPE base (the published values); ggtts writes them too,
    under ``ggtts.qwen3tts.*`` (which llama.cpp ignores), and reads llama.cpp's values where a file lacks them.
    """

    ARCH = "qwen3tts"
    CLIP_ARCH = "clip"

    # talker file (llama.cpp keys)
    BLOCK_COUNT = _llm_key(Keys.LLM.BLOCK_COUNT, ARCH)
    CONTEXT_LENGTH = _llm_key(Keys.LLM.CONTEXT_LENGTH, ARCH)
    EMBEDDING_LENGTH = _llm_key(Keys.LLM.EMBEDDING_LENGTH, ARCH)
    FEED_FORWARD_LENGTH = _llm_key(Keys.LLM.FEED_FORWARD_LENGTH, ARCH)
    HEAD_COUNT = _llm_key(Keys.Attention.HEAD_COUNT, ARCH)
    HEAD_COUNT_KV = _llm_key(Keys.Attention.HEAD_COUNT_KV, ARCH)
    KEY_LENGTH = _llm_key(Keys.Attention.KEY_LENGTH, ARCH)
    VALUE_LENGTH = _llm_key(Keys.Attention.VALUE_LENGTH, ARCH)
    RMS_EPS = _llm_key(Keys.Attention.LAYERNORM_RMS_EPS, ARCH)
    ROPE_FREQ_BASE = _llm_key(Keys.Rope.FREQ_BASE, ARCH)
    ROPE_SECTIONS = _llm_key(Keys.Rope.DIMENSION_SECTIONS, ARCH)
    SUPPRESS_TOKENS = "tokenizer.ggml.suppress_tokens"

    # talker file: ggtts additions
    MODEL_TYPE = "ggtts.qwen3tts.model_type"  # custom_voice, base or voice_design
    TEXT_VOCAB_SIZE = "ggtts.qwen3tts.text_vocab_size"  # token_embd's text rows (the rest are the codec's)
    DIALECTS = "ggtts.qwen3tts.speaker_dialects"  # string[]: "speaker=dialect language" for dialect speakers
    TEMPERATURE = "ggtts.qwen3tts.sampling.temperature"
    TOP_K = "ggtts.qwen3tts.sampling.top_k"
    TOP_P = "ggtts.qwen3tts.sampling.top_p"
    REPETITION_PENALTY = "ggtts.qwen3tts.sampling.repetition_penalty"
    CP_TEMPERATURE = "ggtts.qwen3tts.sampling.subtalker_temperature"
    CP_TOP_K = "ggtts.qwen3tts.sampling.subtalker_top_k"
    CP_TOP_P = "ggtts.qwen3tts.sampling.subtalker_top_p"
    # llama.cpp's converter writes generation_config.json's talker settings here
    GENERAL_TEMPERATURE = "general.sampling.temp"
    GENERAL_TOP_K = "general.sampling.top_k"
    GENERAL_TOP_P = "general.sampling.top_p"
    GENERAL_REPETITION_PENALTY = "general.sampling.penalty_repeat"

    # talker tensors (llama.cpp's names)
    TOKEN_EMBD = "token_embd"
    OUTPUT_NORM = "output_norm"
    OUTPUT = "output"

    # mmproj file (llama.cpp keys)
    PROJECTOR_TYPE = "clip.projector_type"
    HAS_AUDIO_ENCODER = "clip.has_audio_encoder"
    HAS_GEN_AUDIO_ENCODER = "clip.has_gen_audio_encoder"
    AUDIO_PROJECTOR_TYPE = "clip.audio.projector_type"
    AUDIO_PROJECTION_DIM = "clip.audio.projection_dim"
    AUDIO_NUM_MEL_BINS = "clip.audio.num_mel_bins"
    AUDIO_BLOCK_COUNT = "clip.audio.block_count"
    AUDIO_EMBEDDING_LENGTH = "clip.audio.embedding_length"
    AUDIO_FEED_FORWARD_LENGTH = "clip.audio.feed_forward_length"
    AUDIO_HEAD_COUNT = "clip.audio.attention.head_count"
    AUDIO_LAYERNORM_EPS = "clip.audio.attention.layer_norm_epsilon"
    GEN_PROJECTOR_TYPE = "clip.gen.audio.projector_type"
    GEN_PROJECTION_DIM = "clip.gen.audio.projection_dim"  # the talker's width
    GEN_EMBEDDING_LENGTH = "clip.gen.audio.embedding_length"  # the code predictor's
    GEN_FEED_FORWARD_LENGTH = "clip.gen.audio.feed_forward_length"
    GEN_BLOCK_COUNT = "clip.gen.audio.block_count"
    GEN_HEAD_COUNT = "clip.gen.audio.attention.head_count"
    GEN_HEAD_COUNT_KV = "clip.gen.audio.attention.head_count_kv"
    GEN_RMS_EPS = "clip.gen.audio.attention.layer_norm_epsilon"
    SPKENC_PROJECTOR = "qwen3tts_spkenc"
    GEN_PROJECTOR = "qwen3tts_gen"

    # mmproj file: ggtts additions (llama.cpp's hard-coded values where absent: LLAMA_CPP_DEFAULTS)
    CP_ROPE_FREQ_BASE = "ggtts.qwen3tts.code_predictor.rope.freq_base"
    WAV_BLOCK_COUNT = "ggtts.qwen3tts.wav.block_count"
    WAV_HEAD_COUNT = "ggtts.qwen3tts.wav.attention.head_count"
    WAV_HEAD_COUNT_KV = "ggtts.qwen3tts.wav.attention.head_count_kv"
    WAV_RMS_EPS = "ggtts.qwen3tts.wav.attention.layer_norm_rms_epsilon"
    WAV_ROPE_FREQ_BASE = "ggtts.qwen3tts.wav.rope.freq_base"
    WAV_SLIDING_WINDOW = "ggtts.qwen3tts.wav.attention.sliding_window"
    WAV_UPSAMPLING_RATIOS = "ggtts.qwen3tts.wav.upsampling_ratios"  # transposed conv + ConvNeXt stages
    WAV_UPSAMPLE_RATES = "ggtts.qwen3tts.wav.upsample_rates"  # DAC decoder blocks
    WAV_SAMPLE_RATE = "ggtts.qwen3tts.wav.sample_rate"
    SPEAKER_DILATIONS = "ggtts.qwen3tts.speaker.dilations"  # the speaker encoder's, layer by layer
    # a Base model's speech tokenizer encoder (Mimi's; llama.cpp has none): its hyper-parameters
    ENC_RATIOS = "ggtts.qwen3tts.enc.upsampling_ratios"  # Mimi's; the encoder strides through them reversed
    ENC_RESIDUAL_LAYERS = "ggtts.qwen3tts.enc.residual_layers"  # residual blocks per stride
    ENC_DILATION_GROWTH = "ggtts.qwen3tts.enc.dilation_growth_rate"
    ENC_BLOCK_COUNT = "ggtts.qwen3tts.enc.block_count"
    ENC_HEAD_COUNT = "ggtts.qwen3tts.enc.attention.head_count"
    ENC_HEAD_COUNT_KV = "ggtts.qwen3tts.enc.attention.head_count_kv"
    ENC_HEAD_DIM = "ggtts.qwen3tts.enc.attention.key_length"
    ENC_NORM_EPS = "ggtts.qwen3tts.enc.attention.layer_norm_epsilon"
    ENC_ROPE_FREQ_BASE = "ggtts.qwen3tts.enc.rope.freq_base"
    ENC_SLIDING_WINDOW = "ggtts.qwen3tts.enc.attention.sliding_window"
    ENC_DOWNSAMPLE = "ggtts.qwen3tts.enc.downsample_stride"  # 25 Hz -> 12.5 Hz
    ENC_CODEBOOKS = "ggtts.qwen3tts.enc.codebooks"  # kept of Mimi's (upstream's encoder_valid_num_quantizers)
    ENC_SEMANTIC_CODEBOOKS = "ggtts.qwen3tts.enc.semantic_codebooks"
    ENC_FRAME_SAMPLES = "ggtts.qwen3tts.enc.frame_samples"  # upstream's encode_downsample_rate
    # the speaker encoder's first convolution: a Base model's mmproj has it (llama.cpp's converter writes the
    # speaker encoder's keys into every mmproj, so its tensors tell)
    SPEAKER_STEM = "a.conv1d.0.weight"
    LLAMA_CPP_DEFAULTS: Mapping[str, float | int | tuple[int, ...]] = MappingProxyType(
        {
            CP_ROPE_FREQ_BASE: 1_000_000.0,
            WAV_BLOCK_COUNT: 8,
            WAV_HEAD_COUNT: 16,
            WAV_HEAD_COUNT_KV: 16,
            WAV_RMS_EPS: 1e-5,
            WAV_ROPE_FREQ_BASE: 10_000.0,
            WAV_SLIDING_WINDOW: 72,
            WAV_UPSAMPLING_RATIOS: (2, 2),
            WAV_UPSAMPLE_RATES: (8, 5, 4, 3),
            WAV_SAMPLE_RATE: 24_000,
        }
    )

    # mmproj tensors: the code predictor
    CP = "a.gen.code"
    CP_PROJ_IN = "a.gen.code.proj_in"  # absent where the talker and the code predictor are equally wide
    CP_EMBD = "a.gen.code.embd.weight"  # (codebooks - 1, vocab, talker width)
    CP_HEAD = "a.gen.code.head.weight"  # (codebooks - 1, vocab, code predictor width)
    CP_OUT_EMBD = "a.gen.code.out_embd.weight"  # the talker's codec embedding (codebook 0), again
    CP_OUTPUT_NORM = "a.gen.code.output_norm.weight"
    # a code predictor block's names, ggtts's (llama.cpp LLM names) -> the mmproj's
    CP_LAYER: Mapping[str, str] = MappingProxyType(
        {
            "attn_norm": "ln1", "attn_q": "attn_q", "attn_q_norm": "attn_q_norm", "attn_k": "attn_k",
            "attn_k_norm": "attn_k_norm", "attn_v": "attn_v", "attn_output": "attn_out", "ffn_norm": "ln2",
            "ffn_gate": "ffn_gate", "ffn_up": "ffn_up", "ffn_down": "ffn_down",
        }
    )  # fmt: skip
    # the decoder
    WAV = "a.gen.wav"
    # a Base model's speech tokenizer encoder (ggtts's names: conv_in, blk.S.res.J.conv1/conv2, blk.S.down,
    # conv_out, tfm.blk.N.{ln1,attn_q,attn_k,attn_v,attn_out,ls1,ln2,ffn_up,ffn_down,ls2}, downsample,
    # quant.{first,rest}.{in_proj,codebook}: the codebooks already divided by their usage counts, stacked)
    ENC = "a.tok_enc"
    # a decoder transformer layer's names, upstream's -> the mmproj's
    WAV_LAYER: Mapping[str, str] = MappingProxyType(
        {
            "input_layernorm.weight": "ln1.weight", "self_attn.q_proj.weight": "attn_q.weight",
            "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
            "self_attn.o_proj.weight": "attn_out.weight", "self_attn_layer_scale.scale": "ls1.weight",
            "post_attention_layernorm.weight": "ln2.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
            "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
            "mlp_layer_scale.scale": "ls2.weight",
        }
    )  # fmt: skip
    WAV_UPSAMPLE: Mapping[str, str] = MappingProxyType(
        {
            "0.conv.weight": "conv.weight", "0.conv.bias": "conv.bias", "1.dwconv.conv.weight": "dwconv.weight",
            "1.dwconv.conv.bias": "dwconv.bias", "1.norm.weight": "norm.weight", "1.norm.bias": "norm.bias",
            "1.pwconv1.weight": "pw1.weight", "1.pwconv1.bias": "pw1.bias", "1.pwconv2.weight": "pw2.weight",
            "1.pwconv2.bias": "pw2.bias", "1.gamma": "gamma",
        }
    )  # fmt: skip


class Qwen3TTSVoice:
    """A voice cloned for a Qwen3-TTS Base model (``ggtts voice create``): its speaker embedding (the x-vector the
    model's speaker encoder makes of a reference recording) in a small GGUF of its own, found beside the model."""

    ARCH = "qwen3tts-voice"
    NAME = "qwen3tts-voice.name"  # what -v calls it
    WIDTH = "qwen3tts-voice.embedding_length"  # the talker's width it was made for
    MODEL = "qwen3tts-voice.model"  # the file name of the model that made it (informative)
    SOURCE = "qwen3tts-voice.source"  # the reference recording's file name (informative)
    SECONDS = "qwen3tts-voice.source_seconds"
    TEXT = "qwen3tts-voice.text"  # what is said in the recording, where given (the in-context prompt)
    EMBEDDING = "speaker.embedding"  # (width,)
    # the recording's codes (frames, codebooks), stored as floats, where the text is given: with them the voice
    # is an in-context prompt (upstream's ICL mode), without them the x-vector alone
    CODES = "speaker.codes"
    # the speech decoder's state after the recording's frames (``decoder_state.LAYER``, each flattened; its shape in
    # DECODER_SHAPES as "LAYER=d0,d1,..."), made by the decoder whose weights hash to DECODER_CHECK: a model whose
    # decoder hashes alike goes on from it instead of decoding the recording again (a cache: ignored if it does
    # not fit)
    DECODER_STATE = "decoder_state"
    DECODER_SHAPES = "qwen3tts-voice.decoder_state.shapes"
    DECODER_CHECK = "qwen3tts-voice.decoder_state.check"
