//! What the preload library's integration tests share: the library cargo
//! built, and rdma-core's tools when they are installed.
// Each test crate uses its own part of this module.
#![allow(dead_code)]

use std::path::PathBuf;

pub const SKIP: &str = "ibverbs-utils not installed; apt-get install ibverbs-utils";

/// The preload library cargo built next to this test's deps directory.
pub fn preload_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    let lib = "libdevx_preload.so";
    [
        deps.join(lib),
        deps.parent().expect("profile directory").join(lib),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| panic!("{lib} not built next to {}", deps.display()))
}

/// Full path of `tool` when it is on PATH (ibverbs-utils provides them).
pub fn tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}
