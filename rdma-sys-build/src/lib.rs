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

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Where a library's headers are, after [`probe`] has emitted the link flags.
#[derive(Debug, Clone)]
pub struct Library {
    /// Include directories to hand to clang and to the C compiler.
    pub include_paths: Vec<PathBuf>,
    /// The version pkg-config reported, if the library was found that way.
    pub version: Option<String>,
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
        if let Some(libdir) = var("LIB_DIR") {
            println!("cargo:rustc-link-search=native={}", libdir.display());
        }
        println!("cargo:rustc-link-lib=dylib={lib}");
        return Library {
            include_paths: vec![include],
            version: None,
        };
    }
    match pkg_config::Config::new().statik(false).probe(pkg) {
        Ok(found) => Library {
            include_paths: found.include_paths,
            version: Some(found.version),
        },
        Err(err) => panic!(
            "\n{pkg} was not found by pkg-config: {err}\n\
             Install rdma-core's development files (Debian/Ubuntu: apt-get install \
             libibverbs-dev librdmacm-dev libibumad-dev; Fedora: dnf install \
             rdma-core-devel), or point {env_prefix}_INCLUDE_DIR / {env_prefix}_LIB_DIR \
             (or RDMA_CORE_INCLUDE_DIR / RDMA_CORE_LIB_DIR) at a custom install.\n"
        ),
    }
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
