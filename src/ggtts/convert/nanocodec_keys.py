"""Metadata keys and tensor names of the NeMo nano codec's decoder (GGUF architecture ``nano-codec``).

They follow m1el/magpie-tts.cpp's ``scripts/convert_codec_to_gguf.py``, so that files made by that converter load
here and files made here load there. That converter writes five ``codec.*`` keys and hard-codes the rest of the
decoder's layout (the nemo-nano-codec-22khz-1.89kbps-21.5fps values, ``CPP_DEFAULTS`` in
``models/nanocodec/config.py``); the keys marked "added" are ggtts's, so that a file describes its own decoder.
Tensor names are the upstream NeMo state-dict names (weight norm folded into ``.weight``) shortened by that
converter's fixed list of replacements.
"""

from __future__ import annotations


class NanoCodec:
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
