#!/usr/bin/env bash
# The GPU figures ggtts measures, in one call of a lent GPU machine: each step capped in time, its log
# written under $OUT, a summary printed. Steps by name, in the order given (default: magpie omni, what fits a call):
#
#   bash benchmarks/gpu_session.sh [magpie] [omni] [omni-lanes] [magpie-compiled] [qwen2] [server] [lanes] [blocks]
#
#   magpie           gpu_magpie.py: the 357M shape with guidance, graph rows (codec graphed, codec eager), a
#                    profile (~1.5 min)
#   omni             gpu_qwen3omni.py: talker + code predictor, graph, unfused and compiled rows, profiles (~5 min)
#   omni-lanes       gpu_qwen3omni.py: 2/4/8 streams in the talker's static lanes (parallel=N: every lane's talker
#                    step one captured graph, their code-predictor frames another) against the graph row; code2wav's
#                    pushes eager and as graphs (~4 min)
#   magpie-compiled  gpu_magpie.py: the compiled steps, with guidance (~2 min)
#   qwen2            gpu_qwen2.py: OuteTTS's Qwen2, graph, unfused and compiled, f32 / q8_0 / q4_0 / q4_k files (~4 min)
#   server           server_load.py: 8 clients streaming from `ggtts serve` on that Magpie model, one copy and
#                    --replicas 8 (~3 min; needs the wheels of FastAPI, uvicorn, pydantic too)
#   lanes            bench_lanes.py: OuteTTS's Qwen2 (0.5B shape), 1/2/4/8 streams one by one and in static lanes
#                    (parallel=N: all streams' steps one captured graph), f32 and q8_0, then bfloat16 compiled (~4 min)
#   blocks           gpu_blocks.py: the common stored block types widened on the GPU, eager and compiled, checked
#                    against gguf-py; a product through each against the weight widened at load (~2 min)
#
# Together they take ~25 minutes (the estimates above), more than one device call's 10 and a session's 15: name the
# steps wanted (each is capped: a step past its cap is cut and the next runs).
#
# Before the call, here: the wheels the GPU machine lacks in .whl (gguf, soundfile, soxr, regex, cffi, pycparser:
# see the device README for `pip download`), and the skeletons of bench_magpie's files in .gpu:
#   python benchmarks/gguf_skeleton.py save DIR/magpie-357m-f32.gguf .gpu/magpie-357m-f32.json
#   python benchmarks/gguf_skeleton.py save DIR/codec.gguf .gpu/codec.json
# (both folders ignored by git, carried by the call). SMALL=1 runs every step on tiny models: a dry run on the CPU.
# Logs only come back (a call returns at most 8 files): each step's table is in its log.
set -u
OUT=${OUT:-/tmp/gpu-session}
mkdir -p "$OUT"
if [ "${SMALL:-0}" != 1 ] && compgen -G ".whl/*.whl" > /dev/null; then  # the GPU machine's Python 3.12
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks
fi
export PYTHONUNBUFFERED=1
B=benchmarks
SIZE=(--skeletons .gpu)
[ "${SMALL:-0}" = 1 ] && SIZE=(--small)
OMNI_SIZE=()
[ "${SMALL:-0}" = 1 ] && OMNI_SIZE=(--small)

step() {  # name, seconds at most, command...
    local name=$1 limit=$2
    shift 2
    echo "== $name (at most ${limit} s)"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "   exit $?"
    grep -E "^(device|variant|type|Q[0-9]|IQ[0-9]|ggtts|transformers|device busy|server|round|code2wav|# | +[0-9]|\| [a-z0-9]|  \(|  ordinary|  static)|Error" \
        "$OUT/$name.log" | cut -c1-220
}

for name in "${@:-magpie omni}"; do
    for one in $name; do
        case $one in
            magpie) step magpie 150 python3 $B/gpu_magpie.py "${SIZE[@]}" --frames 200 --dir /tmp/gpu-magpie \
                --variants graph,codec-eager --guidance on --profile 20 ;;
            omni) step omni 360 python3 $B/gpu_qwen3omni.py "${OMNI_SIZE[@]}" --frames 60 --dir /tmp/gpu-omni \
                --variants graph,unfused,compiled --profile 10 ;;
            omni-lanes) step omni-lanes 240 python3 $B/gpu_qwen3omni.py "${OMNI_SIZE[@]}" --frames 60 \
                --dir /tmp/gpu-omni --variants graph,lanes,decoder --streams 2,4,8 ;;
            magpie-compiled) step magpie-compiled 150 python3 $B/gpu_magpie.py "${SIZE[@]}" --frames 200 \
                --dir /tmp/gpu-magpie --variants compiled --guidance on ;;
            qwen2)
                small=()
                [ "${SMALL:-0}" = 1 ] && small=(--small)
                step qwen2 270 python3 $B/gpu_qwen2.py "${small[@]}" --variants graph,unfused,compiled \
                    --quantized q8_0,q4_0,q4_k --dir /tmp/gpu-qwen2 ;;
            server)
                if [ ! -f /tmp/gpu-magpie/magpie.gguf ]; then  # the magpie step builds it; alone, build it here
                    python3 $B/gpu_magpie.py "${SIZE[@]}" --frames 2 --dir /tmp/gpu-magpie --variants graph \
                        --guidance on > /dev/null 2>&1
                fi
                device=cuda
                [ "${SMALL:-0}" = 1 ] && device=cpu
                for n in 1 8; do
                    step server-$n 200 python3 $B/server_load.py -m /tmp/gpu-magpie/magpie.gguf --clients 8 \
                        --requests 16 --rounds 2 --server-args "--device $device --replicas $n"
                done ;;
            lanes)
                where=(--device cuda)
                [ "${SMALL:-0}" = 1 ] && where=(--small --static --device cpu)
                step lanes 200 python3 $B/bench_lanes.py "${where[@]}" --types f32,q8_0 --streams 1,2,4,8 \
                    --prompt 300 --new 300 --dir /tmp/gpu-lanes
                step lanes-bf16-compiled 150 python3 $B/bench_lanes.py "${where[@]}" --types f32 --streams 1,8 \
                    --prompt 300 --new 300 --dir /tmp/gpu-lanes --bfloat16 --compile ;;
            blocks)
                shape=()
                [ "${SMALL:-0}" = 1 ] && shape=(--rows 64 --cols 512 --reps 5)
                step blocks 150 python3 $B/gpu_blocks.py "${shape[@]}" --types q8_0,q4_0,q5_0,q4_k,q6_k,iq4_xs ;;
            *) echo "unknown step $one (magpie, omni, omni-lanes, magpie-compiled, qwen2, server, lanes, blocks)"; exit 2 ;;
        esac
    done
done
