#!/usr/bin/env bash
# install.sh: set up .venv for olmo-doctor and the bundled OLMo trainer on this machine.
#
#   ./install.sh                      # CPU torch on a machine without an NVIDIA GPU, a CUDA torch the driver can run otherwise
#   ./install.sh --dry-run            # print the Python, torch requirement and wheel index it would use, and why; change nothing
#   ./install.sh --use-system-torch   # keep the torch the base Python already has (venv with system site-packages)
#   ./install.sh --torch 'torch==2.11.0' --torch-index https://download.pytorch.org/whl/cu128
#   ./install.sh --allow-cuda-torch   # no GPU and no CPU wheel index reachable: take PyPI's CUDA torch (several GB)
#
# The wheel index comes from the table in olmo_doctor/compat/wheels.py (the same one `olmo-doctor check` judges with).
# Idempotent: a second run with the same options and an unchanged pyproject.toml only checks and returns.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-}"
torch_spec="${OLMO_TORCH_SPEC:-}"
torch_index="${OLMO_TORCH_INDEX:-}"
use_system_torch=0
dry_run=0
allow_cuda_torch="${OLMO_ALLOW_CUDA_TORCH:-0}"

die() { echo "install.sh: $*" >&2; exit 2; }
say() { echo "==> $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --use-system-torch) use_system_torch=1 ;;
    --dry-run) dry_run=1 ;;
    --torch) [ $# -ge 2 ] || die "--torch needs a requirement, e.g. --torch 'torch==2.11.0'"; torch_spec="$2"; shift ;;
    --torch-index) [ $# -ge 2 ] || die "--torch-index needs a URL"; torch_index="$2"; shift ;;
    --python) [ $# -ge 2 ] || die "--python needs an interpreter path"; python="$2"; shift ;;
    --allow-cuda-torch) allow_cuda_torch=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see ./install.sh --help)" ;;
  esac
  shift
done

# What the machine has: driver and GPUs from nvidia-smi (nothing when there is no working NVIDIA driver).
# Older drivers do not know the compute_cap field; the GPU name is then looked up in olmo_doctor/compat/gpus.py.
driver=""
gpus=()
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  if rows="$(nvidia-smi --query-gpu=driver_version,compute_cap,name --format=csv,noheader 2>/dev/null)"; then :
  else rows="$(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>/dev/null | sed 's/,/,,/')" || rows=""; fi
  while IFS=, read -r drv cc name; do
    [ -n "$drv" ] || continue
    driver="$(echo "$drv" | tr -d ' ')"
    gpus+=(--gpu "$(echo "$name" | sed 's/^ *//; s/ *$//')|$(echo "$cc" | tr -d ' ')")
  done <<< "$rows"
fi

# Ask the wheel table, with one candidate Python after another, until one fits current torch. The answer comes
# back as key=value lines; they are read as data, never evaluated.
declare -A pick=()
ask() {  # ask PYTHON: fill $pick from `python -m olmo_doctor.compat pick`
  pick=()
  local ver out line
  ver="$("$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)" || return 1
  out="$(cd "$here" && PYTHONPATH="$here" "$1" -m olmo_doctor.compat pick --python "$ver" \
         --arch "$(uname -m)" ${driver:+--driver "$driver"} ${gpus[@]+"${gpus[@]}"} 2>&1)" || true
  while IFS= read -r line; do
    case "$line" in *=*) pick["${line%%=*}"]="${line#*=}" ;; esac
  done <<< "$out"
  pick[python_version]="$ver"
  [ -n "${pick[why]:-}" ] || pick[why]="$1 cannot read the wheel table ($(echo "$out" | tail -n1))"
}
if [ -n "$python" ]; then
  command -v "$python" >/dev/null 2>&1 || die "--python $python: no such interpreter"
  ask "$python" || die "$python does not run"
else
  for cand in python3 python3.14 python3.13 python3.12 python3.11 python3.10 python3.15; do
    command -v "$cand" >/dev/null 2>&1 || continue
    ask "$(command -v "$cand")" || continue
    python="$(command -v "$cand")"
    case "${pick[refuse]:-}" in OD180|OD181) continue ;; *) break ;; esac
  done
  [ -n "$python" ] || die "no Python found; install one (e.g. apt install python3.12-venv) or pass --python PATH"
fi
refuse="${pick[refuse]:-}"
if [ -n "$refuse" ] && { [ "$use_system_torch" = 0 ] && [ -z "$torch_index" ] || [ "$refuse" = OD180 ] || [ "$refuse" = OD181 ]; }; then
  case "$refuse" in
    OD180|OD181) hint="pass --python PATH to a Python current torch supports" ;;
    *) hint="upgrade the driver, or install the CPU build anyway with --torch-index https://download.pytorch.org/whl/cpu" ;;
  esac
  die "${pick[why]} (${python}); $hint (run: olmo-doctor explain $refuse)"
fi
[ -n "${pick[index]:-}${pick[refuse]:-}" ] || [ "$use_system_torch" = 1 ] || die "${pick[why]}"
[ -z "${pick[unknown_gpus]:-}" ] || say "GPU '${pick[unknown_gpus]}' is not in the compute capability table; check it with: nvidia-smi --query-gpu=compute_cap --format=csv"
why="${pick[why]:-}"
if [ "$use_system_torch" = 1 ]; then
  why="--use-system-torch: keeping the torch $python has"
elif [ -n "$torch_index" ]; then
  why="--torch-index / OLMO_TORCH_INDEX given"
else
  torch_index="${pick[url]:-}"
fi
[ -n "$torch_spec" ] || torch_spec="${pick[torch]:-torch}"

if [ "$dry_run" = 1 ]; then
  echo "python: $python (${pick[python_version]})"
  if [ "$use_system_torch" = 1 ]; then echo "torch: the system torch"; else echo "torch: $torch_spec"; fi
  echo "index: ${torch_index:-PyPI, the default index}"
  echo "why: $why"
  echo "dry run: nothing was changed"
  exit 0
fi

# pip speaks only when something fails: no version nag, no root-user or script-location warnings, no
# deprecation warnings from its vendored libraries.
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1 PIP_ROOT_USER_ACTION=ignore
export PYTHONWARNINGS="ignore::DeprecationWarning,ignore::UserWarning"

# The CPU wheel index failed ($1: pip's last line). PyPI's torch for Linux x86_64 is the CUDA build, which pulls
# several GB of nvidia-* libraries a machine without an NVIDIA GPU never uses: take the default index's torch only
# when it is a CPU build (pip's dry-run report lists no nvidia-* package), or when --allow-cuda-torch says so.
cpu_torch_elsewhere() {
  say "the CPU wheel index $torch_index failed (${1:-unreachable}); looking for a CPU build of torch on the default index"
  local report cuda
  report="$(mktemp)"
  if "${pip[@]}" install -qq --dry-run --ignore-installed --report "$report" "$torch_spec" 2>/dev/null; then
    cuda="$("$venv/bin/python" -c 'import json, sys
got = json.load(open(sys.argv[1])).get("install", [])
names = [i.get("metadata", {}).get("name", "") for i in got]
torch = next((i["metadata"]["version"] for i in got if i.get("metadata", {}).get("name") == "torch"), "?")
cuda = [n for n in names if n.lower().startswith(("nvidia-", "cuda-", "triton"))]
print(f"torch {torch} with {len(cuda)} CUDA packages ({cuda[0]}, ...)" if cuda else "")' "$report" 2>/dev/null || echo "?")"
  else
    cuda="?"
  fi
  rm -f "$report"
  if [ -n "$cuda" ] && [ "$allow_cuda_torch" != 1 ]; then
    [ "$cuda" = "?" ] && cuda="a torch pip cannot describe"
    die "no NVIDIA GPU here, the CPU wheel index failed and the default index offers only the CUDA build ($cuda: several GB unused on this machine); rerun with --torch-index URL (a reachable mirror of $torch_index), --use-system-torch, or --allow-cuda-torch to install the CUDA build anyway (it runs on a CPU)"
  fi
  [ -z "$cuda" ] || say "--allow-cuda-torch: installing the CUDA build of torch on a machine without an NVIDIA GPU"
  "${pip[@]}" install -qq "$torch_spec"
}

# The optional extras, each installed next to the venv's torch (pinned, so an extra never replaces it), or skipped
# with the reason said: `olmo-core` (ai2-olmo-core 3.x: its Trainer and checkpoints, for the interop tests) and
# `fp8` (torchao, for precision: fp8; the release made for this torch, from olmo-doctor's own table).
install_extras() {
  local tv ao
  tv="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  case "$tv" in
    2.1[0-3].*) if "${pip[@]}" install -qq -e "$here[olmo-core]" "torch==$tv" --config-settings editable_mode=compat; then
                  say "extra olmo-core: installed"
                else say "extra olmo-core: skipped: pip could not install ai2-olmo-core next to torch $tv (see above); the OLMo-core interop tests will skip"; fi ;;
    *) say "extra olmo-core: skipped: ai2-olmo-core 3.x needs torch >= 2.10, < 2.14 and this venv has torch $tv; the OLMo-core interop tests will skip" ;;
  esac
  ao="$("$venv/bin/python" - "$tv" <<'PY' 2>/dev/null || true
import sys
from olmo_doctor.compat.kernels import torchao_for_torch
print(torchao_for_torch(sys.argv[1]) or "")
PY
)"
  if [ -z "$ao" ]; then
    say "extra fp8: skipped: no torchao release is made for torch $tv; precision fp8 is unavailable"
  elif "${pip[@]}" install -qq -e "$here[fp8]" "$ao" "torch==$tv" --config-settings editable_mode=compat; then
    say "extra fp8: installed ($ao, the torchao release made for torch $tv)"
  else
    say "extra fp8: skipped: pip could not install $ao next to torch $tv (see above); precision fp8 is unavailable"
  fi
}

# What the venv has of the extras, in one line (the "already installed" run says it too).
extras_state() {
  "$venv/bin/python" - <<'PY' 2>/dev/null || echo "unknown"
from importlib.metadata import PackageNotFoundError, version
def have(extra, dist):
    try:
        return f"{extra} ({dist} {version(dist)})"
    except PackageNotFoundError:
        return f"{extra} not installed"
print(", ".join(have(e, d) for e, d in (("olmo-core", "ai2-olmo-core"), ("fp8", "torchao"))))
PY
}

stamp="$venv/.olmo-doctor-install"
want="$(cat "$here/pyproject.toml" "$0" | cksum | cut -d' ' -f1) system=$use_system_torch torch=$torch_spec index=$torch_index"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && "$venv/bin/python" -c 'import torch, olmo_doctor, olmo' 2>/dev/null; then
  say "already installed ($("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
else
  if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv with $("$python" --version)"
    if [ "$use_system_torch" = 1 ]; then
      "$python" -c 'import torch' 2>/dev/null || die "--use-system-torch: $python cannot import torch"
      "$python" -m venv --system-site-packages "$venv"
    else
      "$python" -m venv "$venv"
    fi
  fi
  pip=("$venv/bin/python" -I -m pip --disable-pip-version-check)  # -I: never a pip/ of the folder you run from
  "${pip[@]}" install -qq --upgrade pip >/dev/null 2>&1 || true
  if [ "$use_system_torch" = 1 ]; then
    say "keeping the system torch: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  elif "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    say "torch already in the venv: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  else
    say "installing $torch_spec${torch_index:+ from $torch_index} ($why)"
    if [ -n "$torch_index" ]; then
      # one retry: an unreachable wheel index must fail fast, not back off for minutes per package; pip's retry
      # warnings go to a log, and its last line is what we show. Only the CPU build may fall back to the default
      # index, and only to a CPU build there (cpu_torch_elsewhere); a CUDA index was chosen for the driver.
      log="$(mktemp)"
      if ! "${pip[@]}" install -qq --retries 1 --timeout 15 "$torch_spec" --index-url "$torch_index" 2>"$log"; then
        if grep -qE "NameResolutionError|Failed to establish|ConnectTimeout|timed out|ProxyError|SSLError" "$log"; then
          last="$(echo "${torch_index#*://}" | cut -d/ -f1) cannot be reached"
        else
          last="$(grep -v '^WARNING: Retrying' "$log" | tail -n 1)"
        fi
        rm -f "$log"
        case "$torch_index" in
          */cpu) cpu_torch_elsewhere "$last" ;;
          *) die "could not install $torch_spec from $torch_index (${last:-network?}); rerun, or pass --torch-index URL" ;;
        esac
      fi
      rm -f "$log"
    else
      "${pip[@]}" install -qq "$torch_spec"
    fi
  fi
  say "installing olmo-doctor and the trainer (editable, with dev tools)"
  # compat mode: a plain .pth path entry; the default import-hook finder costs ~10 ms on every command
  "${pip[@]}" install -qq -e "$here[dev]" --config-settings editable_mode=compat
  install_extras
  echo "$want" > "$stamp"
fi
say "extras: $(extras_state)"

echo
echo "Next: .venv/bin/olmo-doctor check && .venv/bin/olmo train --smoke"
