"""Runs INSIDE the image under test (standard library only, Python >= 3.8): pip's install records (RECORD) and
dpkg's file lists, read where they lie, so that only a JSON answer crosses `docker exec`, not a file per exec.

    python -c "$(cat install_records.py)" verify          every file a RECORD lists with a hash, hashed
    find … | python -c "$(cat install_records.py)" owners  who ships each path on stdin unchanged, if anyone

The host-side checks (shared_checks/installed.py) decide what is a problem.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import re
import site
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor

CAP = 200  # findings listed in full; the counts are always complete
CHUNK = 1 << 20


def site_dirs() -> list:
    """Every folder this Python imports distributions from (the venv's site-packages; NGC's dist-packages)."""
    paths = sysconfig.get_paths()
    found = [*sys.path, paths["purelib"], paths["platlib"], *site.getsitepackages(), site.getusersitepackages()]
    return [d for d in dict.fromkeys(os.path.realpath(p) for p in found if p) if os.path.isdir(d)]


def records(site_dir: str) -> list:
    """(distribution folder, RECORD rows) of every distribution in site_dir that pip (or uv) recorded."""
    out = []
    for entry in sorted(os.listdir(site_dir)):
        path = os.path.join(site_dir, entry, "RECORD")
        if entry.endswith(".dist-info") and os.path.isfile(path):
            with open(path, newline="", encoding="utf-8") as handle:
                out.append((entry, [row for row in csv.reader(handle) if row]))
    return out


def dist_name(folder: str) -> str:
    """google_auth-2.40.3.dist-info -> google-auth: the folder names the escaped distribution and its version."""
    return re.sub(r"[-_.]+", "-", folder[: -len(".dist-info")].rsplit("-", 1)[0]).lower()


def listed(site_dir: str) -> list:
    """(distribution, installed path, algorithm, expected digest) for every hashed file of every RECORD, RECORD
    itself and byte-compiled caches aside (pip lists their hashes, and Python rewrites them at will)."""
    out = []
    for folder, rows in records(site_dir):
        for row in rows:
            name, digest = row[0], (row[1] if len(row) > 1 else "")
            if not digest or "=" not in digest or name.endswith(".dist-info/RECORD"):
                continue
            if "__pycache__/" in name and name.endswith(".pyc"):
                continue
            algorithm, expected = digest.split("=", 1)
            out.append((dist_name(folder), os.path.normpath(os.path.join(site_dir, name)), algorithm, expected))
    return out


def digest(path: str, algorithm: str) -> str:
    """RECORD's form of a digest: urlsafe base64 without padding (the wheel spec)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            h.update(block)
    return base64.urlsafe_b64encode(h.digest()).decode().rstrip("=")


def check(item: tuple) -> tuple:
    dist, path, algorithm, expected = item
    try:
        size = os.path.getsize(path)
        got = digest(path, algorithm)
    except FileNotFoundError:
        return dist, path, "missing", 0
    except (OSError, ValueError) as error:  # unreadable, or an algorithm this hashlib lacks
        return dist, path, f"unreadable: {error}", 0
    return dist, path, (None if got == expected else "hash differs"), size


def verify() -> dict:
    """Hash every listed file, one thread per core (hashlib releases the GIL while it hashes). A path two
    distributions both list (flashinfer-python and torch-c-dlpack-ext each ship a top-level build_backend.py)
    holds the copy of whichever was installed last: it matches that one's RECORD, and is reported as shared,
    not as changed."""
    start = time.monotonic()
    sites = site_dirs()
    items = [item for s in sites for item in listed(s)]
    verified = sorted({dist_name(folder) for s in sites for folder, _ in records(s)})
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(check, items, chunksize=64))
    by_path: dict = {}
    for dist, path, why, _ in results:
        by_path.setdefault(path, []).append((dist, why))
    bad, shared = [], []
    for path, claims in by_path.items():
        kept = [dist for dist, why in claims if not why]
        if kept and len(kept) < len(claims):  # two wheels ship the path with other bytes: the later one's is there
            shared.append([path, sorted(dist for dist, _ in claims), kept[0]])
        elif not kept:
            bad += [[dist, path, why] for dist, why in claims]
    return {
        "sites": sites,
        "distributions": verified,
        "files": len(items),
        "bytes": sum(size for *_, size in results),
        "seconds": round(time.monotonic() - start, 1),
        "mismatches": bad[:CAP],
        "mismatch_count": len(bad),
        "shared": shared[:CAP],
    }


def dpkg_files() -> tuple:
    """Every path dpkg's file lists name, and the md5 dpkg recorded for it (.md5sums; a conffile's in status)."""
    info = "/var/lib/dpkg/info"
    names: set = set()
    md5: dict = {}
    if not os.path.isdir(info):
        return names, md5
    for entry in os.listdir(info):
        if not entry.endswith((".list", ".md5sums")):
            continue
        with open(os.path.join(info, entry), encoding="utf-8", errors="replace") as handle:
            if entry.endswith(".list"):
                names.update(line.rstrip("\n") for line in handle)
                continue
            for line in handle:
                value, _, name = line.rstrip("\n").partition("  ")
                md5["/" + name] = value
    try:
        with open("/var/lib/dpkg/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split()
                if line.startswith(" /") and len(parts) >= 2:
                    md5[parts[0]] = parts[1]
    except OSError:
        pass
    return names, md5


def spellings(path: str) -> tuple:
    """A merged-/usr system lists /bin/mount where the file system shows /usr/bin/mount: both spellings."""
    return (path, path[4:]) if path.startswith("/usr/") else (path, "/usr" + path)


def md5_hex(path: str) -> str:
    h = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def owner(path: str, shipped: dict, names: set, md5: dict) -> object:
    """Who shipped the file as it is now: "pip <distribution>" when a RECORD lists it with the hash it has,
    "dpkg" when an OS package's list names it and it still has the md5 dpkg recorded (where dpkg recorded one);
    else None, for an edited file is no longer what its package shipped."""
    real = os.path.realpath(path)
    if real in shipped:
        dist, algorithm, expected = shipped[real]
        try:
            if digest(real, algorithm) == expected:
                return "pip " + dist
        except (OSError, ValueError):
            pass
    for spelling in spellings(path):
        if spelling in names:
            recorded = md5.get(spelling)
            try:
                return "dpkg" if recorded is None or md5_hex(path) == recorded else None
            except OSError:
                return None
    return None


def owners(paths: list) -> dict:
    shipped = {path: (dist, algorithm, expected) for s in site_dirs() for dist, path, algorithm, expected in listed(s)}
    names, md5 = dpkg_files()
    return {path: owner(path, shipped, names, md5) for path in paths}


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "verify":
        print(json.dumps(verify()))
    elif mode == "owners":
        print(json.dumps(owners(list(dict.fromkeys(line.rstrip("\n") for line in sys.stdin if line.strip())))))
    else:
        sys.exit("usage: install_records.py verify | owners < paths")
