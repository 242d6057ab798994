"""cargo_metadata.py version PACKAGE | tests  < `cargo metadata --format-version 1 --no-deps`:
`version` prints PACKAGE's version; `tests` prints the name of every test target of the
workspace but trybuild's compile-fail ones (names starting with compile_fail), one a line."""
import json
import sys

packages = json.load(sys.stdin)["packages"]
if sys.argv[1] == "version":
    print({p["name"]: p["version"] for p in packages}[sys.argv[2]])
elif sys.argv[1] == "tests":
    for p in packages:
        for t in p["targets"]:
            if "test" in t["kind"] and not t["name"].startswith("compile_fail"):
                print(t["name"])
else:
    sys.exit(f"cargo_metadata.py: unknown command {sys.argv[1]}")
