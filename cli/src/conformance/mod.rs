//! `kcsi conformance`: every sequence the kubelet (and the external-provisioner and
//! external-attacher, where the driver has a Controller service) drives, run against a driver
//! with no cluster, each a named case that passes, fails with the call that went wrong and the
//! kubelet behaviour it breaks, or is skipped with the capability that made it not apply.

mod attach;
mod case;
mod crash;
mod ctx;
mod facts;
mod output;
mod owned;
mod registration;
mod rpc;
mod runner;
mod stats;
mod upstream;
mod volume;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::args::ConformanceArgs;
use crate::driver;
use crate::session::check_socket;
use crate::UsageError;

use case::{Case, CASES};
use owned::OwnedDriver;
use runner::Settings;

fn seconds(flag: &str, value: f64) -> Result<Duration, UsageError> {
    if value.is_finite() && value > 0.0 && value <= 86_400.0 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(UsageError(format!(
            "--{flag} {value}: must be > 0 and at most 86400"
        )))
    }
}

fn list(json: bool) -> i32 {
    if json {
        let cases: Vec<_> = CASES
            .iter()
            .map(|c| json!({"name": c.name, "checks": c.checks}))
            .collect();
        println!("{}", json!({ "cases": cases }));
    } else {
        for c in CASES {
            println!("{:<32} {}", c.name, c.checks);
        }
    }
    0
}

fn selected(patterns: &[String]) -> Result<Vec<&'static Case>, UsageError> {
    if let Some(p) = patterns
        .iter()
        .find(|p| !CASES.iter().any(|c| case::matches(p, c.name)))
    {
        return Err(UsageError(format!(
            "--case {p:?} matches no case (see kcsi conformance --list)"
        )));
    }
    Ok(CASES
        .iter()
        .filter(|c| patterns.is_empty() || patterns.iter().any(|p| case::matches(p, c.name)))
        .collect())
}

pub async fn run(a: ConformanceArgs, json: bool) -> Result<i32, UsageError> {
    if a.list {
        return Ok(list(json));
    }
    let mut settings = Settings {
        rpc: seconds("timeout", a.timeout)?,
        case: seconds("case-timeout", a.case_timeout)?,
        mount_options: a.mount_options,
        selinux_mount: a.selinux_mount,
        faults: a.fault,
        driver: None,
    };
    let cases = selected(&a.cases)?;
    let endpoint = a.endpoint.unwrap_or_default();
    let socket = kcsi::socket_path(&endpoint)
        .map_err(|e| UsageError(format!("--endpoint: {}", e.message())))?;
    let start = Instant::now();
    if let Some(command) = &a.driver_command {
        let owned = OwnedDriver::start(command, &socket, settings.rpc)
            .await
            .map_err(UsageError)?;
        settings.driver = Some(Arc::new(owned));
    }
    check_socket(&socket)?;
    let facts = match facts::gather(&driver::channel(&socket), settings.rpc).await {
        Ok(f) => Arc::new(f),
        Err(e) => {
            eprintln!(
                "kcsi conformance: {endpoint} does not answer as a CSI driver must: {}",
                e.message()
            );
            return Ok(1);
        }
    };
    if !json {
        output::header(&facts, &endpoint);
    }
    let mut results = Vec::new();
    let mut interrupted = false;
    for c in cases {
        let r = match runner::run(c, &facts, &socket, &settings).await {
            Ok(r) => r,
            Err(r) => {
                interrupted = true;
                r
            }
        };
        if !json {
            output::progress(&r);
        }
        results.push(r);
        if interrupted {
            break;
        }
    }
    let total = start.elapsed();
    if json {
        println!("{}", output::to_json(&facts, &results, total));
    } else {
        output::summary(&results, total);
    }
    if let Some(file) = &a.junit {
        std::fs::write(file, output::junit(&facts, &results, total))
            .map_err(|e| UsageError(format!("--junit: cannot write {}: {e}", file.display())))?;
    }
    Ok(if interrupted {
        130
    } else if output::ok(&results) {
        0
    } else {
        1
    })
}
