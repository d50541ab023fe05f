"""Each tolerance of ``ggtts parity kokoro`` can fail: a 1 % error in one weight or a 0.01 shift of one bias,
written into our GGUF file (upstream keeps its own weights), fails the stage where it enters and the end-to-end
comparison."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("kokoro")
pytest.importorskip("transformers")

from ggtts.measure.kokoro import upstream as kokoro_upstream
from ggtts.measure.kokoro.parity import kokoro_parity

pytestmark = pytest.mark.needs_reference

ALBERT_LAYER = "bert.encoder.albert_layer_groups.0.albert_layers.0"
# (tensor, "scale" or "shift", the stage where the error enters, whether the audio changes). A convolution followed
# by an instance norm (``conv1`` of the AdaIN blocks, ``convs1`` of the vocoder's) is no place for such a test: the
# norm removes a scale of its weights and a shift of its bias exactly, so the model is the same.
MUTATIONS = [
    (f"{ALBERT_LAYER}.attention.query.weight", "scale", "bert", True),
    (f"{ALBERT_LAYER}.ffn.bias", "shift", "bert", True),
    # frames per token move by about 0.01, too little to change a rounded duration: the audio is the same
    ("predictor.duration_proj.linear_layer.bias", "shift", "frames", False),
    ("predictor.F0_proj.bias", "shift", "f0", True),
    ("predictor.N_proj.weight", "scale", "n", True),
    ("text_encoder.cnn.0.0.weight", "scale", "asr", True),
    ("decoder.generator.m_source.l_linear.weight", "scale", "source", True),
    ("decoder.encode.conv2.weight", "scale", "decoder", True),
    ("decoder.generator.noise_convs.0.bias", "shift", "decoder", True),
    ("decoder.generator.resblocks.0.convs2.0.weight", "scale", "decoder", True),
    ("decoder.generator.conv_post.weight", "scale", "decoder", True),
]


@pytest.mark.parametrize(("name", "how", "stage", "audible"), MUTATIONS, ids=[f"{m[0]}-{m[1]}" for m in MUTATIONS])
def test_mutation_fails_its_stage(
    monkeypatch: pytest.MonkeyPatch, name: str, how: str, stage: str, audible: bool
) -> None:
    folded = kokoro_upstream.Upstream.folded_state

    def mutated(self: kokoro_upstream.Upstream) -> dict[str, torch.Tensor]:
        state = folded(self)
        state[name] = state[name] * 1.01 if how == "scale" else state[name] + 0.01
        return state

    monkeypatch.setattr(kokoro_upstream.Upstream, "folded_state", mutated)
    results = kokoro_parity()
    failing = [r.stage for r in results if not r.ok]
    assert failing[:1] == [stage], [(r.stage, r.relative, r.tolerance) for r in results]
    assert ("end_to_end" in failing) == audible
    stages = [r.stage for r in results]
    assert all(r.ok for r in results[: stages.index(stage)])  # nothing before the stage it enters moved
