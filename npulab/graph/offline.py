"""The offline model file, the .om analog: what the compile step writes and the runtime loads.

One zip archive of three members, stored uncompressed:

* ``header.json``: ``{"magic": "NPULABOM", "version": 1, "sha256": "<hex>"}``, the checksum
  over the payload (the bytes of the two members below, manifest first);
* ``manifest.json``: the model's description (a JSON object: whatever the writer puts there);
* ``arrays.npz``: its arrays (weights, constants), read back with ``allow_pickle=False``.

:func:`read` trusts nothing it has not checked: a file that is not a readable zip (truncated,
cut short, overwritten), a member missing, a header of another magic or version, a payload
whose checksum differs from the header's, or members that do not parse is an
:class:`~npulab.errors.OfflineModelError` saying what was found and what was expected. Nothing
is ever pickled: :func:`write` refuses object arrays (they would need pickle to store).
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np

from ..errors import OfflineModelError

MAGIC = "NPULABOM"
VERSION = 1
HEADER, MANIFEST, ARRAYS = "header.json", "manifest.json", "arrays.npz"
#: every member's time stamp: the zip format's first day, so that one model makes one file
_EPOCH = (1980, 1, 1, 0, 0, 0)


def checksum(manifest_bytes: bytes, arrays_bytes: bytes) -> str:
    """The payload's sha256: the manifest's bytes, then the arrays' (each length-prefixed, so
    bytes moved from one member to the other change it)."""
    h = hashlib.sha256()
    for part in (manifest_bytes, arrays_bytes):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _manifest_bytes(manifest: dict) -> bytes:
    if not isinstance(manifest, dict):
        raise OfflineModelError(f"write: the manifest must be a dict (a JSON object), got {type(manifest).__name__}")
    try:
        text = json.dumps(manifest, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise OfflineModelError(f"write: the manifest is not plain JSON (strings, numbers, lists, dicts; "
                                f"no NaN): {exc}") from None
    if json.loads(text) != manifest:
        raise OfflineModelError("write: the manifest would not read back as written: JSON keeps only string keys "
                                "and lists (a tuple or an integer key changes on the way); use those")
    return text.encode("utf-8")


def _arrays_bytes(arrays: dict) -> bytes:
    if not isinstance(arrays, dict):
        raise OfflineModelError(f"write: arrays must be a dict of name -> numpy array, got {type(arrays).__name__}")
    for name, a in arrays.items():
        if not isinstance(name, str) or not name:
            raise OfflineModelError(f"write: array names must be non-empty strings, got {name!r}")
        if not isinstance(a, np.ndarray):
            raise OfflineModelError(f"write: array '{name}' is a {type(a).__name__}, expected a numpy array")
        if a.dtype.hasobject:
            raise OfflineModelError(f"write: array '{name}' has dtype {a.dtype}, which holds Python objects and "
                                    f"could only be stored with pickle; convert it to a numeric or string dtype")
    # an .npz as np.savez writes it (one NAME.npy a member), written here so that no array name
    # can collide with savez's own keywords and no member carries the clock's time
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, a in arrays.items():
            with zf.open(zipfile.ZipInfo(name + ".npy", date_time=_EPOCH), "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)
    return buf.getvalue()


def write(path, manifest: dict, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``manifest`` and ``arrays`` to ``path`` as one offline model file; returns the path."""
    manifest_bytes, arrays_bytes = _manifest_bytes(manifest), _arrays_bytes(arrays)
    header = json.dumps({"magic": MAGIC, "version": VERSION,
                         "sha256": checksum(manifest_bytes, arrays_bytes)}, sort_keys=True).encode("utf-8")
    path = Path(path)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in ((HEADER, header), (MANIFEST, manifest_bytes), (ARRAYS, arrays_bytes)):
            zf.writestr(zipfile.ZipInfo(name, date_time=_EPOCH), data)
    return path


def _members(path: Path) -> dict[str, bytes]:
    """The archive's three members as bytes; any failure of the zip layer is the file's fault."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise OfflineModelError(f"offline model '{path}': no such file") from None
    except OSError as exc:
        raise OfflineModelError(f"offline model '{path}': cannot be read: {exc.strerror or exc}") from None
    if not data.startswith(b"PK"):
        raise OfflineModelError(f"offline model '{path}': not a zip archive (starts with {data[:8]!r}, expected "
                                f"b'PK'); an offline model file is a zip of {HEADER}, {MANIFEST} and {ARRAYS}")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = zf.namelist()
            missing = [m for m in (HEADER, MANIFEST, ARRAYS) if m not in names]
            if missing:
                raise OfflineModelError(f"offline model '{path}': members {missing} are missing (found {names}, "
                                        f"expected {HEADER}, {MANIFEST} and {ARRAYS})")
            return {m: zf.read(m) for m in (HEADER, MANIFEST, ARRAYS)}
    except OfflineModelError:
        raise
    except Exception as exc:      # zipfile reports a damaged archive in many ways (BadZipFile, CRC, EOF, ...)
        raise OfflineModelError(f"offline model '{path}': the zip archive is damaged or truncated "
                                f"({type(exc).__name__}: {exc})") from None


def _header(path: Path, raw: bytes) -> dict:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise OfflineModelError(f"offline model '{path}': {HEADER} is not JSON (found {raw[:40]!r}...)") from None
    if not isinstance(header, dict):
        raise OfflineModelError(f"offline model '{path}': {HEADER} is a {type(header).__name__}, expected an object")
    if header.get("magic") != MAGIC:
        raise OfflineModelError(f"offline model '{path}': magic {header.get('magic')!r}, expected {MAGIC!r}: "
                                f"not an npulab offline model")
    if header.get("version") != VERSION or isinstance(header.get("version"), bool):
        raise OfflineModelError(f"offline model '{path}': format version {header.get('version')!r}, expected "
                                f"{VERSION}: written by another npulab; compile the model again with this one")
    if not isinstance(header.get("sha256"), str):
        raise OfflineModelError(f"offline model '{path}': {HEADER} has no sha256 checksum string")
    return header


def read(path) -> tuple[dict, dict[str, np.ndarray]]:
    """(manifest, arrays) of the offline model file at ``path``, each checked (module docstring)."""
    path = Path(path)
    members = _members(path)
    header = _header(path, members[HEADER])
    found = checksum(members[MANIFEST], members[ARRAYS])
    if found != header["sha256"]:
        raise OfflineModelError(f"offline model '{path}': checksum mismatch, the payload's sha256 is {found[:16]}... "
                                f"and the header says {header['sha256'][:16]}...: the file is corrupted")
    try:
        manifest = json.loads(members[MANIFEST].decode("utf-8"))
        with np.load(io.BytesIO(members[ARRAYS]), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception as exc:      # a payload the checksum vouches for, yet unreadable: refuse it too
        raise OfflineModelError(f"offline model '{path}': its payload does not parse ({type(exc).__name__}: "
                                f"{exc})") from None
    if not isinstance(manifest, dict):
        raise OfflineModelError(f"offline model '{path}': {MANIFEST} is a {type(manifest).__name__}, expected an object")
    return manifest, arrays
