#!/usr/bin/env bash
# The GPU-machine runs behind bench/RESULTS.md, in one go (one lease). From the repo root on an H200 box:
#   bash bench/gpu_suite.sh [doctor|train|kernels|kernels-all|olmo3|fp8|scale|wave3|all]
#     fp8: precision fp8 on this GPU (its GPU test), then OLMo 3 mode (a) with float8 for ours and OLMo-core
#     wave3: kernels-all (all three builds at once, about a job per core; no attention timings), then
#       OLMo 3 cost as sequences grow (bench/olmo3_throughput.py lengths, longest first) in what is left of
#       WAVE3_LIMIT seconds (default 530), then one summary table; NVCC_TIME=1 records nvcc's phase times
#     kernels, kernels-all and olmo3 need the carried sources and wheels of bench/fetch_sources.sh (.bench/, .whl/);
#     scale needs 2+ GPUs: the nvidia-h200-x2 kind
#     setup: only the installs (source it: `. bench/gpu_suite.sh setup` leaves PYTHONPATH set for what follows)
#     levers: issue 29's speed levers one at a time on OLMo 3 7B (8 layers, 1 x 8192, FA3 on both): FA3 built
#       first unless .gpuwheels/ carries it (the optimizer-overlap bench and the fp8 GPU tests run beside the
#       build), then LEVER_IMPLS side by side within LEVERS_LIMIT seconds (default 570); the FA3 wheel comes back
#       in 15 MiB parts (cat them into .gpuwheels/ for the next run)
# Results go to $OUT (the device tool's output folder) or ./bench-out. Carried wheels in .whl/ (OLMo-core and its
# pure-Python deps) are installed into /tmp/site; our package is installed editable without touching the image's
# packages.
set -uo pipefail
what="${1:-all}"
out="${OUT:-$PWD/bench-out}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q -e . --no-deps --no-build-isolation >"$out/install.log" 2>&1 || { tail -5 "$out/install.log"; exit 1; }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >>"$out/install.log" 2>&1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# kernels built by an earlier kernels-all run, carried back as wheels (gitignored .gpuwheels/, pytest in py/)
if [ -d .gpuwheels ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpuwheels/*.whl \
    $(compgen -G '.gpuwheels/py/*.whl') >>"$out/install.log" 2>&1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ "$what" = doctor ] || [ "$what" = all ]; then
  echo "== olmo-doctor check --json"; olmo-doctor check --json >"$out/check.json"; echo "exit $?"
  olmo-doctor check --json --nccl >"$out/check_nccl.json" 2>/dev/null; echo "check --nccl exit $?"
  echo "== olmo-doctor check"; olmo-doctor check | tail -25
  echo "== olmo-doctor verify"; olmo-doctor verify 2>&1 | tail -3
  echo "== check latency"; python3 bench/check_latency.py --runs 7
  echo "== prepare-data"; python3 bench/prepare_data.py --repeats 3 2>&1 | tail -4
  echo "== gpu tests"; python3 -m pytest -q -m gpu tests 2>&1 | tail -4
fi
if [ "$what" = train ] || [ "$what" = all ]; then
  echo "== train throughput"; python3 bench/train_throughput.py --out "$out/train_throughput.jsonl"
fi
if [ "$what" = fp8 ]; then
  python3 -c 'import torchao.float8' 2>/dev/null || echo "torchao does not import here: fp8 variants will fail"
  echo "== gpu test: precision fp8, compiled and graphed, against bf16"
  python3 -m pytest -q -m gpu tests/trainer/test_olmo_gpu.py -k fp8 2>&1 | tail -3
  echo "== olmo3 throughput (a) with float8, one GPU, 8 layers; $((585 - SECONDS)) s left"
  timeout $((585 - SECONDS)) python3 bench/olmo3_throughput.py one --layers 8 --out "$out/olmo3_fp8.jsonl" \
    --impls "${FP8_IMPLS:-olmo-core-compile:attn=flash_2;ours:attn=flex,fp8=1;ours:attn=flash_attn_3,fp8=1;olmo-core-compile:attn=flash_3,fp8=1;ours:attn=flex;ours:attn=flash_attn_3}" \
    2>&1 | grep -v -i warn
fi
if [ "$what" = scale ] || { [ "$what" = all ] && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; }; then
  echo "== FSDP2 scaling"
  NCCL_NVLS_ENABLE=0 python3 bench/fsdp_scaling.py --compile --variants 'reshard=1;reshard=0' 2>&1 | grep -v -i warn | tail -8
fi
if [ "$what" = kernels ] || [ "$what" = all ]; then
  echo "== build-kernels --subset olmo"
  python3 bench/build_kernels.py --sdist .bench/flash_attn-2.8.3.post2.tar.gz --keep-cache \
    --json "$out/build_kernels.json" >"$out/build_kernels.log" 2>&1; echo "exit $?"
  grep -E "GPU check|PASS|FAIL|end to end|faster" "$out/build_kernels.log"
  find /tmp -path '*olmo-bench-cache-*' -name 'flash_attn-*olmo*.whl' -exec cp {} "$out/" \; 2>/dev/null
fi
if [ "$what" = wave3 ]; then
  limit="${WAVE3_LIMIT:-530}"
  command -v git >/dev/null || { mkdir -p /tmp/nogit && printf '#!/bin/sh\nexit 0\n' >/tmp/nogit/git \
    && chmod +x /tmp/nogit/git && export PATH="/tmp/nogit:$PATH"; }
  echo "== wave3 1/2: kernels-all (flash-attn 2, FlashAttention-3, xformers at once); ${SECONDS} s in"
  # NVCC_TIME=1: every nvcc appends its per-phase times (gcc, cudafe++, cicc, ptxas, fatbinary) to one CSV, so a
  # slow unit shows which phase took the time on this host
  [ "${NVCC_TIME:-0}" = 1 ] && export NVCC_APPEND_FLAGS="--time $out/nvcc_time.csv"
  python3 bench/kernels_all.py --out "$out" --no-attn-times 2>&1 | tee "$out/kernels_all.txt"
  unset NVCC_APPEND_FLAGS
  echo "== wave3 2/2: OLMo 3 7B shape, 8 layers, cost as sequences grow; $((limit - SECONDS)) s left"
  timeout $((limit - SECONDS)) python3 bench/olmo3_throughput.py lengths --layers 8 --steps 3 --warmup 4 \
    --seqs "${WAVE3_SEQS:-65536,32768,16384,8192}" --out "$out/lengths.jsonl" --logs /tmp/lengths-logs 2>&1 \
    | grep -v -i warn | tee "$out/lengths.txt"
  [ -d /tmp/lengths-logs ] && tar czf "$out/lengths_logs.tgz" -C /tmp lengths-logs
  echo "== wave3 summary ($SECONDS s)"
  python3 bench/wave3_summary.py "$out" | tee "$out/summary.md"
  (cd "$out" && tar czf kernels_all_logs.tgz build_*.json build_*.log kernels_all.json install.log 2>/dev/null \
    && rm -f build_*.json build_*.log kernels_all.json install.log)
fi
if [ "$what" = levers ]; then
  limit="${LEVERS_LIMIT:-570}"
  command -v git >/dev/null || { mkdir -p /tmp/nogit && printf '#!/bin/sh\nexit 0\n' >/tmp/nogit/git \
    && chmod +x /tmp/nogit/git && export PATH="/tmp/nogit:$PATH"; }
  bpid=""
  if ! python3 -c 'import flash_attn_interface' 2>/dev/null; then
    python3 bench/build_kernels.py --package flash-attn-3 --sdist .bench/flash-attention-3-0251105a.tar.gz \
      --keep-cache --json "$out/fa3.json" >"$out/fa3.log" 2>&1 & bpid=$!
  fi
  echo "== the optimizer beside the GEMMs (two streams); ${SECONDS} s in"
  python3 bench/overlap.py 2>&1 | tee "$out/overlap.txt"
  echo "== gpu tests: fp8 (copies, fused projections) and the CUDA-graph step"
  python3 -m pytest -q -m gpu tests/trainer/test_olmo_gpu.py -k "fp8 or cuda_graph" 2>&1 | tail -3
  if [ -n "$bpid" ]; then
    wait "$bpid"; echo "FA3 build exit $? at ${SECONDS} s"; grep -E "GPU check|PASS|FAIL|end to end" "$out/fa3.log"
    : >"$out/wheels.txt"
    for w in $(find /tmp -path '*olmo-bench-cache-*' -name 'flash_attn_3-*.whl'); do
      basename "$w" | sed "s/^/flash_attn_3 /" >>"$out/wheels.txt"; split -b 15m -d "$w" "$out/flash_attn_3.part"
    done
  fi
  echo "== OLMo 3 7B, 8 layers, 1 x 8192: the levers side by side; $((limit - SECONDS)) s left"
  timeout $((limit - SECONDS)) python3 bench/olmo3_throughput.py one --layers 8 --out "$out/levers.jsonl" \
    --impls "${LEVER_IMPLS:-olmo-core-compile:attn=flash_3,fp8=1;ours:attn=flash_attn_3,fp8=swap;ours:attn=flash_attn_3,fp8=1;ours:attn=flash_attn_3,fp8=1,fuse=1}" \
    2>&1 | grep -v -i warn
  # archive (then drop) only the logs this run wrote: install.log always, the FA3 build's only when it built here
  logs="install.log"; [ -n "$bpid" ] && logs="$logs fa3.log fa3.json"
  (cd "$out" && tar czf levers_logs.tgz $logs 2>/dev/null && rm -f $logs)
fi
if [ "$what" = kernels-all ] || [ "$what" = kernels-all+olmo3 ]; then
  # hopper/setup.py runs `git submodule update` unconditionally (its result unused); an image without git would
  # make that a FileNotFoundError, so a no-op git stands in only when there is none
  command -v git >/dev/null || { mkdir -p /tmp/nogit && printf '#!/bin/sh\nexit 0\n' >/tmp/nogit/git \
    && chmod +x /tmp/nogit/git && export PATH="/tmp/nogit:$PATH"; }
  echo "== kernels-all: flash-attn 2, FlashAttention-3, xformers"
  python3 bench/kernels_all.py --out "$out"; echo "exit $?"
  echo "== gpu tests: flex and the installed kernels against SDPA"
  python3 -m pytest -q -m gpu tests/trainer/test_olmo_flex.py tests/trainer/test_olmo_gpu.py -k "flex or kernel_backends" \
    2>&1 | tail -4
  if [ "$what" = kernels-all+olmo3 ]; then  # what is left of a 10-minute command goes to issue 17's mode (a)
    echo "== olmo3 throughput (a), one GPU, 8 layers; $((585 - SECONDS)) s left"
    timeout $((585 - SECONDS)) python3 bench/olmo3_throughput.py one --layers 8 --out "$out/olmo3_one.jsonl" 2>&1 \
      | grep -v -i warn
  fi
  # the device returns at most 8 files of <= 16 MiB, named without '+': logs and JSON in one archive; the FA2/FA3
  # wheels (carried by the throughput run) in 15 MiB parts, their names in wheels.txt (cat the parts back)
  (cd "$out" && tar czf kernels_all_logs.tgz build_*.json build_*.log attn_times.* kernels_all.json install.log \
    2>/dev/null && rm -f build_*.json build_*.log attn_times.* kernels_all.json install.log)
  : >"$out/wheels.txt"
  for w in $(find /tmp -path '*olmo-bench-cache-*' \( -name 'flash_attn-*olmo*.whl' -o -name 'flash_attn_3-*.whl' \)); do
    part="$(basename "$w" | cut -d- -f1)"
    basename "$w" | sed "s/^/$part /" >>"$out/wheels.txt"
    split -b 15m -d "$w" "$out/$part.part"
  done
  ls -la "$out"
fi
