#!/usr/bin/env bash
# bench/faults.sh: inject faults into a throwaway copy of this machine's environment and check that
# `olmo-doctor check --json` gives the verdict each one must give. Nothing in the image is changed: every fault
# lives in a subshell (environment variables, ulimits) or in a temp folder (PATH shims, a fake toolkit, fake
# dist-info folders, a small tmpfs when the kernel lets us mount one).
#
#   bash bench/faults.sh            # from the repo root; on the GPU machine, python3 is the image's torch Python
#   PYTHON=.venv/bin/python bash bench/faults.sh   # on a dev box: the faults that need a GPU print n/a
#
#   bash bench/faults.sh --only 'ulimit|TMPDIR'   # just the faults whose name matches (an extended regex)
#
# Every fault is judged twice: with a warm cache (the torch worker's answer cached on the machine without the
# fault, so a cache key missing an input would answer for the clean machine) and with a cold one (an empty
# cache). Faults run in parallel (FAULT_JOBS, default half the CPUs, at most 8; at most one per CPU when set).
#
# Prints one row per fault: fault | expected | got | PASS/FAIL/n/a; exit 1 when any row FAILs (on either cache).
# Results also go to $OUT/faults.txt (the device tool's output folder) when OUT is set.
set -uo pipefail
only=""
if [ "${1:-}" = "--only" ]; then only="${2:-}"; shift 2; fi
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
repo="$PWD"
py="${PYTHON:-python3}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/olmo-faults.XXXXXX")"
mounted=()
cleanup() { for m in ${mounted[@]+"${mounted[@]}"}; do umount "$m" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
export XDG_CACHE_HOME="$tmp/cache"  # our caches go to the temp folder, not the image's home
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"

# typer / rich may be missing from the image's Python: install the carried wheels (.whl/) into the temp folder.
if ! "$py" -c 'import typer, rich, packaging' 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --target "$tmp/site" .whl/*.whl >/dev/null 2>&1
    export PYTHONPATH="$PYTHONPATH:$tmp/site"
  fi
  "$py" -c 'import typer, rich, packaging' 2>/dev/null \
    || { echo "faults.sh: $py lacks typer/rich/packaging and no wheels in .whl/; set PYTHON=..." >&2; exit 2; }
fi
has_gpu=0
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && has_gpu=1

# --- shims and fakes, all under $tmp ------------------------------------------------------------------------
mkdir -p "$tmp/bin" "$tmp/newgcc" "$tmp/cuda-11.0/bin" "$tmp/cuda-11.0/include/crt" "$tmp/empty-cuda" "$tmp/stub" \
         "$tmp/kernel/site-packages/flash_attn-2.8.3.dist-info" \
         "$tmp/unmet/site-packages/olmo_doctor-0.1.0.dist-info" "$tmp/unmet/site-packages/fault_demo-1.0.dist-info"
cat > "$tmp/newgcc/g++" <<'EOF'
#!/bin/sh
# a compiler newer than any nvcc accepts
case "$1" in -dumpfullversion|-dumpversion) echo 99.1.0 ;; --version) echo "g++ (GCC) 99.1.0" ;; *) exit 1 ;; esac
EOF
cat > "$tmp/cuda-11.0/bin/nvcc" <<'EOF'
#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release 11.0, V11.0.221"
EOF
echo '#if __GNUC__ > 9' > "$tmp/cuda-11.0/include/crt/host_config.h"
: > "$tmp/cuda-11.0/include/cuda_runtime.h"
chmod +x "$tmp/newgcc/g++" "$tmp/cuda-11.0/bin/nvcc"
printf 'Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n' \
  > "$tmp/kernel/site-packages/flash_attn-2.8.3.dist-info/METADATA"
# a kernel built for another torch: its extension module fails the way such a .so does
echo 'raise ImportError("flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")' \
  > "$tmp/kernel/site-packages/flash_attn_2_cuda.py"
printf 'Metadata-Version: 2.1\nName: olmo-doctor\nVersion: 0.1.0\nRequires-Dist: ninja>=99\n' \
  > "$tmp/unmet/site-packages/olmo_doctor-0.1.0.dist-info/METADATA"
printf 'Metadata-Version: 2.1\nName: fault-demo\nVersion: 1.0\nRequires-Dist: packaging<1\n' \
  > "$tmp/unmet/site-packages/fault_demo-1.0.dist-info/METADATA"
tiny=""
if mkdir -p "$tmp/full" && mount -t tmpfs -o size=2m tmpfs "$tmp/full" 2>/dev/null; then
  mounted+=("$tmp/full"); tiny="$tmp/full"
fi
noexec=""  # a folder on a noexec mount: libraries compiled there cannot be loaded
if mkdir -p "$tmp/noexec" && mount -t tmpfs -o noexec,size=8m tmpfs "$tmp/noexec" 2>/dev/null; then
  mounted+=("$tmp/noexec"); noexec="$tmp/noexec"
fi
ro=""  # a read-only mount: a cache or temp folder that cannot be written
if mkdir -p "$tmp/ro" && mount -t tmpfs -o ro,size=1m tmpfs "$tmp/ro" 2>/dev/null; then
  mounted+=("$tmp/ro"); ro="$tmp/ro"
fi
gpus=0
[ "$has_gpu" = 1 ] && gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
# a private mount namespace (root, unshare): a read-only /dev/shm for one check without touching the machine's
mountns=0
unshare -m --propagation private sh -c 'mount -t tmpfs -o ro,size=1m tmpfs /dev/shm' 2>/dev/null && mountns=1
# an address-space limit below what importing torch maps here (and above what olmo-doctor itself needs)
vm_low=""
vm_torch="$("$py" -c 'import re, torch; print(re.search(r"VmPeak:\s+(\d+)", open("/proc/self/status").read()).group(1))' 2>/dev/null)"
[ -n "$vm_torch" ] && [ "$vm_torch" -gt 1200000 ] && vm_low=$(( vm_torch * 3 / 4 ))
: > "$tmp/afile"  # a file where a folder is expected
# kernels whose extension fails in the real loader (copies of torch's own _C, patched): bench/fake_kernels.py
for spec in "fa3:flash_attn_3:undefined-symbol" "xformers:xformers:missing-library" "torchao:torchao:truncated" \
            "fa2:flash_attn:truncated" "arch:flash_attn:other-arch"; do
  IFS=: read -r dir kernel kind <<< "$spec"
  "$py" bench/fake_kernels.py "$tmp/fk-$dir" "$kernel" "$kind" >/dev/null 2>&1 || rm -rf "$tmp/fk-$dir"
done
# the CUDA toolkit's stub libcuda (for linking only), found where the loader looks for the real one
stub="$(ls /usr/local/cuda*/lib64/stubs/libcuda.so /usr/local/cuda*/targets/*/lib/stubs/libcuda.so 2>/dev/null | head -n1)"
[ -n "$stub" ] && ln -s "$stub" "$tmp/stub/libcuda.so.1"
noib=1
compgen -G "/sys/class/infiniband/*" >/dev/null && noib=0
nonroot=0
[ "$(id -u)" != 0 ] && nonroot=1

# --- the faults: name | scope | needs (gpu, tmpfs, ... or -) | expected "CODE severity" (or "root:CODE": the one
#     root error the fault adds, its consequences nested under it; or "quiet": no error or warning the machine did
#     not have) | the setup run in the subshell before check (`wrap=(...)`: a command check runs under) ---------
FAULTS=(
  "gpus hidden: CUDA_VISIBLE_DEVICES=|train|gpu|OD004 error|export CUDA_VISIBLE_DEVICES="
  "gpus hidden: CUDA_VISIBLE_DEVICES=-1|train|gpu|OD004 error|export CUDA_VISIBLE_DEVICES=-1"
  "gpus hidden: index past the last GPU|train|gpu|OD004 error|export CUDA_VISIBLE_DEVICES=17"
  "CC=/usr/bin/gcc-99 (missing compiler)|all|-|OD176 error|export CC=/usr/bin/gcc-99"
  "CXX=g++-99 not on PATH|all|-|OD176 error|export CXX=g++-99"
  "too-new host compiler (g++ 99)|install|gpu|OD175 error|export CXX=$tmp/newgcc/g++ CUDAHOSTCXX=$tmp/newgcc/g++"
  "stale nvcc 11.0 first on PATH|install|gpu|root:OD110|unset CUDA_HOME CUDA_PATH; export PATH=$tmp/cuda-11.0/bin:\$PATH"
  "CUDA_HOME without nvcc|install|gpu|OD118 error|export CUDA_HOME=$tmp/empty-cuda"
  "TORCH_CUDA_ARCH_LIST misses the GPU|install|gpu|OD143 warning|export TORCH_CUDA_ARCH_LIST=7.0"
  "TORCH_CUDA_ARCH_LIST too new for nvcc|install|gpu|OD131 error|export TORCH_CUDA_ARCH_LIST=13.9"
  "MAX_JOBS far above memory|install|-|OD210 warning|export MAX_JOBS=100000"
  "open files ulimit 1024|train|-|OD227 warning|ulimit -n 1024"
  "NCCL_P2P_DISABLE=1 left set|train|-|OD224 warning|export NCCL_P2P_DISABLE=1"
  "NCCL_SOCKET_NTHREADS=32|train|-|OD223 warning|export NCCL_SOCKET_NTHREADS=32"
  "flash-attn built for another torch|install|-|OD160 error|export PYTHONPATH=$tmp/kernel/site-packages:\$PYTHONPATH"
  "flash-attn broken, plain check|all|-|OD160 warning|export PYTHONPATH=$tmp/kernel/site-packages:\$PYTHONPATH"
  "trainer requirement unmet (ninja>=99)|all|-|OD206 error|export PYTHONPATH=$tmp/unmet/site-packages:\$PYTHONPATH"
  "other package requirement unmet|all|-|OD207 warning|export PYTHONPATH=$tmp/unmet/site-packages:\$PYTHONPATH"
  "full disk: TMPDIR on a 2 MB tmpfs|all|tmpfs|OD230 error|export TMPDIR=$tiny"
  # the machine as training meets it: limits, folders, variables named against the machine, kernels that do not load
  "CPU-time limit (ulimit -t 3600)|train|-|OD271 error|ulimit -t 3600"
  "file-size limit (ulimit -f 1000000)|train|-|OD272 error|ulimit -f 1000000"
  "process limit (ulimit -u 256) as a user|train|nonroot|OD273 error|ulimit -u 256"
  "CUDA_VISIBLE_DEVICES=0,0 (a repeated index)|train|gpu|OD004 error|export CUDA_VISIBLE_DEVICES=0,0"
  "CUDA_VISIBLE_DEVICES=0,99 (an entry past the last GPU)|train|gpu|OD287 warning|export CUDA_VISIBLE_DEVICES=0,99"
  "GLOO_SOCKET_IFNAME names no interface|train|-|OD283 error|export GLOO_SOCKET_IFNAME=nope0"
  "NCCL_IB_DISABLE=true (not a number)|train|-|OD286 warning|export NCCL_IB_DISABLE=true"
  "NCCL_NET=IB without RDMA devices|train|noib|OD285 error|export NCCL_NET=IB"
  "TRITON_CACHE_DIR under a file|train|-|OD275 error|export TRITON_CACHE_DIR=$tmp/afile/triton"
  "HOME is a file (Triton's cache lives under it)|train|-|OD275 error|unset TRITON_CACHE_DIR TRITON_HOME; export HOME=$tmp/afile"
  "TMPDIR names a missing folder|install|-|OD276 error|export TMPDIR=$tmp/no-such-dir"
  "PYTORCH_ALLOC_CONF=backend:cudaMalloc|train|-|OD277 error|export PYTORCH_ALLOC_CONF=backend:cudaMalloc"
  "LD_LIBRARY_PATH with the toolkit's stub libcuda|train|stub|OD282 error|export LD_LIBRARY_PATH=$tmp/stub\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  "xformers extension needs a missing library|all|fk-xformers|OD291 warning|export PYTHONPATH=$tmp/fk-xformers:\$PYTHONPATH"
  "FlashAttention-3 built against another torch|install|fk-fa3|OD292 error|export PYTHONPATH=$tmp/fk-fa3:\$PYTHONPATH"
  "torchao extension truncated|train|fk-torchao|OD290 warning|export PYTHONPATH=$tmp/fk-torchao:\$PYTHONPATH"
  # settings every process of a run inherits, limits, shared memory, mounts, and a device name of no GPU
  "CUDA_LAUNCH_BLOCKING=1 left on|train|-|OD294 warning|export CUDA_LAUNCH_BLOCKING=1"
  "PYTORCH_NO_CUDA_MEMORY_CACHING=1 left on|train|-|OD294 warning|export PYTORCH_NO_CUDA_MEMORY_CACHING=1"
  "TORCH_CUDA_SANITIZER=1 left on|train|-|OD294 warning|export TORCH_CUDA_SANITIZER=1"
  "TORCH_DISTRIBUTED_DEBUG=DETAIL left on|train|-|OD294 warning|export TORCH_DISTRIBUTED_DEBUG=DETAIL"
  "OMP_NUM_THREADS=0 (OpenMP ignores it, torchrun keeps it)|train|-|OD295 warning|export OMP_NUM_THREADS=0"
  "NCCL_SOCKET_FAMILY=IPv4 (must be AF_INET)|train|-|OD286 warning|export NCCL_SOCKET_FAMILY=IPv4"
  "NCCL_IB_GID_INDEX=three (not a number)|train|-|OD286 warning|export NCCL_IB_GID_INDEX=three"
  "LD_PRELOAD names a library that is not there|train|-|OD296 warning|export LD_PRELOAD=$tmp/no-such-dir/libjemalloc.so.2"
  "/dev/shm read-only (private mount namespace)|train|mountns|OD298 warning|wrap=(unshare -m --propagation private sh -c 'mount -t tmpfs -o ro,size=1m tmpfs /dev/shm && exec \"\$@\"' sh)"
  "CUDA_VISIBLE_DEVICES=GPU-<UUID of no GPU here>|train|gpu|OD004 error|export CUDA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000"
  "TORCHINDUCTOR_CACHE_DIR on a noexec mount|train|noexec|OD274 error|export TORCHINDUCTOR_CACHE_DIR=$noexec/inductor"
  "TMPDIR on a noexec mount (inductor's default cache)|train|noexec|OD274 error|unset TORCHINDUCTOR_CACHE_DIR; export TMPDIR=$noexec"
  "ulimit -v below what importing torch maps|train|vmlow|OD270 error|ulimit -v $vm_low"
  "ulimit -v 4000000 on a GPU (CUDA cannot start)|train|gpu|OD270 error|ulimit -v 4000000"
  # read-only folders, allocator values torch refuses at the first allocation, a kernel for another processor
  "HOME on a read-only mount (Triton's default cache)|train|ro|OD275 error|unset TRITON_CACHE_DIR TRITON_HOME; export HOME=$ro"
  "TRITON_CACHE_DIR on a read-only mount|train|ro|OD275 error|export TRITON_CACHE_DIR=$ro/triton"
  "TMPDIR on a read-only mount (nvcc's temporary files)|install|ro|OD276 error|export TMPDIR=$ro"
  "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:1.5|train|-|OD277 error|export PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:1.5"
  "flash-attn extension built for another processor|install|fk-arch|OD290 error|export PYTHONPATH=$tmp/fk-arch:\$PYTHONPATH"
  # the faults that first showed the need for live checks, kept here so every device run repeats them
  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe|train|-|OD277 error|export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe"
  "TORCHINDUCTOR_CACHE_DIR under a file|train|-|OD274 error|export TORCHINDUCTOR_CACHE_DIR=$tmp/afile/inductor"
  "NCCL_SOCKET_IFNAME names no interface (several GPUs)|train|multigpu|OD225 error|export NCCL_SOCKET_IFNAME=nope0"
  "flash-attn extension truncated, install scope|install|fk-fa2|OD290 error|export PYTHONPATH=$tmp/fk-fa2:\$PYTHONPATH"
  "flash-attn extension truncated, plain check|all|fk-fa2|OD290 warning|export PYTHONPATH=$tmp/fk-fa2:\$PYTHONPATH"
  # no false alarm: torch reads "0" as off (c10::utils::check_env)
  "PYTORCH_NO_CUDA_MEMORY_CACHING=0 (torch reads 0 as off)|train|-|quiet|export PYTORCH_NO_CUDA_MEMORY_CACHING=0"
  # no false alarm: the container runtime reads this only when the container starts
  "NVIDIA_VISIBLE_DEVICES=none set in a running container|train|-|quiet|export NVIDIA_VISIBLE_DEVICES=none"
)

judge() {  # judge JSON EXPECTED BASELINE_JSON -> prints "got<TAB>verdict"
  "$py" - "$1" "$2" "$3" <<'EOF'
import json, sys
path, expected, baseline = sys.argv[1:4]
try:
    data = json.load(open(path))
except Exception as e:
    print(f"no JSON ({type(e).__name__})\tFAIL"); sys.exit()
roots = data.get("findings", [])
flat = [(f["code"], f["severity"], None) for f in roots]
flat += [(c["code"], c["severity"], f["code"]) for f in roots for c in f.get("consequences", [])]
got = ", ".join(f"{c} {s}" + (f" (under {r})" if r else "") for c, s, r in flat) or "nothing"
if expected == "quiet":
    # the fault adds no error or warning the machine did not already have (and check still answered)
    try:
        base = json.load(open(baseline)).get("findings", [])
    except Exception:
        base = []
    before = {f["code"] for f in base} | {c["code"] for f in base for c in f.get("consequences", [])}
    ok = not [c for c, s, _ in flat if s in ("error", "warning") and c not in before]
elif expected.startswith("root:"):
    # the fault adds exactly one root error (what the machine already had without it does not count)
    try:
        before = {f["code"] for f in json.load(open(baseline)).get("findings", []) if f["severity"] == "error"}
    except Exception:
        before = set()
    errors = [f["code"] for f in roots if f["severity"] == "error" and f["code"] not in before]
    ok = errors == [expected[5:]]
else:
    code, sev = expected.split()
    ok = any(c == code and s == sev for c, s, _ in flat)
print(f"{got}\t{'PASS' if ok else 'FAIL'}")
EOF
}

fails=0
report="${OUT:+$OUT/faults.txt}"
row() { printf '%-48s | %-13s | %-60s | %s\n' "$1" "$2" "$3" "$4"; [ -z "$report" ] || printf '%s | %s | %s | %s\n' "$@" >> "$report"; }
check() { ${wrap[@]+"${wrap[@]}"} "$py" -m olmo_doctor.cli check --json --scope "$@"; }  # wrap: a fault's namespace
for scope in all install train; do  # the machine without any fault (warms the shared cache), for "only root"
  check "$scope" > "$tmp/baseline-$scope.json" 2>/dev/null
done

skip_reason() {  # why a fault cannot run here, or nothing
  case "$1" in
    gpu) [ "$has_gpu" = 1 ] || echo "(no NVIDIA GPU here)" ;;
    tmpfs) [ -n "$tiny" ] || echo "(cannot mount a tmpfs here)" ;;
    stub) { [ "$has_gpu" = 1 ] && [ -e "$tmp/stub/libcuda.so.1" ]; } || echo "(no GPU or no CUDA stub libcuda here)" ;;
    noib) [ "$noib" = 1 ] || echo "(this machine has RDMA devices)" ;;
    nonroot) [ "$nonroot" = 1 ] || echo "(root is exempt from ulimit -u)" ;;
    fk-*) [ -d "$tmp/$1" ] || echo "(could not make the fake kernel: no torch here)" ;;
    mountns) [ "$mountns" = 1 ] || echo "(no private mount namespace here: needs root and unshare)" ;;
    noexec) [ -n "$noexec" ] || echo "(cannot mount a noexec tmpfs here)" ;;
    ro) [ -n "$ro" ] || echo "(cannot mount a read-only tmpfs here)" ;;
    multigpu) [ "$gpus" -ge 2 ] || echo "(fewer than two GPUs: one GPU needs no NCCL interface)" ;;
    vmlow) [ -n "$vm_low" ] || echo "(torch maps too little here to place a limit between)" ;;
  esac
}

run_fault() {  # run_fault INDEX: the fault's check with the warm shared cache, then with an empty one
  local i="$1" name scope needs expected setup
  IFS='|' read -r name scope needs expected setup <<< "${FAULTS[$i]}"
  ( eval "$setup"; XDG_CACHE_HOME="$tmp/cache" check "$scope" > "$tmp/f$i.warm.json" 2> "$tmp/f$i.warm.err" )
  ( eval "$setup"; XDG_CACHE_HOME="$tmp/cold-$i" check "$scope" > "$tmp/f$i.cold.json" 2> "$tmp/f$i.cold.err" )
}

cpus="$(nproc 2>/dev/null || echo 2)"
jobs_max="${FAULT_JOBS:-$(( cpus / 2 < 8 ? cpus / 2 : 8 ))}"  # FAULT_JOBS: up to one per CPU
[ "$jobs_max" -ge 1 ] || jobs_max=1
[ "$jobs_max" -le "$cpus" ] || jobs_max="$cpus"
selected=()
for i in "${!FAULTS[@]}"; do
  IFS='|' read -r name scope needs expected setup <<< "${FAULTS[$i]}"
  if [ -n "$only" ] && ! [[ "$name" =~ $only ]]; then continue; fi
  selected+=("$i")
  [ -n "$(skip_reason "$needs")" ] && continue
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  run_fault "$i" &
done
wait

row "fault" "expected" "got (warm cache; cold if it differs)" "verdict"
for i in "${selected[@]}"; do
  IFS='|' read -r name scope needs expected setup <<< "${FAULTS[$i]}"
  reason="$(skip_reason "$needs")"
  if [ -n "$reason" ]; then row "$name" "$expected" "$reason" "n/a"; continue; fi
  IFS=$'\t' read -r warm warm_verdict <<< "$(judge "$tmp/f$i.warm.json" "$expected" "$tmp/baseline-$scope.json")"
  IFS=$'\t' read -r cold cold_verdict <<< "$(judge "$tmp/f$i.cold.json" "$expected" "$tmp/baseline-$scope.json")"
  got="$warm"
  [ "$cold" = "$warm" ] || got="warm: $warm; cold: $cold"
  verdict=PASS
  if [ "$warm_verdict" != PASS ] || [ "$cold_verdict" != PASS ]; then
    verdict=FAIL; fails=$((fails + 1))
    got="$got $(head -c 200 "$tmp/f$i.warm.err" | tr '\n' ' ')"
  fi
  row "$name" "$expected" "$got" "$verdict"
done
echo "faults failed: $fails"
[ "$fails" = 0 ]
