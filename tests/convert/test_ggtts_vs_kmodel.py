"""ggtts on the real Kokoro v1.0 weights against hexgrad's own ``KModel`` on the very same weights.

Both sides run the int8 export's dequantized weights: ggtts through our converter and the GGUF file, ``KModel``
(its default STFT) with the same tensors loaded. Every stage is compared with the tolerances of ``ggtts parity``
(:mod:`ggtts.measure.parity`), the whole chain in float64, same phonemes, voice, speed and seed. Three broken
models, each a plausible converter or loader bug, must fail it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ggtts.convert.kokoro_onnx import NOT_IN_EXPORT, convert_onnx, state_dict_from_onnx
from ggtts.families.kokoro.parity import StageResult, kokoro_stages, print_table
from ggtts.families.kokoro.pipeline import KokoroTTS
from ggtts.gguf import GGUFFile

pytestmark = [pytest.mark.needs_weights, pytest.mark.needs_reference, pytest.mark.slow]

PHONEMES = "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˌOvəɹ ðə lˈAzi dˈɑɡ."  # "The quick brown fox jumps over the lazy dog."
VOICE = "jf_alpha"
SEED = 3


@pytest.fixture(scope="module")
def both(kokoro_int8_onnx: Path, kokoro_voices_npz: Path, tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("kokoro")
    from kmodel_reference import build_kmodel

    from ggtts.families.kokoro.upstream import load_folded

    state = state_dict_from_onnx(kokoro_int8_onnx)
    gguf = convert_onnx(kokoro_int8_onnx, [kokoro_voices_npz], tmp_path_factory.mktemp("kmodel") / "k.gguf")
    tts = KokoroTTS.from_gguf(GGUFFile(gguf))
    kmodel = build_kmodel(tts.vocab, disable_complex=False).eval()  # KModel's default STFT
    missing = load_folded(kmodel, state)
    assert set(missing) <= set(NOT_IN_EXPORT)
    ids = torch.tensor([[0, *tts.token_ids(PHONEMES), 0]])
    ref_s = tts.voicepack(VOICE)[len(PHONEMES) - 1]  # the row the pipeline uses
    return kmodel, tts.model, state, ids, ref_s


def _stages(both, model: torch.nn.Module) -> list[StageResult]:
    kmodel, _, state, ids, ref_s = both
    return kokoro_stages(kmodel, model, ids, ref_s, SEED, folded=state)


def test_every_stage_matches_kmodel_on_the_real_weights(both) -> None:
    results = _stages(both, both[1])
    print_table(results)
    assert [r.stage for r in results if not r.ok] == []


def _f0_bias(model: torch.nn.Module) -> None:
    model.predictor.F0_proj.bias.add_(30.0)  # +30 Hz


def _conv_post(model: torch.nn.Module) -> None:
    model.decoder.generator.conv_post.weight.mul_(1.3)


def _resblock_conv_zeroed(model: torch.nn.Module) -> None:
    model.decoder.generator.resblocks[0].convs1[1].weight.zero_()


@pytest.mark.parametrize(
    ("mutate", "first_failing"),
    [(_f0_bias, "f0"), (_conv_post, "decoder"), (_resblock_conv_zeroed, "decoder")],
    ids=["f0-bias+30Hz", "conv_post-x1.3", "resblock-conv-zeroed"],
)
def test_a_broken_model_fails(both, mutate: Callable[[torch.nn.Module], None], first_failing: str) -> None:
    broken = copy.deepcopy(both[1])
    with torch.no_grad():
        mutate(broken)
    failing = [r.stage for r in _stages(both, broken) if not r.ok]
    assert failing[:1] == [first_failing] and "end_to_end" in failing, failing
