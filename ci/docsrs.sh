#!/usr/bin/env bash
# ci/docsrs.sh: the docs of every publishable crate build as docs.rs builds them:
# DOCS_RS=1, RUSTDOCFLAGS="-Dwarnings --cfg docsrs", and no rdma-core installed at all.
#
# rdma-core is hidden for the build in a mount namespace (`unshare -m`): an empty
# directory over /usr/include/infiniband and /usr/include/rdma, /dev/null over
# rdma-core's .pc files in /usr/lib/x86_64-linux-gnu/pkgconfig. Then, for each of
# rdma-sys-build, ibverbs-sys, rdmacm-sys, umad-sys and rdma (--all-features):
# `cargo doc --no-deps -p CRATE` into one target dir of its own (target/docsrs,
# RDMA_DOCSRS_TARGET), one crate after the other; then a check that key pages rendered
# (rdma::umad with its tokio-only types, the data-path ports of ibverbs-sys and their
# C twins, the CM and umad functions) and that no C shim was compiled.
#
# Needs root for the mount namespace (or unprivileged user namespaces: it then uses
# `unshare -rm`). Under sudo, cargo runs as the invoking user.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

OUT="${RDMA_DOCSRS_TARGET:-$REPO_ROOT/target/docsrs}"
CRATES=(rdma-sys-build ibverbs-sys rdmacm-sys umad-sys rdma)
PC_DIR=/usr/lib/x86_64-linux-gnu/pkgconfig

# rdma-core's .pc files on this host: those of its -dev packages, or the three libraries.
rdma_core_pcs() {
    {
        dpkg-query -L libibverbs-dev librdmacm-dev libibumad-dev 2>/dev/null | grep '\.pc$' || true
        for p in libibverbs librdmacm libibumad; do
            [ -e "$PC_DIR/$p.pc" ] && echo "$PC_DIR/$p.pc"
        done
    } | sort -u
}

# cargo as the invoking user under sudo (keeping this script's environment), else cargo.
docs_cargo() {
    local u home
    u=$(invoking_user)
    if [ -n "$u" ]; then
        home=$(getent passwd "$u" | cut -d: -f6)
        sudo -u "$u" -H --preserve-env=DOCS_RS,RUSTDOCFLAGS,CARGO_TARGET_DIR,CARGO_INCREMENTAL,CARGO_TERM_COLOR \
            -- env "PATH=$home/.cargo/bin:/usr/local/bin:/usr/bin:/bin" cargo "$@"
    else
        cargo_cmd "$@"
    fi
}

inside() {
    step "hide rdma-core (mount namespace)"
    local empty="$OUT/empty" pc
    mkdir -p "$empty"
    for d in /usr/include/infiniband /usr/include/rdma; do
        if [ -d "$d" ]; then mount --bind "$empty" "$d"; fi
    done
    while read -r pc; do
        [ -n "$pc" ] && mount --bind /dev/null "$pc"
    done < <(rdma_core_pcs)
    # The check is only worth something if rdma-core really is gone.
    [ ! -e /usr/include/infiniband/verbs.h ] || die "verbs.h is still visible"
    [ ! -e /usr/include/rdma/rdma_cma.h ] || die "rdma_cma.h is still visible"
    [ ! -e /usr/include/infiniband/umad.h ] || die "umad.h is still visible"
    for p in libibverbs librdmacm libibumad; do
        if pkg-config --exists "$p" 2>/dev/null; then die "pkg-config still finds $p"; fi
    done
    echo "hidden: /usr/include/{infiniband,rdma} and $(rdma_core_pcs | wc -l) .pc files"

    export DOCS_RS=1 RUSTDOCFLAGS="-Dwarnings --cfg docsrs" CARGO_TARGET_DIR="$OUT"
    rm -rf "$OUT/doc"
    local crate t0
    for crate in "${CRATES[@]}"; do
        step "cargo doc --no-deps -p $crate (DOCS_RS=1)"
        t0=$(now)
        if [ "$crate" = rdma ]; then
            docs_cargo doc --no-deps --quiet -p "$crate" --all-features
        else
            docs_cargo doc --no-deps --quiet -p "$crate"
        fi
        echo "$crate: $(elapsed "$t0")s"
    done
}

check_rendered() {
    step "check the rendered docs"
    local missing=0 page
    local pages=(
        rdma_sys_build/fn.probe.html
        rdma_sys_build/fn.copy_shipped.html
        rdma_sys_build/constant.MIN_RDMA_CORE.html
        ibverbs_sys/index.html
        ibverbs_sys/fn.ibv_post_send.html
        ibverbs_sys/fn.ibv_poll_cq.html
        ibverbs_sys/fn.ibv_wr_rdma_write.html
        ibverbs_sys/fn.ibv_wc_read_opcode.html
        ibverbs_sys/fn.ibv_reg_mr.html
        ibverbs_sys/fn.ibv_create_cq_ex.html
        ibverbs_sys/struct.ibv_qp_ex.html
        ibverbs_sys/shim/fn.ibv_post_send.html
        ibverbs_sys/constant.PORTED_FUNCTIONS.html
        rdmacm_sys/fn.rdma_create_id.html
        rdmacm_sys/fn.rdma_post_send.html
        rdmacm_sys/struct.rdma_cm_id.html
        umad_sys/fn.umad_open_port.html
        umad_sys/fn.umad_get_mad.html
        umad_sys/struct.ib_user_mad.html
        rdma/index.html
        rdma/umad/index.html
        rdma/umad/struct.Port.html
        rdma/umad/struct.AsyncPort.html
        rdma/cm/index.html
    )
    for page in "${pages[@]}"; do
        if [ ! -s "$OUT/doc/$page" ]; then
            echo "missing: $OUT/doc/$page"
            missing=$((missing + 1))
        fi
    done
    [ "$missing" = 0 ] || die "$missing page(s) did not render"
    # Documentation-only builds compile and link no C.
    local shims
    shims=$(find "$OUT/debug/build" -name '*_sys_shim.a' -o -name '*shim*.o' 2>/dev/null | head -n 3)
    [ -z "$shims" ] || die "a C shim was compiled in the docs build: $shims"
    echo "docsrs: ${#CRATES[@]} crates documented, ${#pages[@]} key pages rendered"
}

if [ "${1:-}" = --inside ]; then
    inside
    exit 0
fi

T0=$(now)
ensure_target_dir
mkdir -p "$OUT"
chown_to_invoker "$OUT"
if [ "$(id -u)" = 0 ]; then
    unshare -m --propagation private -- bash "$0" --inside
else
    unshare -rm --propagation private -- bash "$0" --inside
fi
check_rendered
echo "docsrs: ok in $(elapsed "$T0")s"
