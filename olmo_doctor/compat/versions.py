"""Version semantics, one place: every comparison of versions in olmo-doctor goes through here (PEP 440 order,
via packaging), lenient enough for the strings machines print ('V12.4.131', '580.159.04', ninja's
'1.13.2.git.kitware...') and strict about what orders them: a nightly ('2.6.0.dev20241112'), an alpha build
('2.11.0a0+git1234') or an rc comes before its release, a post release after it, and a local tag ('+cu126') after
the same version without one. Nothing here raises on bad input; unreadable text gives None (unknown).

Numbers without such tails (drivers, toolkits, compute capabilities, Pythons) are ordered by release.py, which
needs only the standard library; `major_minor` lives there and is re-exported here.
"""

from __future__ import annotations

import re
from functools import lru_cache

from packaging.version import Version

from olmo_doctor.compat.release import major_minor as major_minor

_VERSION_TOKEN = re.compile(r"([0-9]+(?:\.[0-9]+)*)([^\s,;()\[\]{}\"'<>/]*)")


def parse_version(text: object) -> Version | None:
    """Lenient PEP 440 parse of the first version in a text, keeping what orders it: '13.0.88', 'V12.4.131',
    '580.159.04', '2.11.0+cu130', '2.6.0.dev20241112' (< 2.6.0), '2.11.0a0+git1234', '1.0.post1', '2.6.0-rc1'.
    A tail packaging cannot read ('1.13.2.git.kitware.jobserver-pipe-1') is cut back to the longest part it can;
    None when there is no number at all. Never raises."""
    if isinstance(text, Version):
        return text
    if text is None or isinstance(text, bool):
        return None
    return _parse_version(str(text))


@lru_cache(maxsize=4096)
def _parse_version(text: str) -> Version | None:
    m = _VERSION_TOKEN.search(text[:256])  # versions are short; bound the work on hostile input
    if not m:
        return None
    release, tail = m.group(1), m.group(2)[:48]
    for cut in range(len(tail), -1, -1):
        try:
            return Version(release + tail[:cut])
        except ValueError:  # InvalidVersion, or a number too long for int()
            continue
    return None


_ZERO = Version("0")


def version_key(text: object) -> Version:
    """A sort key: PEP 440 order, unreadable text first (max(vs, key=version_key) is the newest)."""
    return parse_version(text) or _ZERO


def version_satisfies(version: object, spec: str) -> bool | None:
    """Does an installed version meet a requirement like '>=2.6,<3'? Pre-releases and nightlies are judged by
    their place in PEP 440 order (2.6.0.dev… does not meet >=2.6.0; 2.7.0.dev… does). None when unreadable."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # ~15 ms to import; only rules that ask pay it

    v = parse_version(version)
    if v is None:
        return None
    try:
        return SpecifierSet(spec).contains(v, prereleases=True)
    except InvalidSpecifier:
        return None
