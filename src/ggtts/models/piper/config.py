"""Piper (VITS) hyper-parameters: what the ``piper`` keys say, and the widths and kernels the tensors' shapes say."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Piper as K
from ggtts.models.layers import validate as V

KERNEL = V.Bounds(1, 1 << 10, "a kernel size")
DILATION = V.Bounds(1, 1 << 12, "a dilation")
RATE = V.Bounds(1, 1 << 10, "an upsampling rate")
WINDOW = V.Bounds(0, 1 << 12, "an attention window")
BINS = V.Bounds(2, 1 << 10, "a spline bin count")
TAIL = V.Bounds(1e-3, 1e3, "a spline tail bound")
FLOWS = V.Bounds(1, 64, "a flow count")
RESBLOCKS = ("1", "2")


@dataclass(frozen=True)
class PiperConfig:
    sample_rate: int
    n_vocab: int
    hidden: int  # text encoder width
    inter: int  # latent width (the prior's channels; the flow's and the decoder's input)
    filter: int  # text encoder feed-forward width
    n_heads: int
    n_layers: int
    kernel_size: int  # feed-forward kernel
    window_size: int
    stochastic_durations: bool
    dp_filter: int
    dp_kernel: int
    dp_layers: int
    dp_flows: int
    dp_bins: int
    dp_tail_bound: float
    flow_couplings: int
    flow_kernel: int
    flow_layers: int
    flow_dilation_rate: int
    resblock: str
    resblock_kernels: tuple[int, ...]
    resblock_dilations: tuple[tuple[int, ...], ...]
    upsample_rates: tuple[int, ...]
    upsample_kernels: tuple[int, ...]
    upsample_initial: int
    n_speakers: int
    gin: int  # speaker embedding width (0: one speaker)

    @property
    def hop_length(self) -> int:
        """Samples per latent frame."""
        hop = 1
        for rate in self.upsample_rates:
            hop *= rate
        return hop

    @property
    def head_width(self) -> int:
        return self.hidden // self.n_heads

    def __post_init__(self) -> None:
        if self.hidden % self.n_heads:
            raise GGUFError(f"{self.n_heads} heads do not divide the text encoder's width {self.hidden}")
        if self.resblock not in RESBLOCKS:
            raise GGUFError(f"resblock '{self.resblock}' is neither '1' nor '2'")
        if len(self.resblock_dilations) != len(self.resblock_kernels):
            raise GGUFError("the decoder's resblock dilations do not match its kernel sizes")
        if len(self.upsample_kernels) != len(self.upsample_rates):
            raise GGUFError("the decoder's upsampling kernels do not match its rates")
        for rate, kernel in zip(self.upsample_rates, self.upsample_kernels, strict=True):
            if (kernel - rate) % 2 or kernel < rate:
                raise GGUFError(f"an upsampling kernel of {kernel} cannot keep a rate of {rate} exact")
        if self.upsample_initial >> len(self.upsample_rates) < 1:
            raise GGUFError(f"a decoder {self.upsample_initial} wide cannot be halved {len(self.upsample_rates)} times")
        if self.inter % 2 or (self.gin == 0) != (self.n_speakers <= 1):
            raise GGUFError("the latent width must be even, and a speaker embedding goes with several speakers")

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> PiperConfig:
        if gguf.architecture != K.ARCH:
            raise GGUFError(f"{gguf.path}: architecture is '{gguf.architecture}', expected '{K.ARCH}'")

        def shape(name: str) -> tuple[int, ...] | None:
            return tuple(int(n) for n in gguf.info(name).shape) if name in gguf else None

        return cls.from_parts(gguf.path, gguf.get, shape)

    @classmethod
    def from_parts(
        cls, path: Path | str, get: Callable[[str, Any], Any], shape_of: Callable[[str], tuple[int, ...] | None]
    ) -> PiperConfig:
        """The configuration from metadata (``get(key, default)``) and tensor shapes (``shape_of(name)``, None
        for a missing tensor): a GGUF file's, or what the converter is about to write."""

        def shape(name: str, rank: int = 3) -> tuple[int, ...]:
            """The shape of tensor ``name``, which must have ``rank`` dimensions (3: a convolution's weight)."""
            found = shape_of(name)
            if found is None:
                raise GGUFError(f"{path}: missing tensor '{name}'")
            if len(found) != rank:
                raise GGUFError(f"{path}: tensor '{name}' has shape {list(found)}; expected {rank} dimensions")
            return found

        def integer(key: str, bounds: V.Bounds, default: int | None = None) -> int:
            value = get(key, default)
            if not isinstance(value, int) or isinstance(value, bool):
                raise GGUFError(f"{path}: metadata '{key}' should be an integer, not {value!r}")
            return bounds.check(path, key, value)

        def integers(key: str, bounds: V.Bounds) -> tuple[int, ...]:
            values = get(key, None)
            if (
                not isinstance(values, list)
                or not values
                or any(isinstance(v, bool) or not isinstance(v, int) for v in values)
            ):
                raise GGUFError(f"{path}: metadata '{key}' should be a non-empty array of integers")
            return bounds.check_each(path, key, tuple(values))

        def count(prefix: str) -> int:
            n = 0
            while shape_of(f"{prefix}.{n}.weight") is not None:
                n += 1
            return n

        n_vocab, hidden = shape("enc_p.emb.weight", 2)
        stochastic = get(K.STOCHASTIC_DURATIONS, True)
        if not isinstance(stochastic, bool):
            raise GGUFError(f"{path}: metadata '{K.STOCHASTIC_DURATIONS}' should be true or false, not {stochastic!r}")
        dp_conv = "dp.convs.convs_sep.0.weight" if stochastic else "dp.conv_1.weight"
        kernels = integers(K.RESBLOCK_KERNEL_SIZES, KERNEL)
        dilations = integers(K.RESBLOCK_DILATIONS, DILATION)
        if len(dilations) % len(kernels):
            raise GGUFError(f"{path}: metadata '{K.RESBLOCK_DILATIONS}' does not split evenly over the kernel sizes")
        per = len(dilations) // len(kernels)
        n_speakers, gin = shape("emb_g.weight", 2) if shape_of("emb_g.weight") is not None else (1, 0)
        tail = get(K.DP_TAIL_BOUND, 5.0)
        if not isinstance(tail, int | float) or isinstance(tail, bool):
            raise GGUFError(f"{path}: metadata '{K.DP_TAIL_BOUND}' should be a number, not {tail!r}")
        resblock = get(K.RESBLOCK, None)
        try:
            return cls(
                sample_rate=integer(K.SAMPLE_RATE, V.SAMPLE_RATE),
                n_vocab=V.SIZE.check(path, "enc_p.emb.weight rows", n_vocab),
                hidden=V.SIZE.check(path, "enc_p.emb.weight columns", hidden),
                inter=shape("enc_p.proj.weight")[0] // 2,
                filter=shape("enc_p.encoder.ffn_layers.0.conv_1.weight")[0],
                n_heads=integer(K.N_HEADS, V.HEAD_COUNT),
                n_layers=integer(K.N_LAYERS, V.LAYER_COUNT),
                kernel_size=shape("enc_p.encoder.ffn_layers.0.conv_1.weight")[2],
                window_size=integer(K.WINDOW_SIZE, WINDOW),
                stochastic_durations=stochastic,
                dp_filter=shape(dp_conv)[0],
                dp_kernel=shape(dp_conv)[2],
                dp_layers=integer(K.DP_LAYERS, V.LAYER_COUNT) if stochastic else 2,
                dp_flows=integer(K.DP_FLOWS, FLOWS) if stochastic else 0,
                dp_bins=integer(K.DP_BINS, BINS) if stochastic else 0,
                dp_tail_bound=float(TAIL.check(path, K.DP_TAIL_BOUND, float(tail))),
                flow_couplings=integer(K.FLOW_COUPLINGS, FLOWS),
                flow_kernel=shape("flow.flows.0.enc.in_layers.0.weight")[2],
                flow_layers=integer(K.FLOW_LAYERS, V.LAYER_COUNT),
                flow_dilation_rate=integer(K.FLOW_DILATION_RATE, DILATION),
                resblock=str(resblock),
                resblock_kernels=kernels,
                resblock_dilations=tuple(dilations[i * per : (i + 1) * per] for i in range(len(kernels))),
                upsample_rates=integers(K.UPSAMPLE_RATES, RATE),
                upsample_kernels=tuple(shape(f"dec.ups.{i}.weight")[2] for i in range(count("dec.ups"))),
                upsample_initial=shape("dec.conv_pre.weight")[0],
                n_speakers=n_speakers,
                gin=gin,
            )
        except GGUFError as e:
            raise GGUFError(f"{path}: {e}") from None
