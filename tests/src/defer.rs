//! Releases C objects in reverse order of creation, also when a test fails.

/// A clean-up action: 0 or an errno value.
type Action = Box<dyn FnOnce() -> i32>;

/// A stack of clean-up actions run in reverse order on drop.
#[derive(Default)]
pub struct Defer(Vec<(&'static str, Action)>);

impl Defer {
    /// An empty stack.
    pub fn new() -> Self {
        Defer(Vec::new())
    }

    /// Pushes a clean-up action returning 0 or an errno value; `what` names it.
    pub fn push(&mut self, what: &'static str, f: impl FnOnce() -> i32 + 'static) {
        self.0.push((what, Box::new(f)));
    }
}

impl Drop for Defer {
    fn drop(&mut self) {
        while let Some((what, f)) = self.0.pop() {
            let rc = f();
            if rc != 0 {
                eprintln!("clean-up {what} failed: {rc}");
            }
        }
    }
}
