"""A metadata-only wheel, made inside an image: what a job's `pip install` of another release looks like,
without a network."""

FAKE_WHEEL = r'''
import base64, hashlib, os, sys, zipfile
name, version, folder = sys.argv[1], sys.argv[2], sys.argv[3]
info = f"{name.replace('-', '_')}-{version}.dist-info"
wheel = "Wheel-Version: 1.0\nGenerator: probe\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", f"{info}/WHEEL": wheel}
def digest(text):
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")
record = "".join(f"{p},sha256={digest(t)},{len(t)}\n" for p, t in files.items()) + f"{info}/RECORD,,\n"
path = os.path.join(folder, f"{name.replace('-', '_')}-{version}-py3-none-any.whl")
with zipfile.ZipFile(path, "w") as z:
    for p, t in files.items():
        z.writestr(p, t)
    z.writestr(f"{info}/RECORD", record)
print(path)
'''
"""A wheel of NAME at VERSION holding only its metadata, written into FOLDER; prints its path."""
