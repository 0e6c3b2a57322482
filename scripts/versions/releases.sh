# The torch releases cachalot's version table covers, one patch release per line (sourced by
# survey_keys.sh and oracle.sh): the newest patch of each line on the registry when the table
# was read. crates/core's TorchVersion::all() is the same range.
VERSIONS=(2.4.1 2.5.1 2.6.0 2.7.1 2.8.0 2.9.1 2.10.0 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)

# The pinned patch release of line X.Y (e.g. 2.9 -> 2.9.1); empty if the line is not covered.
release_of() {
  local v
  for v in "${VERSIONS[@]}"; do
    [[ "${v%.*}" == "$1" ]] && { printf '%s' "$v"; return; }
  done
}
