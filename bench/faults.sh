#!/usr/bin/env bash
# bench/faults.sh: inject faults into a throwaway copy of this machine's environment and check that
# `olmo-doctor check --json` gives the verdict each one must give. Nothing in the image is changed: every fault
# lives in a subshell (environment variables, ulimits) or in a temp folder (PATH shims, a fake toolkit, fake
# dist-info folders, a small tmpfs when the kernel lets us mount one).
#
#   bash bench/faults.sh            # from the repo root; on the GPU machine, python3 is the image's torch Python
#   PYTHON=.venv/bin/python bash bench/faults.sh   # on a dev box: the faults that need a GPU print n/a
#
# Prints one row per fault: fault | expected | got | PASS/FAIL/n/a; exit 1 when any row FAILs. Results also go
# to $OUT/faults.txt (the device tool's output folder) when OUT is set.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
repo="$PWD"
py="${PYTHON:-python3}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/olmo-faults.XXXXXX")"
mounted=""
cleanup() { [ -z "$mounted" ] || umount "$mounted" 2>/dev/null; rm -rf "$tmp"; }
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
mkdir -p "$tmp/bin" "$tmp/newgcc" "$tmp/cuda-11.0/bin" "$tmp/cuda-11.0/include/crt" "$tmp/empty-cuda" \
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
  mounted="$tmp/full"; tiny="$tmp/full"
fi

# --- the faults: name | scope | needs (gpu, tmpfs or -) | expected "CODE severity" (or "root:CODE": the one
#     root error the fault adds, its consequences nested under it) | the setup run in the subshell before check ----------------------------------------------------
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
if expected.startswith("root:"):
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
row() { printf '%-40s | %-13s | %-60s | %s\n' "$1" "$2" "$3" "$4"; [ -z "$report" ] || printf '%s | %s | %s | %s\n' "$@" >> "$report"; }
for scope in all install train; do  # the machine without any fault, for the "only root" comparisons
  "$py" -m olmo_doctor.cli check --json --scope "$scope" > "$tmp/baseline-$scope.json" 2>/dev/null
done
row "fault" "expected" "got" "verdict"
for spec in "${FAULTS[@]}"; do
  IFS='|' read -r name scope needs expected setup <<< "$spec"
  if [ "$needs" = gpu ] && [ "$has_gpu" = 0 ]; then row "$name" "$expected" "(no NVIDIA GPU here)" "n/a"; continue; fi
  if [ "$needs" = tmpfs ] && [ -z "$tiny" ]; then row "$name" "$expected" "(cannot mount a tmpfs here)" "n/a"; continue; fi
  out="$tmp/$(echo "$name" | tr -c 'A-Za-z0-9' '_').json"
  ( eval "$setup"; "$py" -m olmo_doctor.cli check --json --scope "$scope" > "$out" 2> "$out.err" )
  IFS=$'\t' read -r got verdict <<< "$(judge "$out" "$expected" "$tmp/baseline-$scope.json")"
  [ "$verdict" = PASS ] || { fails=$((fails + 1)); got="$got $(head -c 200 "$out.err" | tr '\n' ' ')"; }
  row "$name" "$expected" "$got" "$verdict"
done
echo "faults failed: $fails"
[ "$fails" = 0 ]
