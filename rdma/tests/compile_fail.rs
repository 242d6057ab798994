//! The rules of the API that the compiler enforces, proven by programs that
//! must not compile.

#[test]
fn borrow_and_thread_rules_are_enforced() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile-fail/*.rs");
}
