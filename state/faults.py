"""What a failure of the store is, for the operator: one line (StoreError), and whether a restart can cure it (a lock
another process holds, a full disk, an I/O error) or only the operator can (Lasting: a corrupt file, a newer schema,
another application's file, a mode or a mount that refuses this user, something planted at a path of ours)."""
from __future__ import annotations

import errno


class StoreError(RuntimeError):
    """The database cannot be used; the message is one line for the operator."""


class Lasting(StoreError):
    """What no restart changes, only the operator (corrupt, a newer schema, a mode, a mount or a file planted at its
    path): the daemon's start exits 2 on it, which the unit does not retry. errno: the refusal's, where one said it;
    path: the file its folder refused to take (where the folder is this user's own, a chmod is what to do)."""

    def __init__(self, message: str, errno_: int | None = None, path: object = None):
        super().__init__(message)
        self.errno = errno_
        self.path = path


# refusals of a path that stay until the operator acts (a mode, a read-only mount, a file or folder in the way); any
# other errno (a full disk, an I/O error, too many open files) may pass, so a start retries it
LASTING_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ELOOP,
                            errno.ENXIO})


def refused(message: str, errno_: int | None, path: object = None) -> StoreError:
    """The one split of an OSError's refusal: Lasting where its errno stays, StoreError where a retry may pass. path:
    what was refused, where a chmod of the user's own may be what to do (Lasting's)."""
    return Lasting(message, errno_, path) if errno_ in LASTING_ERRNOS else StoreError(message)


class NotOurs(Lasting):
    """A file that is no spec-controller database, or a damaged one without its schema (not SQLite, another
    application's tables, a schema version not ours): no retry changes it; the daemon's start refuses it as a config
    error (another --db), config check as well."""


class NoData(StoreError):
    """A database a reader opened that holds no spec-controller data yet (an empty file): nothing saved in it, which a
    writer's open makes the database (config check: a start resumes nothing from it)."""


def classify(err: Exception) -> str:
    """What kind of fault a failed write met: locked, disk full, read-only, I/O error, corrupt, error."""
    name = getattr(err, "sqlite_errorname", "") or ""
    text = str(err)
    for kind, names, words in (("locked", ("SQLITE_BUSY", "SQLITE_LOCKED"), ("locked", "busy")),
                               ("disk full", ("SQLITE_FULL",), ("disk is full",)),
                               ("read-only", ("SQLITE_READONLY", "SQLITE_CANTOPEN"), ("readonly", "unable to open")),
                               ("I/O error", ("SQLITE_IOERR",), ("I/O error",)),
                               ("corrupt", ("SQLITE_CORRUPT", "SQLITE_NOTADB"), ("malformed", "not a database"))):
        if name.startswith(names) or any(w in text for w in words):
            return kind
    return "error"
