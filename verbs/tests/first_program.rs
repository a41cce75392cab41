//! The `first_program` example, run as a test: open the default device,
//! connect two RC QPs, RDMA-write 4 KiB and check it.

#[path = "../examples/first_program.rs"]
mod first_program;

#[test]
fn first_program_writes_and_checks_4_kib() {
    first_program::run().unwrap();
}
