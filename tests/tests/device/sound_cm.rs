//! Regression tests for the soundness holes of the issue "Sound by
//! construction" (sound_cm): each names the behaviour it proves.

pub const TESTS: &[rdma_tests::Test] = &[];
