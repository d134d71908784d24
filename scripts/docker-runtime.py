#!/usr/bin/env python3
"""Adds vetto-shim to a dockerd daemon.json as the runtimes "vetto" (every container hardened
with the default profile) and "vetto-plain" (plain OCI unless the container's
dev.vetto.policy annotation names a policy). Other keys are kept; a backup is written first.

usage: docker-runtime.py /usr/local/bin/vetto-shim /etc/docker/daemon.json
"""
import json
import os
import shutil
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    shim, path = sys.argv[1], sys.argv[2]
    if not os.path.isabs(shim) or not os.access(shim, os.X_OK):
        print(f"docker-runtime.py: {shim}: not an absolute path to an executable", file=sys.stderr)
        return 1
    conf = {}
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        try:
            conf = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as e:
            print(f"docker-runtime.py: {path}: not valid JSON ({e}); not changed", file=sys.stderr)
            return 1
        shutil.copy2(path, path + ".before-vetto")
    runtimes = conf.setdefault("runtimes", {})
    runtimes["vetto"] = {"path": shim, "runtimeArgs": ["--vetto-policy=default"]}
    runtimes["vetto-plain"] = {"path": shim}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(conf, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    print(f"{path}: runtimes vetto, vetto-plain -> {shim}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
