//! The rules of the async API (feature `tokio`) that the compiler enforces,
//! proven by programs that must not compile.

#[cfg(feature = "tokio")]
#[test]
fn async_umad_handles_cannot_receive_beside_the_reader() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile-fail-tokio/*.rs");
}
