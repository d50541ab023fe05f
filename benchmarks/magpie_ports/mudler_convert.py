"""Run mudler/magpie-tts.cpp's own converter (its scripts/convert_magpie_to_gguf.py, imported unchanged) on a Magpie
.nemo and a codec .nemo, filling in what that converter hard-codes for the released checkpoint and ggtts's random
test models lack. Only KV values are overridden; every tensor is written by their code:

- magpie.text.vocab_size / bos_id / eos_id: their converter writes the released 3359 / 3357 / 3358; here they come
  from the model's tokenizer export (NeMo's text embedding: vocabulary + BOS + EOS);
- an empty language map / heteronym list (gguf-py refuses empty arrays; their loader requires the keys) become
  {"en": <the first tokenizer>} / one placeholder word (the tokenizer goes unused: the benchmark gives token ids);
- inference_parameters keys the test config does not set get NeMo's ModelInferenceParameters defaults
  (argmax_temperature, absent from NeMo 3.0 and unused by the C++ engine: 0.01).

    python benchmarks/magpie_ports/mudler_convert.py MUDLER_CHECKOUT MODEL.nemo CODEC.nemo OUT.gguf [WORKDIR]

MUDLER_CHECKOUT: DIR/mudler+magpie-tts.cpp of build.sh. Needs NeMo (for its scripts/export_tokenizer.py), torch,
gguf and yaml: ggtts's environment with the nemo extra. WORKDIR (default: OUT's folder/mudler-work) keeps the
extracted .nemo files and the tokenizer export.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

# NeMo's ModelInferenceParameters defaults, for the keys a test config leaves out
INFERENCE_DEFAULTS = {
    "argmax_temperature": 0.01, "max_decoder_steps": 500, "temperature": 0.7, "topk": 80, "cfg_scale": 2.5,
    "apply_attention_prior": True, "attention_prior_epsilon": 0.1, "attention_prior_lookahead_window": 5,
    "estimate_alignment_from_layers": [], "apply_prior_to_layers": [], "start_prior_after_n_audio_steps": 0,
    "ignore_finished_sentence_tracking": True, "eos_detection_method": "argmax_or_multinomial_any",
}  # fmt: skip


def convert(repo: Path, model_nemo: Path, codec_nemo: Path, out: Path, work: Path) -> None:
    mdir, cdir = work / "magpie_extracted", work / "nanocodec_extracted"
    for src, dst in ((model_nemo, mdir), (codec_nemo, cdir)):
        if not (dst / "model_config.yaml").exists():
            dst.mkdir(parents=True, exist_ok=True)
            with tarfile.open(src) as t:
                t.extractall(dst)
    tok_json = work / "tokenizer_export.json"
    if not tok_json.exists():
        subprocess.run(
            [sys.executable, str(repo / "scripts/export_tokenizer.py"), "--extract-dir", str(mdir), "--out",
             str(tok_json)],
            check=True,
        )  # fmt: skip

    spec = importlib.util.spec_from_file_location("mudler_convert_magpie", repo / "scripts/convert_magpie_to_gguf.py")
    assert spec is not None and spec.loader is not None
    conv: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)

    tok = json.loads(tok_json.read_text(encoding="utf-8"))
    # gguf-py refuses empty arrays and their loader requires these keys: a one-tokenizer test checkpoint has no
    # language map and no heteronym list (both unused when token ids are given)
    if not tok.get("language_map"):
        tok["language_map"] = {"en": [tok["tokenizer_names"][0]]}
    if not tok.get("heteronyms"):
        tok["heteronyms"] = {tok["tokenizer_names"][0]: ["ZZZZ"]}
    tok_json = work / "tokenizer_export.filled.json"
    tok_json.write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    overrides = {
        "magpie.text.vocab_size": tok["vocab_size"] + 2, "magpie.text.bos_id": tok["bos"],
        "magpie.text.eos_id": tok["eos"],
    }  # fmt: skip
    orig_u32 = conv.KV.u32
    conv.KV.u32 = lambda self, key, val: orig_u32(self, key, overrides.get(key, val))

    orig_hparams = conv.write_magpie_hparams

    def write_magpie_hparams(kv: Any, cfg: dict[str, Any], *a: Any, **k: Any) -> Any:
        inf = cfg.setdefault("inference_parameters", {})
        for key, val in INFERENCE_DEFAULTS.items():
            if inf.get(key) is None:
                inf[key] = val
        return orig_hparams(kv, cfg, *a, **k)

    conv.write_magpie_hparams = write_magpie_hparams
    sys.argv = ["convert_magpie_to_gguf.py", "--magpie-dir", str(mdir), "--codec-dir", str(cdir),
                "--tokenizer-json", str(tok_json), "--out", str(out)]  # fmt: skip
    conv.main()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", type=Path, help="the mudler/magpie-tts.cpp checkout")
    ap.add_argument("model", type=Path, help="the Magpie .nemo")
    ap.add_argument("codec", type=Path, help="the codec .nemo")
    ap.add_argument("out", type=Path, help="the GGUF file to write (f32)")
    ap.add_argument("work", type=Path, nargs="?", help="scratch folder (default: OUT's folder/mudler-work)")
    args = ap.parse_args()
    convert(args.repo, args.model, args.codec, args.out, args.work or args.out.parent / "mudler-work")


if __name__ == "__main__":
    main()
