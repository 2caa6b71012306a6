//! Figures for whole volume lifecycles; prints, never asserts.
//!
//! kcsi: MountDevice → SetUp → TearDown → UnmountDevice through the C API (WaitForAttach is
//! skipped: the CSIDriver says `attachRequired: false`), and a block lifecycle (SetUpDevice →
//! MapPodDevice → UnmapPodDevice → TearDownDevice). The floor: the same driver work as bare
//! RPCs on one tonic connection — NodeStage, NodePublish, NodeUnpublish, NodeUnstage plus the
//! directories the CO must create for the driver. Each runs sequentially and 16 at a time
//! against the real csi-driver-host-path (real bind mounts and loop devices). Target: kcsi
//! within 1.2× of the floor.

use kcsi_testkit as common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::capi::*;
use common::driver::capability;
use common::mounts_below;
use kcsi::proto::csi;
use kcsi::proto::csi::node_client::NodeClient;
use serde_json::{json, Value};
use tonic::transport::Channel;

const SEQUENTIAL: usize = 60;
const PARALLEL: usize = 16;
const PARALLEL_ROUNDS: usize = 4;
const MIB: i64 = 1 << 20;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// One filesystem lifecycle through the C API.
fn kcsi_fs_lifecycle(host: &Host, spec: &Value, pod_uid: &str) {
    let a = host.attacher();
    let dmp = a.device_mount_path(spec).unwrap();
    a.mount_device(spec, &dmp, None).unwrap();
    host.mounter(spec, &pod("bench", pod_uid))
        .unwrap()
        .set_up(None)
        .unwrap();
    let name = spec["persistentVolume"]["metadata"]["name"]
        .as_str()
        .unwrap();
    host.tear_down(name, pod_uid).unwrap();
    a.unmount_device(&dmp).unwrap();
}

/// One block lifecycle through the C API.
fn kcsi_block_lifecycle(host: &Host, spec: &Value, pod_uid: &str) {
    let m = host.mapper(spec, &pod("bench", pod_uid)).unwrap();
    m.set_up_device().unwrap();
    m.map_pod_device().unwrap();
    let name = spec["persistentVolume"]["metadata"]["name"]
        .as_str()
        .unwrap();
    host.unmapper(name, pod_uid)
        .unwrap()
        .unmap_pod_device()
        .unwrap();
    host.unmapper(name, "")
        .unwrap()
        .tear_down_device("")
        .unwrap();
}

/// The same driver work as bare RPCs; the directories are the ones the CO must create.
async fn floor_lifecycle(mut c: NodeClient<Channel>, dir: PathBuf, volume_id: String, block: bool) {
    let staging = dir.join("staging");
    let target = dir.join("target");
    std::fs::create_dir_all(&staging).unwrap();
    let s = staging.display().to_string();
    let t = target.display().to_string();
    c.node_stage_volume(csi::NodeStageVolumeRequest {
        volume_id: volume_id.clone(),
        staging_target_path: s.clone(),
        volume_capability: Some(capability(block)),
        ..Default::default()
    })
    .await
    .unwrap();
    c.node_publish_volume(csi::NodePublishVolumeRequest {
        volume_id: volume_id.clone(),
        staging_target_path: s.clone(),
        target_path: t.clone(),
        volume_capability: Some(capability(block)),
        ..Default::default()
    })
    .await
    .unwrap();
    c.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: volume_id.clone(),
        target_path: t,
    })
    .await
    .unwrap();
    c.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id,
        staging_target_path: s,
    })
    .await
    .unwrap();
    std::fs::remove_dir(&staging).unwrap();
    std::fs::remove_dir(&dir).unwrap();
}

struct Figures {
    sequential: Duration,
    parallel: Duration,
    parallel_wall_per_lifecycle: Duration,
}

fn run_kcsi(host: &Arc<Host>, specs: &[Value], block: bool) -> Figures {
    let one = move |host: &Host, spec: &Value, uid: &str| {
        let start = Instant::now();
        if block {
            kcsi_block_lifecycle(host, spec, uid)
        } else {
            kcsi_fs_lifecycle(host, spec, uid)
        }
        start.elapsed()
    };
    for spec in &specs[..4] {
        one(host, spec, "warmup");
    }
    let seq: Vec<Duration> = (0..SEQUENTIAL)
        .map(|i| one(host, &specs[i % specs.len()], &format!("seq-{i}")))
        .collect();
    let mut par = Vec::new();
    let wall = Instant::now();
    for round in 0..PARALLEL_ROUNDS {
        let handles: Vec<_> = (0..PARALLEL)
            .map(|i| {
                let (host, spec) = (host.clone(), specs[i].clone());
                std::thread::spawn(move || one(&host, &spec, &format!("par-{round}-{i}")))
            })
            .collect();
        par.extend(handles.into_iter().map(|h| h.join().unwrap()));
    }
    let wall = wall.elapsed() / (PARALLEL * PARALLEL_ROUNDS) as u32;
    Figures {
        sequential: median(seq),
        parallel: median(par),
        parallel_wall_per_lifecycle: wall,
    }
}

fn run_floor(socket: &Path, scratch: &Path, ids: &[String], block: bool) -> Figures {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let channel = rt.block_on(common::driver::channel(socket));
    let client = NodeClient::new(channel);
    let one = |id: &str, tag: String| {
        let (c, dir, id) = (client.clone(), scratch.join(tag), id.to_string());
        async move {
            let start = Instant::now();
            floor_lifecycle(c, dir, id, block).await;
            start.elapsed()
        }
    };
    rt.block_on(async {
        for (i, id) in ids[..4].iter().enumerate() {
            one(id, format!("w{i}")).await;
        }
    });
    let seq: Vec<Duration> = rt.block_on(async {
        let mut v = Vec::new();
        for i in 0..SEQUENTIAL {
            v.push(one(&ids[i % ids.len()], format!("q{i}")).await);
        }
        v
    });
    let mut par = Vec::new();
    let wall = Instant::now();
    for round in 0..PARALLEL_ROUNDS {
        let futs: Vec<_> = (0..PARALLEL)
            .map(|i| rt.spawn(one(&ids[i], format!("p{round}-{i}"))))
            .collect();
        par.extend(
            rt.block_on(futures::future::join_all(futs))
                .into_iter()
                .map(Result::unwrap),
        );
    }
    let wall = wall.elapsed() / (PARALLEL * PARALLEL_ROUNDS) as u32;
    Figures {
        sequential: median(seq),
        parallel: median(par),
        parallel_wall_per_lifecycle: wall,
    }
}

fn report(what: &str, kcsi: &Figures, floor: &Figures) {
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!("{what}:");
    println!(
        "  sequential   kcsi {} / floor {} per lifecycle (median of {SEQUENTIAL}) = {:.2}x",
        ms(kcsi.sequential),
        ms(floor.sequential),
        ratio(kcsi.sequential, floor.sequential)
    );
    println!(
        "  {PARALLEL} parallel  kcsi {} / floor {} per lifecycle (median of {}) = {:.2}x; wall per lifecycle kcsi {} / floor {} = {:.2}x",
        ms(kcsi.parallel),
        ms(floor.parallel),
        PARALLEL * PARALLEL_ROUNDS,
        ratio(kcsi.parallel, floor.parallel),
        ms(kcsi.parallel_wall_per_lifecycle),
        ms(floor.parallel_wall_per_lifecycle),
        ratio(kcsi.parallel_wall_per_lifecycle, floor.parallel_wall_per_lifecycle)
    );
}

fn main() {
    let f = Fixture::new(no_attach(json!({})));
    let host = Arc::new(Host::on_root(f.root(), no_attach(json!({}))));
    host.register_driver(&f.driver);
    let scratch = f.root().join("floor");
    std::fs::create_dir_all(&scratch).unwrap();

    for block in [false, true] {
        let ids: Vec<String> = (0..PARALLEL)
            .map(|i| {
                f.driver
                    .create_volume(&format!("bench-{block}-{i}"), block, 4 * MIB)
            })
            .collect();
        let specs: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                pv_spec(
                    &format!("bench-{block}-{i}"),
                    id,
                    block,
                    json!({}),
                    json!({}),
                )
            })
            .collect();
        let kcsi = run_kcsi(&host, &specs, block);
        let floor = run_floor(&f.driver.socket, &scratch, &ids, block);
        let what = if block {
            "block lifecycle (SetUpDevice, MapPodDevice, UnmapPodDevice, TearDownDevice)"
        } else {
            "filesystem lifecycle (MountDevice, SetUp, TearDown, UnmountDevice)"
        };
        report(what, &kcsi, &floor);
    }
    assert!(mounts_below(f.root()).is_empty(), "bench left mounts");
}
