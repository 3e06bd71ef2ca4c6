#!/usr/bin/env bash
# Fetch everything the GPU benchmarks carry (the GPU machine has no network) into .bench/ and .whl/, both
# git-ignored; nothing fetched here is committed. Run from the repo root on a machine with network access:
#   bash bench/fetch_sources.sh
# Writes (about 16 MiB in all, well under the device's 64 MiB working-tree limit):
#   .bench/flash_attn-2.8.3.post2.tar.gz       flash-attn 2 sdist (PyPI), sha256 checked against its recipe
#   .bench/xformers-0.0.35.tar.gz              xformers sdist (PyPI), sha256 checked against its recipe
#   .bench/flash-attention-3-0251105a.tar.gz   FlashAttention-3: Dao-AILab/flash-attention at the commit
#       recipes/flash-attn-3.toml pins, only hopper/ + README.md + LICENSE, with the csrc/cutlass submodule at the
#       commit that flash-attention commit records, only cutlass' include/ (the one include dir hopper/setup.py
#       adds) + its LICENSE.txt
#   .whl/                                      OLMo-core 3.0.0 and the pure-Python packages it imports
# FA_GIT / CUTLASS_GIT may name existing (bare) clones to read from instead of cloning GitHub.
set -euo pipefail
FA_COMMIT=0251105a2fb19d2957484b7f023cd8c115286ced
PY="${PYTHON:-python3}"
mkdir -p .bench .whl
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

sha() { sha256sum "$1" | cut -d' ' -f1; }
pinned() { sed -n 's/^sha256 = "\([0-9a-f]*\)".*/\1/p' "$1"; }
for spec in "flash_attn==2.8.3.post2 flash_attn-2.8.3.post2.tar.gz recipes/flash-attn-2.8.3.post2.toml" \
            "xformers==0.0.35 xformers-0.0.35.tar.gz recipes/xformers-0.0.35.toml"; do
  set -- $spec
  if [ ! -f ".bench/$2" ]; then  # metadata without isolation (setup.py imports torch), nothing compiled
    FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE "$PY" -m pip download -q --no-deps --no-binary :all: \
      --no-build-isolation -d .bench "$1"
  fi
  [ "$(sha ".bench/$2")" = "$(pinned "$3")" ] || { echo "fetch_sources: .bench/$2 does not match $3" >&2; exit 1; }
done

fa="${FA_GIT:-$tmp/flash-attention.git}"; cutlass="${CUTLASS_GIT:-$tmp/cutlass.git}"
[ -n "${FA_GIT:-}" ] || git clone -q --bare https://github.com/Dao-AILab/flash-attention "$fa"
sub="$(git --git-dir="$fa" ls-tree "$FA_COMMIT" csrc/cutlass | awk '{print $3}')"
[ -n "${CUTLASS_GIT:-}" ] || git clone -q --bare https://github.com/NVIDIA/cutlass "$cutlass"
top="flash-attention-3-${FA_COMMIT:0:8}"
git --git-dir="$fa" archive --prefix="$top/" "$FA_COMMIT" hopper README.md LICENSE | tar -x -C "$tmp"
git --git-dir="$cutlass" archive --prefix="$top/csrc/cutlass/" "$sub" include LICENSE.txt | tar -x -C "$tmp"
printf 'flash-attention %s\ncutlass %s (csrc/cutlass submodule at that commit; include/ only)\n' \
  "$FA_COMMIT" "$sub" >"$tmp/$top/SOURCES.txt"
tar -C "$tmp" -czf ".bench/$top.tar.gz" "$top"

"$PY" -m pip download -q --no-deps --only-binary=:all: -d .whl ai2-olmo-core==3.0.0 cached-path==1.8.10 \
  bettermap dataclass-extensions dill
du -sh .bench/* .whl
