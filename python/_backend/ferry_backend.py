"""A PEP 517 build backend for the ferry package that needs nothing.

pip builds a pyproject.toml project in an isolated environment into which
it installs the backend's requirements, from the network. Debian's pip and
setuptools are system-wide, outside that environment, so `pip install
./python` would fail offline with setuptools as the backend. The package
is plain Python (ctypes over libferry.so), so a wheel is just a zip of
ferry/*.py plus the .dist-info files, written here with the standard
library; pyproject.toml points pip at this file (backend-path) and asks
for no requirements.

Hooks: build_wheel, build_sdist, build_editable (PEP 660: a .pth file
naming this folder), and their get_requires_for_* (all empty). The
metadata comes from pyproject.toml's [project] table, read with a small
parser of the subset used there (tomllib is Python 3.11+ only), and the
version from ferry/__init__.py's __version__.
"""
import base64
import hashlib
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
PKG = "ferry"
TAG = "py3-none-any"
# Never shipped: bytecode, and the prefix file `cmake --install` writes
# (a wheel does not know where libferry was installed).
SKIP = re.compile(r"(__pycache__|\.pyc$|^_prefix\.py$)")


def _version():
    with open(os.path.join(HERE, PKG, "__init__.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("ferry_backend: no __version__ in ferry/__init__.py")
    return m.group(1)


def _project():
    """pyproject.toml's [project] strings and [project.scripts] entries."""
    proj, scripts, extras, table = {}, {}, {}, None
    with open(os.path.join(HERE, "pyproject.toml")) as f:
        for line in f:
            line = line.split(" #")[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                table = line.strip("[]")
                continue
            m = re.match(r'([\w-]+)\s*=\s*(.*)$', line)
            if not m:
                continue
            key, val = m.groups()
            if table == "project" and val.startswith('"'):
                proj[key] = val.strip('"')
            elif table == "project.scripts":
                scripts[key] = val.strip('"')
            elif table == "project.optional-dependencies":
                extras[key] = re.findall(r'"([^"]+)"', val)
    return proj, scripts, extras


def _metadata():
    proj, _, extras = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {proj['name']}", f"Version: {_version()}",
             f"Summary: {proj.get('description', '')}",
             f"Requires-Python: {proj.get('requires-python', '>=3')}"]
    for extra, reqs in extras.items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    readme = proj.get("readme")
    body = ""
    if readme and os.path.exists(os.path.join(HERE, readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(HERE, readme)) as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _dist_info():
    """The .dist-info files: name -> bytes (RECORD excluded)."""
    _, scripts, _ = _project()
    files = {"METADATA": _metadata().encode(),
             "WHEEL": ("Wheel-Version: 1.0\nGenerator: ferry_backend\nRoot-Is-Purelib: true\n"
                       f"Tag: {TAG}\n").encode(),
             "top_level.txt": (PKG + "\n").encode()}
    if scripts:
        files["entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{k} = {v}\n" for k, v in scripts.items())).encode()
    return files


def _sources():
    """(path in the wheel, path on disk) of every file of the package."""
    out = []
    for root, dirs, names in os.walk(os.path.join(HERE, PKG)):
        dirs[:] = sorted(d for d in dirs if not SKIP.search(d))
        for n in sorted(names):
            if n.endswith(".py") and not SKIP.search(n):
                disk = os.path.join(root, n)
                out.append((os.path.relpath(disk, HERE).replace(os.sep, "/"), disk))
    return out


def _write_wheel(wheel_directory, members):
    """members: (path in the wheel, bytes); adds the dist-info and RECORD."""
    name = f"{PKG}-{_version()}"
    info = f"{name}.dist-info"
    members = list(members) + [(f"{info}/{k}", v) for k, v in _dist_info().items()]
    record = []
    path = os.path.join(wheel_directory, f"{name}-{TAG}.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in members:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arc},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return os.path.basename(path)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    members = []
    for arc, disk in _sources():
        with open(disk, "rb") as f:
            members.append((arc, f.read()))
    return _write_wheel(wheel_directory, members)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # PEP 660: the installed wheel holds only a .pth naming this folder, so
    # edits to ferry/*.py take effect without reinstalling.
    return _write_wheel(wheel_directory, [(f"__editable__.{PKG}.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    name = f"{PKG}-{_version()}"
    path = os.path.join(sdist_directory, name + ".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_backend/ferry_backend.py"]:
            if os.path.exists(os.path.join(HERE, rel)):
                t.add(os.path.join(HERE, rel), f"{name}/{rel}")
        for arc, disk in _sources():
            t.add(disk, f"{name}/{arc}")
        info = tarfile.TarInfo(f"{name}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        import io
        t.addfile(info, io.BytesIO(data))
    return os.path.basename(path)
