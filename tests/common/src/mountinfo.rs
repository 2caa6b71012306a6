//! The harness's own reader of the kernel's mount table (`/proc/self/mountinfo`, proc(5)), so
//! that "nothing is left mounted" never rests on kcsi's parser of the same table.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// Every mount point in the table, each once.
pub fn mount_points() -> BTreeSet<PathBuf> {
    let table = std::fs::read("/proc/self/mountinfo").expect("read /proc/self/mountinfo");
    table
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            // Field 5 is the mount point: "36 35 98:0 /mnt1 /mnt2 rw,noatime ...".
            let field = line
                .split(|&b| b == b' ')
                .nth(4)
                .unwrap_or_else(|| panic!("mountinfo line {:?}", String::from_utf8_lossy(line)));
            PathBuf::from(OsString::from_vec(unescape(field)))
        })
        .collect()
}

/// The kernel writes space, tab, newline and backslash in a path as `\` and three octal digits.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| {
                u8::try_from(d.iter().fold(0u16, |n, c| n * 8 + u16::from(c - b'0'))).ok()
            });
        match octal {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// Mount points at or below `dir`, deepest first.
pub fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let mut below: Vec<PathBuf> = mount_points()
        .into_iter()
        .filter(|p| p.starts_with(dir))
        .collect();
    below.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    below
}

/// Whether `path` is listed as a mount point.
pub fn is_mount_point(path: &Path) -> bool {
    mount_points().contains(path)
}
