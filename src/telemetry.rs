//! One host's metrics: a Prometheus registry the host owns (never a process-wide one), the
//! families kcsi records into, and their text exposition. The CSI side and the Kubernetes side
//! both record here, so this module knows neither.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use crate::error::{Error, Result};

/// Upstream's buckets for every storage latency histogram (`pkg/volume/util/metrics.go`).
const LATENCY_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

/// The `grpc_status_code` of an operation that failed before any gRPC method was called
/// (upstream `getErrorCode`).
pub const NON_GRPC: &str = "unknown-non-grpc";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CsiOperation {
    driver_name: String,
    method_name: &'static str,
    grpc_status_code: &'static str,
    migrated: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiRequest {
    verb: &'static str,
    /// `<resource>[/<subresource>]`, e.g. `serviceaccounts/token` for a TokenRequest.
    resource: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

type CsiFamily = Family<CsiOperation, Histogram, fn() -> Histogram>;

/// A host's metrics. Cheap to clone (shared handles); recording never blocks on encoding.
#[derive(Clone)]
pub struct Telemetry {
    registry: Arc<Mutex<Registry>>,
    csi_operations: CsiFamily,
    registrations: Family<Outcome, Counter>,
    registered_drivers: Gauge,
    api_requests: Family<ApiRequest, Counter>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

impl Telemetry {
    pub fn new() -> Telemetry {
        let mut registry = Registry::default();
        let csi_operations = CsiFamily::new_with_constructor(latency_histogram);
        // Upstream: subsystem "csi", name "operations_seconds" (csiOperationsLatencyMetric).
        registry.register(
            "csi_operations_seconds",
            "Container Storage Interface operation duration with gRPC error code status total",
            csi_operations.clone(),
        );
        let registrations = Family::<Outcome, Counter>::default();
        registry.register(
            "kcsi_driver_registrations",
            "CSI driver registrations this host attempted, by result (success or failure)",
            registrations.clone(),
        );
        let registered_drivers = Gauge::default();
        registry.register(
            "kcsi_registered_drivers",
            "CSI drivers currently registered with this host",
            registered_drivers.clone(),
        );
        let api_requests = Family::<ApiRequest, Counter>::default();
        registry.register(
            "kcsi_api_requests",
            "HTTP requests this host sent to the Kubernetes API server, by verb and resource",
            api_requests.clone(),
        );
        Telemetry {
            registry: Arc::new(Mutex::new(registry)),
            csi_operations,
            registrations,
            registered_drivers,
            api_requests,
        }
    }

    fn csi_series(
        &self,
        driver: &str,
        method: &'static str,
        code: &'static str,
        migrated: bool,
    ) -> Histogram {
        let labels = CsiOperation {
            driver_name: driver.to_string(),
            method_name: method,
            grpc_status_code: code,
            migrated: if migrated { "true" } else { "false" },
        };
        self.csi_operations.get_or_create_owned(&labels)
    }

    /// A recorder of one driver's RPCs into `csi_operations_seconds`. It keeps the series it
    /// has used, so an RPC costs a short scan instead of building and hashing a label set.
    pub fn csi_recorder(&self, driver: &str) -> CsiRecorder {
        CsiRecorder {
            telemetry: self.clone(),
            driver: driver.to_string(),
            series: RwLock::new(Vec::new()),
        }
    }

    /// Records a finished registration attempt.
    pub fn registration(&self, succeeded: bool) {
        let result = if succeeded { "success" } else { "failure" };
        self.registrations.get_or_create(&Outcome { result }).inc();
    }

    pub fn set_registered_drivers(&self, registered: usize) {
        self.registered_drivers
            .set(i64::try_from(registered).unwrap_or(i64::MAX));
    }

    /// Counts one API request by its Kubernetes verb (`get`, `list`, `watch`, `create`, ...)
    /// and resource (`csinodes`, `nodes/status`, `serviceaccounts/token`, ...).
    pub fn api_request(&self, verb: &'static str, resource: &str) {
        let labels = ApiRequest {
            verb,
            resource: resource.to_string(),
        };
        self.api_requests.get_or_create(&labels).inc();
    }

    /// Adds a family owned by another part of the host (e.g. the plugin watcher's state).
    /// `name` follows Prometheus rules; a counter's name must not end in `_total` (the
    /// encoder adds it).
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .register(name, help, metric);
    }

    /// Every family in the Prometheus text exposition format, version 0.0.4.
    pub fn encode(&self) -> Result<String> {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        prometheus_text::encode(&mut text, &registry)
            .map_err(|_| Error::internal("encoding the host's metrics failed"))?;
        Ok(text)
    }
}

/// See [`Telemetry::csi_recorder`].
pub struct CsiRecorder {
    telemetry: Telemetry,
    driver: String,
    series: RwLock<Vec<(&'static str, &'static str, bool, Histogram)>>,
}

impl CsiRecorder {
    /// Records one RPC, as upstream's `RecordMetricsInterceptor` does for every call:
    /// `method` is the gRPC full method, `code` the status code name (or [`NON_GRPC`]).
    pub fn observe(
        &self,
        method: &'static str,
        code: &'static str,
        migrated: bool,
        took: Duration,
    ) {
        let seconds = took.as_secs_f64();
        let same =
            |s: &&(&str, &str, bool, Histogram)| s.0 == method && s.1 == code && s.2 == migrated;
        if let Some(s) = self
            .series
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(same)
        {
            s.3.observe(seconds);
            return;
        }
        let histogram = self
            .telemetry
            .csi_series(&self.driver, method, code, migrated);
        histogram.observe(seconds);
        let mut series = self.series.write().unwrap_or_else(|p| p.into_inner());
        if !series.iter().any(|s| same(&s)) {
            series.push((method, code, migrated, histogram));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csi_operations_encode_with_upstream_name_labels_and_buckets() {
        let t = Telemetry::new();
        t.csi_recorder("d.example").observe(
            "/csi.v1.Node/NodeStageVolume",
            "OK",
            false,
            Duration::from_millis(300),
        );
        let text = t.encode().unwrap();
        assert!(
            text.contains("# TYPE csi_operations_seconds histogram"),
            "{text}"
        );
        let labels = r#"driver_name="d.example",method_name="/csi.v1.Node/NodeStageVolume",grpc_status_code="OK",migrated="false""#;
        assert!(
            text.contains(&format!(
                "csi_operations_seconds_bucket{{{labels},le=\"0.25\"}} 0"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "csi_operations_seconds_bucket{{{labels},le=\"0.5\"}} 1"
            )),
            "{text}"
        );
        assert!(text.contains(&format!("csi_operations_seconds_count{{{labels}}} 1")));
        assert!(text.contains("le=\"600\""), "{text}");
        assert!(!text.contains("# EOF"), "0.0.4 has no EOF marker: {text}");
    }

    #[test]
    fn a_recorder_observes_into_the_hosts_family() {
        let t = Telemetry::new();
        let r = t.csi_recorder("d.example");
        for _ in 0..3 {
            r.observe(
                "/csi.v1.Node/NodeGetInfo",
                "OK",
                false,
                Duration::from_millis(1),
            );
        }
        r.observe(
            "/csi.v1.Node/NodeGetInfo",
            "Unavailable",
            false,
            Duration::from_millis(1),
        );
        let text = t.encode().unwrap();
        let ok = r#"csi_operations_seconds_count{driver_name="d.example",method_name="/csi.v1.Node/NodeGetInfo",grpc_status_code="OK",migrated="false"} 3"#;
        assert!(text.contains(ok), "{text}");
        assert!(
            text.contains(r#"grpc_status_code="Unavailable",migrated="false"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn api_requests_count_by_verb_and_resource() {
        let t = Telemetry::new();
        t.api_request("watch", "csidrivers");
        t.api_request("get", "secrets");
        t.api_request("patch", "nodes/status");
        t.api_request("patch", "nodes/status");
        t.api_request("create", "serviceaccounts/token");
        let text = t.encode().unwrap();
        for line in [
            r#"kcsi_api_requests_total{verb="watch",resource="csidrivers"} 1"#,
            r#"kcsi_api_requests_total{verb="patch",resource="nodes/status"} 2"#,
            r#"kcsi_api_requests_total{verb="create",resource="serviceaccounts/token"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
