#!/usr/bin/env bash
# ci/knobs-check.sh: every RDMA_* and PERF_* variable that a ci/ script (ci/*.sh,
# ci/*.py, ci/py/*.py, .ci/run) or the fabric harness (tests/tests/fabric) names must be in a table of ci/README.md ("Environment
# knobs": a knob, or a variable the scripts set for the programs they run), and every
# variable of those tables must still be named by a script. Prints what is missing or
# stale and exits 1; else prints `knobs: N variables, all in ci/README.md`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Names in the scripts (not prefixes such as RDMA_TEST_ in a pattern, which end in _).
# In the fabric harness's Rust, only quoted names (environment variables, not constants).
mapfile -t used < <({
    grep -ohE '\b(RDMA|PERF)_[A-Z0-9_]*[A-Z0-9]\b' ci/*.sh ci/*.py ci/py/*.py .ci/run
    find tests/tests/fabric -name '*.rs' -exec grep -ohE '"(RDMA|PERF)_[A-Z0-9_]*[A-Z0-9]"' {} + | tr -d '"'
} | sort -u)
# Names in the first column of the README's tables.
mapfile -t documented < <(grep -E '^\| *`(RDMA|PERF)_' ci/README.md | cut -d'|' -f2 |
    grep -oE '\b(RDMA|PERF)_[A-Z0-9_]*[A-Z0-9]\b' | sort -u)

missing=$(comm -23 <(printf '%s\n' "${used[@]}") <(printf '%s\n' "${documented[@]}"))
stale=$(comm -13 <(printf '%s\n' "${used[@]}") <(printf '%s\n' "${documented[@]}"))
rc=0
if [ -n "$missing" ]; then
    echo "!! knobs-check.sh: named by a ci/ script but not in ci/README.md's tables:" >&2
    while IFS= read -r v; do
        echo "   $v (in $(grep -lw "$v" ci/*.sh ci/*.py ci/py/*.py .ci/run $(find tests/tests/fabric -name '*.rs') | tr '\n' ' '))" >&2
    done <<<"$missing"
    rc=1
fi
if [ -n "$stale" ]; then
    echo "!! knobs-check.sh: in ci/README.md's tables but named by no ci/ script:" >&2
    while IFS= read -r v; do echo "   $v" >&2; done <<<"$stale"
    rc=1
fi
[ "$rc" != 0 ] || echo "knobs: ${#used[@]} variables, all in ci/README.md"
exit "$rc"
