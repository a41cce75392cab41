//! Checks that a range the caller wants to register is real memory of this
//! process, as the kernel's page pinning would: mapped, readable, and
//! writable when the registration allows device writes. A bad range gives
//! EFAULT; nothing here ever dereferences the caller's pointer.

use std::fs;

/// Page size used for probing.
const PAGE: usize = 4096;

/// `Ok` when `[addr, addr + len)` is mapped readable (and writable if
/// `write`); else the errno the kernel's pinning would give.
pub(crate) fn check_range(addr: usize, len: usize, write: bool) -> Result<(), i32> {
    let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
    if addr == 0 || len == 0 {
        return Err(libc::EINVAL);
    }
    match fs::read_to_string("/proc/self/maps") {
        Ok(maps) => check_maps(&maps, addr, end, write),
        Err(_) => probe_readable(addr, len),
    }
}

/// Walks the sorted mapping list: every byte of `[addr, end)` must lie in a
/// mapping with `r` (and `w` when writing), with no gaps.
fn check_maps(maps: &str, addr: usize, end: usize, write: bool) -> Result<(), i32> {
    let mut cur = addr;
    for line in maps.lines() {
        let mut parts = line.split_whitespace();
        let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) else {
            continue;
        };
        if e <= cur {
            continue;
        }
        if s > cur {
            return Err(libc::EFAULT);
        }
        let p = perms.as_bytes();
        if p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
            return Err(libc::EFAULT);
        }
        cur = e;
        if cur >= end {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
}

/// Fallback without /proc: let the kernel read one byte of every page into
/// a pipe; an unreadable page fails the write with EFAULT instead of
/// faulting this process.
fn probe_readable(addr: usize, len: usize) -> Result<(), i32> {
    let (rd, wr) = nix::unistd::pipe().map_err(|e| e as i32)?;
    let first = addr & !(PAGE - 1);
    let mut page = first;
    let end = addr + len;
    while page < end {
        let at = page.max(addr);
        // SAFETY: no Rust reference to the caller's memory is created; the
        // kernel copies one byte from `at` and reports EFAULT if it cannot.
        let n = unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(&wr), at as *const _, 1) };
        if n != 1 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EFAULT));
        }
        let mut sink = [0u8; 1];
        nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&rd), &mut sink).map_err(|e| e as i32)?;
        page += PAGE;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_memory_passes_and_nonsense_fails() {
        let v = vec![0u8; 3 * PAGE];
        assert_eq!(check_range(v.as_ptr() as usize, v.len(), true), Ok(()));
        assert_eq!(probe_readable(v.as_ptr() as usize, v.len()), Ok(()));
        assert_eq!(check_range(8, 16, false), Err(libc::EFAULT));
        assert_eq!(probe_readable(8, 16), Err(libc::EFAULT));
        assert_eq!(
            check_range(v.as_ptr() as usize, 0, false),
            Err(libc::EINVAL)
        );
        assert_eq!(check_range(usize::MAX - 4, 16, false), Err(libc::EINVAL));
    }

    #[test]
    fn read_only_text_is_not_writable() {
        let f = heap_memory_passes_and_nonsense_fails as fn() as usize;
        assert_eq!(check_range(f, 8, false), Ok(()));
        assert_eq!(check_range(f, 8, true), Err(libc::EFAULT));
    }

    #[test]
    fn gaps_and_permissions_in_a_map_listing() {
        let maps = "1000-3000 rw-p 0 0:0 0\n3000-4000 r--p 0 0:0 0\n5000-6000 rw-p 0 0:0 0\n";
        assert_eq!(check_maps(maps, 0x1000, 0x4000, false), Ok(()));
        assert_eq!(check_maps(maps, 0x1000, 0x4000, true), Err(libc::EFAULT));
        assert_eq!(check_maps(maps, 0x3800, 0x5800, false), Err(libc::EFAULT));
        assert_eq!(check_maps(maps, 0x5000, 0x7000, false), Err(libc::EFAULT));
    }
}
