#!/usr/bin/env bash
# `olmo-doctor check --fleet` on one 2-GPU machine (the nvidia-h200-x2 kind), in under 3 minutes:
#   1. two "nodes" of one GPU each: two torchrun agents on localhost (--nnodes 2 --nproc-per-node 1), each seeing
#      its own GPU, with distinct node names through OLMO_DOCTOR_NODE_NAME;
#   2. one node with two GPUs (--nproc-per-node 2).
# Both print the fleet table with measured all-reduce busbw. From the repo root: bash bench/fleet_gpu.sh
# Output goes to $OUT (the device tool's output folder) or ./bench-out. Like bench/gpu_suite.sh, our package is
# installed editable without touching the image's packages, and carried wheels in .whl/ (typer, rich, psutil,
# nvidia-ml-py, ...) go to /tmp/site.
set -uo pipefail
out="${OUT:-$PWD/bench-out}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q -e . --no-deps --no-build-isolation >"$out/install.log" 2>&1 || { tail -5 "$out/install.log"; exit 1; }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >>"$out/install.log" 2>&1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import typer, rich, packaging" 2>/dev/null || {
  echo "olmo-doctor needs typer, rich and packaging here: carry their wheels in .whl/ (see bench/gpu_suite.sh)"; exit 1; }
nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
run=(python3 -m torch.distributed.run)
fleet=(-m olmo_doctor check --fleet --scope train --fleet-timeout 40)

echo "== 2 nodes x 1 GPU (torchrun --nnodes 2 --nproc-per-node 1, localhost)"
start=$SECONDS; pids=()
for n in 0 1; do
  CUDA_VISIBLE_DEVICES=$n OLMO_DOCTOR_NODE_NAME="fake-node$n" timeout 100 "${run[@]}" --nnodes 2 --node-rank "$n" \
    --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29561 "${fleet[@]}" \
    >"$out/fleet_2x1.node$n.txt" 2>"$out/fleet_2x1.node$n.err" &
  pids+=($!)
done
for n in 0 1; do wait "${pids[$n]}"; echo "fake-node$n exit $?"; done
cat "$out/fleet_2x1.node0.txt"; echo "($((SECONDS - start)) s)"
grep -h -i -E "error|traceback" "$out"/fleet_2x1.node*.err | grep -v -i warn | tail -5

echo "== 1 node x 2 GPUs (torchrun --nproc-per-node 2)"
start=$SECONDS
timeout 100 "${run[@]}" --standalone --nproc-per-node 2 "${fleet[@]}" >"$out/fleet_1x2.txt" 2>"$out/fleet_1x2.err"
echo "exit $?"; cat "$out/fleet_1x2.txt"; echo "($((SECONDS - start)) s)"
timeout 60 "${run[@]}" --standalone --nproc-per-node 2 "${fleet[@]}" --json >"$out/fleet_1x2.json" 2>>"$out/fleet_1x2.err"
python3 - "$out/fleet_1x2.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
for t in data["allreduce"]:
    print(f"{t['name']}: busbw {t['busbw_gbps']} GB/s, expected {t['expected_gbps']} ({t['link']}), slow: {t['slow']}")
PY
