"""cargo_executable.py NAME KIND < cargo-json: the executable of target NAME of kind
KIND (test, bin, example) from `cargo ... --message-format=json`; an empty line if
there is none (the last one when there are several). NAME `*`: every executable of
that kind, one a line."""
import json
import sys

name, kind, exes = sys.argv[1], sys.argv[2], {}
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
            and name in ("*", msg["target"]["name"]) and kind in msg["target"]["kind"]:
        exes[msg["target"]["name"]] = msg["executable"]
if name == "*":
    print("\n".join(sorted(exes.values())))
else:
    print(exes.get(name, ""))
