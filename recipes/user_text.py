"""Reading a file the user names: a sweep file, a reward or data-processor file, tpu-rl.toml, a tokenizer's
configuration. Each is read here, and refused in one line when it is not what every one of them must be (an
existing regular file, within a size bound, UTF-8 text) before its own parser sees it, so a binary file, a
directory or /dev/zero is one line within seconds, not a traceback or a hang. Its own rules (TOML, Python,
JSON) stay with the code that parses it."""

from __future__ import annotations

import stat
from pathlib import Path

from tpu_rl.recipes.errors import UserError

# A sweep file (100 runs of a few --set items) and a settings file are a few KiB; a file over this is none of
# them (a log or an archive named by mistake), and reading it whole would only delay the refusal.
TEXT_FILE_MAX_BYTES = 1024 * 1024


def read_text_file(path: Path, option: str, fix: str, max_bytes: int = TEXT_FILE_MAX_BYTES,
                   bound: str = "", smaller: str = "") -> str:
    """The file's text, or UserError `<option> <path> <what is wrong>: <fix>`. `bound` says why the
    size bound is what it is (default: the bound itself), `smaller` how to stay within it (default: `fix`);
    nothing past max_bytes is ever read."""
    where = f"{option} {path}"
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UserError(f"{where} does not exist: {fix}") from None
    except OSError as error:
        raise UserError(f"{where} cannot be read ({error.strerror or type(error).__name__}): {fix}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"{where} is a directory, not a file: {fix}")
    if not stat.S_ISREG(info.st_mode):  # a device (/dev/zero), a pipe or a socket: no end to wait for
        raise UserError(f"{where} is not a regular file (a device, pipe or socket): {fix}")
    over, smaller = bound or f"the {_size(max_bytes)} tpu-rl reads of it", smaller or fix
    if info.st_size > max_bytes:
        raise UserError(f"{where} has {info.st_size} bytes, over {over}: {smaller}")
    try:
        with path.open("rb") as file:
            data = file.read(max_bytes + 1)  # a file that grew since stat() is still bounded
    except OSError as error:
        raise UserError(f"{where} cannot be read ({error.strerror or type(error).__name__}): {fix}") from None
    if len(data) > max_bytes:
        raise UserError(f"{where} has over {max_bytes} bytes, over {over}: {smaller}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"{where} is not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x}; a binary "
                        f"file?): {fix}") from None
    if "\0" in text:
        raise UserError(f"{where} is not text (byte {text.index(chr(0))} is a NUL; a binary file?): {fix}")
    return text


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count % (1024 * 1024) == 0 else f"{count} bytes"
