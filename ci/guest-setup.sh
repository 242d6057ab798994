# shellcheck shell=bash
# ci/guest-setup.sh: set up soft RDMA devices INSIDE the VM (as root).
#
#   source ci/guest-setup.sh            # set up, then the calling shell has
#                                       # ulimit -l unlimited and the env below
#   bash ci/guest-setup.sh CMD ARGS...  # set up, then exec CMD with them
#
# Devices:
#   rxe0 (Soft-RoCE)  on dummy netdev rd0: 192.0.2.1/24,    fd00:1::1/64
#   siw0 (Soft-iWARP) on dummy netdev rd1: 198.51.100.1/24, fd00:2::1/64
# Exports RDMA_RXE_{DEVICE,NETDEV,IPV4,IPV6}, RDMA_SIW_{...} and the function
# `rdma_use_provider rxe|siw`, which exports RDMA_TEST_IN_VM=1, RDMA_TEST_PROVIDER,
# RDMA_TEST_DEVICE, RDMA_TEST_NETDEV, RDMA_TEST_IPV4, RDMA_TEST_IPV6.
# Knobs: RDMA_SIW_KO (path of siw.ko; default target/ci/siw-$(uname -r)/siw.ko),
#        RDMA_GID_TIMEOUT (seconds to wait for GIDs, default 30),
#        RDMA_GUEST_ROOT (a tree of another release's packages, extracted with
#        dpkg -x: its usr/lib/x86_64-linux-gnu, usr/bin and etc/libibverbs.d are
#        mounted over the guest's own (overlayfs, theirs on top), so every
#        process started afterwards runs that release's dynamic loader, glibc,
#        rdma-core libraries, providers and tools).

export RDMA_RXE_DEVICE=rxe0 RDMA_RXE_NETDEV=rd0 RDMA_RXE_IPV4=192.0.2.1 RDMA_RXE_IPV6=fd00:1::1
export RDMA_SIW_DEVICE=siw0 RDMA_SIW_NETDEV=rd1 RDMA_SIW_IPV4=198.51.100.1 RDMA_SIW_IPV6=fd00:2::1

rdma_use_provider() {
    local p=${1:?usage: rdma_use_provider rxe|siw} P
    case "$p" in
    rxe | siw) ;;
    *)
        echo "rdma_use_provider: unknown provider '$p' (rxe|siw)" >&2
        return 1
        ;;
    esac
    P=$(echo "$p" | tr a-z A-Z)
    export RDMA_TEST_IN_VM=1 RDMA_TEST_PROVIDER="$p"
    eval "export RDMA_TEST_DEVICE=\$RDMA_${P}_DEVICE RDMA_TEST_NETDEV=\$RDMA_${P}_NETDEV"
    eval "export RDMA_TEST_IPV4=\$RDMA_${P}_IPV4 RDMA_TEST_IPV6=\$RDMA_${P}_IPV6"
}

# GID strings as they appear in /sys/class/infiniband/*/ports/*/gids/*.
_rdma_gid_v4mapped() { # 192.0.2.1 -> 0000:0000:0000:0000:0000:ffff:c000:0201
    local IFS=. a b c d
    read -r a b c d <<<"$1"
    printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d"
}
_rdma_gid_v6() { # fd00:1::1 -> fd00:0001:0000:0000:0000:0000:0000:0001
    local addr=$1 head tail i n g out=
    local -a h=() t=() groups=()
    if [[ $addr == *::* ]]; then head=${addr%%::*} tail=${addr#*::}; else head=$addr tail=; fi
    [ -z "$head" ] || IFS=: read -ra h <<<"$head"
    [ -z "$tail" ] || IFS=: read -ra t <<<"$tail"
    n=$((8 - ${#h[@]} - ${#t[@]}))
    groups=("${h[@]}")
    for ((i = 0; i < n; i++)); do groups+=(0); done
    groups+=("${t[@]}")
    for g in "${groups[@]}"; do out+=$(printf '%04x:' "0x$g"); done
    echo "${out%:}"
}

_rdma_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

_rdma_guest_fail() {
    echo "!! guest-setup: $*" >&2
    return 1
}

_rdma_netdev() { # name ipv4 ipv6 (one `ip -batch` process: exec is slow under TCG)
    local cmds=
    ip link show "$1" >/dev/null 2>&1 || cmds+="link add $1 type dummy"$'\n'
    cmds+="addr replace $2/24 dev $1"$'\n'
    cmds+="addr replace $3/64 dev $1 nodad"$'\n'
    cmds+="link set $1 up"$'\n'
    ip -batch - <<<"$cmds" ||
        _rdma_guest_fail "setting up dummy netdev $1 ($2/24, $3/64) failed: ip -batch of: ${cmds//$'\n'/; }"
}

_rdma_link() { # dev type netdev
    [ -e "/sys/class/infiniband/$1" ] && return 0
    rdma link add "$1" type "$2" netdev "$3" ||
        _rdma_guest_fail "rdma link add $1 type $2 netdev $3 failed" || return 1
}

_rdma_has_gid() { # dev gid
    grep -qxF "$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null
}

# Mount RDMA_GUEST_ROOT's library, tool and provider-config dirs over the guest's.
_rdma_guest_root() {
    local root=$1 d
    [ -d "$root/usr/lib/x86_64-linux-gnu" ] ||
        _rdma_guest_fail "RDMA_GUEST_ROOT=$root has no usr/lib/x86_64-linux-gnu" || return 1
    [ -d /sys/module/overlay ] || modprobe overlay ||
        _rdma_guest_fail "modprobe overlay failed (kernel $(uname -r))" || return 1
    for d in usr/lib/x86_64-linux-gnu usr/bin etc/libibverbs.d; do
        [ -d "$root/$d" ] || continue
        mkdir -p "/$d"
        mount -t overlay overlay -o "lowerdir=$root/$d:/$d" "/$d" ||
            _rdma_guest_fail "mounting $root/$d over /$d failed" || return 1
    done
    echo "userspace of $root: $(/usr/lib64/ld-linux-x86-64.so.2 --version 2>&1 | head -n 1)"
}

rdma_guest_setup() {
    local t0 kver siw_ko m dev want deadline missing mods
    t0=$(date +%s.%N)
    if [ -n "${RDMA_GUEST_ROOT:-}" ]; then
        echo "== guest-setup: userspace from $RDMA_GUEST_ROOT"
        _rdma_guest_root "$RDMA_GUEST_ROOT" || return 1
    fi
    echo "== guest-setup: memlock limit"
    ulimit -l unlimited || _rdma_guest_fail "ulimit -l unlimited failed (not root?)" || return 1
    echo "ulimit -l: $(ulimit -l)"

    echo "== guest-setup: kernel modules ($(_rdma_since "$t0") s)"
    kver=$(uname -r)
    mods=(ib_uverbs rdma_ucm ib_umad rdma_rxe iw_cm)
    # siw needs crc32c: from the module libcrc32c up to kernel 6.13; since then
    # the kernel's lib has it built in and there is no such module.
    if grep -q '/libcrc32c\.ko' "/lib/modules/$kver/modules.dep" 2>/dev/null; then
        mods+=(libcrc32c)
    fi
    # One modprobe process for all (process start is slow under TCG).
    if ! modprobe -a "${mods[@]}"; then
        for m in "${mods[@]}"; do
            [ -d "/sys/module/$m" ] || _rdma_guest_fail "modprobe $m failed (kernel $kver)" || return 1
        done
    fi
    if [ ! -d /sys/module/siw ]; then
        siw_ko=${RDMA_SIW_KO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/ci/siw-$kver/siw.ko}
        [ -f "$siw_ko" ] || _rdma_guest_fail "$siw_ko missing: run ci/setup.sh on the host first" || return 1
        insmod "$siw_ko" || _rdma_guest_fail "insmod $siw_ko failed" || return 1
    fi

    echo "== guest-setup: netdevs rd0 rd1 ($(_rdma_since "$t0") s)"
    _rdma_netdev "$RDMA_RXE_NETDEV" "$RDMA_RXE_IPV4" "$RDMA_RXE_IPV6" || return 1
    _rdma_netdev "$RDMA_SIW_NETDEV" "$RDMA_SIW_IPV4" "$RDMA_SIW_IPV6" || return 1

    echo "== guest-setup: rdma links rxe0 siw0 ($(_rdma_since "$t0") s)"
    _rdma_link "$RDMA_RXE_DEVICE" rxe "$RDMA_RXE_NETDEV" || return 1
    _rdma_link "$RDMA_SIW_DEVICE" siw "$RDMA_SIW_NETDEV" || return 1
    for dev in "$RDMA_RXE_DEVICE" "$RDMA_SIW_DEVICE"; do
        [ -d "/sys/class/infiniband/$dev" ] ||
            _rdma_guest_fail "device $dev missing from /sys/class/infiniband (have: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' '))" ||
            return 1
    done

    echo "== guest-setup: wait for ports ACTIVE and rxe0 GIDs ($(_rdma_since "$t0") s)"
    want=("$(_rdma_gid_v4mapped "$RDMA_RXE_IPV4")" "$(_rdma_gid_v6 "$RDMA_RXE_IPV6")")
    deadline=$(($(date +%s) + ${RDMA_GID_TIMEOUT:-30}))
    while :; do
        missing=()
        for dev in "$RDMA_RXE_DEVICE" "$RDMA_SIW_DEVICE"; do
            grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null ||
                missing+=("$dev port 1 ACTIVE")
        done
        for m in "${want[@]}"; do
            _rdma_has_gid "$RDMA_RXE_DEVICE" "$m" || missing+=("$RDMA_RXE_DEVICE GID $m")
        done
        [ "${#missing[@]}" -eq 0 ] && break
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "rxe0 GIDs: $(cat /sys/class/infiniband/"$RDMA_RXE_DEVICE"/ports/1/gids/* 2>/dev/null | grep -v '^0000:0000:0000:0000:0000:0000:0000:0000$' | tr '\n' ' ')" >&2
            _rdma_guest_fail "timed out after ${RDMA_GID_TIMEOUT:-30} s waiting for: ${missing[*]}"
            return 1
        fi
        sleep 0.2
    done
    echo "devices ready in $(_rdma_since "$t0") s:" \
        "$RDMA_RXE_DEVICE($RDMA_RXE_NETDEV $RDMA_RXE_IPV4 $RDMA_RXE_IPV6)" \
        "$RDMA_SIW_DEVICE($RDMA_SIW_NETDEV $RDMA_SIW_IPV4 $RDMA_SIW_IPV6)"
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # Sourced: the limits and exports stay in the caller's shell.
    rdma_guest_setup || return 1
else
    rdma_guest_setup || exit 1
    if [ "$#" -gt 0 ]; then
        exec "$@"
    fi
fi
