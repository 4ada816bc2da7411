#!/usr/bin/env bash
# Real-size Wan2.1, HunyuanVideo, HunyuanVideo-1.5, Cosmos-Predict2.5 and Cosmos3 steps on one lent GPU (an H200): vidax (JAX)
# against diffusers (PyTorch), in one call of under 8 minutes. Run from the repository root: `bash bench/gpu.sh`. Results: one JSON per
# part in $OUT (the device tool's output folder, at most 8 files come back: this writes 8, the machine's
# description inside matmul.json; ./gpu-results elsewhere), the log on stdout; then, back on the CPU machine:
#   python bench/gpu_step.py report <that folder>     # writes the "GPU" section of docs/benchmarks.md
#
# GPU_BENCH_PARTS picks the groups, in this order: "wan13 hv hv15 cosmos cosmos3 ltx2 wan14"; the default is "wan13 hv wan14" (the
# device returns at most 8 files: these 7 parts and the matmul). E.g. GPU_BENCH_PARTS=hv for the HunyuanVideo pair
# alone, GPU_BENCH_PARTS=hv15 for the HunyuanVideo-1.5 pair, GPU_BENCH_PARTS=cosmos for the Cosmos-Predict2.5 pair,
# GPU_BENCH_PARTS=cosmos3 for the Cosmos3 Edge pair (832x480x121, its und prefill timed apart), GPU_BENCH_PARTS=ltx2
# for the LTX-2.5 22B-width pair (1216x704x121 with its 126 audio frames) (about 2-3 minutes each). With all groups the 14B parts,
# last, get what is left of the budget. GPU_BENCH_DRY_RUN=1 prints the parts' commands and runs none (a check on any
# machine).
#
# The device image has JAX (CUDA), Flax and PyTorch but not diffusers: carry it as wheels in .whl/
# (ignored by git, see /work/.library/device/README.md), e.g. here, once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#       diffusers==0.42.1 importlib_metadata
# and call the device with carry [".whl"] and timeout_s 540. Without .whl/ the diffusers parts are
# recorded as failed and the vidax parts still run.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
BUDGET=${GPU_BENCH_BUDGET_S:-450}   # whole script, seconds (under 8 minutes with the install)
STEPS_13B=${STEPS_13B:-3}           # timed steps after one warm-up step
STEPS_14B=${STEPS_14B:-1}
STEPS_HV=${STEPS_HV:-2}             # HunyuanVideo 13B width, 2 + 4 blocks, 1280x720x129: timed steps after one warm-up
STEPS_HV15=${STEPS_HV15:-2}         # HunyuanVideo-1.5 8.3B width, 2 blocks, 1280x720x121, CFG: timed steps after a warm-up
STEPS_COSMOS=${STEPS_COSMOS:-2}     # Cosmos-Predict2.5 2B width, 2 blocks, 1280x704x93, CFG: timed steps after a warm-up
STEPS_COSMOS3=${STEPS_COSMOS3:-3}   # Cosmos3 Edge width, 2 layers, 832x480x121, CFG: timed steps after a warm-up
STEPS_LTX2=${STEPS_LTX2:-3}         # LTX-2.5 22B width, 2 blocks, 1216x704x121 with audio, CFG: timed steps after a warm-up
PARTS=" ${GPU_BENCH_PARTS:-wan13 hv wan14} "
ATTENTION_14B=${ATTENTION_14B:-cudnn}  # attention_impl of the 14B run: chunked, or cudnn where the engine has it
                                     # (an engine without it fails that part; one that refuses a call falls back)

DRY=${GPU_BENCH_DRY_RUN:-0}

if [ "$DRY" = 0 ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}

part() {  # part CAP_S ARGS...: one gpu_step.py part in its own process, capped by the time left
  local cap=$1; shift
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 30 ]; then echo "== skip $* (${left}s left)"; return 0; fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo "== $* (cap ${cap}s, ${SECONDS}s elapsed)"
  if [ "$DRY" != 0 ]; then echo "dry-run: python3 bench/gpu_step.py $* --out-dir $OUT"; return 0; fi
  timeout --kill-after=10 "$cap" python3 bench/gpu_step.py "$@" --out-dir "$OUT" || echo "== part failed or capped: $*"
}

want() { [[ "$PARTS" == *" $1 "* ]]; }

# estimate: no device needed (`gpu_step.py report` computes it here); matmul also records the machine
part 45 matmul
if want wan13; then
  part 80 vidax --model 1.3b-480p --steps "$STEPS_13B" --attention chunked
  part 70 diffusers --model 1.3b-480p --steps "$STEPS_13B"
  part 60 vidax --model 1.3b-480p --steps "$STEPS_13B" --attention cudnn
fi
if want hv; then
  part 75 diffusers --model hv-720p --steps "$STEPS_HV"
  part 110 vidax --model hv-720p --steps "$STEPS_HV" --attention auto
fi
if want hv15; then
  part 90 diffusers --model hv15-720p --steps "$STEPS_HV15"
  part 110 vidax --model hv15-720p --steps "$STEPS_HV15" --attention auto
fi
if want cosmos; then
  part 90 diffusers --model cosmos-720p --steps "$STEPS_COSMOS"
  part 110 vidax --model cosmos-720p --steps "$STEPS_COSMOS" --attention auto
fi
if want cosmos3; then
  part 90 diffusers --model cosmos3-edge-480p --steps "$STEPS_COSMOS3"
  part 110 vidax --model cosmos3-edge-480p --steps "$STEPS_COSMOS3" --attention auto
fi
if want ltx2; then
  part 90 diffusers --model ltx2-22b-704p --steps "$STEPS_LTX2"
  part 110 vidax --model ltx2-22b-704p --steps "$STEPS_LTX2" --attention auto
fi
if want wan14; then
  part 90 diffusers --model 14b-720p --steps "$STEPS_14B"
  part 240 vidax --model 14b-720p --steps "$STEPS_14B" --attention "$ATTENTION_14B"
fi
echo "== done in ${SECONDS}s; results in $OUT"
if [ "$DRY" = 0 ]; then ls -la "$OUT"; fi
