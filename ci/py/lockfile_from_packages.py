"""lockfile_from_packages.py CRATE...: in the current directory's Cargo.lock, every CRATE
must come from its package (a path dependency, which has no `source` line), not from
a registry. Exits non-zero naming those that do not."""
import sys
import tomllib

lock = tomllib.load(open("Cargo.lock", "rb"))
bad = []
for name in sys.argv[1:]:
    found = [p for p in lock["package"] if p["name"] == name]
    if not found:
        bad.append(f"{name}: not in the lockfile")
    for p in found:
        if "source" in p:
            bad.append(f"{name} {p['version']} from {p['source']}")
if bad:
    sys.exit("package: not taken from the packages: " + "; ".join(bad))
print("   lockfile: " + ", ".join(sys.argv[1:]) + " from their packages")
