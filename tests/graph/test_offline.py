"""The offline model file (graph.offline): a round trip keeps manifest and arrays; every damaged,
foreign or future file is refused with an OfflineModelError that says what it found; never pickle."""
import io
import json
import zipfile

import numpy as np
import pytest

from npulab.errors import NpuError, OfflineModelError
from npulab.graph import offline

MANIFEST = {"name": "tiny", "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float16"}],
            "nodes": [{"op_type": "Add", "inputs": ["x", "w"]}], "chip": "910b", "batch": 2}


def arrays():
    rng = np.random.default_rng(7)
    return {"w": rng.standard_normal((2, 3)).astype(np.float16),
            "bias": np.arange(5, dtype=np.int32),
            "scale": np.array(0.5, dtype=np.float32),
            "names": np.array(["conv1", "fc"]),
            "empty": np.zeros((0, 4), dtype=np.float32),
            "file": np.ones(3, dtype=np.uint8)}        # a name np.savez itself would choke on


def same(load, manifest, arrs):
    m, a = load
    return m == manifest and a.keys() == arrs.keys() and all(
        a[k].dtype == arrs[k].dtype and a[k].shape == arrs[k].shape and a[k].tobytes() == arrs[k].tobytes()
        for k in arrs)


@pytest.fixture
def model(tmp_path):
    return offline.write(tmp_path / "tiny.om", MANIFEST, arrays())


def test_round_trip_keeps_manifest_and_every_array(model):
    assert same(offline.read(model), MANIFEST, arrays())


def test_one_model_makes_one_file(tmp_path):
    a = offline.write(tmp_path / "a.om", MANIFEST, arrays()).read_bytes()
    b = offline.write(tmp_path / "b.om", MANIFEST, arrays()).read_bytes()
    assert a == b


def test_the_file_is_a_zip_of_header_manifest_and_npz(model):
    with zipfile.ZipFile(model) as zf:
        assert zf.namelist() == ["header.json", "manifest.json", "arrays.npz"]
        header = json.loads(zf.read("header.json"))
        assert header["magic"] == "NPULABOM" and header["version"] == offline.VERSION
        assert header["sha256"] == offline.checksum(zf.read("manifest.json"), zf.read("arrays.npz"))
        with np.load(io.BytesIO(zf.read("arrays.npz")), allow_pickle=False) as npz:
            assert sorted(npz.files) == sorted(arrays())


def rewrite(path, **members):
    """The model at ``path`` with some members replaced (bytes), the others kept."""
    with zipfile.ZipFile(path) as zf:
        old = {n: zf.read(n) for n in zf.namelist()}
    old.update(members)
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in old.items():
            zf.writestr(n, data)


def header_of(path):
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("header.json"))


def test_wrong_magic_says_what_it_found_and_expected(model):
    h = header_of(model)
    rewrite(model, **{"header.json": json.dumps({**h, "magic": "ONNXMODL"}).encode()})
    with pytest.raises(OfflineModelError, match=r"magic 'ONNXMODL', expected 'NPULABOM'"):
        offline.read(model)


@pytest.mark.parametrize("version", [2, 0, "1", True, None])
def test_wrong_version_says_what_it_found_and_expected(model, version):
    h = header_of(model)
    rewrite(model, **{"header.json": json.dumps({**h, "version": version}).encode()})
    with pytest.raises(OfflineModelError, match=rf"format version {version!r}, expected {offline.VERSION}"):
        offline.read(model)


def test_a_changed_payload_fails_the_checksum(model):
    with zipfile.ZipFile(model) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    manifest["batch"] = 64                          # a well-formed, valid-zip edit: only the checksum sees it
    rewrite(model, **{"manifest.json": json.dumps(manifest, sort_keys=True).encode()})
    with pytest.raises(OfflineModelError, match="checksum mismatch"):
        offline.read(model)


def test_truncated_file_is_refused(model):
    data = model.read_bytes()
    model.write_bytes(data[:len(data) // 2])
    with pytest.raises(OfflineModelError, match="damaged or truncated"):
        offline.read(model)


def test_not_a_zip_and_a_missing_member_and_no_file(tmp_path, model):
    junk = tmp_path / "junk.om"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    with pytest.raises(OfflineModelError, match=r"not a zip archive .* expected b'PK'"):
        offline.read(junk)
    with zipfile.ZipFile(tmp_path / "part.om", "w") as zf:
        zf.writestr("header.json", b"{}")
    with pytest.raises(OfflineModelError, match=r"members \['manifest.json', 'arrays.npz'\] are missing"):
        offline.read(tmp_path / "part.om")
    with pytest.raises(OfflineModelError, match="no such file"):
        offline.read(tmp_path / "none.om")


def test_object_arrays_are_refused_on_write(tmp_path):
    with pytest.raises(OfflineModelError, match="pickle"):
        offline.write(tmp_path / "o.om", MANIFEST, {"w": np.array([{"a": 1}, None], dtype=object)})
    assert not (tmp_path / "o.om").exists()


@pytest.mark.parametrize("manifest, arrs, match", [
    ([1, 2], {}, "must be a dict"),
    ({"x": float("nan")}, {}, "not plain JSON"),
    ({"x": object()}, {}, "not plain JSON"),
    ({1: "a"}, {}, "would not read back"),
    ({"shape": (2, 3)}, {}, "would not read back"),
    ({}, {"w": [1, 2]}, "expected a numpy array"),
    ({}, {3: np.ones(2)}, "non-empty strings"),
])
def test_bad_write_arguments_name_the_problem(tmp_path, manifest, arrs, match):
    with pytest.raises(OfflineModelError, match=match):
        offline.write(tmp_path / "bad.om", manifest, arrs)


def test_an_npz_with_a_pickled_array_is_never_unpickled(tmp_path, model):
    """Even under a valid checksum (an attacker can recompute it), an object array in the npz is
    refused: the reader loads with allow_pickle=False."""
    buf = io.BytesIO()
    np.save(buf, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    npz = io.BytesIO()
    with zipfile.ZipFile(npz, "w") as zf:
        zf.writestr("w.npy", buf.getvalue())
    with zipfile.ZipFile(model) as zf:
        manifest = zf.read("manifest.json")
    header = {"magic": "NPULABOM", "version": offline.VERSION, "sha256": offline.checksum(manifest, npz.getvalue())}
    rewrite(model, **{"header.json": json.dumps(header).encode(), "arrays.npz": npz.getvalue()})
    with pytest.raises(OfflineModelError, match="does not parse"):
        offline.read(model)


def mutate(data: bytes, rng) -> bytes:
    """One damage of a valid file: flip 1-4 bytes, cut it short, or insert 1-16 random bytes."""
    how = rng.integers(3)
    if how == 0:
        out = bytearray(data)
        for i in rng.integers(len(data), size=rng.integers(1, 5)):
            out[i] ^= int(rng.integers(1, 256))
        return bytes(out)
    if how == 1:
        return data[:int(rng.integers(len(data)))]
    at = int(rng.integers(len(data) + 1))
    return data[:at] + rng.integers(256, size=int(rng.integers(1, 17)), dtype=np.uint8).tobytes() + data[at:]


def test_fuzz_damaged_files_raise_offline_model_error_or_load_unchanged(tmp_path, model):
    """600 seeded damages of a valid file (byte flips, truncations, insertions): the reader
    either refuses with an OfflineModelError or loads exactly what was written, never anything
    else and never another exception."""
    data = model.read_bytes()
    rng = np.random.default_rng(20261204)
    refused = loaded = 0
    target = tmp_path / "fuzz.om"
    for case in range(600):
        target.write_bytes(mutate(data, rng))
        try:
            load = offline.read(target)
        except OfflineModelError as exc:
            assert isinstance(exc, NpuError) and "offline model" in str(exc)
            refused += 1
            continue
        assert same(load, MANIFEST, arrays()), f"case {case}: a damaged file loaded as something else"
        loaded += 1
    assert refused > 400 and refused + loaded == 600
