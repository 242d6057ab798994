"""cargo_executable.py NAME KIND < cargo-json: the executable of target NAME of kind
KIND (test, bin, example) from `cargo ... --message-format=json`; an empty line if
there is none (the last one when there are several)."""
import json
import sys

name, kind, exe = sys.argv[1], sys.argv[2], ""
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
            and msg["target"]["name"] == name and kind in msg["target"]["kind"]:
        exe = msg["executable"]
print(exe)
