"""Every file olmo and olmo-doctor open, read within a budget (both packages use this one place).

- `files`: open only regular files (a FIFO never blocks the open, a device is refused) and read at most a cap
  per kind of file (`CAPS`), refused in one line naming the file and the cap (`ReadRefused`, an OSError).
- `data`: JSON and YAML parsed within a budget of values (aliases expanded), depth and scalar length
  (`DataRefused`, a ValueError); `shown()` puts any value into a message at a bounded size.
- `decompress`: gzip, bz2 and xz streams capped by output bytes, xz also by the memory its header asks for.

Stdlib only (PyYAML imported when YAML is parsed), in olmo_common because `olmo` must work without olmo_doctor
(tests/trainer/test_olmo_imports.py) and the doctor must work when a foreign `olmo` package shadows the trainer
(OD260), so the reader lives in neither.
"""

from olmo_common.bounded.data import DataRefused, load_json, parse_json, parse_yaml, shown, yaml_loader
from olmo_common.bounded.files import CAPS, ReadRefused, open_regular, read_bytes, read_lines, read_text, size_text

__all__ = ["CAPS", "DataRefused", "ReadRefused", "load_json", "open_regular", "parse_json", "parse_yaml",
           "read_bytes", "read_lines", "read_text", "shown", "size_text", "yaml_loader"]
