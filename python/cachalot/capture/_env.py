"""Names shared by the launcher, the captured process and `capture()`."""

ENV_SNAPSHOT = "CACHALOT_CAPTURE_SNAPSHOT"  # where the captured process writes its snapshot
ENV_META = "CACHALOT_CAPTURE_META"  # where it writes the JSON sidecar
ENV_MAX_ENTRIES = "CACHALOT_CAPTURE_MAX_ENTRIES"  # torch's history ring size
ENV_ACTIVE = "CACHALOT_CAPTURE_ACTIVE"  # set (to the GPU key) in a process on the capture runtime
DEFAULT_MAX_ENTRIES = 4_000_000
