#!/usr/bin/env bash
# The GPU-machine runs behind bench/RESULTS.md, in one go (one lease). From the repo root on an H200 box:
#   bash bench/gpu_suite.sh [doctor|train|kernels|scale|all]  (kernels needs the sdist in .bench/, carried;
#                                                            scale needs 2+ GPUs: the nvidia-h200-x2 kind)
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
