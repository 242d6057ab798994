//! Regression tests for the soundness holes of the issue "Sound by
//! construction" (sound_mr): each names the behaviour it proves.

pub const TESTS: &[rdma_tests::Test] = &[];
