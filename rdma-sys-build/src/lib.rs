//! Build-time support shared by `ibverbs-sys`, `rdmacm-sys` and `umad-sys`.
//!
//! Each -sys crate does the same three things in its build script:
//!
//! 1. find the rdma-core library and its headers ([`probe`]): pkg-config by
//!    default, or an environment override for custom installs;
//! 2. run bindgen over the headers ([`builder`]), asking it to wrap every
//!    `static inline` function in a C shim ([`Shims`]);
//! 3. compile those shims with `cc` ([`Shims::compile`]) so that each static
//!    inline is callable from Rust with exactly the C semantics.
//!
//! The oldest rdma-core they build against is [`MIN_RDMA_CORE`] (v44, Debian
//! 12's, the oldest release that is built and tested); [`probe`] fails the
//! build with a message naming the version it found when it is older.
//!
//! For documentation only ([`docs_only`]: docs.rs sets `DOCS_RS`, and builds
//! without rdma-core's headers), a crate uses the bindings it ships in
//! `src/generated/` ([`copy_shipped`]) instead of running bindgen, and
//! compiles and links nothing. `ci/bindings.sh` regenerates those files and
//! checks that they match what bindgen generates now.

use std::env;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

/// An rdma-core release: `44.0` is rdma-core v44.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    /// The release number (44 for v44.0).
    pub major: u32,
    /// The stable update of that release (the 1 of v56.1).
    pub minor: u32,
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)
    }
}

/// The oldest rdma-core release the -sys crates support: v44.0, Debian 12's,
/// the oldest that is built and tested.
pub const MIN_RDMA_CORE: Release = Release {
    major: 44,
    minor: 0,
};

impl Release {
    /// The release in the pkg-config version of one of rdma-core's libraries.
    ///
    /// rdma-core versions each library `<ABI>.<ABI minor>.<release>`:
    /// libibverbs `1.14.44.0`, librdmacm `1.3.44.0` and libibumad `3.2.44.0`
    /// are all rdma-core v44.0. Returns `None` for anything else.
    pub fn from_pkg_version(version: &str) -> Option<Release> {
        let mut parts = version.trim().split('.');
        let (Some(abi), Some(abi_minor), Some(major)) = (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let number = |s: &str| -> Option<u32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        number(abi)?;
        number(abi_minor)?;
        let major = number(major)?;
        let minor = match parts.next() {
            Some(m) => number(m)?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Release { major, minor })
    }
}

/// Checks the pkg-config `version` of library `pkg`, as found in `source`
/// (a .pc file, or "pkg-config"), against [`MIN_RDMA_CORE`].
///
/// Returns the release, or the message the build fails with.
pub fn check_version(pkg: &str, version: &str, source: &str) -> Result<Release, String> {
    let release = Release::from_pkg_version(version).ok_or_else(|| {
        format!(
            "{pkg} version {version:?} (from {source}) is not an rdma-core library version \
             (<ABI>.<ABI minor>.<release>, e.g. 1.14.44.0 for rdma-core v44.0)"
        )
    })?;
    if release < MIN_RDMA_CORE {
        return Err(format!(
            "{pkg} {version} (from {source}) is rdma-core {release}; the rdma -sys crates need \
             rdma-core {MIN_RDMA_CORE} or newer (the oldest release they are built and tested \
             with). Install a newer rdma-core, or point RDMA_CORE_INCLUDE_DIR / \
             RDMA_CORE_LIB_DIR at one."
        ));
    }
    Ok(release)
}

/// Whether this build is for documentation only: docs.rs sets `DOCS_RS`, and
/// builds without network and (as far as these crates assume) without
/// rdma-core's headers or pkg-config files. Emits the rerun trigger.
pub fn docs_only() -> bool {
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    env::var_os("DOCS_RS").is_some()
}

/// The first line of every file under `src/generated/` after its header.
pub const SHIPPED_HEADER_END: &str = "// (end of header)";

/// For a documentation-only build: copies the shipped `src/generated/<name>`
/// of the crate being built to `$OUT_DIR/<name>` for each name, where the
/// crate includes its bindings from. Panics, naming the file, when one is
/// missing.
pub fn copy_shipped(names: &[&str]) {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    for name in names {
        let from = manifest.join("src/generated").join(name);
        println!("cargo:rerun-if-changed={}", from.display());
        let text = std::fs::read_to_string(&from).unwrap_or_else(|e| {
            panic!(
                "\nreading the shipped bindings {}: {e}\n\
                 (regenerate them with ci/bindings.sh regen)\n",
                from.display()
            )
        });
        assert!(
            text.lines().any(|l| l == SHIPPED_HEADER_END),
            "{} has no header ending in {SHIPPED_HEADER_END:?}; regenerate it with ci/bindings.sh regen",
            from.display()
        );
        let to = out_dir().join(name);
        std::fs::write(&to, text).unwrap_or_else(|e| panic!("writing {}: {e}", to.display()));
    }
}

/// Where a library's headers are, after [`probe`] has emitted the link flags.
#[derive(Debug, Clone)]
pub struct Library {
    /// Include directories to hand to clang and to the C compiler.
    pub include_paths: Vec<PathBuf>,
    /// The pkg-config version of the library (`1.14.44.0`), from pkg-config
    /// or from the .pc file beside an overriding lib dir, when one was found.
    pub version: Option<String>,
    /// The rdma-core release of that version, at least [`MIN_RDMA_CORE`].
    pub release: Option<Release>,
}

/// Finds a system library of rdma-core and tells cargo to link it dynamically.
///
/// `pkg` is the pkg-config name (`libibverbs`), `lib` the linker name
/// (`ibverbs`), and `env_prefix` the prefix of the override variables
/// (`IBVERBS`). The override is `<PREFIX>_INCLUDE_DIR` and `<PREFIX>_LIB_DIR`,
/// falling back to `RDMA_CORE_INCLUDE_DIR` and `RDMA_CORE_LIB_DIR`, which serve
/// all three libraries of one rdma-core install. When an include dir is set,
/// pkg-config is not consulted.
///
/// Fails the build when the library is older than [`MIN_RDMA_CORE`]: the
/// version pkg-config reports, or with the override that of `<pkg>.pc` in
/// `<lib dir>/pkgconfig` (or in `lib/pkgconfig` or `lib64/pkgconfig` beside
/// the include dir). Without such a file the version of an override is not
/// known; the build says so in a warning and goes on (ibverbs-sys also checks
/// its headers for the newest API it needs).
///
/// Dynamic linking is the only mode: libibverbs loads its providers as plugins.
pub fn probe(pkg: &str, lib: &str, env_prefix: &str) -> Library {
    let var = |suffix: &str| -> Option<PathBuf> {
        let own = format!("{env_prefix}_{suffix}");
        let shared = format!("RDMA_CORE_{suffix}");
        println!("cargo:rerun-if-env-changed={own}");
        println!("cargo:rerun-if-env-changed={shared}");
        env::var_os(own)
            .or_else(|| env::var_os(shared))
            .map(PathBuf::from)
    };
    if let Some(include) = var("INCLUDE_DIR") {
        let libdir = var("LIB_DIR");
        if let Some(libdir) = &libdir {
            println!("cargo:rustc-link-search=native={}", libdir.display());
        }
        println!("cargo:rustc-link-lib=dylib={lib}");
        let (version, release) = match pc_file(pkg, &include, libdir.as_deref()) {
            Some(pc) => {
                println!("cargo:rerun-if-changed={}", pc.display());
                let version = pc_version(&pc).unwrap_or_default();
                let release = check_version(pkg, &version, &pc.display().to_string())
                    .unwrap_or_else(|msg| fail(&msg));
                (Some(version), Some(release))
            }
            None => {
                println!(
                    "cargo:warning=no {pkg}.pc beside {} or the lib dir: the rdma-core version \
                     of this install is not known (rdma-core {MIN_RDMA_CORE} or newer is needed)",
                    include.display()
                );
                (None, None)
            }
        };
        return Library {
            include_paths: vec![include],
            version,
            release,
        };
    }
    match pkg_config::Config::new().statik(false).probe(pkg) {
        Ok(found) => {
            let release =
                check_version(pkg, &found.version, "pkg-config").unwrap_or_else(|msg| fail(&msg));
            Library {
                include_paths: found.include_paths,
                version: Some(found.version),
                release: Some(release),
            }
        }
        Err(err) => panic!(
            "\n{pkg} was not found by pkg-config: {err}\n\
             Install rdma-core's development files ({MIN_RDMA_CORE} or newer; Debian/Ubuntu: \
             apt-get install libibverbs-dev librdmacm-dev libibumad-dev; Fedora: dnf install \
             rdma-core-devel), or point {env_prefix}_INCLUDE_DIR / {env_prefix}_LIB_DIR \
             (or RDMA_CORE_INCLUDE_DIR / RDMA_CORE_LIB_DIR) at a custom install.\n"
        ),
    }
}

/// Fails the build script with `msg`: printed on stderr, which cargo shows
/// under the failed build command, and exit status 1 (no panic, so no
/// backtrace hides the message).
pub fn fail(msg: &str) -> ! {
    eprintln!("\nerror: {msg}\n");
    std::process::exit(1)
}

/// The `<pkg>.pc` of an install given by its include and lib dirs.
fn pc_file(pkg: &str, include: &Path, libdir: Option<&Path>) -> Option<PathBuf> {
    let file = format!("{pkg}.pc");
    let prefix = include.parent();
    libdir
        .map(|l| l.join("pkgconfig"))
        .into_iter()
        .chain(prefix.map(|p| p.join("lib/pkgconfig")))
        .chain(prefix.map(|p| p.join("lib64/pkgconfig")))
        .map(|dir| dir.join(&file))
        .find(|p| p.is_file())
}

/// The `Version:` field of a .pc file.
fn pc_version(pc: &Path) -> Option<String> {
    let text = std::fs::read_to_string(pc).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
}

/// A bindgen builder with the settings every -sys crate shares.
///
/// C enums become integer type aliases with unprefixed constants, as in C
/// (`IBV_QPS_RTS: ibv_qp_state`): a C library may return a value that a Rust
/// enum does not know, which would be undefined behaviour.
pub fn builder(header: &Path, include_paths: &[PathBuf]) -> bindgen::Builder {
    println!("cargo:rerun-if-changed={}", header.display());
    bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_args(include_paths.iter().map(|p| format!("-I{}", p.display())))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .impl_debug(false)
        .generate_comments(true)
        .layout_tests(true)
        .wrap_unsafe_ops(true)
}

/// The C shim for the static inline functions of one bindgen run.
#[derive(Debug)]
pub struct Shims {
    c_files: Vec<PathBuf>,
}

impl Default for Shims {
    fn default() -> Self {
        Self::new()
    }
}

impl Shims {
    /// An empty set of shim sources.
    pub fn new() -> Self {
        Shims {
            c_files: Vec::new(),
        }
    }

    /// Configures `builder` to wrap the static inline functions it binds into
    /// `$OUT_DIR/<stem>.c`, and remembers that file for [`Shims::compile`].
    ///
    /// Each wrapper is an exported C function named `<name>__extern` that calls
    /// the static inline; the Rust declaration links to it under the C name.
    pub fn wrap(&mut self, builder: bindgen::Builder, stem: &str) -> bindgen::Builder {
        let path = out_dir().join(stem);
        self.c_files.push(path.with_extension("c"));
        builder.wrap_static_fns(true).wrap_static_fns_path(path)
    }

    /// Compiles every shim into one static library `lib<name>.a` and links it.
    pub fn compile(&self, name: &str, include_paths: &[PathBuf], extra_include: &Path) {
        let mut build = cc::Build::new();
        build
            .files(&self.c_files)
            .includes(include_paths)
            .include(extra_include)
            // The wrappers are generated code; warnings there are noise.
            .warnings(false);
        build.compile(name);
    }
}

/// Writes bindings to `$OUT_DIR/<file>` and returns the path.
pub fn write(bindings: bindgen::Bindings, file: &str) -> PathBuf {
    let path = out_dir().join(file);
    bindings
        .write_to_file(&path)
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// Names of the `pub fn`s declared in a generated bindings file.
pub fn function_names(bindings_file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(bindings_file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", bindings_file.display()));
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub fn "))
        .filter_map(|rest| rest.split('(').next())
        .map(|n| n.trim().to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Names of the C functions a generated bindings file declares: the `pub fn`s
/// of its `extern "C"` blocks, not the methods bindgen writes for its own
/// helper types (`__IncompleteArrayField::as_ptr`).
pub fn c_function_names(bindings_file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(bindings_file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", bindings_file.display()));
    let mut names = extern_block_functions(&text);
    names.sort();
    names.dedup();
    names
}

/// The `pub fn` names inside top-level `extern "C" { ... }` blocks of
/// rustfmt-formatted bindgen output.
fn extern_block_functions(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if !inside {
            inside = matches!(line, "extern \"C\" {" | "unsafe extern \"C\" {");
        } else if line == "}" {
            inside = false;
        } else if let Some(rest) = line.trim_start().strip_prefix("pub fn ") {
            if let Some(name) = rest.split('(').next() {
                names.push(name.trim().to_string());
            }
        }
    }
    names
}

/// Emits `cfg(has_<name>)` for each function of `optional` that `present`
/// (the functions the bindings declare) holds, for this crate, and hands both
/// lists on to the crates that depend on it, through its `links` metadata:
/// `DEP_<LINKS>_OPTIONAL` (the ones present) and `DEP_<LINKS>_OPTIONAL_KNOWN`
/// (all of `optional`). A dependent's build script turns them into the same
/// cfgs with [`forward_optional`].
pub fn emit_optional(present: &[String], optional: &[&str]) {
    let found: Vec<&str> = optional
        .iter()
        .copied()
        .filter(|name| present.iter().any(|p| p == name))
        .collect();
    for name in optional {
        println!("cargo::rustc-check-cfg=cfg(has_{name})");
    }
    for name in &found {
        println!("cargo::rustc-cfg=has_{name}");
    }
    println!("cargo:optional_known={}", optional.join(","));
    println!("cargo:optional={}", found.join(","));
}

/// For a crate that depends on the -sys crates whose `links` names are
/// `links` (`IBVERBS`, `RDMACM`, `IBUMAD`): emits the `cfg(has_<name>)` each
/// of them emitted for itself ([`emit_optional`]), so that an API over a
/// function only newer rdma-core releases have is built exactly where the
/// headers declare it.
pub fn forward_optional(links: &[&str]) {
    for link in links {
        for (suffix, enable) in [("OPTIONAL_KNOWN", false), ("OPTIONAL", true)] {
            let var = format!("DEP_{link}_{suffix}");
            println!("cargo::rerun-if-env-changed={var}");
            let value = env::var(&var).unwrap_or_default();
            for name in split_names(&value) {
                if enable {
                    println!("cargo::rustc-cfg=has_{name}");
                } else {
                    println!("cargo::rustc-check-cfg=cfg(has_{name})");
                }
            }
        }
    }
}

/// The names of a comma-separated list, without empty ones.
fn split_names(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|n| !n.is_empty())
}

/// Writes `pub const <const_name>: &[&str] = &[...];` listing `names`.
pub fn write_name_list(file: &str, const_name: &str, doc: &str, names: &[String]) -> PathBuf {
    let mut text = format!("/// {doc}\npub const {const_name}: &[&str] = &[\n");
    for n in names {
        let _ = writeln!(text, "    {n:?},");
    }
    text.push_str("];\n");
    let path = out_dir().join(file);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

fn out_dir() -> PathBuf {
    PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(major: u32, minor: u32) -> Release {
        Release { major, minor }
    }

    #[test]
    fn only_functions_of_extern_blocks_are_c_functions() {
        let text = "impl<T> __IncompleteArrayField<T> {\n    #[inline]\n    pub fn as_ptr(&self) -> *const T {\n    }\n}\n\
            unsafe extern \"C\" {\n    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device;\n}\n\
            pub struct ibv_sge {\n    pub addr: u64,\n}\n\
            extern \"C\" {\n    #[doc = \" x\"]\n    pub fn umad_init() -> c_int;\n    pub fn umad_done(\n        a: c_int,\n    ) -> c_int;\n}\n\
            pub fn helper() {}\n";
        assert_eq!(
            extern_block_functions(text),
            ["ibv_get_device_list", "umad_init", "umad_done"]
        );
    }

    #[test]
    fn optional_lists_split_without_empty_names() {
        assert_eq!(split_names("").count(), 0);
        assert_eq!(
            split_names("ibv_wr_flush, ibv_wr_opcode_str,").collect::<Vec<_>>(),
            ["ibv_wr_flush", "ibv_wr_opcode_str"]
        );
    }

    #[test]
    fn pkg_versions_of_each_library_give_the_release() {
        assert_eq!(Release::from_pkg_version("1.14.44.0"), Some(release(44, 0)));
        assert_eq!(Release::from_pkg_version("1.3.44.0"), Some(release(44, 0)));
        assert_eq!(Release::from_pkg_version("3.2.44.0"), Some(release(44, 0)));
        assert_eq!(Release::from_pkg_version("1.14.56.1"), Some(release(56, 1)));
        assert_eq!(
            Release::from_pkg_version("1.18.65.0\n"),
            Some(release(65, 0))
        );
        assert_eq!(Release::from_pkg_version("1.5.65"), Some(release(65, 0)));
    }

    #[test]
    fn other_versions_are_not_releases() {
        for v in [
            "",
            "44",
            "1.14",
            "1.14.x.0",
            "1.14.44.0.1",
            "1.14.-44.0",
            "1.14.44.rc1",
        ] {
            assert_eq!(Release::from_pkg_version(v), None, "{v:?}");
        }
    }

    #[test]
    fn releases_order_by_number_then_update() {
        assert!(release(43, 9) < release(44, 0));
        assert!(release(44, 0) < release(44, 1));
        assert!(release(9, 0) < release(10, 0));
        assert_eq!(MIN_RDMA_CORE, release(44, 0));
        assert_eq!(MIN_RDMA_CORE.to_string(), "v44.0");
    }

    #[test]
    fn v44_and_newer_pass_the_check() {
        for v in [
            "1.14.44.0",
            "1.3.44.0",
            "3.2.44.0",
            "1.14.56.1",
            "1.18.65.0",
        ] {
            let got = check_version("libibverbs", v, "pkg-config");
            assert!(
                got.as_ref().is_ok_and(|r| *r >= MIN_RDMA_CORE),
                "{v}: {got:?}"
            );
        }
    }

    #[test]
    fn older_releases_fail_with_the_versions_in_the_message() {
        let msg = check_version(
            "libibverbs",
            "1.14.43.1",
            "/opt/rdma/lib/pkgconfig/libibverbs.pc",
        )
        .unwrap_err();
        for part in [
            "libibverbs 1.14.43.1",
            "/opt/rdma/lib/pkgconfig/libibverbs.pc",
            "rdma-core v43.1",
            "rdma-core v44.0 or newer",
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg:?}");
        }
        assert!(check_version("librdmacm", "1.3.28.0", "pkg-config").is_err());
    }

    #[test]
    fn unparsable_versions_fail_naming_the_version() {
        let msg = check_version("libibumad", "3.2", "pkg-config").unwrap_err();
        assert!(
            msg.contains("\"3.2\"") && msg.contains("libibumad"),
            "{msg}"
        );
    }

    #[test]
    fn the_pc_file_beside_an_override_gives_its_version() {
        let root = env::temp_dir().join(format!("rdma-sys-build-pc-{}", std::process::id()));
        let include = root.join("usr/include");
        let libdir = root.join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&include).unwrap();
        std::fs::create_dir_all(libdir.join("pkgconfig")).unwrap();
        assert_eq!(pc_file("libibverbs", &include, Some(&libdir)), None);

        // Beside the include dir (a prefix install).
        let prefix_pc = root.join("usr/lib64/pkgconfig/libibverbs.pc");
        std::fs::create_dir_all(prefix_pc.parent().unwrap()).unwrap();
        std::fs::write(&prefix_pc, "Name: libibverbs\nVersion: 1.14.43.0\n").unwrap();
        assert_eq!(
            pc_file("libibverbs", &include, None),
            Some(prefix_pc.clone())
        );

        // The lib dir's own comes first.
        let lib_pc = libdir.join("pkgconfig/libibverbs.pc");
        std::fs::write(
            &lib_pc,
            "prefix=/usr\nName: libibverbs\nVersion:  1.18.65.0 \n",
        )
        .unwrap();
        let found = pc_file("libibverbs", &include, Some(&libdir)).unwrap();
        assert_eq!(found, lib_pc);
        assert_eq!(pc_version(&found).as_deref(), Some("1.18.65.0"));
        assert_eq!(pc_version(&prefix_pc).as_deref(), Some("1.14.43.0"));
        assert!(check_version("libibverbs", "1.14.43.0", "x").is_err());
        assert_eq!(pc_file("librdmacm", &include, Some(&libdir)), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
