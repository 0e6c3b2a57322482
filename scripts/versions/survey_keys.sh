#!/usr/bin/env bash
# Lists, for each torch release, the allocator configuration keys its own parser compares
# against (the key names compiled into libc10.so / libc10_cuda.so) and the minimum it states for
# max_split_size_mb, into tests/fixtures/torch-versions/keys.txt. crates/core's versions table
# (config/versions.rs) is tested against that file.
# Downloads each torch wheel once, without dependencies, into $CACHALOT_WHEELS
# (default ~/.cache/cachalot-wheels), keeping only the two libraries.
set -euo pipefail
cd "$(dirname "$0")/../.."
W="${CACHALOT_WHEELS:-$HOME/.cache/cachalot-wheels}"
PY="${CACHALOT_VENV:-$HOME/.cache/cachalot-torch}/bin/python"
source scripts/versions/releases.sh
KEYS='backend|max_split_size_mb|max_non_split_rounding_mb|large_segment_size_mb|roundup_power2_divisions|garbage_collection_threshold|expandable_segments|expandable_segments_reserve|expandable_segments_reserve_by_class|release_lock_on_cudamalloc|release_lock_on_hipmalloc|per_process_memory_fraction|throw_on_cudamalloc_oom|graph_capture_record_stream_reuse|pinned_[a-z_]+'
out=tests/fixtures/torch-versions/keys.txt
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
{
  echo "# release: keys its parser knows | its max_split_size_mb minimum (scripts/versions/survey_keys.sh)"
  for v in "${VERSIONS[@]}"; do
    d="$W/$v"
    if [[ ! -f "$d/done" ]]; then
      mkdir -p "$d"
      "$PY" -m pip download -q --no-deps "torch==$v" -d "$d" >&2
      whl=$(ls "$d"/torch-*.whl | head -1)
      (cd "$d" && unzip -q -o "$whl" 'torch/lib/libc10.so' 'torch/lib/libc10_cuda.so')
      rm -f "$whl"
      touch "$d/done"
    fi
    libs=("$d/torch/lib/libc10.so" "$d/torch/lib/libc10_cuda.so")
    keys=$(strings "${libs[@]}" | grep -xE "$KEYS" | sort -u | tr '\n' ' ')
    # the CUDA pass decides (2.9 carries both texts: its generic pass says ">=", its CUDA pass ">")
    min=$(strings "${libs[@]}" | grep -oE 'max_split_size_mb too small, must be >=? ' | sort -u | tr '\n' ';')
    echo "${v%.*}: ${keys}| ${min}"
  done
} >"$tmp"
mv "$tmp" "$out"
echo "wrote $out"
