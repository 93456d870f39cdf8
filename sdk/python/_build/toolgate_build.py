"""The toolgate package's build backend (PEP 517, PEP 660), standard
library only, so that the package builds and installs offline with no
setuptools: it packs toolgate/ into a wheel (or a source archive) with
the metadata pyproject.toml's [project] table gives. It writes nothing
into the source tree."""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "toolgate"


def _project():
    """The [project] table's plain string fields."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S).group(1)
    fields = dict(re.findall(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"\s*$', section, re.M))
    for required in ("name", "version"):
        if required not in fields:
            raise ValueError("pyproject.toml: [project] %s: required" % required)
    return fields


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if "description" in p:
        lines.append("Summary: " + p["description"])
    if "requires-python" in p:
        lines.append("Requires-Python: " + p["requires-python"])
    body = ""
    readme = os.path.join(ROOT, p.get("readme", "README.md"))
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = "\n" + f.read()
    return p, "\n".join(lines) + "\n" + body


def _dist_info(p):
    return "%s-%s.dist-info" % (p["name"].replace("-", "_"), p["version"])


def _wheel_name(p):
    return "%s-%s-py3-none-any.whl" % (p["name"].replace("-", "_"), p["version"])


WHEEL = "Wheel-Version: 1.0\nGenerator: toolgate_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _sources():
    """The package's files: (path in the archive, path on disk)."""
    out = []
    top = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name == "py.typed":
                disk = os.path.join(dirpath, name)
                out.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    return out


def _write_wheel(wheel_directory, files):
    """Writes a wheel of files ((name, bytes) pairs) and its metadata."""
    p, metadata = _metadata()
    info = _dist_info(p)
    files = list(files) + [
        (info + "/METADATA", metadata.encode("utf-8")),
        (info + "/WHEEL", WHEEL.encode()),
        (info + "/top_level.txt", (PACKAGE + "\n").encode()),
    ]
    record = []
    name = _wheel_name(p)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            zf.writestr(zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))
        record.append(info + "/RECORD,,")
        zf.writestr(zipfile.ZipInfo(info + "/RECORD", date_time=(1980, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p, metadata = _metadata()
    info = os.path.join(metadata_directory, _dist_info(p))
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata)
    with open(os.path.join(info, "WHEEL"), "w") as f:
        f.write(WHEEL)
    return _dist_info(p)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for arcname, disk in _sources():
        with open(disk, "rb") as f:
            files.append((arcname, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this source tree on sys.path."""
    return _write_wheel(wheel_directory, [(PACKAGE + "_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p, metadata = _metadata()
    base = "%s-%s" % (p["name"].replace("-", "_"), p["version"])
    name = base + ".tar.gz"
    members = [(rel, disk) for rel, disk in _sources()]
    for extra in ("pyproject.toml", "README.md", "_build/toolgate_build.py"):
        if os.path.exists(os.path.join(ROOT, extra)):
            members.append((extra, os.path.join(ROOT, extra)))
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel, disk in members:
            with open(disk, "rb") as f:
                data = f.read()
            ti = tarfile.TarInfo(base + "/" + rel)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            tf.addfile(ti, io.BytesIO(data))
        pkg = metadata.encode("utf-8")
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size, ti.mtime, ti.mode = len(pkg), 0, 0o644
        tf.addfile(ti, io.BytesIO(pkg))
    return name
