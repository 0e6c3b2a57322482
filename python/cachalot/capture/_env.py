"""Names shared by the launcher, the captured processes and `capture()`."""

ENV_DIR = "CACHALOT_CAPTURE_DIR"  # the folder each captured process writes its result into
ENV_NCCL_LOG = "CACHALOT_NCCL_LOG"  # where the simulated NCCL appends its communicators
ENV_NCCL_SHARE = "CACHALOT_NCCL_SHARE"  # where its broadcasts leave the root's known bytes
ENV_MAX_ENTRIES = "CACHALOT_CAPTURE_MAX_ENTRIES"  # torch's history ring size
ENV_ACTIVE = "CACHALOT_CAPTURE_ACTIVE"  # set (to the GPU key) in a process on the capture runtime
DEFAULT_MAX_ENTRIES = 4_000_000
