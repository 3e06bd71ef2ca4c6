#!/usr/bin/env bash
# bench/device_verify.sh: the faults of the live check, verified on the GPU machine in one command (no kernel builds).
#
#   bash bench/device_verify.sh          # from the repo root; python3 is the image's Python with its torch
#
# 1. installs this repo editable into the image's python3 without touching its packages (--no-deps; the carried
#    wheels in .whl/, when there are any, go to a temp folder on PYTHONPATH);
# 2. `(ulimit -v 4000000; olmo train --smoke --steps 4)`: must stop in one line naming OD270, exit 2, no traceback;
# 3. `bash bench/faults.sh`: every injected fault judged by `olmo-doctor check` with a warm and a cold cache.
# Prints one PASS/FAIL line per item (n/a for a fault this machine cannot hold) and a summary line; exit 1 when any
# item FAILs. Budget: VERIFY_BUDGET seconds in all (default 240); faults.sh gets what the other steps left, and
# says FAIL (not finished) rather than run past it. Logs go to $OUT (the device tool's output folder) or
# ./bench-out. On a dev box: PYTHON=.venv/bin/python VERIFY_ONLY='ulimit|TMPDIR' bash bench/device_verify.sh (VERIFY_ONLY:
# only the faults whose name matches, as faults.sh --only).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
budget="${VERIFY_BUDGET:-240}"
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
py="${PYTHON:-python3}"
site="$(mktemp -d "${TMPDIR:-/tmp}/olmo-verify-site.XXXXXX")"
trap 'rm -rf "$site"' EXIT
pass=0 fail=0 na=0
trim() { local s="$1"; s="${s#"${s%%[! ]*}"}"; printf '%s' "${s%"${s##*[! ]}"}"; }
item() {  # item VERDICT NAME DETAIL
  printf '%-4s %s%s\n' "$1" "$2" "${3:+ -- $3}"
  case "$1" in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; *) na=$((na + 1)) ;; esac
}

# --- 1. install (editable, no dependencies: the image's torch stays as it is) --------------------------------
if "$py" -m pip install -q --no-deps --no-build-isolation -e . >"$out/verify_install.log" 2>&1; then
  item PASS "install: pip install --no-deps --no-build-isolation -e ."
else
  item FAIL "install: pip install --no-deps --no-build-isolation -e ." "$(tail -1 "$out/verify_install.log"); using PYTHONPATH"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null; then  # typer, rich, ... where the image lacks them
  "$py" -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl >>"$out/verify_install.log" 2>&1
  export PYTHONPATH="$PYTHONPATH:$site"
fi
olmo=(olmo)
command -v olmo >/dev/null 2>&1 || olmo=("$py" -m olmo)  # the console script's folder may not be on PATH

# --- 2. the smoke run under an address-space limit: one line, OD270, exit 2, with an empty and a warm cache ------
# (warm: the doctor's torch facts cached by a check without the limit; a key without the limits would answer "ok")
gpu=0
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && gpu=1
[ "$gpu" = 1 ] && XDG_CACHE_HOME="$site/warm" timeout 120 "$py" -m olmo_doctor.cli check --scope train >/dev/null 2>&1
for cache in cold warm; do
  if [ "$gpu" = 0 ]; then  # a CPU run fits in 4 GB: the limit stops only CUDA (tests/trainer cover smaller limits)
    item n/a "(ulimit -v 4000000; olmo train --smoke --steps 4), $cache cache" "no NVIDIA GPU here"
    continue
  fi
  name="(ulimit -v 4000000; olmo train --smoke --steps 4), $cache cache"
  ( ulimit -v 4000000; XDG_CACHE_HOME="$site/$cache" exec timeout 120 "${olmo[@]}" train --smoke --steps 4 ) \
    >"$out/verify_smoke_$cache.out" 2>"$out/verify_smoke_$cache.err"
  code=$?
  err="$(grep -v '^[[:space:]]*$' "$out/verify_smoke_$cache.err")"
  lines="$(printf '%s\n' "$err" | grep -c .)"
  if [ "$code" = 2 ] && [ "$lines" = 1 ] && grep -q 'OD270' <<<"$err" && ! grep -q -e Traceback -e 'bug in olmo' <<<"$err"
  then item PASS "$name" "exit 2, one line naming OD270"
  else item FAIL "$name" "exit $code, $lines line(s): $(printf '%s' "$err" | tail -1 | cut -c1-200)"
  fi
done

# --- 3. every injected fault, warm and cold cache, in what is left of the budget ------------------------------
left=$((budget - SECONDS - 5))
if [ "$left" -lt 30 ]; then
  item FAIL "bench/faults.sh" "not started: only ${left}s of the ${budget}s budget left"
else
  jobs="$(nproc 2>/dev/null || echo 2)"
  [ "$jobs" -le 12 ] || jobs=12
  FAULT_JOBS="$jobs" PYTHON="$py" timeout "$left" bash bench/faults.sh ${VERIFY_ONLY:+--only "$VERIFY_ONLY"} \
    >"$out/verify_faults.txt" 2>"$out/verify_faults.err"
  code=$?
  rows=0
  while IFS= read -r line; do  # the table's rows: fault | expected | got | verdict (got may hold any text)
    verdict="$(trim "${line##*|}")"
    case "$verdict" in PASS|FAIL|n/a) ;; *) continue ;; esac
    rows=$((rows + 1))
    head="${line%|*}"; name="$(trim "${head%%|*}")"; rest="${head#*|}"
    expected="$(trim "${rest%%|*}")"; got="$(trim "${rest#*|}")"
    case "$verdict" in
      PASS) item PASS "fault: $name" ;;
      FAIL) item FAIL "fault: $name" "expected $expected, got $got" ;;
      *) item n/a "fault: $name" "$got" ;;
    esac
  done <"$out/verify_faults.txt"
  if [ "$code" = 124 ]; then
    item FAIL "bench/faults.sh" "did not finish in the ${left}s left of the budget"
  elif [ "$rows" = 0 ]; then
    item FAIL "bench/faults.sh" "printed no rows (exit $code): $(tail -1 "$out/verify_faults.err")"
  fi
fi

echo "summary: $pass PASS, $fail FAIL, $na n/a in ${SECONDS}s (budget ${budget}s)"
[ "$fail" = 0 ]
