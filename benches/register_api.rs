//! Registration with an API server: register+deregister round trips against a real
//! kube-apiserver and Kubernetes' mock CSI driver, and the API requests each step sends
//! (counted by the host's client). Prints figures; asserts nothing about timing.
//!
//! `cargo bench --bench register_api` (ROUNDS=n to change the 200 rounds).

use kcsi_testkit as common;

use std::time::{Duration, Instant};

use common::apiserver::{run, ApiServer};
use common::{short_tempdir, DriverProcess};
use k8s_openapi::api::core::v1::Node;
use kcsi::registration;
use kcsi::ApiClient;
use kcsi::NodeAgent;
use kube::api::{Api, PostParams};

fn requests(host: &NodeAgent) -> u64 {
    host.status().api_requests.expect("apiRequests")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(200);
    let api = ApiServer::shared();
    let admin = run(async { ApiClient::from_kubeconfig(&api.kubeconfig) }).unwrap();
    let node_name = format!("bench-{}", std::process::id());
    let node: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": node_name}})).unwrap();
    run(Api::<Node>::all(admin.client.clone()).create(&PostParams::default(), &node)).unwrap();

    let root = short_tempdir("kcsi-bench");
    let host = NodeAgent::new(api.node_config(root.path(), &node_name).check().unwrap()).unwrap();
    let start = Instant::now();
    while !host.status().csi_node_initialized {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "CSINode not initialized: {:?}",
            host.status()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let driver = DriverProcess::mock(
        "bench.csi.example.com",
        &["--enable-topology", "--attach-limit=16"],
    );
    let versions = ["1.0.0".to_string()];
    let register = || {
        run(registration::register(
            &host,
            &driver.name,
            &driver.endpoint(),
            &versions,
            None,
        ))
        .unwrap()
    };
    let deregister = || run(registration::deregister(&host, &driver.name)).unwrap();

    // Warm-up (connections, first CSINode write), then one counted round.
    register();
    deregister();
    let before = requests(&host);
    register();
    let per_register = requests(&host) - before;
    let before = requests(&host);
    deregister();
    let per_deregister = requests(&host) - before;

    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        register();
        deregister();
        times.push(t.elapsed());
    }
    times.sort();
    let total: Duration = times.iter().sum();
    println!("register_api: {rounds} register+deregister rounds against kube-apiserver (mock CSI driver, topology, attach limit)");
    println!(
        "  median {:?}  p99 {:?}  min {:?}  max {:?}  mean {:?}",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[0],
        times[times.len() - 1],
        total / rounds as u32
    );
    println!("  API requests per registration: {per_register} (upstream: GET+PATCH Node, GET+UPDATE CSINode = 4)");
    println!("  API requests per deregistration: {per_deregister}");
}
