//! Which paths the library takes over, and where they lead.
//!
//! Only absolute paths under `/sys/class/infiniband`, `/sys/class/infiniband_verbs`
//! and `/dev/infiniband` are touched; everything else goes to libc unchanged.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where a path goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Not ours: libc handles it.
    Pass,
    /// A file or directory of the private tree.
    Tree(PathBuf),
    /// `/dev/infiniband/uverbsN`: opening it yields an fd the library owns.
    Uverbs(u32),
}

/// Prefixes redirected into the tree, with their place in it.
const PREFIXES: &[(&str, &str)] = &[
    ("/sys/class/infiniband_verbs", "class/infiniband_verbs"),
    ("/sys/class/infiniband", "class/infiniband"),
    ("/dev/infiniband", "dev/infiniband"),
];

/// Cheap first test: could `path` be ours? (No state needed.)
pub fn may_route(path: &[u8]) -> bool {
    PREFIXES
        .iter()
        .any(|(prefix, _)| path.starts_with(prefix.as_bytes()))
}

/// Where `path` goes, given the tree's root.
pub fn route(path: &[u8], root: &Path) -> Route {
    let Some((rest, place)) = PREFIXES.iter().find_map(|(prefix, place)| {
        let rest = path.strip_prefix(prefix.as_bytes())?;
        (rest.is_empty() || rest[0] == b'/').then_some((rest, *place))
    }) else {
        return Route::Pass;
    };
    // `..` could climb out of the tree; real sysfs has no use for it here.
    if rest.split(|&b| b == b'/').any(|c| c == b"..") {
        return Route::Pass;
    }
    if place == "dev/infiniband" {
        if let Some(n) = uverbs_index(rest) {
            return Route::Uverbs(n);
        }
    }
    let mut p = root.join(place).into_os_string();
    p.push(OsStr::from_bytes(rest));
    Route::Tree(PathBuf::from(p))
}

/// N of `/uverbsN` (no trailing slash, no leading zeros).
fn uverbs_index(rest: &[u8]) -> Option<u32> {
    let digits = rest.strip_prefix(b"/uverbs")?;
    if digits.is_empty()
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits.len() > 1 && digits[0] == b'0')
    {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// True for the socket the library refuses: RDMA netlink, so that
/// libibverbs falls back to sysfs.
pub fn refuse_socket(domain: i32, protocol: i32) -> bool {
    domain == libc::AF_NETLINK && protocol == libc::NETLINK_RDMA
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/tmp/devx-preload-x";

    fn tree(p: &str) -> Route {
        Route::Tree(PathBuf::from(p))
    }

    #[test]
    fn class_paths_lead_into_the_tree() {
        let root = Path::new(ROOT);
        assert_eq!(
            route(b"/sys/class/infiniband_verbs", root),
            tree("/tmp/devx-preload-x/class/infiniband_verbs")
        );
        assert_eq!(
            route(b"/sys/class/infiniband_verbs/uverbs0/ibdev", root),
            tree("/tmp/devx-preload-x/class/infiniband_verbs/uverbs0/ibdev")
        );
        assert_eq!(
            route(b"/sys/class/infiniband/sim0/device/modalias", root),
            tree("/tmp/devx-preload-x/class/infiniband/sim0/device/modalias")
        );
        assert_eq!(
            route(b"/dev/infiniband", root),
            tree("/tmp/devx-preload-x/dev/infiniband")
        );
    }

    #[test]
    fn uverbs_nodes_are_owned_devices() {
        let root = Path::new(ROOT);
        assert_eq!(route(b"/dev/infiniband/uverbs0", root), Route::Uverbs(0));
        assert_eq!(route(b"/dev/infiniband/uverbs12", root), Route::Uverbs(12));
        assert_eq!(
            route(b"/dev/infiniband/uverbs01", root),
            tree("/tmp/devx-preload-x/dev/infiniband/uverbs01")
        );
        assert_eq!(
            route(b"/dev/infiniband/rdma_cm", root),
            tree("/tmp/devx-preload-x/dev/infiniband/rdma_cm")
        );
    }

    #[test]
    fn other_paths_pass() {
        let root = Path::new(ROOT);
        for p in [
            &b"/sys/class/infiniband_mad"[..],
            b"/sys/class/net/eth0",
            b"/sys/class/infinibandx",
            b"sys/class/infiniband",
            b"/sys/class/infiniband/../../etc/passwd",
            b"/etc/libibverbs.d",
            b"",
        ] {
            assert_eq!(
                route(p, root),
                Route::Pass,
                "{}",
                String::from_utf8_lossy(p)
            );
        }
    }

    #[test]
    fn only_rdma_netlink_is_refused() {
        assert!(refuse_socket(libc::AF_NETLINK, libc::NETLINK_RDMA));
        assert!(!refuse_socket(libc::AF_NETLINK, libc::NETLINK_ROUTE));
        assert!(!refuse_socket(libc::AF_INET, libc::NETLINK_RDMA));
    }
}
