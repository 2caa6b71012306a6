//! Memory and descriptors of one host with 1 000 registered drivers; prints, never asserts.
//!
//! All names are registered at one real csi-driver-host-path process: registration asks a
//! driver only `NodeGetInfo` and kcsi never checks which name a socket serves, so one process
//! stands behind 1 000 names while kcsi keeps, per name, what it would keep for 1 000 separate
//! drivers (a client, its metrics series, its own connection). Figures: this process's RSS
//! growth and open descriptors right after registering (every connection open) and after
//! `idleConnectionSeconds` without RPCs (each closed). Target: <= 20 MiB and <= 100 fds idle.

use kcsi_testkit as common;

use std::time::{Duration, Instant};

use common::capi::*;
use common::DriverProcess;
use serde_json::json;

const DRIVERS: usize = 1000;
const IDLE: Duration = Duration::from_secs(3);

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn mib(kib: u64, base: u64) -> String {
    format!("{:+.1} MiB", (kib as f64 - base as f64) / 1024.0)
}

fn main() {
    let d = DriverProcess::hostpath("node-1", &[]);
    let host = Host::new(json!({"idleConnectionSeconds": IDLE.as_secs_f64()}));
    let name = |i: usize| format!("d{i:04}.bench.kcsi.dev");
    // Warm-up: the runtime's threads and the first connection's one-time allocations.
    host.register(&name(0), &d.endpoint());
    host.deregister(&name(0));
    std::thread::sleep(Duration::from_millis(200));
    let (rss0, fds0) = (rss_kib(), fds());

    let start = Instant::now();
    for i in 0..DRIVERS {
        host.register(&name(i), &d.endpoint());
    }
    let took = start.elapsed();
    let (rss1, fds1) = (rss_kib(), fds());
    std::thread::sleep(IDLE + Duration::from_secs(2));
    let (rss2, fds2) = (rss_kib(), fds());
    println!(
        "{DRIVERS} drivers registered in {:.2} s (one real hostpath process behind them)",
        took.as_secs_f64()
    );
    println!("  before: RSS {:.1} MiB, {fds0} fds", rss0 as f64 / 1024.0);
    println!(
        "  connected (just registered): RSS {}, {fds1} fds ({:+})",
        mib(rss1, rss0),
        fds1 as i64 - fds0 as i64
    );
    println!(
        "  idle ({}s without RPCs): RSS {}, {fds2} fds ({:+}) (target <= 20 MiB, <= 100 fds)",
        IDLE.as_secs(),
        mib(rss2, rss0),
        fds2 as i64 - fds0 as i64
    );
    for i in 0..DRIVERS {
        host.deregister(&name(i));
    }
    println!(
        "  all deregistered: RSS {}, {} fds",
        mib(rss_kib(), rss0),
        fds()
    );
}
