"""The console's vendored libraries are the files the vendoring script checked (sha256 in
VENDOR.lock, recorded from tarballs whose registry integrity matched VENDOR.json), and every asset
a page names ships in the package."""
import hashlib
import json
import re
from importlib import resources

STATIC = resources.files("delayq.nodes.console").joinpath("static")
TEMPLATES = resources.files("delayq.nodes.console").joinpath("templates")


def test_vendored_files_match_their_lock():
    vendor = STATIC.joinpath("vendor")
    lock = json.loads(vendor.joinpath("VENDOR.lock").read_text())
    pins = json.loads(vendor.joinpath("VENDOR.json").read_text())
    assert set(lock) == {target for pin in pins.values() for target in pin["files"].values()}
    for name, sha in lock.items():
        assert hashlib.sha256(vendor.joinpath(name).read_bytes()).hexdigest() == sha, name
    for pin in pins.values():
        assert pin["integrity"].startswith("sha512-")


def test_pages_name_only_assets_of_the_package():
    for template in TEMPLATES.iterdir():
        text = template.read_text()
        assert "//" not in re.sub(r"https?://\{\{|<!--.*?-->", "", " ".join(re.findall(r'(?:src|href)="([^"]*)"', text))), template.name
        for asset in re.findall(r'(?:src|href)="/ui/static/([^"]+)"', text):
            assert STATIC.joinpath(*asset.split("/")).is_file(), asset
