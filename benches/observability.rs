//! What metrics and the CSI call trace cost at the default log level (warnings); prints,
//! never asserts.
//!
//! Per RPC, `CsiClient::call` records one `csi_operations_seconds` observation and emits a
//! debug record ("CSI call") and two trace records (request, response), which are disabled
//! at the default level; lifecycle steps add disabled debug records. Measured here: that work
//! alone (the same calls), a real lifecycle against the real csi-driver-host-path (its RPCs
//! counted from the host's own metrics), and a cheap query (`kcsi_get_volume_name`).
//! Targets: under 2 % of the lifecycle, under 100 ns on the cheap query.

use kcsi_testkit as common;

use std::ffi::CString;
use std::hint::black_box;
use std::ptr;
use std::time::{Duration, Instant};

use common::capi::{check, cstr, pod, take_string, Host as CHost};
use kcsi::ffi;
use kcsi::{CsiRecorder, Telemetry};
use serde_json::json;

const DRIVER: &str = "obs-bench.csi.k8s.io";
const ROUNDS: u32 = 1_000_000;

fn ns(d: Duration, n: u32) -> f64 {
    d.as_nanos() as f64 / f64::from(n)
}

/// The instrumentation of one RPC, as `CsiClient::call` adds it: the attempt's start was
/// read already (for the deadline), so one more clock read, one observation, three records.
fn instrument_one_rpc(
    t: &CsiRecorder,
    start: tokio::time::Instant,
    volume: &str,
    request: &impl std::fmt::Debug,
) {
    let method = "/csi.v1.Node/NodePublishVolume";
    tracing::trace!(driver = DRIVER, method, volume, request = ?request, "CSI request");
    let took = start.elapsed();
    t.observe(method, "OK", false, took);
    tracing::debug!(driver = DRIVER, method, volume, code = "OK", duration = ?took, "CSI call");
    tracing::trace!(driver = DRIVER, method, volume, response = ?(), "CSI response");
}

fn main() {
    kcsi::init_logging();
    let telemetry = Telemetry::new();
    let t = telemetry.csi_recorder(DRIVER);
    let request = kcsi::proto::csi::NodePublishVolumeRequest::default();
    for _ in 0..10_000 {
        instrument_one_rpc(&t, tokio::time::Instant::now(), "vol-1", &request);
    }
    let rpc_start = tokio::time::Instant::now();
    let start = Instant::now();
    for _ in 0..ROUNDS {
        instrument_one_rpc(
            black_box(&t),
            black_box(rpc_start),
            black_box("vol-1"),
            black_box(&request),
        );
    }
    let per_rpc = ns(start.elapsed(), ROUNDS);
    println!(
        "instrumentation per RPC (1 clock read, 1 observation, 3 disabled records): {per_rpc:.1} ns"
    );

    let took = Duration::from_micros(120);
    let start = Instant::now();
    for _ in 0..ROUNDS {
        t.observe(
            black_box("/csi.v1.Node/NodePublishVolume"),
            "OK",
            false,
            black_box(took),
        );
    }
    let per_observation = ns(start.elapsed(), ROUNDS);
    let start = Instant::now();
    for _ in 0..ROUNDS {
        black_box(black_box(rpc_start).elapsed());
    }
    let per_clock = ns(start.elapsed(), ROUNDS);
    let start = Instant::now();
    for _ in 0..ROUNDS {
        let (method, volume) = (
            black_box("/csi.v1.Node/NodePublishVolume"),
            black_box("vol-1"),
        );
        tracing::trace!(driver = DRIVER, method, volume, request = ?black_box(&request), "CSI request");
        tracing::debug!(driver = DRIVER, method, volume, code = "OK", duration = ?took, "CSI call");
        tracing::trace!(driver = DRIVER, method, volume, response = ?(), "CSI response");
    }
    let per_records = ns(start.elapsed(), ROUNDS);
    println!(
        "  of which the observation: {per_observation:.1} ns, the clock read: {per_clock:.1} ns, the three disabled records: {per_records:.1} ns"
    );

    let start = Instant::now();
    for _ in 0..ROUNDS {
        tracing::debug!(
            driver = black_box(DRIVER),
            volume = "v",
            pod = "p",
            "{}",
            "step"
        );
    }
    let per_record = ns(start.elapsed(), ROUNDS);
    println!("one disabled lifecycle-step record: {per_record:.2} ns");

    let start = Instant::now();
    let mut bytes = 0;
    for _ in 0..1_000 {
        bytes += telemetry.encode().unwrap().len();
    }
    println!(
        "kcsi_host_metrics encoding (1 series): {:.1} µs, {} bytes",
        start.elapsed().as_secs_f64() * 1e6 / 1_000.0,
        bytes / 1_000
    );

    // The cheap query.
    let root = common::short_tempdir("kcsi-bench");
    let config = CString::new(common::host_config(root.path(), "bench-node")).unwrap();
    let mut h = ptr::null_mut();
    assert_eq!(
        ffi::host::kcsi_host_new(config.as_ptr(), &mut h, ptr::null_mut()),
        ffi::KCSI_OK
    );
    let spec = CString::new(
        json!({"persistentVolume": {"metadata": {"name": "pv"}, "spec": {"csi": {"driver": DRIVER, "volumeHandle": "v"}}}})
            .to_string(),
    )
    .unwrap();
    let query_rounds = 200_000;
    let start = Instant::now();
    for _ in 0..query_rounds {
        let mut name = ptr::null_mut();
        ffi::queries::kcsi_get_volume_name(h, spec.as_ptr(), &mut name, ptr::null_mut());
        ffi::error::kcsi_string_free(name);
    }
    let query = ns(start.elapsed(), query_rounds);
    println!(
        "cheap query kcsi_get_volume_name: {query:.0} ns/call; it makes no RPC and passes no record, so metrics + trace add nothing; a cheap RPC query pays the {per_rpc:.1} ns above (target < 100 ns)"
    );
    ffi::host::kcsi_host_free(h);

    // A real lifecycle: MountDevice → SetUp → TearDown → UnmountDevice.
    let driver = common::DriverProcess::hostpath_named(DRIVER, "bench-node", &[]);
    let root = common::short_tempdir("kcsi-bench");
    let host = CHost::from_config(&json!({"nodeName": "bench-node", "rootDir": root.path(),
        "csiDrivers": [{"metadata": {"name": DRIVER}, "spec": {"attachRequired": false}}]}));
    host.register(DRIVER, &driver.endpoint());
    let handle = driver.create_volume("bench-pv", false, 1 << 20);
    let spec = json!({"persistentVolume": {"metadata": {"name": "bench-pv"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "csi": {"driver": DRIVER, "volumeHandle": handle}}}});
    let (s, p) = (
        cstr(&spec.to_string()),
        cstr(&pod("bench", "uid-bench").to_string()),
    );
    let lifecycle = || {
        let a = host.attacher();
        let dmp = a.device_mount_path(&spec).unwrap();
        a.mount_device(&spec, &dmp, None).unwrap();
        let (mut m, mut err) = (ptr::null_mut(), ptr::null_mut());
        check(
            ffi::mounter::kcsi_mounter_new(host.ptr, s.as_ptr(), p.as_ptr(), &mut m, &mut err),
            err,
        )
        .unwrap();
        check(
            ffi::mounter::kcsi_mounter_set_up(m, ptr::null(), &mut err),
            err,
        )
        .unwrap();
        ffi::mounter::kcsi_mounter_free(m);
        let (name, uid) = (cstr("bench-pv"), cstr("uid-bench"));
        let mut u = ptr::null_mut();
        check(
            ffi::mounter::kcsi_unmounter_new(
                host.ptr,
                name.as_ptr(),
                uid.as_ptr(),
                &mut u,
                &mut err,
            ),
            err,
        )
        .unwrap();
        check(ffi::mounter::kcsi_unmounter_tear_down(u, &mut err), err).unwrap();
        ffi::mounter::kcsi_unmounter_free(u);
        a.unmount_device(&dmp).unwrap();
    };
    let rpcs = || -> f64 {
        let mut text = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            ffi::host_metrics::kcsi_host_metrics(host.ptr, &mut text, &mut err),
            err,
        )
        .unwrap();
        take_string(text)
            .lines()
            .filter(|l| l.starts_with("csi_operations_seconds_count"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    for _ in 0..5 {
        lifecycle();
    }
    let (rounds, before) = (100, rpcs());
    let mut times = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        lifecycle();
        times.push(start.elapsed());
    }
    let per_lifecycle = (rpcs() - before) / f64::from(rounds);
    times.sort();
    let median = times[times.len() / 2];
    // Each lifecycle also passes four disabled step records per operation (entry, success).
    let cost = per_lifecycle * per_rpc + 8.0 * per_record;
    println!(
        "lifecycle (real hostpath): median {:.3} ms, {per_lifecycle:.0} RPCs; metrics + trace {:.2} µs = {:.4} % (target < 2 %)",
        median.as_secs_f64() * 1e3,
        cost / 1e3,
        cost / median.as_nanos() as f64 * 100.0
    );
    common::unmount_below(root.path());
}
