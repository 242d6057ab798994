//! uMAD and MAD device tests (rxe; siw has no MADs).

/// The tests of this module.
pub const TESTS: &[rdma_tests::Test] = &[];
