#!/usr/bin/env bash
# install.sh: set up .venv for olmo-doctor and the bundled OLMo trainer on this machine.
#
#   ./install.sh                      # CPU torch on a machine without an NVIDIA GPU, a CUDA torch the driver can run otherwise
#   ./install.sh --use-system-torch   # keep the torch the base Python already has (venv with system site-packages)
#   ./install.sh --torch 'torch==2.11.0' --torch-index https://download.pytorch.org/whl/cu128
#
# Idempotent: a second run with the same options and an unchanged pyproject.toml only checks and returns.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-}"
torch_spec="${OLMO_TORCH_SPEC:-torch}"
torch_index="${OLMO_TORCH_INDEX:-}"
use_system_torch=0

die() { echo "install.sh: $*" >&2; exit 2; }
say() { echo "==> $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --use-system-torch) use_system_torch=1 ;;
    --torch) [ $# -ge 2 ] || die "--torch needs a requirement, e.g. --torch 'torch==2.11.0'"; torch_spec="$2"; shift ;;
    --torch-index) [ $# -ge 2 ] || die "--torch-index needs a URL"; torch_index="$2"; shift ;;
    --python) [ $# -ge 2 ] || die "--python needs an interpreter path"; python="$2"; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see ./install.sh --help)" ;;
  esac
  shift
done

# Pick a Python >= 3.10.
if [ -z "$python" ]; then
  for cand in python3 python3.13 python3.12 python3.11 python3.10; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      python="$(command -v "$cand")"; break
    fi
  done
fi
[ -n "$python" ] || die "no Python >= 3.10 found; install one (e.g. apt install python3.12-venv) or pass --python PATH"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "$python is older than 3.10; pass --python PATH to a newer one"

# The torch to install: a CUDA build the driver can run, or the CPU build when there is no NVIDIA GPU.
if [ "$use_system_torch" = 0 ] && [ -z "$torch_index" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    drv_cuda="$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9]*\).*/\1/p' | head -n1)"
    case "$drv_cuda" in
      1[3-9].*) torch_index="" ;;                       # PyPI's torch is a CUDA 13.0 build (torch >= 2.11)
      12.[89]) torch_index="https://download.pytorch.org/whl/cu128" ;;
      12.[67]) torch_index="https://download.pytorch.org/whl/cu126" ;;
      "") torch_index="" ;;
      *) die "the NVIDIA driver supports only CUDA $drv_cuda; current torch needs a driver for CUDA >= 12.6 (run: olmo-doctor explain OD101)" ;;
    esac
    # Volta/Pascal GPUs are not in cu128/cu130 wheels (CUDA 13 dropped sm_70); the cu126 build still has them.
    cc_major="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | cut -d. -f1)"
    if [ -n "$cc_major" ] && [ "$cc_major" -lt 8 ] 2>/dev/null && [ "$cc_major" -ge 5 ]; then
      cc_full="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1)"
      [ "$cc_full" = "7.5" ] || torch_index="https://download.pytorch.org/whl/cu126"
    fi
  else
    torch_index="https://download.pytorch.org/whl/cpu"
  fi
fi

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
  pip=("$venv/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install -q --upgrade pip >/dev/null 2>&1 || true
  if [ "$use_system_torch" = 1 ]; then
    say "keeping the system torch: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  elif "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    say "torch already in the venv: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  else
    say "installing $torch_spec${torch_index:+ from $torch_index}"
    if [ -n "$torch_index" ]; then
      # one retry: an unreachable wheel index must fail fast, not back off for minutes per package
      "${pip[@]}" install -q --retries 1 --timeout 15 "$torch_spec" --index-url "$torch_index" \
        || { say "that index failed; trying the default index"; "${pip[@]}" install -q "$torch_spec"; }
    else
      "${pip[@]}" install -q "$torch_spec"
    fi
  fi
  say "installing olmo-doctor and the trainer (editable, with dev tools)"
  # compat mode: a plain .pth path entry; the default import-hook finder costs ~10 ms on every command
  "${pip[@]}" install -q -e "$here[dev]" --config-settings editable_mode=compat
  # ai2-olmo-core (the OLMo-core checkpoint round-trip test) wants torch 2.10-2.13: add it only next to such a
  # torch, pinned to the installed one so it never replaces it; without it that one test skips
  tv="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  case "$tv" in
    2.1[0-3].*) "${pip[@]}" install -q -e "$here[olmo-core]" "torch==$tv" --config-settings editable_mode=compat \
                  || say "ai2-olmo-core did not install; the OLMo-core round-trip test will skip" ;;
  esac
  echo "$want" > "$stamp"
fi

echo
echo "Next: .venv/bin/olmo-doctor check && .venv/bin/olmo train --smoke"
