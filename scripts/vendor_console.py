#!/usr/bin/env python3
"""Vendor the console's front-end libraries into nodes/console/static/vendor/, from the npm registry.

    python3 scripts/vendor_console.py          # fetch, check, extract; then commit the files

VENDOR.json beside the files pins each package's version and its registry integrity (sha512 of the
tarball, the registry's `dist.integrity`). The tarball comes from `npm pack` (npm's own client and
its configured registry); a tarball whose sha512 differs from the pin is refused and nothing is
written. The extracted files' sha256 go to VENDOR.lock, which a unit test checks against the files
shipped, so a hand edit of a vendored file shows. To upgrade: change version and integrity (from
`npm view PACKAGE@VERSION dist.integrity`) and run this again.
"""
from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VENDOR = Path(__file__).resolve().parent.parent / "nodes" / "console" / "static" / "vendor"


def main() -> int:
    pins = json.loads((VENDOR / "VENDOR.json").read_text())
    lock: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, pin in pins.items():
            out = subprocess.run(["npm", "pack", f"{name}@{pin['version']}", "--json", "--pack-destination", tmp],
                                 capture_output=True, text=True, timeout=120, check=True, cwd=tmp)
            tarball = Path(tmp) / json.loads(out.stdout)[0]["filename"]
            digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
            if digest != pin["integrity"]:
                print(f"{name}@{pin['version']}: integrity {digest} is not the pinned {pin['integrity']}",
                      file=sys.stderr)
                return 1
            with tarfile.open(tarball) as tar:
                for member, target in pin["files"].items():
                    f = tar.extractfile(member)
                    if f is None:
                        print(f"{name}: {member} is not a file in the tarball", file=sys.stderr)
                        return 1
                    data = f.read()
                    (VENDOR / target).write_bytes(data)
                    lock[target] = hashlib.sha256(data).hexdigest()
            print(f"{name}@{pin['version']}: integrity checked, {len(pin['files'])} files")
    (VENDOR / "VENDOR.lock").write_text(json.dumps(dict(sorted(lock.items())), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
