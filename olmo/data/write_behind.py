"""Write-behind for a large file being appended to: flush it to disk in a background thread as it grows.

Without it the kernel holds a whole shard (up to 1 GB of uint32 tokens) as dirty pages until the final fsync,
which then writes all of it while nothing else runs: a serial second or more at the end of every shard. With
it, `fdatasync` runs in a thread (it releases the GIL) every SYNC_BYTES, overlapping the encoding, so the
final fsync only has the last few MiB left. The bytes written are the same either way; only when they reach
the disk changes. An error of a background flush (a full disk, an I/O error) is raised again by the next
`wrote` or by `close`, in the thread that writes the file, so callers handle it as they handle a write error.
"""

from __future__ import annotations

import os
import threading

SYNC_BYTES = 64 << 20  # flush after this much new data: small next to a shard, large enough to write efficiently


class WriteBehind:
    """Flushes file descriptor `fd` in the background after every SYNC_BYTES reported by `wrote`."""

    def __init__(self, fd: int):
        self.fd = fd
        self.pending = 0  # bytes written since the last flush was asked for
        self.error: OSError | None = None
        self.kick = threading.Event()
        self.stop = False
        self.thread: threading.Thread | None = None  # started at the first flush: small files never start one

    def wrote(self, nbytes: int) -> None:
        self._raise()
        self.pending += nbytes
        if self.pending < SYNC_BYTES:
            return
        self.pending = 0
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="olmo-write-behind", daemon=True)
            self.thread.start()
        self.kick.set()  # a flush already running picks this up when it is done: at most one runs at a time

    def close(self) -> None:
        """Wait for the running flush, if any, and end the thread; raise what a background flush hit."""
        if self.thread is not None:
            self.stop = True
            self.kick.set()
            self.thread.join()
            self.thread = None
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def _run(self) -> None:
        while True:
            self.kick.wait()
            self.kick.clear()
            if self.stop:
                return
            try:
                os.fdatasync(self.fd) if hasattr(os, "fdatasync") else os.fsync(self.fd)
            except OSError as e:
                self.error = e
                return
