#!/usr/bin/env bash
# install.sh: set up .venv for olmo-doctor and the bundled OLMo trainer on this machine.
#
#   ./install.sh                      # CPU torch on a machine without an NVIDIA GPU, a CUDA torch the driver can run otherwise
#   ./install.sh --dry-run            # print the Python, torch requirement and wheel index it would use, and why; change nothing
#   ./install.sh --use-system-torch   # keep the torch the base Python already has (venv with system site-packages)
#   ./install.sh --torch 'torch==2.11.0' --torch-index https://download.pytorch.org/whl/cu128
#
# The wheel index comes from the table in olmo_doctor/wheels.py (the same one `olmo-doctor check` judges with).
# Idempotent: a second run with the same options and an unchanged pyproject.toml only checks and returns.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-}"
torch_spec="${OLMO_TORCH_SPEC:-}"
torch_index="${OLMO_TORCH_INDEX:-}"
use_system_torch=0
dry_run=0

die() { echo "install.sh: $*" >&2; exit 2; }
say() { echo "==> $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --use-system-torch) use_system_torch=1 ;;
    --dry-run) dry_run=1 ;;
    --torch) [ $# -ge 2 ] || die "--torch needs a requirement, e.g. --torch 'torch==2.11.0'"; torch_spec="$2"; shift ;;
    --torch-index) [ $# -ge 2 ] || die "--torch-index needs a URL"; torch_index="$2"; shift ;;
    --python) [ $# -ge 2 ] || die "--python needs an interpreter path"; python="$2"; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see ./install.sh --help)" ;;
  esac
  shift
done

# What the machine has: driver and GPUs from nvidia-smi (nothing when there is no working NVIDIA driver).
# Older drivers do not know the compute_cap field; the GPU name is then looked up in olmo_doctor/gpus.py.
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
ask() {  # ask PYTHON: fill $pick from `python -m olmo_doctor.wheels pick`
  pick=()
  local ver out line
  ver="$("$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)" || return 1
  out="$(cd "$here" && PYTHONPATH="$here" "$1" -m olmo_doctor.wheels pick --python "$ver" \
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
  "${pip[@]}" install -qq --upgrade pip >/dev/null 2>&1 || true
  if [ "$use_system_torch" = 1 ]; then
    say "keeping the system torch: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  elif "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    say "torch already in the venv: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  else
    say "installing $torch_spec${torch_index:+ from $torch_index} ($why)"
    if [ -n "$torch_index" ]; then
      # one retry: an unreachable wheel index must fail fast, not back off for minutes per package. Only the CPU
      # build may fall back to PyPI (its CUDA torch runs on a CPU too); a CUDA index was chosen for the driver.
      if ! "${pip[@]}" install -qq --retries 1 --timeout 15 "$torch_spec" --index-url "$torch_index"; then
        case "$torch_index" in
          */cpu) say "that index failed; trying the default index"; "${pip[@]}" install -qq "$torch_spec" ;;
          *) die "could not install $torch_spec from $torch_index (network?); rerun, or pass --torch-index URL" ;;
        esac
      fi
    else
      "${pip[@]}" install -qq "$torch_spec"
    fi
  fi
  say "installing olmo-doctor and the trainer (editable, with dev tools)"
  # compat mode: a plain .pth path entry; the default import-hook finder costs ~10 ms on every command
  "${pip[@]}" install -qq -e "$here[dev]" --config-settings editable_mode=compat
  # ai2-olmo-core (the OLMo-core checkpoint round-trip test) wants torch 2.10-2.13: add it only next to such a
  # torch, pinned to the installed one so it never replaces it; without it that one test skips
  tv="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  case "$tv" in
    2.1[0-3].*) "${pip[@]}" install -qq -e "$here[olmo-core]" "torch==$tv" --config-settings editable_mode=compat \
                  || say "ai2-olmo-core did not install; the OLMo-core round-trip test will skip"
                "${pip[@]}" install -qq -e "$here[fp8]" "torch==$tv" --config-settings editable_mode=compat \
                  || say "torchao did not install; precision fp8 and its tests will be unavailable" ;;
  esac
  echo "$want" > "$stamp"
fi

echo
echo "Next: .venv/bin/olmo-doctor check && .venv/bin/olmo train --smoke"
