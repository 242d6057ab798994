"""cargo_executable.py NAME KIND < cargo-json: the executable of target NAME of kind
KIND (test, bin, example) from `cargo ... --message-format=json`; an empty line if
there is none (the last one when there are several). NAME `*`: every executable of
that kind that is not a unit-test build, one a line."""
import json
import sys

name, kind, exes = sys.argv[1], sys.argv[2], {}
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable") \
            or kind not in msg["target"]["kind"]:
        continue
    if name == "*":
        # Every program of that kind, not the unit-test builds of its targets
        # (`--all-targets` builds a bin twice: the program and its tests).
        if not msg["profile"]["test"]:
            exes[msg["target"]["name"]] = msg["executable"]
    elif msg["target"]["name"] == name:
        exes[name] = msg["executable"]
if name == "*":
    print("\n".join(sorted(exes.values())))
else:
    print(exes.get(name, ""))
