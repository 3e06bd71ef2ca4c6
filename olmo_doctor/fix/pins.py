"""Folders of the project held open by file descriptor, from the check to the last write.

Checking `.olmo-doctor` with lstat and then writing to `.olmo-doctor/journal/...` by name leaves a window: swap
the folder for a symlink in between and the write lands wherever the link points (a shell rc file, another
user's project). Here each folder is opened once, with O_NOFOLLOW (a symlink is refused, not followed) and its
owner checked on the open descriptor, and every later access goes through `/proc/self/fd/<fd>`: a path that
always means the folder that was checked, whatever is renamed or swapped at its old name afterwards. Files are
opened the same way (`read_regular`): no symlink, no FIFO or device, and one link only, since a hard-linked
`env.sh` is another file's contents (copied into the journal, written through).

A `Pins` keeps its descriptors open for as long as it lives; every path it hands out is only valid that long,
so objects that hold such a path (journal entries) hold the Pins too. Without /proc (not Linux) the paths are
the plain ones and only the checks at open time remain.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from olmo_doctor.fix.safety import JournalError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HAVE_PROC = os.path.isdir("/proc/self/fd")


class Pins:
    """Open folder descriptors and the stable paths that name them."""

    def __init__(self) -> None:
        self._fds: list[int] = []
        self.shown: dict[Path, Path] = {}  # stable path -> the path to show the user

    def _keep(self, fd: int, shown: Path) -> Path:
        self._fds.append(fd)
        path = Path(f"/proc/self/fd/{fd}") if _HAVE_PROC else shown
        self.shown[path] = shown
        return path

    def show(self, path: Path) -> Path:
        """The user's name for a path under a pinned folder."""
        for pinned, shown in self.shown.items():
            if path == pinned or pinned in path.parents:
                return shown / path.relative_to(pinned)
        return path

    def root(self, folder: Path) -> Path:
        """The project folder itself (the user named it, so a symlink to it is followed)."""
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise JournalError(f"cannot open the project folder {folder} ({e.strerror or e})") from None
        return self._keep(fd, folder)

    def folder(self, parent: Path, name: str, create: bool = False, mode: int = 0o755) -> Path | None:
        """`parent/name` as a pinned folder of this user's (None when absent and not `create`); a symlink, a file
        or someone else's folder there is refused with one line."""
        shown = self.show(parent) / name
        try:
            fd = os.open(parent / name, _DIR_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
            try:
                os.mkdir(parent / name, mode)
            except FileExistsError:
                pass
            return self.folder(parent, name, create=False)
        except OSError as e:
            raise _not_a_folder(parent / name, shown, e) from None
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            os.close(fd)
            raise JournalError(f"{shown} belongs to another user (uid {st.st_uid}); olmo-doctor only uses its own "
                               "folder there (move it away)")
        return self._keep(fd, shown)

    def walk(self, root: Path, parts: list[str], create: bool = False) -> Path | None:
        """Pin each folder of `parts` below `root` in turn (None if one is absent and not `create`)."""
        here: Path | None = root
        for part in parts:
            assert here is not None
            here = self.folder(here, part, create=create)
            if here is None:
                return None
        return here

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()


def _not_a_folder(path: Path, shown: Path, e: OSError) -> JournalError:
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        return JournalError(f"{shown} is a symlink; olmo-doctor keeps its env file and journal in a real folder "
                            "there, so it refuses to follow it (remove the link)")
    if e.errno in (errno.ENOTDIR, errno.ELOOP):
        return JournalError(f"{shown} is a file, but olmo-doctor keeps a folder there; move it away")
    return JournalError(f"cannot open {shown} ({e.strerror or e})")


def read_regular(path: Path, kind: str, shown: Path | None = None) -> bytes | None:
    """The bytes of the file at `path`, or None when there is none. Refused (JournalError) when it is a symlink,
    not a regular file (a FIFO would block the read), has another name (a hard link: its bytes are another
    file's, and copying them into the journal would copy that file's secrets), or is larger than its `kind` (a key
    of olmo_common.bounded.files.CAPS) can be."""
    from olmo_common.bounded.files import cap_of, too_large

    shown = shown or path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise JournalError(f"{shown} is a symlink; olmo-doctor writes a real file there, so move the link "
                               "away") from None
        raise JournalError(f"cannot read {shown} ({e.strerror or e}); move it away or repair it") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JournalError(f"{shown} is not a regular file; olmo-doctor writes a real file there, so move it "
                               "away")
        if st.st_nlink > 1:
            raise JournalError(f"{shown} is hard-linked ({st.st_nlink} names): its bytes are another file's too, "
                               "and olmo-doctor would copy them into its journal; give it its own copy (cp it to "
                               "a new name, then move that over it)")
        limit = cap_of(kind)
        if st.st_size > limit:
            raise JournalError(str(too_large(shown, kind, st.st_size)) + "; move it away")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit + 1)
    finally:
        os.close(fd)
