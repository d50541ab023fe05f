#!/usr/bin/env bash
# Build the three C++/ggml Magpie TTS ports that benchmarks/bench_magpie.py compares ggtts with, CPU-only
# (Release, -O3, GGML_NATIVE), at pinned commits, with the small command-line patches in this folder. Benchmark
# references only: built outside the package, never imported by ggtts (see README.md).
#
#   bash benchmarks/magpie_ports/build.sh [DIR] [all|m1el|mudler|nemo-speech]
#
# DIR: the target folder (default $PORTS_DIR, else ./magpie-ports); pass it to bench_magpie.py as --ports DIR.
# Sources are cloned from https://github.com/OWNER/NAME, or with MIRROR=/path from local clones laid out as
# /path/OWNER+NAME/repo. J=N: parallel build jobs (default 2). Idempotent: clones and checks out only what is
# missing, applies each patch once, builds incrementally.
#
# Layout (what bench_magpie.py expects):
#   DIR/m1el+magpie-tts.cpp/magpie-tts
#   DIR/mudler+magpie-tts.cpp/build/examples/cli/magpie-cli
#   DIR/NVIDIA+NeMo-Speech.cpp/build/cpu-tts/bin/synthesize_text
#   DIR/venv-tools/bin/cmake            (only when the system cmake is older than 3.26)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${1:-${PORTS_DIR:-./magpie-ports}}
WHICH=${2:-all}
J=${J:-2}
case $WHICH in all | m1el | mudler | nemo-speech) ;; *) echo "usage: $0 [DIR] [all|m1el|mudler|nemo-speech]" >&2; exit 2 ;; esac
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# pinned commits
M1EL_COMMIT=7d2b8ffcde4ba0339ac8b49e239dfbbbd433131a     # m1el/magpie-tts.cpp, 2026-02-02
M1EL_GGML=d99724f2b141fed9e1a9f402213506c081433465       # ggml master 2026-08-21 (m1el pins none)
MUDLER_COMMIT=3008ff73fc2d2da9e4d743b09350aa7023e8980c   # mudler/magpie-tts.cpp, 2026-07-24
MUDLER_GGML=e705c5fed490514458bdd2eaddc43bd098fcce9b     # its submodule third_party/ggml
NEMO_COMMIT=4f9676226f667d14608487df744f375db87127f8     # NVIDIA/NeMo-Speech.cpp, 2026-08-19
NEMO_GGML=c03b4e2bcece5134827881af90242086daf75be5       # its submodule ggml (the other submodules are not needed)

source_of() { # source_of OWNER/NAME: where to clone it from
    if [ -n "${MIRROR:-}" ]; then echo "$MIRROR/${1/\//+}/repo"; else echo "https://github.com/$1"; fi
}
checkout() { # checkout OWNER/NAME DIR COMMIT: a work tree of OWNER/NAME at COMMIT in DIR (submodules: see ggml_at)
    if [ ! -e "$2/.git" ]; then
        rmdir "$2" 2>/dev/null || true # an empty submodule folder
        git clone -q "$(source_of "$1")" "$2"
    fi
    git -C "$2" checkout -q "$3"
}
patch_once() { # patch_once REPO DIFF
    if git -C "$1" apply --check "$2" 2>/dev/null; then
        git -C "$1" apply "$2"
    elif ! git -C "$1" apply -R --check "$2" 2>/dev/null; then # applied already when it reverses cleanly
        echo "error: $2 does not apply to $1" >&2
        exit 1
    fi
}

# cmake >= 3.26 (NeMo-Speech.cpp's minimum; Debian 12 has 3.25): from PyPI into DIR/venv-tools when needed
CMAKE=cmake
if [ -x "$DIR/venv-tools/bin/cmake" ]; then
    CMAKE=$DIR/venv-tools/bin/cmake
elif ! command -v cmake >/dev/null || [ "$(printf '%s\n' 3.26 "$(cmake --version | sed -n 's/^cmake version //p')" |
    sort -V | head -1)" != 3.26 ]; then
    python3 -m venv "$DIR/venv-tools"
    "$DIR/venv-tools/bin/pip" install -q "cmake>=3.26,<4"
    CMAKE=$DIR/venv-tools/bin/cmake
fi
GEN=(-G Ninja)
command -v ninja >/dev/null || GEN=() # cmake's default generator (make) otherwise
configure() { # configure SRC BUILD ARGS...: the generator for a fresh build folder, the cached one otherwise
    local src=$1 build=$2 gen=()
    shift 2
    [ -f "$build/CMakeCache.txt" ] || gen=("${GEN[@]}")
    "$CMAKE" -S "$src" -B "$build" "${gen[@]}" "$@"
}
O3=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_FLAGS_RELEASE=-O3 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O3 -DNDEBUG"
    -DGGML_NATIVE=ON)

if [ "$WHICH" = all ] || [ "$WHICH" = m1el ]; then
    # m1el/magpie-tts.cpp: a Makefile against a ggml built in ./ggml (its README: "clone ggml-org/ggml" there)
    M1EL=$DIR/m1el+magpie-tts.cpp
    checkout m1el/magpie-tts.cpp "$M1EL" $M1EL_COMMIT
    checkout ggml-org/ggml "$M1EL/ggml" $M1EL_GGML
    patch_once "$M1EL" "$HERE/m1el.diff"
    configure "$M1EL/ggml" "$M1EL/ggml/build" "${O3[@]}" -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF
    "$CMAKE" --build "$M1EL/ggml/build" -j"$J"
    # its Makefile says -O2 -g and a cwd-relative rpath: both overridden here
    make -C "$M1EL" magpie-tts \
        CXXFLAGS="-std=c++17 -O3 -march=native -DNDEBUG -I ggml/include -I src" \
        LDFLAGS="-L $M1EL/ggml/build/src -lggml -lggml-base -lggml-cpu -Wl,-rpath,$M1EL/ggml/build/src -lm -lpthread"
    echo "m1el: $M1EL/magpie-tts"
fi

if [ "$WHICH" = all ] || [ "$WHICH" = mudler ]; then
    # mudler/magpie-tts.cpp: CMake, ggml linked statically from third_party/ggml
    MUDLER=$DIR/mudler+magpie-tts.cpp
    checkout mudler/magpie-tts.cpp "$MUDLER" $MUDLER_COMMIT
    checkout ggml-org/ggml "$MUDLER/third_party/ggml" $MUDLER_GGML
    patch_once "$MUDLER" "$HERE/mudler.diff"
    # MAGPIE_BUILD_TESTS=OFF: tests/CMakeLists.txt lists test_tokenizer_parity.cpp, which this commit lacks
    configure "$MUDLER" "$MUDLER/build" "${O3[@]}" -DMAGPIE_BUILD_TESTS=OFF -DMAGPIE_BUILD_CLI=ON
    "$CMAKE" --build "$MUDLER/build" -j"$J"
    echo "mudler: $MUDLER/build/examples/cli/magpie-cli"
fi

if [ "$WHICH" = all ] || [ "$WHICH" = nemo-speech ]; then
    # NVIDIA/NeMo-Speech.cpp: its cpu-tts preset's settings (stock ggml; TTS only: no ASR, diarization, NMT, HTTP,
    # gRPC, Flashlight/KenLM, text normalization, microphone) plus the examples: synthesize_text is the one front
    # end that takes token ids
    NEMO=$DIR/NVIDIA+NeMo-Speech.cpp
    checkout NVIDIA/NeMo-Speech.cpp "$NEMO" $NEMO_COMMIT
    checkout ggml-org/ggml "$NEMO/ggml" $NEMO_GGML
    patch_once "$NEMO" "$HERE/nemo-speech.diff"
    configure "$NEMO" "$NEMO/build/cpu-tts" "${O3[@]}" \
        -DNEMO_SPEECH_GGML_PATCHED=OFF -DNEMO_SPEECH_BUILD_ASR=OFF -DNEMO_SPEECH_BUILD_DIAR=OFF \
        -DNEMO_SPEECH_BUILD_TTS=ON -DNEMO_SPEECH_BUILD_NMT=OFF -DNEMO_SPEECH_BUILD_CLI=ON \
        -DNEMO_SPEECH_BUILD_MIC_CAPTURE=OFF -DNEMO_SPEECH_BUILD_HTTP=OFF -DNEMO_SPEECH_BUILD_GRPC=OFF \
        -DNEMO_SPEECH_WITH_FLASHLIGHT=OFF -DNEMO_SPEECH_WITH_NORM=OFF \
        -DNEMO_SPEECH_BUILD_EXAMPLES=ON -DNEMO_SPEECH_BUILD_TESTS=OFF -DNEMO_SPEECH_BUILD_TOOLS=OFF
    "$CMAKE" --build "$NEMO/build/cpu-tts" -j"$J"
    echo "nemo-speech: $NEMO/build/cpu-tts/bin/synthesize_text"
fi
