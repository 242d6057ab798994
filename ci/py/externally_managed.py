"""externally_managed.py: exits 0 when this python's standard library is marked
EXTERNALLY-MANAGED (PEP 668: pip then needs --break-system-packages), 1 otherwise."""
import os
import sys
import sysconfig

sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))
